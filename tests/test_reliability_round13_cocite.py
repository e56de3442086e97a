"""Round 13: the co-citation pipeline and nearest negatives against brute-force references.

Two defects: `nearest_negatives` scored a chunk of anchors with whatever kernel the chunk's shape chose, so two
papers with one vector (a duplicated abstract) could score apart in the last bits: their order broke the
documented tie rule (the earlier paper first) and changed with `chunk`; and the examples stage's
`contexts_per_example_mean` averaged over every pair, the pairs it dropped (no possible negative) included.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from aspire.data import cocite
from aspire.data.cocite import ExamplesConfig, SplitConfig, build_examples, split_groups
from aspire.data.negatives.rank import nearest_negatives
from tests.test_cocite import _own_abstract

ABSTRACT = ["First sentence here.", "Second sentence here.", "Third sentence here."]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --------------------------------------------------------------------------- nearest negatives


def test_nearest_negatives_papers_with_one_vector_tie_exactly_whatever_chunk():
    vecs = np.random.default_rng(0).normal(size=(13, 5)).astype(np.float32)
    vecs[12] = vecs[3]  # p12 is p03's duplicate: a tie for every anchor, p03 (earlier) first
    ids = [f"p{i:02d}" for i in range(13)]
    runs = {chunk: nearest_negatives(vecs, {}, ids, k=12, chunk=chunk) for chunk in (1, 2, 1024)}
    for pid, negatives in runs[1].negatives.items():
        if pid not in ("p03", "p12"):
            at = negatives.index("p03")
            assert negatives[at + 1] == "p12", (pid, negatives)
    assert runs[1].negatives == runs[2].negatives == runs[1024].negatives
    # the margin guard: p12 scores exactly its partner p03's similarity, so it is not above `reference - 0`
    # and, the nearest candidate left, is p00's first negative
    partners = {"p00": {"p00", "p03"}, "p03": {"p00", "p03"}}
    guarded = {chunk: nearest_negatives(vecs, partners, ids, k=3, margin=0.0, chunk=chunk) for chunk in (1, 1024)}
    assert guarded[1].negatives == guarded[1024].negatives and guarded[1].dropped == guarded[1024].dropped
    assert guarded[1].negatives["p00"][0] == "p12"


def _brute_nearest(vecs: list[list[float]], partners, ids, k, skip, margin, reference):
    """Plain-Python nearest negatives: cosine, partners out, margin guard, skip, k; ties by position."""
    def cos(a, b):
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    out, dropped_partner, dropped_margin = {}, 0, 0
    for i, anchor in enumerate(ids):
        if not any(vecs[i]):
            out[anchor] = []
            continue
        mine = partners.get(anchor, set())
        live = [j for j in range(len(ids)) if j != i and any(vecs[j])]
        partner_js = [j for j in live if ids[j] in mine]
        cands = [j for j in live if ids[j] not in mine]
        sim = {j: cos(vecs[i], vecs[j]) for j in live}
        too_close = set()
        if margin is not None and partner_js:
            ref = (min if reference == "min" else max)(sim[j] for j in partner_js)
            too_close = {j for j in cands if sim[j] > ref - margin}
        ranked = sorted((j for j in cands if j not in too_close), key=lambda j: (-sim[j], j))
        kept = ranked[skip : skip + k]
        out[anchor] = [ids[j] for j in kept]
        floor = sim[kept[-1]] if len(kept) == k else -math.inf
        dropped_partner += sum(sim[j] > floor for j in partner_js)
        dropped_margin += len(too_close)
    return out, dropped_partner, dropped_margin


def test_nearest_negatives_match_a_brute_force_loop_for_any_chunk():
    rng, gen = random.Random(1), np.random.default_rng(1)
    for _ in range(60):
        n = rng.randint(2, 12)
        vecs = gen.normal(size=(n, rng.randint(2, 5))).astype(np.float32)
        for _ in range(rng.randint(0, 2)):
            vecs[rng.randrange(n)] = vecs[rng.randrange(n)]
        if rng.random() < 0.3:
            vecs[rng.randrange(n)] = 0
        ids = [f"p{i:02d}" for i in range(n)]
        rng.shuffle(ids)
        partners: dict[str, set[str]] = {}
        for _ in range(rng.randint(0, n)):
            members = rng.sample(ids, min(n, rng.randint(2, 3)))
            for pid in members:
                partners.setdefault(pid, set()).update(members)
        k, skip = rng.randint(1, 4), rng.randint(0, 2)
        margin, reference = rng.choice([None, 0.0, 0.1, -0.2]), rng.choice(["min", "max"])
        want, partner_dropped, margin_dropped = _brute_nearest(vecs.tolist(), partners, ids, k, skip, margin, reference)
        for chunk in (1, 3, 1024):
            mined = nearest_negatives(vecs, partners, ids, k, skip, margin, reference, chunk=chunk)
            assert mined.negatives == want
            assert mined.dropped["partner"] == partner_dropped
            if margin is not None:
                assert mined.dropped["margin"] == margin_dropped


# --------------------------------------------------------------------------- examples report


def _groups_dir(root: Path, sets: dict[tuple[str, ...], int]) -> Path:
    """A group-stage folder: each set with its number of contexts."""
    rows = []
    for members in sorted(sets, key=cocite.set_id):
        sid = cocite.set_id(members)
        texts = [f"context {n} of {sid}" for n in range(sets[members])]
        rows.append({"set_id": sid, "paper_ids": sorted(members), "context_ids": [f"{sid}#{n}" for n in range(len(texts))],
                     "contexts": texts, "contexts_clean": texts})
    _write_jsonl(root / "groups.jsonl", rows)
    papers = sorted({p for members in sets for p in members})
    _write_jsonl(root / "abstracts.jsonl", [{"paper_id": p, "title": p, "abstract": _own_abstract(p)} for p in papers])
    return root


def test_examples_contexts_per_example_mean_counts_only_the_examples_written(tmp_path):
    # A|B (1 context) keeps D as its negative; C is everyone's partner, so A|C, B|C (1 each) and C|D (3) are dropped
    src = _groups_dir(tmp_path / "g", {("A", "B", "C"): 1, ("C", "D"): 3})
    split_groups(src, tmp_path / "s", SplitConfig(dev_fraction=0.0))
    report = build_examples(tmp_path / "s", tmp_path / "e", ExamplesConfig(num_negatives=1))
    written = _read(tmp_path / "e" / "examples.train.jsonl")
    assert [e["example_id"] for e in written] == ["A|B"] and report["train"]["dropped_no_negative"] == 3
    mean = sum(len(e["context_ids"]) for e in written) / len(written)
    assert report["train"]["contexts_per_example_mean"] == mean == 1.0


# --------------------------------------------------------------------------- the real file, recomputed


@pytest.mark.slow
def test_real_run_all_matches_a_brute_force_recomputation(tmp_path, shared_data):
    from aspire.benchmarks.context2doc import held_out_for
    from aspire.data.cocite.text import clean_citations, get_tokenizer

    source = shared_data / "cocite-acl" / "cocitations.jsonl"
    held = held_out_for(source)
    out = cocite.run_all(source, tmp_path / "run", held_out=held)
    records = _read(source)
    tokens = get_tokenizer("regex")
    first: dict[str, list[str]] = {}
    contexts = []
    for lineno, rec in enumerate(records, 1):  # ingest: test sentences out, self-citation out, >= 2 papers
        ids = sorted({c["paper_id"] for c in rec["cited"]} - {rec["citing_paper_id"]})
        if rec["context"].strip() in held or len(ids) < 2:
            continue
        for c in rec["cited"]:
            if c["paper_id"] in ids:
                first.setdefault(c["paper_id"], c["abstract"])
        contexts.append((f"{rec['citing_paper_id']}#L{lineno}", rec["context"], ids))
    good = {p for p, a in first.items() if 3 <= len(a) <= 20 and all(len(tokens(s)) <= 80 for s in a)}
    kept, seen = {}, set()
    for cid, text, ids in contexts:  # the default filters, in order
        n = len(tokens(clean_citations(text)))
        left = [p for p in ids if p in good]
        key = " ".join(text.lower().split())
        if len(ids) > 3 or not 5 <= n <= 60 or len(left) < 2 or key in seen:
            continue
        seen.add(key)
        kept[cid] = left
    sets = defaultdict(list)
    for cid, ids in kept.items():
        sets[cocite.set_id(ids)].append(cid)
    split_of = {}
    for split in cocite.SPLITS:
        for g in _read(out / f"groups.{split}.jsonl"):
            assert g["context_ids"] == sets[g["set_id"]]
            split_of[g["set_id"]] = split
    assert set(split_of) == set(sets)
    for split in cocite.SPLITS:
        partners = defaultdict(set)
        pairs = defaultdict(list)
        for sid, s in split_of.items():
            if s == split:
                for p in sid.split("|"):
                    partners[p].update(sid.split("|"))
                for pair in itertools.combinations(sid.split("|"), 2):
                    pairs[pair].append(sid)
        examples = _read(out / f"examples.{split}.jsonl")
        assert [(e["query_id"], e["positive_id"]) for e in examples] == sorted(pairs)
        for e in examples:
            q, p = e["query_id"], e["positive_id"]
            assert e["set_ids"] == pairs[(q, p)]
            assert e["context_ids"] == [c for sid in pairs[(q, p)] for c in sets[sid]]
            assert not set(e["negative_ids"]) & (partners[q] | partners[p])
            assert set(e["negative_ids"]) <= set(partners)
    report = json.loads((tmp_path / "run" / "pipeline_report.json").read_text())["stages"]
    assert report["ingest"]["counts"]["contexts"] == len(contexts) and report["filter"]["contexts_out"] == len(kept)
    assert report["group"]["sets"] == len(sets)
