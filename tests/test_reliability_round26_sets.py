"""Round 26: co-citation examples keep every split's partners out of the negatives; the ingest stage holds a
record's citing paper id to the paper-id rule its cited ids follow."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from aspire.data import cocite
from aspire.data.cocite import DataError, ExamplesConfig, IngestConfig, build_examples, ingest_records, pair_components
from aspire.data.cocite.sets import set_id
from tests.test_cocite import _own_abstract

ABSTRACT = ["First sentence of the abstract.", "Second sentence here.", "Third and last sentence."]
CONTEXT = "This context is long enough to pass the token filter easily (Smith, 2000; Jones, 2001)."


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _split_folder(folder: Path, train: list[list[str]], dev: list[list[str]], papers: list[str]) -> Path:
    """A split stage's folder built by hand: `groups.{train,dev}.jsonl` and `abstracts.jsonl`."""
    for split, sets in (("train", train), ("dev", dev)):
        rows = []
        for i, ids in enumerate(sorted(sets, key=set_id)):
            rows.append({"set_id": set_id(ids), "paper_ids": sorted(ids), "context_ids": [f"{split}{i}"],
                         "contexts": [f"ctx {i}"], "contexts_clean": [f"ctx {i}"]})
        _write_jsonl(folder / f"groups.{split}.jsonl", rows)
    _write_jsonl(folder / "abstracts.jsonl",
                 [{"paper_id": p, "title": f"Title {p}", "abstract": _own_abstract(p)} for p in papers])
    return folder


def _check_against_brute_force(out: Path, train: list[list[str]], dev: list[list[str]], papers: list[str],
                               cfg: ExamplesConfig) -> None:
    """Every example's negatives are `num_negatives` distinct papers of the pool that share no set, of either
    split, with the query or the positive; a pair is dropped exactly when fewer such papers exist."""
    every_set = [set(s) for s in train + dev]
    for split, sets in (("train", train), ("dev", dev)):
        pairs = {(a, b) for s in sets for a in s for b in s if a < b}
        pool = {p for s in sets for p in s} if cfg.negatives_from == "split" else set(papers)
        examples = {(e["query_id"], e["positive_id"]): e for e in cocite.iter_examples(out, split)}
        for a, b in sorted(pairs):
            allowed = {p for p in pool if not any(a in s and p in s or b in s and p in s for s in every_set)}
            if len(allowed) < cfg.num_negatives:
                assert (a, b) not in examples, (split, a, b, examples.get((a, b)), sorted(allowed))
                continue
            negatives = examples[(a, b)]["negative_ids"]
            assert len(negatives) == len(set(negatives)) == cfg.num_negatives
            assert set(negatives) <= allowed, (split, a, b, negatives, sorted(allowed))


@pytest.mark.parametrize("negatives_from", ["all", "split"])
def test_negatives_are_never_a_partner_of_the_other_split(tmp_path, negatives_from):
    # train {A,B}, {C,D}; dev {A,C}: C is A's partner in dev, a known positive, so never a negative of A|B.
    # Before, A|B got C for 11 of 40 seeds with negatives_from="all" (pool A..E) and 18 of 40 with "split"
    # (train pool A..D, C included: it is in a train set too).
    train, dev, papers = [["A", "B"], ["C", "D"]], [["A", "C"]], ["A", "B", "C", "D", "E"]
    folder = _split_folder(tmp_path / "split", train, dev, papers)
    for seed in range(40):
        cfg = ExamplesConfig(num_negatives=1, negatives_from=negatives_from, seed=seed)
        out = tmp_path / f"ex{seed}"
        build_examples(folder, out, cfg)
        _check_against_brute_force(out, train, dev, papers, cfg)
        negatives = {e["example_id"]: e["negative_ids"] for e in cocite.iter_examples(out, "train")}
        assert "C" not in negatives["A|B"]


def test_dev_negatives_exclude_train_partners_and_too_few_drop(tmp_path):
    # dev {A,C}: B is A's train partner and D is C's, so with the dev pool {A,C} plus all papers only E is left;
    # with two negatives wanted the pair has too few candidates and is dropped (before: B, D or E were drawn).
    train, dev, papers = [["A", "B"], ["C", "D"]], [["A", "C"]], ["A", "B", "C", "D", "E"]
    folder = _split_folder(tmp_path / "split", train, dev, papers)
    one = build_examples(folder, tmp_path / "one", ExamplesConfig(num_negatives=1, negatives_from="all", seed=0))
    assert [e["negative_ids"] for e in cocite.iter_examples(tmp_path / "one", "dev")] == [["E"]]
    assert one["dev"]["examples"] == 1
    two = build_examples(folder, tmp_path / "two", ExamplesConfig(num_negatives=2, negatives_from="all", seed=0))
    assert two["dev"] == {**two["dev"], "examples": 0, "dropped_no_negative": 1}


@pytest.mark.parametrize("graph_seed", range(6))
def test_random_split_matches_brute_force(tmp_path, graph_seed):
    rng = random.Random(graph_seed)
    papers = [f"P{i}" for i in range(10)]
    sets = sorted({set_id(rng.sample(papers, rng.choice((2, 2, 3)))) for _ in range(12)})
    roots = pair_components([s.split("|") for s in sets])
    dev_roots = set(rng.sample(sorted(set(roots)), max(1, len(set(roots)) // 3)))
    train = [s.split("|") for s, r in zip(sets, roots) if r not in dev_roots]
    dev = [s.split("|") for s, r in zip(sets, roots) if r in dev_roots]
    folder = _split_folder(tmp_path / "split", train, dev, papers)
    for negatives_from in ("all", "split"):
        for k in (1, 2):
            cfg = ExamplesConfig(num_negatives=k, negatives_from=negatives_from, seed=graph_seed)
            out = tmp_path / f"ex_{negatives_from}_{k}"
            build_examples(folder, out, cfg)
            _check_against_brute_force(out, train, dev, papers, cfg)


def _record(citing: str, *paper_ids: str) -> dict:
    return {"citing_paper_id": citing, "context": CONTEXT, "source": "test", "all_links_confirmed": True,
            "cited": [{"paper_id": p, "title": f"Title {p}", "abstract": ABSTRACT} for p in paper_ids]}


@pytest.mark.parametrize("citing", [" P1", "P1 ", "P\t1", "P 1"])
def test_citing_id_with_whitespace_is_refused_like_a_cited_id(tmp_path, citing):
    # ' P1' citing P1 was written as a context citing P1, P2, P3 with no self-citation counted
    path = _write_jsonl(tmp_path / "r.jsonl", [_record("Q", "P1", "P2"), _record(citing, "P1", "P2", "P3")])
    with pytest.raises(DataError, match=r"r\.jsonl:2: citing_paper_id .* holds whitespace"):
        ingest_records(path, tmp_path / "out", IngestConfig(exclude_benchmark_papers=False), held_out=())
    skipped = ingest_records(path, tmp_path / "skip", IngestConfig(on_error="skip", exclude_benchmark_papers=False),
                             held_out=())
    assert skipped["bad_lines"] == 1 and skipped["counts"]["contexts"] == 1
    assert "citing_paper_id" in skipped["bad_line_messages"][0]


def test_clean_citing_id_still_counts_its_self_citation(tmp_path):
    path = _write_jsonl(tmp_path / "r.jsonl", [_record("P1", "P1", "P2", "P3")])
    report = ingest_records(path, tmp_path / "out", IngestConfig(exclude_benchmark_papers=False), held_out=())
    assert report["counts"]["self_citations_removed"] == 1
    contexts = [json.loads(line) for line in (tmp_path / "out" / "contexts.jsonl").read_text().splitlines()]
    assert [c["cited_ids"] for c in contexts] == [["P2", "P3"]]


@pytest.mark.slow
def test_real_cocitations_no_negative_is_a_partner(tmp_path, shared_data):
    records = shared_data / "cocite-acl" / "cocitations.jsonl"
    out = cocite.run_all(records, tmp_path / "run", held_out=())
    stages = json.loads((tmp_path / "run" / "pipeline_report.json").read_text())["stages"]
    assert stages["ingest"]["counts"] == {"records": 2600, "self_citations_removed": 1, "contexts": 2600,
                                          "papers": 768}
    sets = [json.loads(line)["paper_ids"] for split in ("train", "dev")
            for line in (out / f"groups.{split}.jsonl").read_text().splitlines()]
    for split in ("train", "dev"):
        for e in cocite.iter_examples(out, split):
            near = {p for s in sets if e["query_id"] in s or e["positive_id"] in s for p in s}
            assert not near & set(e["negative_ids"]), (split, e["example_id"], e["negative_ids"])
