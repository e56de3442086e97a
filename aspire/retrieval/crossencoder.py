"""The cross-encoder re-rank stage: a cross-encoder scores each query's top N of a previous stage's ranking and
its z-scored logits are mixed with that stage's scores (`aspire.scoring.crossencoder.mix_rerank`).

One stage for search and for the benchmarks that re-rank ranked lists with a cross-encoder (context2doc,
CSFCube and other pool sets): a benchmark gives its query texts and document texts (`rerank_texts`,
`pair_scores`, `rerank_run`); search gives its hits over an index (`cross_rerank`). Reviewer matching scores
(submission, archive paper) pairs with the same reranker and mix, aggregated over each archive
(`aspire.evaluate.reviewer_run.cross_rerank`).

In search it is optional and last: after the first stage (ANN, BM25 or both fused) and any re-rank (`aspire.retrieval.rerank`),
when `SearchConfig.cross_encoder` is on and the `Searcher` holds a model (`load_cross_stage`). The stages
before it return `max(k, cross_top)` hits; the cross-encoder reads

    query text      the query's selected sentences joined by spaces (`aspire.retrieval.lexical.selected_text`,
                    the text BM25 matches)
    candidate text  each of the `cross_top` best papers' title and abstract sentences joined by spaces
                    (`aspire.data.papers.abstract_text`, as the context2doc evaluator's hook reads them)

and its logits are mixed with the previous stage's scores by `aspire.scoring.crossencoder.mix_rerank`, the
evaluator hook's mix (`--rerank-weight`): z-scores over those N, weight `cross_weight` on the cross-encoder
(1: its order alone; 0: the previous order kept); papers below the top N keep their order after them (equal
previous scores there ordered by paper id, `mix_rerank`'s rule, unless the weight is 0). Each
re-scored hit reports its logit as the stage score `crossencoder`; the model's time is on the reranker
(`cross_seconds`: the difference over one search is that query's cost).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from numbers import Integral, Real
from pathlib import Path

from aspire.config import is_whole
from aspire.data.papers import abstract_text
from aspire.io import write_json
from aspire.retrieval.lexical import selected_text
from aspire.scoring.crossencoder import CrossEncoderReranker, check_trained_cross_encoder, mix_rerank

STAGE = "crossencoder"  # a search hit's stage-score name
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RerankOptions:
    """A cross-encoder (`model`: a directory or a name of `aspire.encoders.pretrained`) over the top `top_n`,
    weight `weight` on its z-scored logits against the first stage's (1 replaces the first stage), run on `device`
    (`reranker`)."""

    model: str
    top_n: int = 50
    weight: float = 1.0
    max_length: int | None = None  # None: the length the model was saved with
    batch_size: int = 32
    device: str | None = None  # a torch device; None: the CPU (`load_cross_encoder`'s default)

    def __post_init__(self) -> None:
        counts = {"top N": self.top_n, "batch size": self.batch_size, "max length": self.max_length}
        for name, value in counts.items():  # a float top N failed later, slicing each query's list
            if (value is not None or name != "max length") and (isinstance(value, bool) or not isinstance(value, Integral)):
                raise ValueError(f"rerank {name} must be an integer, got {value!r}")
        if self.top_n < 1:
            raise ValueError(f"rerank top N must be >= 1, got {self.top_n}")
        # a weight of True was taken as 1.0, and a string ("0.5" from a config) failed comparing, naming no option
        if isinstance(self.weight, bool) or not isinstance(self.weight, Real) or not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"rerank weight must be a number in [0, 1], got {self.weight!r}")
        if (self.max_length is not None and self.max_length < 8) or self.batch_size < 1:
            raise ValueError(f"rerank max length must be >= 8 and batch size >= 1, got {self.max_length}, "
                             f"{self.batch_size}")

    def reranker(self) -> CrossEncoderReranker:
        """The `CrossEncoderReranker` these options describe: its model, length, batch size and device."""
        return CrossEncoderReranker(self.model, self.max_length, self.batch_size, self.device)


def rerank_texts(queries: Mapping[str, str], texts: Mapping[str, str], run: Mapping[str, Sequence[tuple[str, float]]],
                 options: RerankOptions, out: Path | None = None) -> tuple[dict, dict]:
    """`run` with each query's top N re-ranked, and a record of the settings, of the documents re-scored a query
    (`reranked_depth`: fewer than the top N asked where the lists are shorter) and of the speed (pairs/s, ms a query):
    `queries` `{qid: query text}`, `texts` `{doc: text}` (see `pair_scores`); a query `run` ranks without a text in
    `queries` is an error naming it, raised before the model is loaded. With `out`, the cross-encoder's logits are
    written to `out/crossencoder_scores.json` for later mixes."""
    textless = [q for q in run if q not in queries]
    if textless:  # once every pair was scored first, then "queries have no cross-encoder scores"
        raise ValueError(f"query {textless[0]} is ranked in the run but has no query text to re-rank with "
                         f"({len(textless)} of {len(run)} ranked queries have none, e.g. {textless[:3]})")
    depth = reranked_depth((len(ranked) for ranked in run.values()), options.top_n)  # said before the model loads
    reranker = options.reranker()
    cross = pair_scores(queries, texts, run, reranker, options.top_n)
    if out is not None:
        write_json(Path(out) / "crossencoder_scores.json", cross, indent=None)
    speed = reranker.speed()
    speed["ms_per_query"] = round(1000 * speed["seconds"] / max(len(queries), 1), 1)
    return rerank_run(run, cross, options.top_n, options.weight), {**asdict(options), **depth, "speed": speed}


def reranked_depth(lengths: Iterable[int], top_n: int, level: int = logging.WARNING) -> dict:
    """`{"reranked_per_list": {"most": M, "fewest": F}}`: the documents a re-rank of the top `top_n` re-scores in
    ranked lists `lengths` long (a shorter list is re-scored whole). Where no list reaches `top_n`, one line at `level`
    (a warning unless the caller expects whole lists) says so: the record's `top_n` is what was asked, `most` what was
    done."""
    done = [min(n, top_n) for n in lengths]
    if done and max(done) < top_n:  # `--rerank-top 200` over lists of 100 once recorded 200, unsaid
        log.log(level, "cross-encoder: the top %d asked for is deeper than every ranked list: at most %d documents a list "
                    "were re-scored", top_n, max(done))
    return {"reranked_per_list": {"most": max(done, default=0), "fewest": min(done, default=0)}}


def pair_scores(queries: Mapping[str, str], texts: Mapping[str, str], first: Mapping[str, Sequence[tuple[str, float]]],
                reranker, top_n: int) -> dict[str, dict[str, float]]:
    """`{qid: {doc: logit}}` of `reranker` over the (query text, document text) pairs of each query's top `top_n`
    in `first`, scored in one pass; a query `first` does not rank, a query text that is not a string, or a ranked
    document without a text (a string), is an error naming the query (and document); so is a `top_n` that is not a
    whole number >= 1."""
    if not is_whole(top_n, 1):  # a float failed slicing each list, naming nothing; 0 or a negative N scored too few
        raise ValueError(f"pair_scores: top N must be a whole number >= 1, got {top_n!r}")
    unranked = [q for q in queries if q not in first]
    if unranked:  # once a bare KeyError
        raise ValueError(f"{len(unranked)} queries have no first-stage ranking to re-rank (e.g. {unranked[:3]})")
    pairs, keys = [], []
    for qid, query in queries.items():
        if not isinstance(query, str):  # None or a list of sentences failed in the model's pass, naming no query
            raise ValueError(f"query {qid}: its text is a {type(query).__name__}, not a string")
        for doc, _ in first[qid][:top_n]:
            if not isinstance(texts.get(doc), str):
                held = f" (a {type(texts[doc]).__name__}, not a string)" if doc in texts else ""
                raise ValueError(f"query {qid}: document {doc} has no text for the cross-encoder{held}")
            pairs.append((query, texts[doc]))
            keys.append((qid, doc))
    out: dict[str, dict[str, float]] = {q: {} for q in queries}
    for (qid, doc), score in zip(keys, reranker.score_pairs(pairs).tolist()):
        out[qid][doc] = score
    return out


def rerank_run(first: Mapping[str, Sequence[tuple[str, float]]], cross: Mapping[str, Mapping[str, float]],
               top_n: int, weight: float) -> dict[str, list[tuple[str, float]]]:
    """Every query's first-stage list with its top `top_n` mixed with the cross-encoder (`mix_rerank`); a query
    `cross` holds no scores for is an error naming it, and so is one `mix_rerank` refuses (a document listed twice,
    a score not finite, a list out of order)."""
    unscored = [q for q in first if q not in cross]
    if unscored:  # once a bare KeyError
        raise ValueError(f"{len(unscored)} queries have no cross-encoder scores (e.g. {unscored[:3]})")
    out = {}
    for q, ranked in first.items():
        try:
            out[q] = mix_rerank(ranked, cross[q], top_n, weight)
        except ValueError as err:  # once named the document alone, of any of thousands of queries
            raise ValueError(f"query {q}: {err}") from None
    return out


def load_cross_stage(path: str | Path, max_length: int | None = None, batch_size: int = 32, device: str | None = None):
    """The `CrossEncoderReranker` of a trained cross-encoder directory (checked first: a missing directory or a
    plain encoder raises ValueError naming the path); `max_length` None keeps the length it was trained with."""
    return CrossEncoderReranker(str(check_trained_cross_encoder(path)), max_length, batch_size, device)


def candidate_text(index, position: int) -> str:
    """An indexed paper's title and abstract sentences joined by spaces; a title stored as sentence 0 (an index
    built with `include_title`: `SentenceIndex.title_first`, the rule its BM25 reads the paper by) is read once."""
    title, sentences = index.titles[position], list(index.sentences[position])
    return abstract_text(title, sentences[1:] if index.title_first(position) else sentences)


def cross_rerank(searcher, query, hits: list, cfg) -> list:
    """The `cfg.k` best of `hits` (the previous stages' ranking, best first) after the cross-encoder stage (see
    the module): scores mixed, ranks renumbered, stage score `crossencoder` added to each re-scored hit. Equal mixed
    scores are ordered by paper id (`mix_rerank`'s rule), not by the previous stages' order as the re-rank stage
    orders its ties; at `cross_weight` 0 the previous order is kept exactly, ties included."""
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
