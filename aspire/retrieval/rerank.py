"""The re-ranking stage of search: re-score the first stage's shortlist, keep the best `k`.

A re-ranker is a function `(searcher, query, papers, cfg) -> (scores (P,), alignment)` (higher is better)
over the shortlist's index positions `papers (P,)`, registered by name in `RERANK_STAGES`; `alignment` is
None, or (the OT stage) a function giving the transport plans and costs of chosen papers, which explain
the hits without solving them again:

    minl2       exact min-L2 single match on the stored sentence vectors
    ot          the batched Sinkhorn OT scorer (multi match), solved only for the papers whose lower bound
                lets them enter the k best (`aspire.scoring.ot_topk`): the k best and their scores are those of
                scoring the whole shortlist; every other paper gets an upper bound of its score, below the k-th
    maxpassage  the best window of `passage_window` sentences (`aspire.scoring.passage`), mixed with the
                first stage's score: β·z(first stage) + (1 - β)·z(max passage), z over the first stage's best
                `passage_depth` (100, the depth β was tuned at on context2doc dev), β = `passage_beta`
                (β = 1: the first stage's order; β = 0: the passages' alone); only those are scored, so
                its cost is that of `passage_depth` papers whatever the shortlist. The rest of the shortlist
                follows in the first stage's order, each scored as if its passage were the worst scored one
                (β·z(first stage) + (1 - β)·min z(max passage), z by the scored papers' mean and spread: a
                bound below every scored paper), with no maxpassage score of its own
    hybrid      the hybrid aspect score (`aspire.scoring.scorers.HybridScorer`, default weights: whole + facet):
                the cosine of the query's and each paper's whole-abstract vectors (stored in the index beside the
                sentence vectors) plus the cosine of the query's selected sentences (their mean) and the paper's
                whole vector; each hit shows both terms' shares of its score

A further vector re-ranker is one more function here and one more name in
`aspire.index.config.RERANKERS`. `rerank` returns the k best positions, their final scores, per paper
the stage's own scores (shown beside the first stage's on each hit) and their alignment, if any. The cross-encoder, which
reads texts rather than vectors, is a separate last stage after this one (`aspire.retrieval.crossencoder`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from aspire.scoring import cross_l2_cost
from aspire.scoring.chunked import score_chunked
from aspire.scoring.fusion import normalise
from aspire.scoring.ot_topk import ot_top_k_dist


def _scorer_stage(name: str) -> Callable:
    def stage(searcher, query, papers: np.ndarray, cfg) -> tuple[np.ndarray, None]:
        pool = searcher.index.gather(papers, device=query.device, dtype=query.emb.dtype, texts=False)
        return score_chunked(searcher.scorer(name, cfg), query, pool)[0].float().cpu().numpy(), None  # memory-bounded

    return stage


def shortlist_cost(index, query, papers: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """L2 distances of the query's sentences to each shortlisted paper's sentences.

    query (1, S, D) (its mask: the selected sentences); papers (P,) index positions -> cost (P, S, T) (T the
    longest paper, 0 on padding), q_mask (P, S), c_mask (P, T). One read of the P papers' rows, one GEMM: the
    distances `cross_l2_cost` gives the padded batch (the same norms; each distance one row-column product of
    the GEMM, equal to the bit on the 100k benchmark).
    """
    q = query.emb[0]  # (S, D)
    vectors, lengths = index.gather_rows(papers, device=q.device, dtype=q.dtype)  # (n, D), (P,)
    flat = cross_l2_cost(q[None], vectors[None])[0, 0]  # (S, n)
    T = int(lengths.max()) if len(lengths) else 0
    pos = torch.arange(T, device=q.device)
    c_mask = pos[None, :] < lengths[:, None]  # (P, T)
    firsts = torch.cumsum(lengths, 0) - lengths  # (P,) each paper's first column of `flat`
    cols = torch.where(c_mask, firsts[:, None] + pos[None, :], 0)  # (P, T)
    cost = flat[:, cols].permute(1, 0, 2).masked_fill(~c_mask[:, None, :], 0.0).contiguous()  # (P, S, T)
    return cost, query.mask[0].expand(len(lengths), -1), c_mask


def _ot_stage(searcher, query, papers: np.ndarray, cfg) -> tuple[np.ndarray, Callable]:
    scorer = searcher.scorer("ot", cfg)
    cost, q_mask, c_mask = shortlist_cost(searcher.index, query, papers)
    res = ot_top_k_dist(cost, q_mask, c_mask, cfg.k, tau=scorer.tau, eps=scorer.eps, **scorer.sinkhorn_kw)

    def alignment(rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(plan, cost) (len(rows), S, T) of the shortlisted papers at `rows` (among the solved ones)."""
        rows = torch.as_tensor(rows, dtype=torch.long, device=cost.device)
        return res.plans(rows), cost[rows]

    return -res.dist.cpu().numpy(), alignment


def _passage_mix(searcher, query, papers: np.ndarray, first: np.ndarray, cfg) -> tuple[np.ndarray, np.ndarray]:
    """The maxpassage stage's final scores of the shortlist `papers (P,)` (best first by `first (P,)`) and its
    own scores of the first `passage_depth` (the only ones scored; module docstring)."""
    depth = min(cfg.passage_depth, len(papers))
    own, _ = RERANK_STAGES["maxpassage"](searcher, query, papers[:depth], cfg)  # (depth,)
    beta = cfg.passage_beta
    head = first[:depth]
    sd = head.std() if head.max() > head.min() else 0.0  # equal scores' spread can be rounding alone (normalise)
    z_first = (first - head.mean()) / sd if sd > 0 else np.zeros_like(first)  # (P,) by the scored papers' spread
    z_own = normalise(own.astype(np.float64), "z")  # (depth,)
    floor = np.full(len(papers) - depth, z_own.min())  # the unscored: the worst scored passage
    return beta * z_first + (1 - beta) * np.concatenate([z_own, floor]), own


def _hybrid_stage(searcher, query, papers: np.ndarray, cfg) -> tuple[np.ndarray, None]:
    searcher.index.whole_vectors("re-ranker 'hybrid'")  # refused, naming the fix, for an index without them
    return _scorer_stage("hybrid")(searcher, query, papers, cfg)


def hybrid_shares(searcher, query, papers: np.ndarray, cfg) -> list[dict[str, float]]:
    """Each paper's hybrid terms' shares of its score (they add up to it), for the hits shown."""
    pool = searcher.index.gather(papers, device=query.device, dtype=query.emb.dtype, texts=False)
    shares = searcher.scorer("hybrid", cfg).dist_details(query, pool).shares  # term -> (1, P)
    return [{f"hybrid/{t}": float(v[0, i]) for t, v in shares.items()} for i in range(len(papers))]


RERANK_STAGES: dict[str, Callable] = {"minl2": _scorer_stage("minl2"), "ot": _ot_stage,
                                      "maxpassage": _scorer_stage("maxpassage"), "hybrid": _hybrid_stage}


def rerank(searcher, query, papers: np.ndarray, first_scores: np.ndarray, cfg) -> tuple[
        np.ndarray, np.ndarray, list[dict[str, float]], tuple[torch.Tensor, torch.Tensor] | None]:
    """The `cfg.k` best of the shortlist `papers (P,)` by `cfg.rerank` -> (positions (k,), final scores
    (k,), per position its stage scores, and for the OT stage their (plan, cost) (k, S, T), else None),
    best first (ties: shortlist order). A stage score that is not finite is a ValueError naming the paper."""
    if cfg.rerank not in RERANK_STAGES:
        raise ValueError(f"unknown re-ranker {cfg.rerank!r}; valid: {', '.join(RERANK_STAGES)}")
    if cfg.rerank == "maxpassage":
        final, own = _passage_mix(searcher, query, papers, np.asarray(first_scores, dtype=np.float64), cfg)
        alignment = None
    else:
        own, alignment = RERANK_STAGES[cfg.rerank](searcher, query, papers, cfg)  # (P,)
        final = own
    bad = np.flatnonzero(~np.isfinite(own))
    if len(bad):  # a NaN was once sorted last (and zeroed every max-passage z-score), without a word
        raise ValueError(f"re-ranker {cfg.rerank!r} scored paper {searcher.index.paper_ids[papers[bad[0]]]!r} "
                         f"{own[bad[0]]}: not a finite score ({len(bad)} of {len(own)} papers)")
    top = np.argsort(-final, kind="stable")[: min(cfg.k, len(papers))]
    stage_scores = [{cfg.rerank: float(own[i])} if i < len(own) else {} for i in top]
    if cfg.rerank == "hybrid":  # each term's share beside the score
        stage_scores = [{**s, **shares} for s, shares in zip(stage_scores, hybrid_shares(searcher, query, papers[top], cfg))]
    return papers[top], final[top], stage_scores, None if alignment is None else alignment(top)
