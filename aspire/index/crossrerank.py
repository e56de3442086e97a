"""The cross-encoder stage of search: a trained (query, paper) pair model over the previous stage's top N.

Optional and last: after the first stage (ANN, BM25 or both fused) and any re-rank (`aspire.index.rerank`),
when `SearchConfig.cross_encoder` is on and the `Searcher` holds a model (`load_cross_stage`). The stages
before it return `max(k, cross_top)` hits; the cross-encoder reads

    query text      the query's selected sentences joined by spaces (`aspire.index.lexical.selected_text`,
                    the text BM25 matches)
    candidate text  each of the `cross_top` best papers' title and abstract sentences joined by spaces
                    (`aspire.scoring.lexical.join_text`, as the context2doc evaluator's hook reads them)

and its logits are mixed with the previous stage's scores by `aspire.scoring.crossencoder.mix_rerank`, the
evaluator hook's mix (`--rerank-weight`): z-scores over those N, weight `cross_weight` on the cross-encoder
(1: its order alone; 0: the previous order kept); papers below the top N keep their order after them. Each
re-scored hit reports its logit as the stage score `crossencoder`; the model's time is on the reranker
(`cross_seconds`: the difference over one search is that query's cost).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from aspire.index.config import SearchArgumentError, SearchConfig
from aspire.index.lexical import selected_text
from aspire.scoring.crossencoder import CrossEncoderReranker, check_trained_cross_encoder, mix_rerank
from aspire.scoring.lexical import join_text

STAGE = "crossencoder"  # the hit's stage-score name


def load_cross_stage(path: str | Path, max_length: int | None = None, batch_size: int = 32, device: str | None = None):
    """The `CrossEncoderReranker` of a trained cross-encoder directory (checked first: a missing directory or a
    plain encoder raises ValueError naming the path); `max_length` None keeps the length it was trained with."""
    return CrossEncoderReranker(str(check_trained_cross_encoder(path)), max_length, batch_size, device)


def cross_depth(searcher, cfg: SearchConfig) -> SearchConfig:
    """The config the stages before the cross-encoder run with: `k` raised to `cross_top` when the stage is on
    (it needs a model: SearchArgumentError otherwise), `cfg` itself when it is off."""
    if not cfg.cross_encoder:
        return cfg
    if searcher.cross_encoder is None:
        raise SearchArgumentError("cross_encoder: the cross-encoder stage is on but no cross-encoder is loaded "
                                  "(give --cross-encoder DIR, or Searcher(..., cross_encoder=load_cross_stage(DIR)))")
    return replace(cfg, k=max(cfg.k, cfg.cross_top))


def candidate_text(index, position: int) -> str:
    """An indexed paper's title and abstract sentences joined by spaces; a title stored as sentence 0 (an index
    built with `include_title`) is read once."""
    title, sentences = index.titles[position], list(index.sentences[position])
    return join_text(title, sentences[1:] if sentences and sentences[0] == title else sentences)


def cross_rerank(searcher, query, hits: list, cfg: SearchConfig) -> list:
    """The `cfg.k` best of `hits` (the previous stages' ranking, best first) after the cross-encoder stage (see
    the module): scores mixed, ranks renumbered, stage score `crossencoder` added to each re-scored hit."""
    if not hits:
        return []
    top = hits[: cfg.cross_top]
    texts = {h.paper_id: candidate_text(searcher.index, searcher.index.positions[h.paper_id]) for h in top}
    previous = [(h.paper_id, h.score) for h in hits]
    logits = searcher.cross_encoder.head_scores(selected_text(query), previous, texts, cfg.cross_top)
    by_id = {h.paper_id: h for h in hits}
    out = []
    for rank, (pid, score) in enumerate(mix_rerank(previous, logits, cfg.cross_top, cfg.cross_weight)[: cfg.k], 1):
        stages = {**by_id[pid].stages, STAGE: logits[pid]} if pid in logits else dict(by_id[pid].stages)
        out.append(replace(by_id[pid], rank=rank, score=float(score), stages=stages))
    return out


def cross_seconds(searcher) -> float:
    """Seconds the searcher's cross-encoder has spent scoring so far (0.0 without one)."""
    return searcher.cross_encoder.seconds if searcher.cross_encoder is not None else 0.0


def search_timed(searcher, query, cross_encoder: bool | None = None, **options) -> tuple[list, float | None]:
    """`searcher.search(query, cross_encoder=..., **options)` and the milliseconds its cross-encoder stage took
    (None when the stage was off for this search: `cross_encoder`, else the searcher's config, says)."""
    on = searcher.config.cross_encoder if cross_encoder is None else cross_encoder
    before = cross_seconds(searcher)
    hits = searcher.search(query, cross_encoder=cross_encoder, **options)
    return hits, round(1000 * (cross_seconds(searcher) - before), 2) if on else None
