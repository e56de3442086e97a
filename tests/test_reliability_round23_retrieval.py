"""Round 23, the retrieval stages shared by search and evaluation (`aspire.retrieval`), against independent
references: BM25 against a hand-written Okapi BM25 (Lucene's idf and length norm, bm25s' tokens); the minl2 and OT
re-rankers' own scores against a brute-force loop (numpy min-L2, POT's Sinkhorn on the same weights); the
cross-encoder stage's weight-0 order.

Pinned defects: a BM25 first stage whose query shares no word with any paper answered k papers in index order
(all scored 0) without a word; a cross-encoder rerank weight of True was taken as 1.0 and one of "0.5" failed with a
bare TypeError naming no option.
"""

from __future__ import annotations

import logging
import math
import re

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.config import SearchConfig, checked_search_config
from aspire.retrieval.crossencoder import RerankOptions
from aspire.retrieval.lexical import LexicalStage
from aspire.retrieval.rerank import RERANK_STAGES, rerank
from aspire.scoring.lexical import BM25Index
from aspire.search import Searcher

WORDS = "graph parsing neural model the of attention transformer citation sentence aspect speech vision data".split()


def _random_searcher(P: int = 30, seed: int = 5) -> Searcher:
    """A flat index of P papers of 1..5 random 6-d sentence vectors and random words, with whole vectors."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 6, P)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    corpus = EncodedCorpus(rng.standard_normal((int(offsets[-1]), 6)).astype(np.float32), offsets,
                           [f"p{i}" for i in range(P)], [f"title {i}" for i in range(P)],
                           [[" ".join(rng.choice(WORDS, 4)) + "." for _ in range(n)] for n in lengths],
                           whole=rng.standard_normal((P, 6)).astype(np.float32))
    return Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))


# ---- BM25 against a hand-written Okapi BM25 ---------------------------------------------------------------------
def _okapi(texts: list[str], query: str, k1: float, b: float) -> np.ndarray:
    """Lucene's BM25 by hand: idf = ln(1 + (N - df + 0.5) / (df + 0.5)), tf / (tf + k1 (1 - b + b dl / avgdl)),
    summed over the query's words (a repeated word counts each time); bm25s' tokens (lower-cased words of 2+
    characters, its English stop words left out)."""
    from bm25s.stopwords import STOPWORDS_EN

    stop = set(STOPWORDS_EN)

    def tokens(t: str) -> list[str]:
        return [w for w in re.findall(r"(?u)\b\w\w+\b", t.lower()) if w not in stop]

    docs = [tokens(t) for t in texts]
    avg = sum(map(len, docs)) / len(docs)
    out = np.zeros(len(docs))
    for word in tokens(query):
        df = sum(word in d for d in docs)
        if df == 0:
            continue
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d.count(word)
            if tf:
                out[i] += idf * tf / (tf + k1 * (1 - b + b * len(d) / avg))
    return out


@pytest.mark.parametrize("k1, b", [(1.25, 0.75), (0.9, 0.4), (2.0, 1.0), (1.2, 0.0)])
def test_bm25_stage_scores_and_order_equal_a_hand_written_okapi_bm25(k1, b, tmp_path):
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, rng.integers(1, 15))) for _ in range(40)]
    ids = [str(i) for i in range(len(texts))]
    built = BM25Index(texts, ids, k1=k1, b=b)
    built.save(tmp_path)
    for bm25 in (built, BM25Index.load(tmp_path, ids)):
        stage = LexicalStage(bm25)
        for query in ("graph graph parsing", "Attention, MODEL!", "citation vision data", "zzz unknown"):
            want = _okapi(texts, query, k1, b)
            np.testing.assert_allclose(bm25.scores([query])[0], want, rtol=1e-5, atol=1e-6)
            top, scores = stage.top(query, 12, exclude=[3, 7], fill=False)
            keep = [p for p in np.flatnonzero(want > 0) if p not in (3, 7)]
            ref = sorted(keep, key=lambda p: (-np.float32(want[p]), p))[:12]  # float32 scores, ties: lower position
            assert top.tolist() == ref
            np.testing.assert_allclose(scores, want[ref], rtol=1e-5)


# ---- re-rankers against brute force -----------------------------------------------------------------------------
def _paper_vectors(index, p: int) -> np.ndarray:
    return np.asarray(index.vectors[index.offsets[p]:index.offsets[p + 1]], dtype=np.float64)


@pytest.mark.parametrize("paper, selection", [("p3", None), ("p8", [0, 2, 4]), ("p12", [1])])
def test_minl2_and_ot_rerank_scores_equal_brute_force_and_pot(paper, selection):
    """Over a shortlist of every other paper (excluded query): minl2's scores are -min over sentence pairs of numpy's
    L2; OT's k best are the k best of POT's Sinkhorn (x, y = softmax(-row / column minima / tau), reg eps) and their
    scores its -<D, P>; every other paper's OT score is a bound at or above its own, below the k-th."""
    import ot

    searcher = _random_searcher()
    index = searcher.index
    query = searcher.query_from_index(paper, selection)
    Q = query.emb[0][query.mask[0]].double().numpy()
    papers = np.array([p for p in range(index.n_papers) if index.paper_ids[p] != paper])
    cfg = checked_search_config(searcher.config, k=5, rerank="ot", shortlist=len(papers))
    own, _ = RERANK_STAGES["minl2"](searcher, query, papers, cfg)
    want = np.array([-np.linalg.norm(Q[:, None] - _paper_vectors(index, p)[None], axis=2).min() for p in papers])
    np.testing.assert_allclose(own, want, atol=1e-5)

    scorer = searcher.scorer("ot", cfg)
    ref = []
    for p in papers:
        D = np.linalg.norm(Q[:, None] - _paper_vectors(index, p)[None], axis=2)
        x, y = np.exp(-D.min(1) / scorer.tau), np.exp(-D.min(0) / scorer.tau)
        plan = ot.sinkhorn(x / x.sum(), y / y.sum(), D, reg=scorer.eps, numItermax=100000, stopThr=1e-12)
        ref.append(-(plan * D).sum())
    ref = np.array(ref)
    chosen, final, stages, (plan, cost) = rerank(searcher, query, papers, np.zeros(len(papers)), cfg)
    want_top = np.argsort(-ref, kind="stable")[:5]
    assert chosen.tolist() == papers[want_top].tolist()
    np.testing.assert_allclose(final, ref[want_top], atol=5e-4)  # Sinkhorn's tol 1e-4 on costs of a few units
    assert [s["ot"] for s in stages] == pytest.approx(final.tolist())
    assert plan.shape[0] == cost.shape[0] == 5
    scores, _ = RERANK_STAGES["ot"](searcher, query, papers, cfg)
    rest = np.setdiff1d(np.arange(len(papers)), want_top)
    assert (scores[rest] >= ref[rest] - 5e-4).all() and (scores[rest] < final[-1]).all()


# ---- a BM25 query sharing no word with any paper ------------------------------------------------------------------
def _stop_word_query(searcher: Searcher) -> DocBatch:
    q = searcher.query_from_index("p0")
    return DocBatch.from_list([q.emb[0]], ["q-stop"], [["The of and it."] * q.emb.shape[1]], q.whole)


@pytest.mark.parametrize("stages", ["bm25", "ann,bm25"])
def test_a_bm25_query_sharing_no_word_is_said_not_answered_in_index_order_silently(stages, caplog):
    # stages=bm25 answered the first k papers in index order, every one scored 0, and said nothing; the fused list
    # was the ANN stage's alone, also unsaid
    searcher = _random_searcher()
    with caplog.at_level(logging.WARNING, logger="aspire"):
        hits = searcher.search(_stop_word_query(searcher), k=4, stages=stages)
    assert len(hits) == 4
    if stages == "bm25":
        assert [h.paper_id for h in hits] == ["p0", "p1", "p2", "p3"] and {h.score for h in hits} == {0.0}
    assert "query 'q-stop': no paper shares a word of its text" in caplog.text
    assert ("first in index order" if stages == "bm25" else "the other stage's alone") in caplog.text


def test_a_bm25_query_sharing_a_word_is_not_warned_about(caplog):
    searcher = _random_searcher()
    with caplog.at_level(logging.WARNING, logger="aspire"):
        hits = searcher.search(searcher.query_from_index("p0"), k=4, stages="bm25")
    assert hits[0].score > 0 and "shares a word" not in caplog.text


# ---- the cross-encoder stage ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("weight", [True, "0.5", None])
def test_rerank_weight_that_is_not_a_number_is_refused_by_name(weight):
    # True was taken as weight 1.0; "0.5" (a quoted config value) failed with "'<=' not supported", naming nothing
    with pytest.raises(ValueError, match="rerank weight must be a number in"):
        RerankOptions("model", weight=weight)
    assert RerankOptions("model", weight=np.float64(0.25)).weight == 0.25
    assert RerankOptions("model", weight=1).weight == 1


class _ConstantCrossEncoder:
    """A stand-in cross-encoder scoring every paper alike."""

    seconds = 0.0

    def head_scores(self, text, previous, texts, top) -> dict[str, float]:
        return {pid: 1.0 for pid, _ in previous[:top]}


def test_cross_stage_at_weight_zero_keeps_the_previous_order_of_ties_and_otherwise_orders_them_by_id():
    """Twelve papers tied in the previous stage (BM25, all texts alike), listed by position (P0, P1, P2, ...): weight 0
    keeps that order, as its docstring now says; any other weight orders equal mixes by id (P0, P1, P10, P11, P2)."""
    n = 12
    corpus = EncodedCorpus(np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (n, 1)), np.arange(n + 1),
                           [f"P{i}" for i in range(n)], ["t"] * n, [["graph parsing."]] * n)
    index = SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp")
    searcher = Searcher(index, SearchConfig(cross_top=n), cross_encoder=_ConstantCrossEncoder())
    query = DocBatch.from_list([torch.tensor([[1.0, 0.0]])], ["q"], [["graph"]])
    previous = [h.paper_id for h in searcher.search(query, k=n, stages="bm25")]
    assert previous == [f"P{i}" for i in range(n)]
    searcher.config = SearchConfig(cross_top=n, cross_weight=0.0)
    kept = searcher.search(query, k=n, stages="bm25", cross_encoder=True)
    assert [h.paper_id for h in kept] == previous and all("crossencoder" in h.stages for h in kept)
    searcher.config = SearchConfig(cross_top=n, cross_weight=0.5)
    by_id = searcher.search(query, k=n, stages="bm25", cross_encoder=True)
    assert [h.paper_id for h in by_id] == sorted(previous)
