"""The page server, round 10 (correctness): a request's shortlist with no re-ranker is refused (it was taken and read
by nothing), `aspire serve` refuses a search.cross_encoder override (never read: requests decide) and cross-encoder
settings without --cross-encoder, the "fewer than k" note counts the query paper when it is not left out; and, as
references, the service's answers equal `aspire search --json` on the same index, a labels file repeating an id is read
from its first record (as the index build keeps it), and a rebuilt index's texts and labels are served after a reload
while a failed one leaves the old generation whole."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from serve_support import PAPERS, L, build_index, encoder_fixture, index_fixture  # noqa: F401 (fixtures encoder, index)

from aspire.cli.search import main as search_main
from aspire.data.papers import Paper, write_papers
from aspire.index import SentenceIndex
from aspire.serve import RequestError, ServiceHolder, open_service, read_labels
from aspire.serve.__main__ import main as serve_main


@pytest.fixture
def no_serving(monkeypatch):
    """`aspire serve` returns instead of serving (so a command line it wrongly takes ends the test, not hangs it)."""
    from aspire.serve.server import AspireServer

    monkeypatch.setattr(AspireServer, "serve_forever", lambda self: None)


def test_a_shortlist_without_a_reranker_is_refused_not_ignored(index):
    service = open_service(index, ["k=2"])  # rerank none: the first stage's k best are the answer
    body = {"paper_id": "q", "sentences": [0, 1], "shortlist": 2}
    with pytest.raises(RequestError) as err:  # once 200, the shortlist read by nothing
        service.search(body)
    assert err.value.status == 400 and err.value.message == (
        "shortlist: the papers the first stage passes to a re-ranker, and this search reranks by 'none' (the first "
        "stage's 2 best are the answer): leave shortlist out, or ask for a re-ranker")
    with pytest.raises(RequestError, match="reranks by 'none'"):
        service.search({**body, "rerank": "none", "cross_encoder": False})
    out = service.search({**body, "rerank": "minl2"})  # read where a re-ranker takes it
    direct = service.searcher.search(service.searcher.query_from_index("q", [0, 1]), k=2, rerank="minl2", shortlist=2)
    assert [h["paper_id"] for h in out["hits"]] == [h.paper_id for h in direct] and out["shortlist"] == 2
    plain = service.search({"paper_id": "q", "sentences": [0, 1]})  # no shortlist: answered, and none reported
    assert plain["hits"] and plain["rerank"] == "none" and plain["shortlist"] is None  # once the unread default, 1000


def test_serve_refuses_a_cross_encoder_override_it_would_not_read(index, capsys, no_serving):
    # search.cross_encoder=true was taken and every search ran without the stage (a request's field decides)
    message = "search.cross_encoder=true: the page's searches turn the cross-encoder stage on one request at a time"
    with pytest.raises(ValueError, match=message):
        open_service(index, ["cross_encoder=true"])
    assert serve_main(["--index", str(index), "--port", "0", "search.cross_encoder=true"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"error: {message}")


@pytest.mark.parametrize("override", ["search.cross_top=5", "search.cross_weight=0.5"])
def test_serve_refuses_cross_encoder_settings_without_a_cross_encoder(index, capsys, no_serving, override):
    assert serve_main(["--index", str(index), "--port", "0", override]) == 2  # once 0: served, the setting unread
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {override}: the cross-encoder stage's settings go with --cross-encoder DIR, and no cross-encoder "
        "is given")


def test_a_labels_file_repeating_an_id_is_read_from_its_first_record(index, tmp_path, caplog):
    """A check (it held): the papers reader refuses a repeated id, so the first record's labels are served, as the
    index build keeps the first record."""
    stored = SentenceIndex.load(index)
    a = PAPERS[1]
    records = [PAPERS[0], a, Paper("a", a.title, a.sentences, [L[2], L[2]]),  # same sentences, other labels
               PAPERS[2], Paper("b", "x", ["other sentences.", "here."], [L[0], L[0]])]  # labelled first, then other
    write_papers(tmp_path / "labels.jsonl", records)
    with caplog.at_level(logging.WARNING, logger="aspire.serve.service"):
        labels, counts = read_labels(tmp_path / "labels.jsonl", stored.paper_ids, stored.sentences)
    assert labels["a"] == list(a.labels) == stored.labels[stored.position("a")]
    assert labels["b"] == list(PAPERS[2].labels)
    assert (counts["labelled"], counts["mismatched"], counts["rejected_records"]) == (3, 0, 2)
    assert "labels.jsonl:3 (paper_id 'a'): duplicate paper_id" in caplog.text


def test_the_short_note_counts_the_query_paper_when_it_is_not_left_out(index):
    kept = open_service(index, ["k=10", "exclude_query=false"]).search({"paper_id": "q", "sentences": [0]})
    assert len(kept["hits"]) == len(PAPERS) and "q" in [h["paper_id"] for h in kept["hits"]]
    assert kept["note"] == f"the index holds only {len(PAPERS)} papers"  # once "5 of the 10 papers asked for ..."
    left_out = open_service(index, ["k=10"]).search({"paper_id": "q", "sentences": [0]})
    assert left_out["note"] == f"the index holds only {len(PAPERS) - 1} other papers"


def test_the_short_note_says_one_paper_in_the_singular(encoder, tmp_path):
    two = build_index(encoder, PAPERS[:2], tmp_path / "two", "tiny")  # once "the index holds only 1 other papers"
    assert open_service(two, ["k=5"]).search({"paper_id": "q", "sentences": [0]})["note"] == \
        "the index holds only 1 other paper"


@pytest.mark.parametrize("stages, rerank, k, shortlist", [("ann", "ot", 3, 4), ("ann,bm25", "minl2", 2, None),
                                                          ("ann", "none", 4, None), ("whole", "hybrid", 3, 3)])
def test_the_service_answers_as_the_search_command_does(index, capsys, stages, rerank, k, shortlist):
    service = open_service(index, ["ot_max_iter=200"])
    body = {"paper_id": "q", "sentences": [2, 0], "k": k, "stages": stages, "rerank": rerank}
    extra = []
    if shortlist is not None:
        body["shortlist"], extra = shortlist, ["--shortlist", str(shortlist)]
    out = service.search(body)
    capsys.readouterr()
    assert search_main(["--index", str(index), "--query-id", "q", "--sentences", "0,2", "--k", str(k), "--stages",
                        stages, "--rerank", rerank, *extra, "--json", "search.ot_max_iter=200"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["query_sentences"] == out["plan_rows"] == out["sentences"] == [0, 2] and len(out["hits"]) == k
    assert [h["paper_id"] for h in out["hits"]] == [h["paper_id"] for h in cli["hits"]]
    np.testing.assert_allclose([h["score"] for h in out["hits"]], [h["score"] for h in cli["hits"]], rtol=1e-5)
    for ours, theirs in zip(out["hits"], cli["hits"]):
        assert [(p["query_sentence"], p["hit_sentence"]) for p in ours["pairs"]] == \
               [(p["query_sentence"], p["hit_sentence"]) for p in theirs["pairs"]]
        assert ours["stages"] == pytest.approx(theirs["stages"], rel=1e-5)
        for p in ours["pairs"]:  # each pair's distance is its cell of the hit's distance grid
            assert p["dist"] == pytest.approx(ours["dist"][[0, 2].index(p["query_sentence"])][p["hit_sentence"]],
                                              abs=1e-4)


def test_a_reload_serves_the_rebuilt_texts_and_labels_and_a_failed_one_the_old_generation_whole(encoder, tmp_path):
    index = build_index(encoder, PAPERS, tmp_path / "index", "tiny")
    write_papers(tmp_path / "labels.jsonl", PAPERS)
    holder = ServiceHolder(index, ["k=2"], labels_from=tmp_path / "labels.jsonl", check_every=None)
    old = holder.service.search({"paper_id": "b", "sentences": [0]})
    new_b = Paper("b", "aspects of citation", ["a title of a paper.", "we show results.", "the data improves."],
                  [L[1], L[1], L[2]])
    rebuilt = [new_b, *PAPERS[:2]]
    build_index(encoder, rebuilt, index, "tiny")
    write_papers(tmp_path / "labels.jsonl", rebuilt)
    assert holder.service.paper("b")["title"] == "document similarity"  # no check: the old one until a reload
    assert holder.reload()["reloaded"] is True
    paper = holder.service.paper("b")
    assert (paper["title"], [s["text"] for s in paper["sentences"]], [s["label"] for s in paper["sentences"]]) == \
           (new_b.title, new_b.sentences, list(new_b.labels))
    out = holder.service.search({"paper_id": "b", "sentences": [2]})
    assert [h["paper_id"] for h in out["hits"]] == [h.paper_id for h in holder.service.searcher.search(
        holder.service.searcher.query_from_index("b", [2]), k=2)] and out["generation"] == "gen-000002"
    (index / "CURRENT").write_text("gen-000009\n")  # a live generation that cannot be opened
    assert "gen-000009" in holder.reload()["error"]
    again = holder.service.search({"paper_id": "b", "sentences": [2]})
    assert again == out  # the old generation whole: its texts, labels, vectors and name
    assert old["generation"] == "gen-000001" and old["hits"] != out["hits"]
