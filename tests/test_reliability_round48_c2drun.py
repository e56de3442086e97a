"""Round 48: `aspire.retrieval.crossencoder` (cross_rerank over a shortlist) and `aspire.evaluate.context2doc_run`
(depth, the written run's metrics, judged papers that are not candidates) against hand computations."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.benchmarks.runs import read_run
from aspire.evaluate.context2doc_run import METRICS, check_depth, run_context2doc
from aspire.evaluate.options import Stages
from aspire.retrieval.crossencoder import cross_rerank
from aspire.scoring.crossencoder import CrossEncoderReranker
from aspire.search import Hit
from tests.test_reliability_round32_context2doc import brute_metrics
from tests.test_reliability_round41_c2drun import tiny_text_bench

# ---- fixes ----

@pytest.mark.parametrize("depth", [12.5, 100.0, "100", None])
def test_a_depth_that_is_not_a_whole_number_is_refused_naming_it(depth):
    bench = tiny_text_bench()
    with pytest.raises(ValueError, match="context2doc depth must be a whole number"):
        check_depth(bench, depth)


def test_run_refuses_a_float_depth_before_any_scoring(tmp_path):
    bench = tiny_text_bench()
    with pytest.raises(ValueError, match=r"depth must be a whole number, got 12\.0"):
        run_context2doc(bench, tmp_path, "bm25", stages=Stages(bm25=True), depth=12.0)
    assert not (tmp_path / "run.trec").exists()


def test_a_judged_paper_that_is_not_a_candidate_is_counted_and_scored_as_a_miss(tmp_path):
    bench = tiny_text_bench()
    bench.qrels["Q0"]["NOT-A-CANDIDATE"] = 1
    bench.qrels["Q3"]["GONE"] = 1
    res = run_context2doc(bench, tmp_path, "bm25", stages=Stages(bm25=True), depth=len(bench.candidates))
    assert res["relevant_not_candidates"] == {"n": 2, "queries": ["Q0", "Q3"]}
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["relevant_not_candidates"] == {"n": 2, "queries": ["Q0", "Q3"]}
    run = read_run(tmp_path / "run.trec")
    for q in bench.queries:  # still judged: the paper no run can rank counts as a miss in every metric
        hand = brute_metrics(set(bench.qrels[q]), [d for d, _ in run[q]])
        for m in METRICS:
            assert saved["per_query"][m][q] == pytest.approx(hand[m], abs=1e-12), (q, m)
    assert saved["per_query"]["R@100"]["Q0"] == pytest.approx(0.5)


def test_no_count_when_every_judged_paper_is_a_candidate(tmp_path):
    bench = tiny_text_bench()
    res = run_context2doc(bench, tmp_path, "bm25", stages=Stages(bm25=True), depth=len(bench.candidates))
    assert "relevant_not_candidates" not in res


# ---- checks ----

def _fake_searcher(reranker, title_first: bool):
    titles = [f"title {i}" for i in range(7)]
    sentences = [[titles[i], f"sentence a of {i}.", f"words {'x ' * i}b."] if title_first
                 else [f"sentence a of {i}.", f"words {'x ' * i}b."] for i in range(7)]
    index = SimpleNamespace(titles=titles, sentences=sentences, positions={f"p{i}": i for i in range(7)},
                            title_first=lambda pos: title_first)
    return SimpleNamespace(index=index, cross_encoder=reranker)


def _z(v):
    v = np.asarray(v, dtype=np.float64)
    return (v - v.mean()) / v.std()


@pytest.mark.parametrize("weight,title_first", [(1.0, False), (0.4, True), (0.0, False)])
def test_cross_rerank_is_the_hand_mix_of_the_shortlist_and_keeps_the_tail(tiny_cross_encoder_dir, weight,
                                                                          title_first):
    reranker = CrossEncoderReranker(str(tiny_cross_encoder_dir), max_length=32, batch_size=3)
    searcher = _fake_searcher(reranker, title_first)
    # the query's first and third sentences selected: the stage reads those alone
    query = DocBatch.from_list([torch.eye(3)], ["q"], [["the first sentence.", "unselected words",
                                                         "a second one about x."]]).select_sentences([[0, 2]])
    order = [3, 0, 5, 1, 6, 2, 4]
    hits = [Hit(rank=r, paper_id=f"p{i}", title=f"title {i}", score=10.0 - r, stages={"ann": 10.0 - r})
            for r, i in enumerate(order, 1)]
    cfg = SimpleNamespace(cross_top=4, cross_weight=weight, k=6)
    out = cross_rerank(searcher, query, hits, cfg)
    # by hand: the query's sentences joined; each head paper's title and abstract (title read once)
    qtext = "the first sentence. a second one about x."
    head = hits[:4]
    texts = [f"title {int(h.paper_id[1:])} sentence a of {int(h.paper_id[1:])}. "
             f"words {'x ' * int(h.paper_id[1:])}b." for h in head]
    logits = reranker.score_pairs([(qtext, t) for t in texts])
    mixed = weight * _z(logits) + (1 - weight) * _z([h.score for h in head])
    if weight == 0.0:
        want_head = [h.paper_id for h in head]
    else:
        want_head = [h.paper_id for _, h in sorted(zip(mixed, head), key=lambda t: (-t[0], t[1].paper_id))]
    assert [h.paper_id for h in out] == want_head + [h.paper_id for h in hits[4:6]]
    assert [h.rank for h in out] == list(range(1, 7))
    got = {h.paper_id: h for h in out}
    for h, lg, mx in zip(head, logits, mixed):
        assert got[h.paper_id].stages["crossencoder"] == pytest.approx(float(lg), abs=1e-5)
        assert got[h.paper_id].stages["ann"] == h.score
        if weight:
            assert got[h.paper_id].score == pytest.approx(float(mx), abs=1e-5)
    for h in out[4:]:
        assert "crossencoder" not in h.stages
        assert h.score < min(x.score for x in out[:4])
    assert all(not math.isnan(h.score) for h in out)
