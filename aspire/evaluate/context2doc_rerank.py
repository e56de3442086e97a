"""Cross-encoder reranking on context2doc: the first stage, the cross-encoder's scores of its top N, the mix.

The first stage is the benchmark's best run so far, minilm's whole-abstract vector z-fused with BM25
(`first_stage_scores`, weight `alpha` on the dense scores). `cross_scores` runs a
`aspire.scoring.crossencoder.CrossEncoderReranker` over each query's top `top_n` once, so several
(N, weight) settings can be scored from the same numbers (`rerank_run`, `sweep`); the grid is chosen on
the dev split only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from aspire.benchmarks.context2doc import Context2Doc
from aspire.benchmarks.runs import mean_scores, per_query
from aspire.evaluate.context2doc_run import METRICS, candidate_texts
from aspire.evaluate.options import exact_g
from aspire.retrieval.crossencoder import pair_scores, rerank_run

FIRST_STAGE = {"model": "minilm", "scorer": "abstract", "alpha": 0.815,
               "encode_options": {"max_length": 256, "normalize": True, "joiner": " "}}


def first_stage_scores(bench: Context2Doc, alpha: float = FIRST_STAGE["alpha"], model: str = FIRST_STAGE["model"],
                       cache_dir=None) -> np.ndarray:
    """(Q, N) fused scores: `alpha` * z(whole-abstract cosine) + (1 - alpha) * z(BM25), per query."""
    from aspire.evaluate.cache import default_cache_dir
    from aspire.evaluate.context2doc_run import bm25_scores, dense_scores, fuse_dense_bm25
    from aspire.evaluate.options import EvalOptions

    options = EvalOptions(encode_options=dict(FIRST_STAGE["encode_options"]), cache_dir=cache_dir or default_cache_dir())
    dense, _ = dense_scores(bench, model, FIRST_STAGE["scorer"], options)
    return fuse_dense_bm25(bench, dense, bm25_scores(bench), alpha)


def cross_scores(bench: Context2Doc, first: Mapping[str, Sequence[tuple[str, float]]], reranker,
                 top_n: int) -> dict[str, dict[str, float]]:
    """`{qid: {doc: logit}}` of the cross-encoder over each query's top `top_n` first-stage documents."""
    return pair_scores(bench.queries, candidate_texts(bench), first, reranker, top_n)


def sweep(bench: Context2Doc, first: Mapping, cross: Mapping, tops: Sequence[int], weights: Sequence[float],
          metric: str = "MRR") -> dict:
    """Mean `metric` of every (top N, weight) setting, keyed `N:W` (W in full where `:g` would round it); `best` is
    the highest (ties: smaller N, then smaller weight). A setting given twice is scored once; no top N or no weight
    is a ValueError (a grid of no setting has no best)."""
    if not len(tops) or not len(weights):
        raise ValueError(f"the rerank sweep needs at least one top N and one weight, got tops {list(tops)} and "
                         f"weights {list(weights)}")
    table, setting = {}, {}
    for n in tops:
        for w in weights:
            key = f"{n}:{exact_g(w)}"  # `:g` gave 0.1234567 and 0.1234568 one key: one setting's figure lost unsaid
            if key in table:  # the very same setting given twice
                continue
            values = per_query(bench.qrels, rerank_run(first, cross, n, w), [metric])
            table[key], setting[key] = mean_scores(values)[metric], (int(n), float(w))
    best = max(table, key=lambda k: (table[k], -setting[k][0], -setting[k][1]))
    return {"metric": metric, "table": table, "best": {"top_n": setting[best][0], "weight": setting[best][1],
                                                       metric: table[best]}}


def metrics_of(bench: Context2Doc, run: Mapping) -> dict[str, float]:
    """The context2doc headline metrics (means) of a run."""
    return mean_scores(per_query(bench.qrels, run, METRICS))
