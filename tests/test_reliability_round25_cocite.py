"""Round 25: the co-citation pipeline's ingest and grouping stages against brute-force references.

Defects fixed: `ingest_records` compared each record's sentence stripped with the `held_out` sentences as given, so a
held-out sentence given with its surrounding whitespace dropped nothing, and a `held_out` string was read a character
a sentence (the test sentence went to training, unsaid); `filter_contexts`' `dedup="text_and_set"` keyed on the cited
ids in the order a hand-built context lists them, so one sentence citing {A, B} as ["B", "A"] was kept twice and
grouped twice into the set A|B.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from aspire.data import cocite
from aspire.data.acl import HeldOut, normalise_title
from aspire.data.cocite import FilterConfig, IngestConfig, filter_contexts, group_contexts, ingest_records
from aspire.data.cocite.sets import cocited_partners
from tests.test_cocite import _write_jsonl

ABSTRACT = ["First sentence here.", "Second sentence here.", "Third sentence here."]
LONG = "this context is long enough to pass every length filter"


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _paper(pid: str, abstract=ABSTRACT, title: str | None = None) -> dict:
    return {"paper_id": pid, "title": title or f"Title {pid}", "abstract": abstract}


def _record(context: str, *cited: dict, citing: str = "Z") -> dict:
    return {"citing_paper_id": citing, "context": context, "cited": list(cited)}


# --------------------------------------------------------------------------- held-out sentences


def test_ingest_strips_the_held_out_sentences_as_it_strips_the_records(tmp_path):
    src = _write_jsonl(tmp_path / "r.jsonl", [_record("  the test sentence  ", _paper("A"), _paper("B")),
                                              _record("a training sentence", _paper("A"), _paper("B"))])
    cfg = IngestConfig(exclude_benchmark_papers=False)
    report = ingest_records(src, tmp_path / "out", cfg, held_out={"the test sentence\n"})
    assert report["counts"]["dropped_benchmark_test"] == 1
    assert [c["text"] for c in _read(tmp_path / "out" / "contexts.jsonl")] == ["a training sentence"]


@pytest.mark.parametrize("held_out", ["the test sentence", ["the test sentence", 7]])
def test_ingest_refuses_held_out_that_is_not_a_collection_of_sentences(tmp_path, held_out):
    src = _write_jsonl(tmp_path / "r.jsonl", [_record("the test sentence", _paper("A"), _paper("B"))])
    with pytest.raises(TypeError, match="held_out must"):
        ingest_records(src, tmp_path / "out", IngestConfig(exclude_benchmark_papers=False), held_out=held_out)
    assert not (tmp_path / "out" / "contexts.jsonl").exists()


@pytest.mark.parametrize("held_out", ["the test sentence", ["the test sentence", 7]])
def test_s2orc_ingest_refuses_held_out_that_is_not_a_collection_of_sentences(tmp_path, held_out):
    """The S2ORC input shares the check (`IngestConfig.held_out_inputs`): a string once held out its characters."""
    from aspire.data.s2orc import mine_s2orc

    fixture = Path(__file__).parent / "fixtures" / "s2orc_mini"
    with pytest.raises(TypeError, match="held_out must"):
        mine_s2orc(fixture / "pdf_parses.jsonl", fixture / "abstracts.jsonl", tmp_path / "out",
                   IngestConfig(exclude_benchmark_papers=False), held_out=held_out)


# --------------------------------------------------------------------------- dedup on the set


def test_filter_text_and_set_dedup_keys_on_the_set_not_its_order(tmp_path):
    _write_jsonl(tmp_path / "in" / "abstracts.jsonl", [_paper(p) for p in "ABC"])
    _write_jsonl(tmp_path / "in" / "contexts.jsonl", [
        {"context_id": "c1", "text": LONG, "text_clean": LONG, "cited_ids": ["A", "B"]},
        {"context_id": "c2", "text": LONG, "text_clean": LONG, "cited_ids": ["B", "A"]},  # the same set
        {"context_id": "c3", "text": LONG, "text_clean": LONG, "cited_ids": ["A", "C"]},  # another set: kept
    ])
    report = filter_contexts(tmp_path / "in", tmp_path / "f", FilterConfig(dedup="text_and_set"))
    removed = {row["filter"]: row["removed"] for row in report["removed_in_order"]}
    assert removed["dedup"] == 1 and report["contexts_out"] == 2
    assert [c["context_id"] for c in _read(tmp_path / "f" / "contexts.jsonl")] == ["c1", "c3"]
    group_contexts(tmp_path / "f", tmp_path / "g")
    assert {g["set_id"]: g["context_ids"] for g in _read(tmp_path / "g" / "groups.jsonl")} == {
        "A|B": ["c1"], "A|C": ["c3"]}


# --------------------------------------------------------------------------- ingest against a brute-force filter


def _tiny_records() -> list:
    other = ["Another abstract, one sentence.", "And a second one.", "And a third one."]
    return [
        _record("s1 keeps two papers", _paper("A"), _paper("B"), _paper("A", other)),  # A twice, two texts
        _record("s2 cites a benchmark paper by title", _paper("A"), _paper("Q", title="A Benchmark Title!"),
                _paper("B")),
        _record("s3 loses its benchmark paper", _paper("C"), _paper("Q")),  # dropped: one left
        _record("s4 cites itself", _paper("C"), _paper("D"), citing="C"),  # one other paper: too few
        "not json",
        _record("  the held out test sentence ", _paper("A"), _paper("B")),
        _record("s6 cites 7 and '7'", _paper("7"), _paper("A", ["Changed."])),  # A's third text
        _record("s7 cites C and D", _paper("C", title="Other title"), _paper("D"), _paper("7")),
        _record("s8 bad abstract", {"paper_id": "E", "title": "t", "abstract": [" "]}, _paper("A")),
        _record("s9 only one paper", _paper("A"), _paper("A")),
    ]


def test_ingest_matches_a_brute_force_filter_and_its_counts_add_up(tmp_path):
    rows = _tiny_records()
    src = _write_jsonl(tmp_path / "r.jsonl", rows)
    held = {"the held out test sentence"}
    benchmark = HeldOut(titles=frozenset({normalise_title("a benchmark title")}))
    report = ingest_records(src, tmp_path / "out", IngestConfig(on_error="skip"), held, benchmark)
    records = [r for r in rows if isinstance(r, dict) and r["context"] != "s8 bad abstract"]
    bench = {c["paper_id"] for r in records for c in r["cited"] if benchmark.reason(c["paper_id"], c["title"],
                                                                                    c["abstract"])}
    assert bench == {"Q"}
    kept, first = [], {}
    for lineno, rec in enumerate(rows, 1):
        if not isinstance(rec, dict) or rec["context"] == "s8 bad abstract" or rec["context"].strip() in held:
            continue
        ids = sorted({c["paper_id"] for c in rec["cited"]} - {rec["citing_paper_id"]} - bench)
        if len(ids) >= 2:
            kept.append((f"{rec['citing_paper_id']}#L{lineno}", ids))
            for c in rec["cited"]:
                if c["paper_id"] in ids:
                    first.setdefault(c["paper_id"], (c["title"], c["abstract"]))
    contexts = _read(tmp_path / "out" / "contexts.jsonl")
    assert [(c["context_id"], c["cited_ids"]) for c in contexts] == kept
    assert {p["paper_id"]: (p["title"], p["abstract"]) for p in _read(tmp_path / "out" / "abstracts.jsonl")} == first
    counts = report["counts"]
    assert counts["records"] + report["bad_lines"] == len(rows) == 10  # every line counted once
    dropped = sum(v for k, v in counts.items() if k.startswith("dropped"))
    assert dropped + counts["contexts"] == counts["records"]
    assert counts == {"records": 8, "contexts": 4, "papers": 5, "dropped_benchmark_test": 1,
                      "dropped_benchmark_paper": 1, "dropped_fewer_than_2_cited": 2, "self_citations_removed": 1,
                      "records_citing_benchmark": 2, "benchmark_citations_removed": 2,
                      "conflicting_abstracts_ignored": 2}  # A's 2nd text (s1), A's 3rd (s6); C's first kept is s7's
    assert report["removed_benchmark_by"]["title"] == 1


def test_ingest_outputs_are_byte_identical_run_to_run(tmp_path):
    src = _write_jsonl(tmp_path / "r.jsonl", _tiny_records())
    benchmark = HeldOut(titles=frozenset({normalise_title("a benchmark title")}))
    for name in ("a", "b"):
        ingest_records(src, tmp_path / name, IngestConfig(on_error="skip"), {"the held out test sentence"}, benchmark)
    for name in ("contexts.jsonl", "abstracts.jsonl", "report.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_cocited_partners_are_symmetric_and_pairs_have_no_self_pair():
    sets = [["A", "B"], ["B", "C", "D"], ["A", "B"], ["E", "F"]]
    partners = cocited_partners(sets)
    for p, ps in partners.items():
        assert p in ps  # itself included, as documented
        for q in ps:
            assert p in partners[q]
    assert partners["B"] == {"A", "B", "C", "D"} and partners["E"] == {"E", "F"}
    for s in sets:
        pairs = cocite.pairs_of(s + s[:1])  # a repeated id makes no self-pair
        assert pairs == list(itertools.combinations(sorted(set(s)), 2))


@pytest.mark.slow
def test_real_ingest_removes_exactly_the_held_out_sentences_and_benchmark_papers(tmp_path, shared_data):
    from aspire.benchmarks.context2doc import held_out_for
    from aspire.benchmarks.heldout import cited_benchmark_papers

    source = shared_data / "cocite-acl" / "cocitations.jsonl"
    held, papers = held_out_for(source), cited_benchmark_papers(shared_data)
    report = ingest_records(source, tmp_path / "out", IngestConfig(), held, papers)
    records = _read(source)
    bench = {c["paper_id"] for r in records for c in r["cited"] if papers.reason(c["paper_id"], c["title"],
                                                                                 c["abstract"])}
    kept, first = [], {}
    for lineno, rec in enumerate(records, 1):
        ids = sorted({c["paper_id"] for c in rec["cited"]} - {rec["citing_paper_id"]} - bench)
        if rec["context"].strip() in held or len(ids) < 2:
            continue
        kept.append((f"{rec['citing_paper_id']}#L{lineno}", ids))
        for c in rec["cited"]:
            if c["paper_id"] in ids:
                first.setdefault(c["paper_id"], (c["title"], c["abstract"]))
    assert bench and held
    assert [(c["context_id"], c["cited_ids"]) for c in _read(tmp_path / "out" / "contexts.jsonl")] == kept
    assert {p["paper_id"]: (p["title"], p["abstract"]) for p in _read(tmp_path / "out" / "abstracts.jsonl")} == first
    counts = report["counts"]
    assert counts["records"] == len(records) and report["bad_lines"] == 0
    assert sum(v for k, v in counts.items() if k.startswith("dropped")) + counts["contexts"] == len(records)
    assert sum(report["removed_benchmark_by"].values()) <= len(bench)
