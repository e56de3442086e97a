"""The page's paper filter, round 74 (the page on real ACL abstracts, as a user meets it).

Found on a 1,500-abstract ACL index served by `aspire serve`: `GET /api/papers?q=%C3%A9t%C3%A9` ("été" as one letter
each) listed 6 papers, and the same word with its accents as combining marks (`e` + U+0301, as text pasted from a PDF or
typed on some keyboards gives it; it looks the same) listed none: the filter case-folded titles and words but did not
bring them to one Unicode normal form. Titles and words are now compared in BM25's normal form (NFKC), then folded.
"""

from __future__ import annotations

import json
import unicodedata
from urllib.parse import quote

import pytest
from serve_support import build_index, encoder_fixture, request, running  # noqa: F401 (fixture encoder)

from aspire.data.papers import Paper
from aspire.serve import open_service

NFC_TITLE = "Étude des traductions automatiques"
NFD_TITLE = unicodedata.normalize("NFD", "Évaluation d'un système")  # a title stored with combining marks
PAPERS = [
    Paper("fr1", NFC_TITLE, ["une étude des traductions.", "nous proposons une méthode."]),
    Paper("fr2", NFD_TITLE, ["un système est évalué.", "les résultats sont bons."]),
    Paper("de1", "Große Modelle", ["große modelle sind gut.", "wir zeigen ergebnisse."]),
    Paper("en1", "a parser for documents", ["we study scientific documents.", "we propose a parser."]),
]


@pytest.fixture(scope="module")
def service(encoder, tmp_path_factory):
    return open_service(build_index(encoder, PAPERS, tmp_path_factory.mktemp("r74") / "index", "tiny"))


def listed(srv, text: str) -> list[str]:
    """The ids `GET /api/papers?q=` lists for `text`, sent as the page sends it (encodeURIComponent: UTF-8, %-escaped)."""
    status, _, body = request(srv, "GET", f"/api/papers?q={quote(text, safe='')}&limit=30&offset=0")
    assert status == 200, body
    return [p["paper_id"] for p in json.loads(body)["papers"]]


@pytest.mark.parametrize("text, want", [
    (unicodedata.normalize("NFD", "étude"), ["fr1"]),  # the word decomposed, the title composed (failed: [])
    (unicodedata.normalize("NFD", "ÉTUDE traductions"), ["fr1"]),
    ("évaluation système", ["fr2"]),  # the word composed, the title decomposed (failed: [])
    ("ÉVALUATION", ["fr2"]),
    ("étude", ["fr1"]),  # as before
    ("GROSSE", ["de1"]),  # case folding kept
    ("parser", ["en1"]),
])
def test_paper_filter_finds_titles_whatever_the_unicode_form_of_either(service, text, want):
    assert [p["paper_id"] for p in service.find_papers(text)["papers"]] == want
    with running(service) as srv:
        assert listed(srv, text) == want


def test_paper_filter_answer_keeps_the_title_and_the_query_as_given(service):
    """Only the comparison is normalised: the listed title is the index's, and `query` echoes the text sent."""
    text = unicodedata.normalize("NFD", "système")
    found = service.find_papers(text)
    assert found["query"] == text
    assert [p["title"] for p in found["papers"]] == [NFD_TITLE]
