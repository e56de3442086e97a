"""Cross-encoder reranking on context2doc: the first stage, the cross-encoder's scores of its top N, the mix.

The first stage is the benchmark's best run so far, minilm's whole-abstract vector z-fused with BM25
(`first_stage_scores`, weight `alpha` on the dense scores). `cross_scores` runs a
`aspire.scoring.crossencoder.CrossEncoderReranker` over each query's top `top_n` once, so several
(N, weight) settings can be scored from the same numbers (`rerank_run`, `sweep`); the grid is chosen on
the dev split only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from aspire.evaluate.context2doc import Context2Doc
from aspire.evaluate.context2doc_run import METRICS
from aspire.evaluate.runs import mean_scores, per_query
from aspire.scoring.crossencoder import mix_rerank

FIRST_STAGE = {"model": "minilm", "scorer": "abstract", "alpha": 0.815,
               "encode_options": {"max_length": 256, "normalize": True, "joiner": " "}}


def first_stage_scores(bench: Context2Doc, alpha: float = FIRST_STAGE["alpha"], model: str = FIRST_STAGE["model"],
                       cache_dir=None, **dense_options) -> np.ndarray:
    """(Q, N) fused scores: `alpha` * z(whole-abstract cosine) + (1 - alpha) * z(BM25), per query."""
    from aspire.evaluate.cache import default_cache_dir
    from aspire.evaluate.context2doc_run import bm25_scores, dense_scores, fuse_dense_bm25

    opts = {"encode_options": dict(FIRST_STAGE["encode_options"]), **dense_options}
    dense, _ = dense_scores(bench, model, FIRST_STAGE["scorer"], cache_dir=cache_dir or default_cache_dir(), **opts)
    return fuse_dense_bm25(bench, dense, bm25_scores(bench), alpha)


@dataclass(frozen=True)
class RerankOptions:
    """A cross-encoder (`model`: a directory or a name of `aspire.encoders.models`) over the top `top_n`,
    weight `weight` on its z-scored logits against the first stage's (1 replaces the first stage)."""

    model: str
    top_n: int = 50
    weight: float = 1.0
    max_length: int | None = None  # None: the length the model was saved with
    batch_size: int = 32

    def __post_init__(self) -> None:
        if self.top_n < 1:
            raise ValueError(f"rerank top N must be >= 1, got {self.top_n}")
        if not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"rerank weight must be in [0, 1], got {self.weight}")
        if (self.max_length is not None and self.max_length < 8) or self.batch_size < 1:
            raise ValueError(f"rerank max length must be >= 8 and batch size >= 1, got {self.max_length}, "
                             f"{self.batch_size}")


def apply_rerank(bench: Context2Doc, run: Mapping[str, Sequence[tuple[str, float]]], options: RerankOptions,
                 out: Path | None = None) -> tuple[dict, dict]:
    """`run` with each query's top N reranked, and a record of the settings and speed (pairs/s, ms a query).

    With `out`, the cross-encoder's logits are written to `out/crossencoder_scores.json` for later mixes."""
    return rerank_texts(bench.queries, candidate_texts(bench), run, options, out)


def rerank_texts(queries: Mapping[str, str], texts: Mapping[str, str], run: Mapping[str, Sequence[tuple[str, float]]],
                 options: RerankOptions, out: Path | None = None) -> tuple[dict, dict]:
    """`apply_rerank` for any benchmark: `queries` `{qid: query text}`, `texts` `{doc: text}` (see `pair_scores`)."""
    from aspire.io import write_json
    from aspire.scoring.crossencoder import CrossEncoderReranker

    reranker = CrossEncoderReranker(options.model, options.max_length, options.batch_size)
    cross = pair_scores(queries, texts, run, reranker, options.top_n)
    if out is not None:
        write_json(Path(out) / "crossencoder_scores.json", cross, indent=None)
    speed = reranker.speed()
    speed["ms_per_query"] = round(1000 * speed["seconds"] / max(len(queries), 1), 1)
    return rerank_run(run, cross, options.top_n, options.weight), {**asdict(options), "speed": speed}


def candidate_texts(bench: Context2Doc) -> dict[str, str]:
    """`{paper_id: title and abstract}`, the text a cross-encoder reads for each candidate."""
    from aspire.scoring.lexical import paper_text

    return {p.paper_id: paper_text(p) for p in bench.candidates}


def cross_scores(bench: Context2Doc, first: Mapping[str, Sequence[tuple[str, float]]], reranker,
                 top_n: int) -> dict[str, dict[str, float]]:
    """`{qid: {doc: logit}}` of the cross-encoder over each query's top `top_n` first-stage documents."""
    return pair_scores(bench.queries, candidate_texts(bench), first, reranker, top_n)


def pair_scores(queries: Mapping[str, str], texts: Mapping[str, str], first: Mapping[str, Sequence[tuple[str, float]]],
                reranker, top_n: int) -> dict[str, dict[str, float]]:
    """`{qid: {doc: logit}}` of `reranker` over the (query text, document text) pairs of each query's top `top_n`
    in `first`, scored in one pass; a ranked document without text is an error naming the query and document."""
    pairs, keys = [], []
    for qid, query in queries.items():
        for doc, _ in first[qid][:top_n]:
            if doc not in texts:
                raise ValueError(f"query {qid}: document {doc} has no text for the cross-encoder")
            pairs.append((query, texts[doc]))
            keys.append((qid, doc))
    out: dict[str, dict[str, float]] = {q: {} for q in queries}
    for (qid, doc), score in zip(keys, reranker.score_pairs(pairs).tolist()):
        out[qid][doc] = score
    return out


def rerank_run(first: Mapping[str, Sequence[tuple[str, float]]], cross: Mapping[str, Mapping[str, float]],
               top_n: int, weight: float) -> dict[str, list[tuple[str, float]]]:
    """Every query's first-stage list with its top `top_n` mixed with the cross-encoder (`mix_rerank`)."""
    return {q: mix_rerank(ranked, cross[q], top_n, weight) for q, ranked in first.items()}


def sweep(bench: Context2Doc, first: Mapping, cross: Mapping, tops: Sequence[int], weights: Sequence[float],
          metric: str = "MRR") -> dict:
    """Mean `metric` of every (top N, weight) setting; `best` is the highest (ties: smaller N, then weight)."""
    table = {}
    for n in tops:
        for w in weights:
            values = per_query(bench.qrels, rerank_run(first, cross, n, w), [metric])
            table[f"{n}:{w:g}"] = mean_scores(values)[metric]
    best = max(table, key=lambda k: (table[k], -int(k.split(":")[0]), -float(k.split(":")[1])))
    return {"metric": metric, "table": table, "best": {"top_n": int(best.split(":")[0]),
                                                       "weight": float(best.split(":")[1]), metric: table[best]}}


def metrics_of(bench: Context2Doc, run: Mapping) -> dict[str, float]:
    """The context2doc headline metrics (means) of a run."""
    return mean_scores(per_query(bench.qrels, run, METRICS))
