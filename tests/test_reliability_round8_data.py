"""Round-8 correctness probes of the data pipeline: co-cited sets recomputed by brute force from the real
records, self-citations, the citing paper of a context id, and the alignments against a brute-force argmax."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.align import abs_align, cc_align
from aspire.data.cocite import IngestConfig, ingest_records, run_all
from aspire.data.negatives.graph import citation_negatives

NO_HELD_OUT = IngestConfig(exclude_benchmark_test=False)
ABSTRACT = ["First sentence of the abstract.", "Second sentence here.", "Third and last sentence."]


def _cited(pid: str) -> dict:
    return {"paper_id": pid, "title": f"Title {pid}", "abstract": ABSTRACT}


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---- ingest: a paper citing itself is no co-citation (as input B already had it) ---------------------------
def test_ingest_leaves_the_citing_paper_out_of_its_own_set(tmp_path):
    records = [
        {"citing_paper_id": "A", "context": "We extend our earlier work (A, 2001) and (B, 2002) and (C, 2003).",
         "cited": [_cited("A"), _cited("B"), _cited("C")]},
        {"citing_paper_id": "A", "context": "As in our own (A, 2001) and (B, 2002).", "cited": [_cited("A"), _cited("B")]},
    ]
    src = tmp_path / "records.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = ingest_records(src, tmp_path / "out", NO_HELD_OUT)
    contexts = _jsonl(tmp_path / "out" / "contexts.jsonl")
    assert [c["cited_ids"] for c in contexts] == [["B", "C"]]  # was ["A", "B", "C"]: A "co-cited" with itself
    assert report["counts"]["self_citations_removed"] == 2
    assert report["counts"]["dropped_fewer_than_2_cited"] == 1  # only B is left of the second record
    assert [p["paper_id"] for p in _jsonl(tmp_path / "out" / "abstracts.jsonl")] == ["B", "C"]


# ---- the real co-citation records, end to end, against a brute-force recomputation -----------------------
@pytest.fixture(scope="module")
def real_run(shared_data, tmp_path_factory):
    from aspire.benchmarks.context2doc import held_out_for

    src = shared_data / "cocite-acl" / "cocitations.jsonl"
    held = held_out_for(src)
    out = tmp_path_factory.mktemp("cocite") / "run"
    run_all(src, out, held_out=held)
    return src, held, out


def test_real_ingest_sets_match_the_records(real_run):
    src, held, out = real_run
    want = []
    for lineno, line in enumerate(src.read_text(encoding="utf-8").splitlines(), start=1):
        rec = json.loads(line)
        if rec["context"].strip() in held:
            continue
        ids = sorted({c["paper_id"] for c in rec["cited"]} - {rec["citing_paper_id"]})
        if len(ids) >= 2:
            want.append((f"{rec['citing_paper_id']}#L{lineno}", ids))
    got = [(c["context_id"], c["cited_ids"]) for c in _jsonl(out / "1_ingest" / "contexts.jsonl")]
    assert got == want
    assert not any(c["citing_paper_id"] in c["cited_ids"] for c in _jsonl(out / "2_filter" / "contexts.jsonl"))


def test_real_groups_split_and_examples_match_brute_force(real_run):
    _, _, out = real_run
    kept = _jsonl(out / "2_filter" / "contexts.jsonl")
    sets = defaultdict(list)
    for ctx in kept:
        sets["|".join(ctx["cited_ids"])].append(ctx["context_id"])
    groups = {g["set_id"]: g["context_ids"] for g in _jsonl(out / "3_group" / "groups.jsonl")}
    assert groups == dict(sets)  # every context in exactly one set, the set of its own cited papers

    split = {s: _jsonl(out / "4_split" / f"groups.{s}.jsonl") for s in ("train", "dev")}
    assert sorted(g["set_id"] for s in split.values() for g in s) == sorted(sets)
    pairs = {s: {p for g in gs for p in itertools.combinations(g["paper_ids"], 2)} for s, gs in split.items()}
    assert not pairs["train"] & pairs["dev"] and pairs["dev"]

    for s, gs in split.items():
        want: dict[tuple[str, str], tuple[list[str], set[str]]] = {}
        for g in gs:
            for pair in itertools.combinations(sorted(g["paper_ids"]), 2):
                ctx_ids, members = want.setdefault(pair, ([], set()))
                ctx_ids.extend(g["context_ids"])
                members.update(g["paper_ids"])
        examples = _jsonl(out / "5_examples" / f"examples.{s}.jsonl")
        assert sorted((e["query_id"], e["positive_id"]) for e in examples) == sorted(want)
        split_papers = {p for g in gs for p in g["paper_ids"]}
        for e in examples:
            ctx_ids, members = want[(e["query_id"], e["positive_id"])]
            assert sorted(e["context_ids"]) == sorted(ctx_ids)
            assert e["negative_ids"] and all(n not in members and n in split_papers for n in e["negative_ids"])


# ---- citation negatives: the citing paper is the context id before its last '#' --------------------------
def test_citation_negatives_keep_citing_ids_holding_a_hash_apart():
    groups = [
        {"set_id": "A|B", "paper_ids": ["A", "B"], "context_ids": ["doc#1#L1"]},
        {"set_id": "C|D", "paper_ids": ["C", "D"], "context_ids": ["doc#2#L5"]},
        {"set_id": "A|E", "paper_ids": ["A", "E"], "context_ids": ["other#L9"]},
        {"set_id": "B|F", "paper_ids": ["B", "F"], "context_ids": ["doc#1#L3"]},
    ]
    mined = citation_negatives(groups, ["A", "B", "C", "D", "E", "F"], k=5)
    # doc#1 cites A, B, F; doc#2 cites C, D: two papers, not one paper "doc" citing all five
    assert mined.negatives["A"] == ["F"]
    assert mined.negatives["C"] == []
    assert mined.negatives["F"] == ["A"]


# ---- alignment: the brute-force argmax, ties to the earliest sentence -------------------------------------
def test_alignments_equal_a_brute_force_argmax():
    gen = torch.Generator().manual_seed(0)
    lengths_a, lengths_b, lengths_c = [3, 1, 5, 4], [2, 4, 1, 3], [1, 3, 2, 2]
    a = [torch.randn(n, 6, generator=gen) for n in lengths_a]
    b = [torch.randn(n, 6, generator=gen) for n in lengths_b]
    c = [torch.randn(n, 6, generator=gen) for n in lengths_c]
    index, sim = cc_align(DocBatch.from_list(a), DocBatch.from_list(c))
    pair, pair_sim = abs_align(DocBatch.from_list(a), DocBatch.from_list(b))
    cos = lambda x, y: torch.nn.functional.normalize(x, dim=-1) @ torch.nn.functional.normalize(y, dim=-1).T  # noqa: E731
    for k in range(len(a)):
        per_sentence = cos(a[k], c[k]).max(dim=1).values
        assert int(index[k]) == int(per_sentence.argmax()) and float(sim[k]) == pytest.approx(float(per_sentence.max()))
        full = cos(a[k], b[k])
        best = max(itertools.product(range(len(a[k])), range(len(b[k]))), key=lambda ij: full[ij])
        assert tuple(pair[k].tolist()) == best and float(pair_sim[k]) == pytest.approx(float(full[best]))
    same = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    index, _ = cc_align(DocBatch.from_list([same]), DocBatch.from_list([torch.tensor([[1.0, 0.0]])]))
    pair, _ = abs_align(DocBatch.from_list([same]), DocBatch.from_list([same]))
    assert int(index[0]) == 1 and pair[0].tolist() == [0, 0]


# ---- nearest negatives: an anchor without a vector has no neighbour, so its guards drop nothing -----------
def test_nearest_negatives_count_no_guarded_partner_for_an_anchor_without_vector():
    import numpy as np

    from aspire.data.negatives.rank import nearest_negatives

    vectors = np.array([[0.0, 0.0], [1.0, 0.0], [0.9, 0.1], [0.0, 1.0]], dtype=np.float32)
    partners = {"A": {"A", "B"}, "B": {"A", "B"}}
    mined = nearest_negatives(vectors, partners, ["A", "B", "C", "D"], k=1, margin=0.5)
    assert mined.negatives["A"] == [] and mined.notes["papers_without_vector"] == ["A"]
    # B's partner A has no vector, so no guard dropped it either; the only anchors guarded by the margin would
    # be those with a partner that has a vector: none here
    assert mined.dropped == {"partner": 0, "margin": 0}
    assert mined.notes["margin_guarded_anchors"] == 0
