"""The re-ranking stage of search: re-score the first stage's shortlist, keep the best `k`.

A re-ranker is a function `(searcher, query, papers, cfg) -> (P,) scores` (higher is better) over the
shortlist's index positions `papers (P,)`, registered by name in `RERANK_STAGES`:

    minl2       exact min-L2 single match on the stored sentence vectors
    ot          the batched Sinkhorn OT scorer (multi match)
    maxpassage  the best window of `passage_window` sentences (`aspire.scoring.passage`), mixed with the
                first stage's score: β·z(first stage) + (1 - β)·z(max passage), z over the shortlist,
                β = `passage_beta` (β = 1: the first stage's order; β = 0: the passages' alone)

A further vector re-ranker is one more function here and one more name in
`aspire.index.config.RERANKERS`. `rerank` returns the k best positions, their final scores and, per
paper, the stage's own scores (shown beside the first stage's on each hit). The cross-encoder, which
reads texts rather than vectors, is a separate last stage after this one (`aspire.index.crossrerank`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from aspire.scoring.chunked import score_chunked
from aspire.scoring.fusion import normalise


def _scorer_stage(name: str) -> Callable:
    def stage(searcher, query, papers: np.ndarray, cfg) -> np.ndarray:
        pool = searcher.index.gather(papers, device=query.device, dtype=query.emb.dtype, texts=False)
        return score_chunked(searcher.scorer(name, cfg), query, pool)[0].float().cpu().numpy()  # memory-bounded

    return stage


RERANK_STAGES: dict[str, Callable] = {name: _scorer_stage(name) for name in ("minl2", "ot", "maxpassage")}


def rerank(searcher, query, papers: np.ndarray, first_scores: np.ndarray,
           cfg) -> tuple[np.ndarray, np.ndarray, list[dict[str, float]]]:
    """The `cfg.k` best of the shortlist `papers (P,)` by `cfg.rerank` -> (positions (k,), final scores
    (k,), per position its stage scores), best first (ties: shortlist order)."""
    if cfg.rerank not in RERANK_STAGES:
        raise ValueError(f"unknown re-ranker {cfg.rerank!r}; valid: {', '.join(RERANK_STAGES)}")
    own = RERANK_STAGES[cfg.rerank](searcher, query, papers, cfg)  # (P,)
    final = own
    if cfg.rerank == "maxpassage":
        beta = cfg.passage_beta
        final = beta * normalise(np.asarray(first_scores, dtype=np.float64), "z") + (1 - beta) * normalise(
            own.astype(np.float64), "z")
    top = np.argsort(-final, kind="stable")[: min(cfg.k, len(papers))]
    stage_scores = [{cfg.rerank: float(own[i])} for i in top]
    return papers[top], final[top], stage_scores
