"""Round 45: the S2ORC input (`aspire.data.s2orc`): a cite span whose `text` is not the paragraph's characters at
its offsets is refused (its offsets would give the citation to another sentence); the mined output, checked against
a hand slice of the text, is read by the `filter` stage unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aspire.data.cocite import FilterConfig, IngestConfig, filter_contexts, iter_jsonl
from aspire.data.s2orc import mine_s2orc
from aspire.io import DataError

PLAIN = IngestConfig(splitter="regex", exclude_benchmark_test=False, exclude_benchmark_papers=False)
ABSTRACT = ["First sentence of it.", "Second sentence here.", "Third one ends it."]
BIB = {"B1": {"title": "t", "link": "P1"}, "B2": {"title": "t", "link": "P2"}, "B3": {"title": "t", "link": "P3"}}
TEXT = "We use A [1] here. B [2] and C [3] agree."


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cite(text: str, marker: str, ref: str | None, nth: int = 0) -> dict:
    start = -1
    for _ in range(nth + 1):
        start = text.index(marker, start + 1)
    return {"start": start, "end": start + len(marker), "text": marker, "ref_id": ref}


def _abstracts(tmp_path: Path) -> Path:
    return _write(tmp_path / "a.jsonl", [{"paper_id": p, "title": p, "abstract": ABSTRACT} for p in ("P1", "P2", "P3")])


def test_cite_span_whose_text_is_not_its_characters_is_refused(tmp_path):
    """Span 1 says "[2]" but its offsets point at "[1]" (offsets of another text). The old code gave P2 to the first
    sentence and wrote a false co-citation {P1, P2} for "We use A [1] here."; now the line and span are named, and
    with on_error=skip the paper is counted in bad_lines, never mined."""
    wrong = {**_cite(TEXT, "[1]", "B2"), "text": "[2]"}
    paper = {"paper_id": "C", "bib_entries": BIB, "body_text": [
        {"text": TEXT, "section": "I", "cite_spans": [_cite(TEXT, "[1]", "B1"), wrong, _cite(TEXT, "[3]", "B3")]}]}
    ok = {"paper_id": "D", "bib_entries": BIB, "body_text": [
        {"text": TEXT, "section": "I", "cite_spans": [_cite(TEXT, "[2]", "B2"), _cite(TEXT, "[3]", "B3")]}]}
    full = _write(tmp_path / "f.jsonl", [paper, ok])
    with pytest.raises(DataError, match=r"f\.jsonl:1: .*body_text\[0\]\.cite_spans\[1\]: text '\[2\]' is not"):
        mine_s2orc(full, _abstracts(tmp_path), tmp_path / "o", PLAIN)
    skip = IngestConfig(splitter="regex", exclude_benchmark_test=False, exclude_benchmark_papers=False,
                        on_error="skip")
    report = mine_s2orc(full, _abstracts(tmp_path), tmp_path / "s", skip)
    assert report["bad_lines"] == 1 and "cite_spans[1]" in report["bad_line_messages"][0]
    contexts = [c for _, c in iter_jsonl(tmp_path / "s" / "contexts.jsonl")]
    assert [(c["citing_paper_id"], c["text"], c["cited_ids"]) for c in contexts] == [
        ("D", "B [2] and C [3] agree.", ["P2", "P3"])]


def test_cite_span_text_of_wrong_type_is_refused(tmp_path):
    cite = {**_cite(TEXT, "[1]", "B1"), "text": 7}
    paper = {"paper_id": "C", "bib_entries": BIB, "body_text": [{"text": TEXT, "cite_spans": [cite]}]}
    with pytest.raises(DataError, match=r"f\.jsonl:1: .*cite_spans\[0\]: text must be a string, got int"):
        mine_s2orc(_write(tmp_path / "f.jsonl", [paper]), _abstracts(tmp_path), tmp_path / "o", PLAIN)


def test_mined_contexts_match_a_hand_slice_and_filter_reads_them(tmp_path):
    """Three paragraphs: every written context is the hand slice of its sentence, cites the papers a hand loop
    finds (two or more with an abstract; the one-paper and no-abstract sentences dropped, each counted), a cite
    span without `text` is accepted as before, and the `filter` stage reads the output unchanged."""
    t2 = "Only A [1] here. Then Lin et al. 2002 and B [2] agree. Also [9] and [1] are cited."
    c2 = [_cite(t2, "[1]", "B1"), {"start": t2.index("Lin et al. 2002"), "end": t2.index("Lin et al. 2002") + 15,
                                    "ref_id": "B3"}, _cite(t2, "[2]", "B2"), _cite(t2, "[9]", "B9"),
          _cite(t2, "[1]", "B1", nth=1)]
    bib = {**BIB, "B9": {"title": "no abstract", "link": "P9"}}
    paper = {"paper_id": 11, "bib_entries": bib, "body_text": [
        {"text": TEXT, "section": "Intro", "cite_spans": [_cite(TEXT, "[1]", "B1"), _cite(TEXT, "[2]", "B2"),
                                                          _cite(TEXT, "[3]", "B3")]},
        {"text": t2, "section": None, "cite_spans": c2}]}
    report = mine_s2orc(_write(tmp_path / "f.jsonl", [paper]), _abstracts(tmp_path), tmp_path / "ing", PLAIN)
    contexts = [c for _, c in iter_jsonl(tmp_path / "ing" / "contexts.jsonl")]
    texts = {0: TEXT, 1: t2}
    got = []
    for c in contexts:
        p = int(c["context_id"].split("#p")[1].split("s")[0])
        start = texts[p].index(c["text"])
        assert texts[p][start:start + len(c["text"])] == c["text"]
        got.append((p, c["text"], c["cited_ids"], c["source"]))
    assert got == [(0, "B [2] and C [3] agree.", ["P2", "P3"], "s2orc:Intro"),
                   (1, "Then Lin et al. 2002 and B [2] agree.", ["P2", "P3"], "s2orc:")]
    counts = report["counts"]
    assert counts["sentence_merges_at_citations"] == 1
    assert counts["dropped_fewer_than_2_linked"] == 2 and counts["dropped_fewer_than_2_with_abstract"] == 1
    assert {r["paper_id"] for _, r in iter_jsonl(tmp_path / "ing" / "abstracts.jsonl")} == {"P2", "P3"}
    filter_contexts(tmp_path / "ing", tmp_path / "flt", FilterConfig())
    assert sorted(c["context_id"] for _, c in iter_jsonl(tmp_path / "flt" / "contexts.jsonl")) == sorted(
        c["context_id"] for c in contexts)
