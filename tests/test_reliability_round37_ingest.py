"""Round 37: co-citation stages 1-2 (ingest, filter) checked against hand-made records and hand counts."""

from __future__ import annotations

import json

import pytest

from aspire.data.acl import HeldOut
from aspire.data.cocite import DataError, FilterConfig, IngestConfig, filter_contexts, ingest_records

ABSTRACT = ["One sentence here.", "Two sentence here.", "Three sentence here."]


def _paper(pid: str, title: str | None = None) -> dict:
    return {"paper_id": pid, "title": title or f"Title {pid}", "abstract": ABSTRACT}


def _write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_ingest_counts_add_up_to_the_input_and_benchmark_papers_go_exactly(tmp_path):
    recs = [
        {"citing_paper_id": "C1", "context": "We use A and B (X, 2000).", "cited": [_paper("A"), _paper("B")]},
        {"citing_paper_id": "C2", "context": " Held out sentence. ", "cited": [_paper("A"), _paper("B")]},
        {"citing_paper_id": "C3", "context": "Self cite.", "cited": [_paper("C3"), _paper("A")]},
        {"citing_paper_id": "C4", "context": "Bench.", "cited": [_paper("A"), _paper("Z")]},
        {"citing_paper_id": "C5", "context": "Bench2.", "cited": [_paper("A"), _paper("B"), _paper("Z", "A Bench")]},
        {"citing_paper_id": "C6", "context": "Twice.", "cited": [_paper("A"), _paper("A")]},
    ]
    path = tmp_path / "r.jsonl"
    _write_jsonl(path, recs)
    with path.open("a") as handle:
        handle.write('{"citing_paper_id": 3}\n')
    cfg = IngestConfig(on_error="skip", exclude_benchmark_test=True, exclude_benchmark_papers=True)
    rep = ingest_records(path, tmp_path / "i", cfg, held_out=["Held out sentence."],
                         held_out_papers=HeldOut(titles=frozenset({"abench"})))
    c = rep["counts"]
    assert rep["bad_lines"] == 1 and ":7:" in rep["bad_line_messages"][0]
    assert c["records"] == 6 == (c["contexts"] + c["dropped_benchmark_test"] + c["dropped_benchmark_paper"]
                                 + c["dropped_fewer_than_2_cited"])
    assert (c["contexts"], c["dropped_benchmark_test"], c["dropped_benchmark_paper"]) == (2, 1, 1)
    assert c["self_citations_removed"] == 1 and c["benchmark_citations_removed"] == 2
    contexts = [json.loads(x) for x in (tmp_path / "i" / "contexts.jsonl").read_text().splitlines()]
    papers = [json.loads(x)["paper_id"] for x in (tmp_path / "i" / "abstracts.jsonl").read_text().splitlines()]
    # Z matched by title in record 5's version only, so it goes from record 4 too; nothing else goes
    assert [x["cited_ids"] for x in contexts] == [["A", "B"], ["A", "B"]]
    assert sorted(papers) == ["A", "B"]
    assert rep["removed_benchmark_by"]["title"] == 1


def test_ingest_malformed_record_names_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    _write_jsonl(path, [{"citing_paper_id": "C1", "context": "x", "cited": [_paper("A"), _paper("B")]},
                        {"citing_paper_id": "C2", "context": "x", "cited": [_paper("A|B"), _paper("B")]}])
    with pytest.raises(DataError, match=rf"{path}:2: cited\[0\]"):
        ingest_records(path, tmp_path / "i", IngestConfig(exclude_benchmark_test=False, exclude_benchmark_papers=False))
    assert not (tmp_path / "i" / "contexts.jsonl").exists()


def test_filter_refuses_a_context_citing_a_paper_without_abstract(tmp_path):
    # ingest writes every cited paper's abstract; a context naming one that is missing was counted as
    # "trimmed by bad_abstract" and the paper silently dropped
    in_dir = tmp_path / "in"
    in_dir.mkdir()
    _write_jsonl(in_dir / "abstracts.jsonl", [_paper("A"), _paper("B")])
    text = "a b c d e f g"
    _write_jsonl(in_dir / "contexts.jsonl", [
        {"context_id": "ok", "text": text, "text_clean": text, "cited_ids": ["A", "B"]},
        {"context_id": "x", "text": text + " h", "text_clean": text + " h", "cited_ids": ["A", "B", "Q"]}])
    with pytest.raises(DataError, match=r"contexts\.jsonl:2: context 'x'.*'Q'.*no abstract"):
        filter_contexts(in_dir, tmp_path / "out", FilterConfig(min_abstract_sentences=1))
    assert not (tmp_path / "out" / "report.json").exists()


def test_filter_counts_add_up_in_the_documented_order(tmp_path):
    in_dir = tmp_path / "in"
    in_dir.mkdir()
    _write_jsonl(in_dir / "abstracts.jsonl", [_paper("A"), _paper("B"), _paper("C"),
                                              {"paper_id": "S", "title": "s", "abstract": ["Only one."]}])
    t = "one two three four five six"

    def ctx(i, ids, text=t, confirmed=True):
        return {"context_id": f"c{i}", "text": text, "text_clean": text, "cited_ids": ids,
                "links_confirmed": confirmed}
    rows = [ctx(0, ["A", "B"], confirmed=False),         # confirmed_only (also too short: first filter wins)
            ctx(1, ["A", "B", "C", "S"], text="x"),     # max_cited before context_tokens
            ctx(2, ["A", "B"], text="x"),               # context_tokens
            ctx(3, ["A", "S"]),                         # trimmed, then min_cited
            ctx(4, ["A", "B", "S"]),                    # trimmed, kept
            ctx(5, ["A", "B"], text=t.upper()),         # dedup of c4 (case-folded text)
            ctx(6, ["B", "C"], text=t + " seven")]      # kept
    rows[0]["text"] = rows[0]["text_clean"] = "x"
    _write_jsonl(in_dir / "contexts.jsonl", rows)
    rep = filter_contexts(in_dir, tmp_path / "out", FilterConfig(confirmed_only=True))
    removed = {r["filter"]: r["removed"] for r in rep["removed_in_order"]}
    assert removed == {"confirmed_only": 1, "max_cited": 1, "context_tokens": 1, "bad_abstract": 0,
                       "min_cited": 1, "dedup": 1}
    assert rep["contexts_in"] == 7 == sum(removed.values()) + rep["contexts_out"]
    assert rep["contexts_trimmed_by_bad_abstract"] == 2
    out = [json.loads(x) for x in (tmp_path / "out" / "contexts.jsonl").read_text().splitlines()]
    assert [(x["context_id"], x["cited_ids"]) for x in out] == [("c4", ["A", "B"]), ("c6", ["B", "C"])]
    assert rep["papers"] == {"papers_in": 4, "removed_too_few_sentences": 1, "papers_passing": 3}
