"""Round 41: context2doc benchmark (citation-context retrieval) checked against hand-made records."""

import json
import re

import pytest

from aspire.benchmarks import context2doc as c2d

RECORDS = [
    {"citing_paper_id": "A", "context": "We use TNT (Brants, 2000) as in Petrov et al (2012).",
     "cited": [{"paper_id": "P1", "title": "t1", "abstract": ["a1."]}, {"paper_id": "P2", "title": "t2"}]},
    {"citing_paper_id": "B", "context": "Parsing [3] helps.", "cited": [{"paper_id": "P3", "title": "t3"}]},
    {"citing_paper_id": "C", "context": "No link here.", "cited": []},
    {"citing_paper_id": "D", "context": "(Brants, 2000)", "cited": [{"paper_id": "P1", "title": "t1",
                                                                      "abstract": ["a1."]}]},
]


def _write(tmp_path, records=RECORDS):
    source = tmp_path / "cocitations.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    return source


def _all_test_split(tmp_path, source, extra=()):
    """A split putting every kept query (and `extra`) in test, with a valid checksum."""
    meta = c2d.make_split(source)
    allq = [q for p in meta["splits"].values() for q in p["queries"]] + list(extra)
    body = {n: {"n_queries": 0, "n_citing_papers": 0, "queries": [], "citing_papers": []} for n in c2d.SPLIT_NAMES}
    body["test"]["queries"] = allq
    meta["splits"], meta["checksum"] = body, c2d._checksum(body)
    path = tmp_path / "split.json"
    path.write_text(json.dumps(meta))
    return meta, path


def test_make_split_excludes_no_cited_and_empty_query(tmp_path):
    meta = c2d.make_split(_write(tmp_path))
    assert meta["excluded_queries"] == ["L3", "L4"]


def test_query_text_relevant_and_candidates_match_hand_reference(tmp_path):
    source = _write(tmp_path)
    _, split = _all_test_split(tmp_path, source)
    bench = c2d.load_context2doc(tmp_path, "test", split)
    assert bench.queries == {"L1": "We use TNT as in.", "L2": "Parsing helps."}
    hand = re.sub(r"\s+", " ", re.sub(r"\s*(\([^()]*\d{4}\)|\[\d+\]|Petrov et al \(2012\))", "",
                                      RECORDS[0]["context"])).strip()
    assert bench.queries["L1"] == hand
    assert bench.qrels == {"L1": {"P1": 1, "P2": 1}, "L2": {"P3": 1}}
    assert [p.paper_id for p in bench.candidates] == ["P1", "P2", "P3"]


@pytest.mark.parametrize("qid", ["L3", "L4"])
def test_split_listing_an_excluded_record_is_refused(tmp_path, qid):
    """A split (valid checksum) that lists a record with no cited paper (L3) or an empty query text (L4) was kept
    silently: the query scored with empty qrels or an empty text."""
    source = _write(tmp_path)
    _, split = _all_test_split(tmp_path, source, extra=[qid])
    with pytest.raises(ValueError, match=qid):
        c2d.load_context2doc(tmp_path, "test", split)


def test_edited_split_is_refused(tmp_path):
    source = _write(tmp_path)
    meta, split = _all_test_split(tmp_path, source)
    meta["splits"]["test"]["queries"] = ["L1"]
    split.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="checksum"):
        c2d.load_split(split, source)
