"""Round-5 reliability probes of the data readers: co-citation ingest, citation cleaning, papers files,
sentence splitting."""

from __future__ import annotations

import json

import pytest

from aspire.data.cocite import DataError, IngestConfig, clean_citations, ingest_records

ABSTRACT = ["First sentence of the abstract.", "Second sentence here.", "Third and last sentence."]
CONTEXT = "This context is long enough to pass the token filter easily (Smith, 2000; Jones, 2001)."
NO_HELD_OUT = IngestConfig(exclude_benchmark_test=False)


def _cited(pid: str, **fields) -> dict:
    return {"paper_id": pid, "title": "Title", "abstract": ABSTRACT, **fields}


def _record(cited: list[dict] | None = None, **fields) -> dict:
    return {"citing_paper_id": "X", "context": CONTEXT, "cited": cited or [_cited("A"), _cited("B")], **fields}


def _records_file(tmp_path, *records: dict):
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# ---- ingest: a record the later stages would refuse is refused at ingest, naming its line --------------
@pytest.mark.parametrize("bad, message", [
    (_record([_cited("A|B"), _cited("C")]), "cited[0].paper_id 'A|B' holds '|'"),
    (_record([_cited("A"), _cited("P 7")]), "cited[1].paper_id 'P 7' holds whitespace"),
    (_record([_cited("A", abstract=["One.", "   ", "Three."]), _cited("B")]), "cited[0].abstract[1] is empty"),
    (_record([_cited("A", abstract=["One \ud800 two.", "Three."]), _cited("B")]),
     "cited[0].abstract[0] holds a lone surrogate U+D800"),
    (_record([_cited("A", title="T\udfff"), _cited("B")]), "cited[0].title holds a lone surrogate U+DFFF"),
    (_record(context="Broken \ud83d text (Smith, 2000)."), "context holds a lone surrogate U+D83D"),
    (_record(citing_paper_id="X\udc00"), "citing_paper_id holds a lone surrogate U+DC00"),
    (_record(all_links_confirmed="false"), "all_links_confirmed must be true or false, got str 'false'"),
    (_record(source=3), "source must be a string, got int"),
], ids=["pipe-id", "space-id", "blank-sentence", "surrogate-sentence", "surrogate-title", "surrogate-context",
        "surrogate-citing-id", "confirmed-string", "source-int"])
def test_ingest_refuses_what_later_stages_cannot_take_naming_the_line(tmp_path, bad, message):
    path = _records_file(tmp_path, _record(), bad, _record())
    with pytest.raises(DataError) as err:
        ingest_records(path, tmp_path / "out", NO_HELD_OUT)
    assert str(err.value).startswith(f"{path}:2: ") and message in str(err.value)
    report = ingest_records(path, tmp_path / "skip", IngestConfig(exclude_benchmark_test=False, on_error="skip"))
    assert report["bad_lines"] == 1 and message in report["bad_line_messages"][0]
    assert report["counts"]["contexts"] == 2


def test_ingest_still_takes_an_empty_abstract_for_the_filter_to_count(tmp_path):
    path = _records_file(tmp_path, _record([_cited("A", abstract=[]), _cited("B"), _cited("C")]))
    report = ingest_records(path, tmp_path / "out", NO_HELD_OUT)
    assert report["counts"]["contexts"] == 1 and report["bad_lines"] == 0


# ---- citation cleaning -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, cleaned", [
    ("Øvrelid and Nivre (2007) show it.", "[CIT] show it."),
    ("As Çetinoğlu (2010) argues.", "As [CIT] argues."),
    ("Émile et al. (2003) and Łukasz (2019) agree.", "[CIT] agree."),
    ("Smith and Jones (2001) show it.", "[CIT] show it."),  # the ASCII case is unchanged
])
def test_clean_citations_takes_narrative_citations_of_non_ascii_names_whole(text, cleaned):
    assert clean_citations(text) == cleaned


def test_clean_citations_keeps_a_nul_of_the_text_and_marks_only_citations():
    # two real cocite-acl contexts hold NULs (lost table symbols); each became a spurious "[CIT]"
    text = "SR \x00 CP \x00 LR 59.9 (Hobbs, 1978) and x \ue000 y"
    assert clean_citations(text) == "SR \x00 CP \x00 LR 59.9 [CIT] and x \ue000 y"
    assert clean_citations("A\x00B", placeholder="<c>") == "A\x00B"


def test_an_unknown_splitter_name_is_refused_even_when_no_abstract_is_a_string(tmp_path):
    """The splitter is built when a string abstract first needs it, so a mistyped name passed unnoticed over a file
    of sentence lists (and failed later on the first file that had one)."""
    from aspire.data.papers import read_papers

    path = tmp_path / "p.jsonl"
    path.write_text('{"paper_id": "p1", "title": "t", "abstract": ["One.", "Two."]}\n')
    with pytest.raises(ValueError, match=r"unknown sentence splitter 'pysbdd'; valid: \["):
        read_papers(path, splitter="pysbdd")
    assert len(read_papers(path, splitter="pysbd").papers) == 1
