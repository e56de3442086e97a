"""The cross-encoder re-rank stage: a cross-encoder scores each query's top N of a first-stage run and its
z-scored logits are mixed with the first stage's scores (`aspire.scoring.crossencoder.mix_rerank`).

One stage for every benchmark that re-ranks with a cross-encoder (context2doc, CSFCube and other pool sets);
a benchmark gives its query texts and document texts, the stage knows nothing else of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from aspire.io import write_json
from aspire.scoring.crossencoder import CrossEncoderReranker, mix_rerank


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


def rerank_texts(queries: Mapping[str, str], texts: Mapping[str, str], run: Mapping[str, Sequence[tuple[str, float]]],
                 options: RerankOptions, out: Path | None = None) -> tuple[dict, dict]:
    """`run` with each query's top N re-ranked, and a record of the settings and speed (pairs/s, ms a query):
    `queries` `{qid: query text}`, `texts` `{doc: text}` (see `pair_scores`). With `out`, the cross-encoder's
    logits are written to `out/crossencoder_scores.json` for later mixes."""
    reranker = CrossEncoderReranker(options.model, options.max_length, options.batch_size)
    cross = pair_scores(queries, texts, run, reranker, options.top_n)
    if out is not None:
        write_json(Path(out) / "crossencoder_scores.json", cross, indent=None)
    speed = reranker.speed()
    speed["ms_per_query"] = round(1000 * speed["seconds"] / max(len(queries), 1), 1)
    return rerank_run(run, cross, options.top_n, options.weight), {**asdict(options), "speed": speed}


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
