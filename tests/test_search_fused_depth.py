"""The fused first stage (`stages: ann,bm25`) without a re-ranker fuses each stage's best `shortlist` papers, whatever
k: its lists were k deep, and z-scores over k papers gave the k best of one query other scores and another order at
each k (on 50 ACL abstracts the top 10 of `aspire search --k 10` differed from the top 10 of `--k 49` for every query,
and from the ranking `aspire evaluate ... --search-pipeline search.stages=ann,bm25` scored)."""

from __future__ import annotations

import json

import pytest
from test_reliability_round11_search import random_index

from aspire.cli.search import main as search_main
from aspire.index.config import checked_search_config, unused_settings
from aspire.search import Searcher


@pytest.mark.parametrize("fuse", ["z:0.815", "minmax:0.5", "rrf"])
def test_the_fused_k_best_are_the_first_k_of_a_deeper_search(fuse):
    searcher = Searcher(random_index())
    for paper in ("p3", "p9", "p0"):
        query = searcher.query_from_index(paper)
        deep = searcher.search(query, k=25, stages="ann,bm25", fuse=fuse)
        for k in (1, 3, 10):
            hits = searcher.search(query, k=k, stages="ann,bm25", fuse=fuse)
            assert [(h.paper_id, h.score) for h in hits] == [(h.paper_id, h.score) for h in deep[:k]], (paper, k)


def test_the_fused_stage_reads_the_shortlist_without_a_re_ranker(tmp_path, capsys):
    fused = checked_search_config(Searcher(random_index()).config, stages="ann,bm25", rerank="none")
    assert unused_settings(fused, ["shortlist"]) == []  # its lists' depth
    assert unused_settings(checked_search_config(fused, stages="ann"), ["shortlist"])  # the k best: read by nothing
    random_index().save(tmp_path / "index")
    query = ["--index", str(tmp_path / "index"), "--query-id", "p3", "--stages", "ann,bm25", "--json", "--quiet"]
    answers = []
    for k in ("2", "20"):
        assert search_main([*query, "--k", k]) == 0
        answers.append([(h["paper_id"], h["score"]) for h in json.loads(capsys.readouterr().out)["hits"]])
    assert len(answers[1]) == 20 and answers[0] == answers[1][:2]
    assert search_main([*query, "--k", "2", "--shortlist", "40"]) == 0  # once refused: "read by nothing"
    assert [(h["paper_id"], h["score"]) for h in json.loads(capsys.readouterr().out)["hits"]] == answers[0]
    assert search_main([*query, "--k", "2", "--shortlist", "5", "--stages", "ann"]) == 2
    assert "--shortlist 5" in capsys.readouterr().err


def test_the_page_takes_a_fused_searchs_shortlist_and_answers_it(tmp_path):
    from aspire.serve import RequestError, open_service

    random_index().save(tmp_path / "index")
    service = open_service(tmp_path / "index", ["k=2"])
    body = {"paper_id": "p3", "sentences": [0], "rerank": "none", "stages": "ann,bm25"}
    deep = service.search({**body, "k": 20})
    for answer in (service.search(body), service.search({**body, "shortlist": 40})):  # once refused: read by nothing
        assert [(h["paper_id"], h["score"]) for h in answer["hits"]] == [
            (h["paper_id"], h["score"]) for h in deep["hits"][:2]]
    assert service.search({**body, "shortlist": 40})["shortlist"] == 40
    with pytest.raises(RequestError, match="reranks by 'none'"):  # the first stage's k best: read by nothing
        service.search({**body, "stages": "ann", "shortlist": 40})
