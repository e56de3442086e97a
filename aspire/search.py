"""Corpus search: ANN single match over a sentence index, then an optional re-ranking of the shortlist.

    query DocBatch (1, S, D), mask = the selected sentences (aspect-conditional search)
      │  ANN: one faiss lookup per selected sentence, per paper the minimum L2 (`aggregate_min_l2`);
      │  and/or BM25 over titles + sentences (`stages`), fused (`fuse`): the `shortlist` best papers
      ▼
    re-rank (optional, `aspire.retrieval.rerank`): exact min-L2, the batched OT scorer or the best passage
      (mixed with the first stage by β) over the shortlist's stored vectors
      ▼
    cross-encoder (optional, `aspire.retrieval.crossencoder`): a trained pair model reads the selected sentences
      with the title and abstract of the `cross_top` best, mixed with the previous score by `cross_weight`
      ▼
    k hits, each with its score (higher is better) and the aligned sentence pairs that explain it

`k` means k papers: when the selected sentences' nearest neighbours fall in fewer than k (or
`shortlist`) distinct papers, the sentence lookups are widened until enough papers are found or the
index has no more to give (then fewer come back, and a warning says why).

Python API: `Searcher.open(index_dir).search(query)`; command line: `aspire search` (`aspire.cli.search`; also
`python -m aspire.search`).
"""

from __future__ import annotations

import logging
import math
import warnings
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from aspire.batch import DocBatch
from aspire.config import apply_overrides, is_whole
from aspire.data.facets import resolve_selection, title_labelled
from aspire.data.papers import Paper
from aspire.index.config import (  # the argument checks every entry point (API, CLI, page, server) shares
    RERANKERS,  # noqa: F401  (re-exported: aspire.search.RERANKERS)
    STAGES,  # noqa: F401  (re-exported: aspire.search.STAGES)
    SearchArgumentError,  # also re-exported for callers that catch it
    SearchConfig,
    check_selection,
    checked_search_config,
    exhaustion_reason,
    unused_settings,
)
from aspire.index.fingerprint import model_fingerprints
from aspire.index.store import SentenceIndex
from aspire.retrieval.crossencoder import cross_rerank, cross_seconds
from aspire.retrieval.lexical import first_stage_depth
from aspire.scoring import cross_l2_cost, get_scorer
from aspire.scoring.chunked import score_chunked

log = logging.getLogger(__name__)
# the k the running search was asked for, where its stages run deeper for the cross-encoder (`cross_depth`): a
# shortfall is said against it (`Searcher.short_of_k`), not against the cross_top papers the stages were asked for
_ASKED_K: ContextVar[int | None] = ContextVar("aspire_search_asked_k", default=None)


@dataclass
class AlignedPair:
    """One query sentence aligned with one sentence of a hit.

    `dist` is the L2 distance of the two sentence vectors; `weight` is the share of the query
    sentence's transport mass sent to this hit sentence (OT), or 1.0 for a nearest-sentence pair.
    """

    query_sentence: int
    hit_sentence: int
    dist: float
    weight: float
    query_text: str = ""
    hit_text: str = ""


@dataclass
class Hit:
    """One retrieved paper: `score` is a similarity (higher is better) of the ranking method used."""

    rank: int
    paper_id: str
    title: str
    score: float
    pairs: list[AlignedPair] = field(default_factory=list)
    # the scores that ranked it: its first stage's (ann = -min L2, bm25, whole, fused), the re-ranker's own, crossencoder
    stages: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:  # a distance of 0 negated is -0.0, printed "-0.0000" for the query paper itself
        self.score += 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Candidates:
    """Papers retrieved by ANN, best first, with the sentence pair achieving each one's minimum.

    All arrays are (U,): paper position, min L2 distance, query sentence row (in the query's
    selected-sentence order), and the indexed sentence row of the best pair.
    """

    papers: np.ndarray
    dist: np.ndarray
    query_rows: np.ndarray
    hit_rows: np.ndarray

    def __len__(self) -> int:
        return len(self.papers)

    def take(self, keep: np.ndarray) -> "Candidates":
        return Candidates(self.papers[keep], self.dist[keep], self.query_rows[keep], self.hit_rows[keep])


def aggregate_min_l2(dist: np.ndarray, rows: np.ndarray, papers: np.ndarray) -> Candidates:
    """Per paper, the minimum L2 over its retrieved sentence pairs; papers sorted by that minimum.

    Args:
        dist: (n, k) L2 distance of query sentence i to its j-th retrieved sentence.
        rows: (n, k) indexed sentence rows (-1 = no result).
        papers: (n, k) paper position of each retrieved row (-1 = no result).
    Returns: Candidates, ascending distance (ties: lower paper position first).
    """
    n, k = dist.shape
    flat_p = papers.reshape(-1)
    valid = flat_p >= 0
    flat_p, flat_d = flat_p[valid], dist.reshape(-1)[valid]
    flat_q = np.repeat(np.arange(n), k)[valid]
    flat_r = rows.reshape(-1)[valid]
    order = np.lexsort((flat_d, flat_p))  # by paper, then distance
    sorted_p = flat_p[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = sorted_p[1:] != sorted_p[:-1]
    best = order[first]  # (U,) entry holding each paper's minimum
    best = best[np.lexsort((flat_p[best], flat_d[best]))]
    return Candidates(flat_p[best], flat_d[best], flat_q[best], flat_r[best])


def reach(dist: np.ndarray) -> float:
    """The distance within which the lookups `dist` ((n, k) per query sentence, nearest first) hold every
    indexed sentence: the nearest of their farthest neighbours. A paper within it of some query sentence has its
    nearest sentence to that query sentence among the lookups (on an exact index)."""
    return float(dist[:, -1].min())


def nearest_pairs(q: DocBatch, c: DocBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """For each selected query sentence, its nearest sentence in each candidate.

    Args: q (1, Sq, D) query, c (C, Sc, D) candidates.
    Returns: (dist (C, Sq), idx (C, Sq)); padded/unselected query rows hold +inf.
    """
    dist = cross_l2_cost(q.emb.float(), c.emb.float())[0]  # (C, Sq, Sc): one GEMM, no query copies
    dist = dist.masked_fill(~c.mask[:, None, :], float("inf"))
    best, idx = dist.min(dim=2)  # (C, Sq)
    return best.masked_fill(~q.mask, float("inf")), idx


def _query_name(query: DocBatch) -> str:
    """How an error names the query paper of a one-query DocBatch: "query 'ID'", or "the query" without an id."""
    return f"query {query.paper_ids[0]!r}" if query.paper_ids else "the query"


def check_query(query: DocBatch, dim: int) -> None:
    """ValueError naming the query paper when one query DocBatch `(1, S, D)` cannot be searched over an index of
    `dim`-d sentence vectors: no sentence selected (its mask), vectors of another dimension (another model), or a
    selected sentence vector or the whole-abstract vector `(1, D)` holding NaN or infinity (every distance to it
    would be NaN)."""
    name = _query_name(query)
    if query.emb.shape[-1] != dim:
        raise ValueError(f"{name}: its sentence vectors are {query.emb.shape[-1]}-d and the index's {dim}-d: encode "
                         "the query with the model the index was built with")
    selected = query.mask[0].nonzero()[:, 0]  # (n,)
    if len(selected) == 0:
        raise ValueError(f"{name} has no selected sentence (its mask is empty): select at least one")
    finite = torch.isfinite(query.emb[0, selected].detach()).all(dim=1)  # (n,)
    if not bool(finite.all()):
        bad = selected[~finite.cpu()].tolist()
        raise ValueError(f"{name}: sentence vector(s) {bad[:10]} hold NaN or infinity")
    if query.whole is not None and not bool(torch.isfinite(query.whole[0].detach()).all()):
        raise ValueError(f"{name}: its whole-abstract vector holds NaN or infinity")


def check_whole_vectors(index: SentenceIndex, config: SearchConfig) -> None:
    """ValueError naming the fix (`SentenceIndex.whole_vectors`) when `config`'s first stage ('whole') or re-ranker
    ('hybrid') needs the papers' whole-abstract vectors and `index` stores none (built before the one-pass
    encoding): what a searcher's defaults and a command's asked settings are checked with before any query."""
    if index.whole is None:
        if "whole" in config.stages.split(","):
            index.whole_vectors("first stage 'whole'")
        if config.rerank == "hybrid":
            index.whole_vectors("re-ranker 'hybrid'")


def _paper_id(paper_id: str | int) -> str:
    """A paper id as the index stores it: a string (an integer becomes its digits, as the papers reader does)."""
    if isinstance(paper_id, bool) or not isinstance(paper_id, (str, int, np.integer)):
        raise TypeError(f"a paper id is a string or an integer, got {type(paper_id).__name__} {paper_id!r}")
    return str(paper_id)


class Searcher:
    """Searches a `SentenceIndex`; `encoder` is needed only to encode queries that are not indexed.

    Args:
        index: the sentence index.
        config: search defaults (the index's saved `search` section when None).
        encoder: a ContextualSentenceEncoder whose fingerprint must match the index's.
        cross_encoder: the cross-encoder stage's model (`aspire.retrieval.crossencoder.load_cross_stage`).
    """

    def __init__(self, index: SentenceIndex, config: SearchConfig | None = None, encoder=None,
                 cross_encoder=None) -> None:
        self.index, self.cross_encoder = index, cross_encoder
        self.config = checked_search_config(config or index.config.search)
        check_whole_vectors(index, self.config)  # a default that needs them: refused now, not at the first query
        self.encoder = encoder
        if encoder is not None:
            index.check_model(*model_fingerprints(encoder))
        self._scorers: dict = {}
        self._lexical: dict = {}  # BM25 stages per (k1, b), shared with the searchers `with_config` makes
        self.shortfalls: list[tuple[int, int, str]] | None = None  # None: each short search warns (`short_of_k`)
        self.notes: list[str] | None = None  # None: each note on an answer is a warning (`say`)

    @classmethod
    def open(cls, index_dir: str | Path, overrides: Sequence[str] | str = (), model: str | None = None,
             load_model: bool = False, encoder_options: dict | None = None) -> "Searcher":
        """Load an index; `overrides` like `["k=20", "rerank=ot"]` (or `"search.k=20"`, as the command line writes
        them; one override may be a bare string) adjust its saved search config.

        With `load_model` (or a `model` named), the encoder is loaded (default: the model the index was
        built with) with `encoder_options` (e.g. `backend="onnx", quantize="int8"`; default: the backend and
        precision the index records, `index.config.encode.encoder_options()`) and checked against the index's
        fingerprint.
        """
        index = SentenceIndex.load(index_dir)
        overrides = [overrides] if isinstance(overrides, str) else overrides
        overrides = [o.removeprefix("search.") for o in overrides]
        config = apply_overrides(index.config.search, overrides, "search")
        encoder = None
        if load_model or model is not None:
            from aspire.encoders import load_encoder

            options = index.config.encode.encoder_options() if encoder_options is None else dict(encoder_options)
            encoder = load_encoder(model or index.model_name, **options)
        return cls(index, config, encoder)

    def with_config(self, config: SearchConfig) -> "Searcher":
        """A searcher over the same index, encoder and cross-encoder with `config` (checked), sharing this one's BM25
        stages: one built at query time (an index storing none, or another k1 / b than it stores) is built once for
        both. (The page's searches at another OT temperature each made a new Searcher, which built it again over the
        whole index at every search.)"""
        other = Searcher(self.index, config, cross_encoder=self.cross_encoder)
        other.encoder = self.encoder  # the index was checked against it when this searcher took it
        other._lexical = self._lexical
        return other

    def short_of_k(self, found: int, k: int, reason: str) -> None:
        """A search found `found` < `k` papers: a warning, or, while `shortfalls` is a list (a batch of queries,
        `aspire search --queries`), one more `(found, k, reason)` there for the batch's one summary line. Where the
        stages ran deeper than the search's k for its cross-encoder stage (`cross_depth`), a search is short only when
        it found fewer than that k, and is said against it (it once warned "found 19 of the k=50" when 5 were asked)."""
        asked = _ASKED_K.get()
        if asked is not None and k > asked:
            if found >= asked:
                return
            k = asked
        if self.shortfalls is None:
            log.warning("found %d of the k=%d papers asked for: %s", found, k, reason)
        else:
            self.shortfalls.append((found, k, reason))

    def say(self, message: str) -> None:
        """Something the reader of a search's answer must know to read it (e.g. a BM25 list that is index order, every
        paper scored 0): a warning, or, while `notes` is a list (the page, which shows it beside the answer), one more
        line there."""
        if self.notes is None:
            log.warning("%s", message)
        else:
            self.notes.append(message)

    def short_of_papers(self, found: int, k: int, n_excluded: int, ann: bool = False) -> None:
        """`short_of_k` for an exact stage (BM25, whole vectors), which falls short only when the index holds fewer than
        k papers besides the `n_excluded` ones; with `ann` (the fused list of ANN and BM25, which adds only the papers
        sharing a word with the query) as the ANN stage falls short on this index's faiss structure."""
        kind = self.index.kind if ann else "flat"
        reason = exhaustion_reason(kind, self.index.n_papers - n_excluded)
        if kind != "flat":
            reason += " (BM25 adds only the papers sharing a word with the query)"
        self.short_of_k(found, k, reason)

    # ---- queries ------------------------------------------------------------------------------------
    def query_from_index(self, paper_id: str | int, sentences: str | Sequence[int | str] | None = None) -> DocBatch:
        """An indexed paper as a query (its stored contextual vectors), optionally only `sentences`:
        0-based positions and/or facet names (`"method"`, from the labels the index keeps). An integer id is
        the string of its digits, as the papers reader stores it."""
        paper_id = _paper_id(paper_id)
        position = self.index.position(paper_id)
        query = self.index.gather([position])
        if sentences is None:
            return query
        chosen = resolve_selection(sentences, self.index.labels[position], paper_id)
        return query.select_sentences([check_selection(chosen, int(query.lengths[0]), f"paper {paper_id}")])

    def query_from_paper(self, paper: Paper, sentences: str | Sequence[int | str] | None = None) -> DocBatch:
        """Encode `paper` (all sentences in the context of the whole abstract), then select `sentences`
        (0-based positions of the encoded sentences and/or facet names, from `paper.labels`), as
        `query_from_index` selects them: with an encoder that encodes the title as sentence 0 (`include_title`)
        the labels follow it, as the index stores them (a facet name once selected the sentence before)."""
        if self.encoder is None:
            raise ValueError("encoding a query needs an encoder: Searcher.open(..., load_model=True)")
        query = self.encoder.encode([paper], progress=False)
        if sentences is None:
            return query
        n = len(query.sentences[0]) if query.sentences else int(query.lengths[0])  # encoded sentences
        labels = title_labelled(paper.labels, n)  # as `encode_corpus` labels them for the index
        chosen = resolve_selection(sentences, labels, paper.paper_id)
        return query.select_sentences([check_selection(chosen, int(query.lengths[0]), f"paper {paper.paper_id}")])

    # ---- search -------------------------------------------------------------------------------------
    def search(self, query: DocBatch, k: int | None = None, rerank: str | None = None,
               shortlist: int | None = None, exclude: Sequence[str] | None = None, stages: str | None = None,
               fuse: str | None = None, passage_window: int | None = None,
               passage_beta: float | None = None, cross_encoder: bool | None = None) -> list[Hit]:
        """The `k` best papers for one query DocBatch `(1, S, D)` (its mask selects the sentences).

        `exclude` paper ids (one id or a list) are left out (default: the query's own id when `config.exclude_query`);
        `stages` / `fuse` override the config's first stage, `passage_window` / `passage_beta` its maxpassage
        re-ranker, `cross_encoder` turns the cross-encoder stage on or off (see `SearchConfig`). Arguments
        are checked by `checked_search_config` (SearchArgumentError naming a bad one); `fuse`, `passage_window` or
        `passage_beta` given to a search whose pipeline does not read them is said (a warning), and `shortlist`
        is read only by a re-ranker and the fused first stage (`first_stage_depth`). A query that cannot be searched
        (no selected sentence, vectors of another dimension than the index's, NaN or infinity) is a ValueError naming
        it (`check_query`).
        """
        asked = checked_search_config(self.config, k=k, rerank=rerank, shortlist=shortlist, stages=stages, fuse=fuse,
                                      passage_window=passage_window, passage_beta=passage_beta, cross_encoder=cross_encoder)
        given = {"fuse": fuse, "passage_window": passage_window, "passage_beta": passage_beta}
        unused = unused_settings(asked, [key for key, value in given.items() if value is not None])
        if unused:  # once taken and read by nothing, without a word
            log.warning("search argument(s) not used: %s", "; ".join(unused))
        if not unused_settings(asked, ["shortlist"]) and asked.shortlist < asked.k:  # a shortlist (or fused lists)
            # shorter than k gives < k
            if shortlist is not None:
                raise SearchArgumentError(f"shortlist ({shortlist}) must be at least k ({asked.k})")
            asked = replace(asked, shortlist=asked.k)  # the configured default grows to k, as on the page
        cfg = cross_depth(self, asked)  # with the cross-encoder stage: the stages before it give cross_top
        if len(query) != 1:
            raise ValueError(f"search takes one query paper, got a batch of {len(query)}")
        check_query(query, self.index.dim)  # an empty selection was once answered by BM25 with index order
        exclude = self._excluded(query, exclude)
        asked_k = _ASKED_K.set(asked.k)  # a shortfall is said against the k asked, not cross_top (`short_of_k`)
        try:
            papers, first_scores, stage_scores = self.first_stage(query, cfg, exclude)
        finally:
            _ASKED_K.reset(asked_k)
        if len(papers) == 0:  # nothing to rank, e.g. an index holding only the query paper
            return []
        if cfg.rerank == "none":
            keep = slice(0, min(cfg.k, len(papers)))
            hits = self._explain_min_l2(query, papers[keep], first_scores[keep])
        else:
            from aspire.retrieval.rerank import rerank

            chosen, top_scores, reranked, aligned = rerank(self, query, papers, first_scores, cfg)
            if aligned is not None:  # the OT stage's plans and costs of the k hits, (k, S, T) each
                hits = self._explain_ot(query, chosen, top_scores, *aligned)
            else:
                hits = self._explain_min_l2(query, chosen, top_scores)
            for hit, own in zip(hits, reranked):
                stage_scores.setdefault(hit.paper_id, {}).update(own)
        for hit in hits:  # -0.0 (a distance of 0 negated) as 0.0, as the hit's score
            hit.stages = {name: score + 0.0 for name, score in stage_scores.get(hit.paper_id, {}).items()}
        return cross_rerank(self, query, hits, asked) if asked.cross_encoder else hits

    def first_stage(self, query: DocBatch, cfg: SearchConfig,
                    exclude: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, dict[str, float]]]:
        """ANN, BM25 or both fused (`aspire.retrieval.lexical.first_stage`)."""
        from aspire.retrieval.lexical import first_stage

        return first_stage(self, query, cfg, exclude)

    def lexical(self, cfg: SearchConfig):
        """The BM25 stage over this index: the stored one, or one built on first use (kept per k1 / b)."""
        from aspire.index.lexical import stored_bm25
        from aspire.retrieval.lexical import LexicalStage

        key = (cfg.bm25_k1, cfg.bm25_b)
        if key not in self._lexical:
            self._lexical[key] = LexicalStage(stored_bm25(self.index, *key))
        return self._lexical[key]

    def retrieve(self, query: DocBatch, config: SearchConfig, exclude: Sequence[str] = ()) -> Candidates:
        """ANN stage: one faiss lookup per selected query sentence, aggregated per paper by min L2.

        Returns `first_stage_depth(config)` candidates (`shortlist` when re-ranking or fusing, else `k`), excluded
        ids removed. When the lookups reach fewer papers, `sentence_k` is widened (about in proportion to what is
        missing) until they do, or until the index gives no more (every sentence reached, or the ANN structure
        returns fewer rows than asked); then fewer come back and a warning says so.

        When the single match is the ranking (`rerank: none`, first stage `ann`) and several sentences are selected, the lookups
        also widen (doubling) until the k-th paper is no farther than every lookup's farthest neighbour
        (`reach`): a paper nearer than that to some query sentence has its nearest sentence in that sentence's
        lookup, so on an exact index (flat) the k papers and their distances are the exhaustive single match's.
        Without it a paper nearest to a query sentence crowded by another paper's many sentences came back
        with a larger distance, or not at all. A shortlist for a re-ranker is not widened so (its papers are
        re-scored, and it is 100 times deeper), nor is the fused stage's list: its membership stays approximate.
        """
        selected = query.mask[0].nonzero()[:, 0]  # (n,) positions of the selected sentences
        if len(selected) == 0:
            raise ValueError("the query has no selected sentence")
        vectors = query.emb[0, selected].detach().float().cpu().numpy()  # (n, D)
        limit = first_stage_depth(config)
        exact = config.rerank == "none" and config.stages == "ann"  # the single match is the ranking: its papers and
        # distances must hold
        wanted = limit + len(exclude)
        sentence_k = config.sentence_k or max(config.sentence_k_min, math.ceil(wanted * config.sentence_k_factor))
        # an excluded paper (the query itself) can fill a lookup with its own sentences: look further
        excluded = [self.index.positions[pid] for pid in exclude if pid in self.index.positions]
        sentence_k += int(sum(self.index.offsets[p + 1] - self.index.offsets[p] for p in excluded))
        drop = np.array([self.index.positions.get(pid, -1) for pid in exclude], dtype=np.int64)
        while True:
            sentence_k = min(sentence_k, self.index.n_sentences)
            dist, rows = self.index.search_sentences(vectors, sentence_k)  # (n, k') each
            candidates = aggregate_min_l2(dist, rows, self.index.sentence_papers(rows))
            candidates = candidates.take(~np.isin(candidates.papers, drop))
            exhausted = sentence_k >= self.index.n_sentences or bool((rows < 0).any())
            if exhausted or (len(candidates) >= limit and (not exact or candidates.dist[limit - 1] <= reach(dist))):
                break
            sentence_k = max(2 * sentence_k, math.ceil(sentence_k * limit / max(len(candidates), 1)))
        if len(candidates) < config.k and "bm25" not in config.stages.split(","):  # BM25 fills a fused list
            self.short_of_k(len(candidates), config.k, exhaustion_reason(self.index.kind,
                                                                         self.index.n_papers - len(excluded)))
        return candidates.take(np.arange(min(limit, len(candidates))))

    def exhaustive(self, query: DocBatch, method: str = "minl2", k: int = 10, chunk: int = 4096,
                   exclude: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact ranking of every indexed paper by scorer `method` ("minl2", "ot", ...), no ANN.

        "minl2" scans all sentence vectors (`chunk` x 64 rows at a time) and takes each paper's
        minimum; other scorers score the papers `chunk` at a time, grouped by sentence count. Returns (papers (k,) positions,
        scores (k,) similarities), best first, ties by lower position (as `search` breaks them). The query is
        checked as `search` checks it (`check_query`); a `chunk` that is no positive integer is a ValueError (a negative
        one scanned nothing and ranked papers by -inf or by uninitialised memory). A paper (excluded ones aside) scoring
        NaN is a ValueError naming the query and the papers' ids and positions.
        """
        from aspire.retrieval.lexical import best_positions

        checked_search_config(self.config, k=k)
        if not is_whole(chunk, 1):
            raise ValueError(f"exhaustive: chunk must be a positive integer, got {chunk!r}")
        if len(query) != 1:
            raise ValueError(f"exhaustive takes one query paper, got a batch of {len(query)}")
        check_query(query, self.index.dim)
        exclude = self._excluded(query, exclude)
        if method == "minl2":
            scores = -self._scan_min_l2(query, chunk * 64)
        else:
            scorer = self.scorer(method, self.config)
            scores = torch.empty(self.index.n_papers)
            by_length = np.argsort(np.diff(self.index.offsets), kind="stable")  # chunks of similar length pad little
            for start in range(0, self.index.n_papers, chunk):
                papers = by_length[start : start + chunk]
                pool = self.index.gather(papers, device=query.device, dtype=query.emb.dtype, texts=False)
                scores[torch.from_numpy(papers)] = score_chunked(scorer, query, pool)[0].float().cpu()
        keep = np.ones(self.index.n_papers, dtype=bool)
        keep[[self.index.positions[pid] for pid in exclude if pid in self.index.positions]] = False
        scores = scores.numpy()
        try:
            top = best_positions(scores, np.flatnonzero(keep), k)  # torch.topk put tied papers in no stated order
        except ValueError as err:  # its NaN error names positions alone: said here with the papers' ids
            nan = np.flatnonzero(np.isnan(scores) & keep)  # (n,) read only once the ranking failed
            if not len(nan):
                raise
            ids = [self.index.paper_ids[p] for p in nan[:10].tolist()]
            raise ValueError(f"exhaustive {method!r} search for {_query_name(query)}: {len(nan)} paper(s) score NaN "
                             f"(ids {ids}, positions {nan[:10].tolist()}): they cannot be ranked") from err
        return top, scores[top]

    def _excluded(self, query: DocBatch, exclude: Sequence[str | int] | str | int | None) -> list[str]:
        """The paper ids a search leaves out, each once, as strings: `exclude` (one id, or a list of them), or by
        default the query's own id when `config.exclude_query`."""
        if exclude is None:
            return query.paper_ids[:1] if self.config.exclude_query and query.paper_ids else []
        if isinstance(exclude, (str, int, np.integer)):  # one id (a NumPy integer was iterated)
            exclude = [exclude]
        return list(dict.fromkeys(_paper_id(pid) for pid in exclude))

    def _scan_min_l2(self, query: DocBatch, rows_per_step: int) -> torch.Tensor:
        """(P,) min L2 distance of every indexed paper to the selected query sentences (CPU)."""
        q = query.emb[0, query.mask[0]].detach().float().cpu()  # (n, D)
        q_sq = (q * q).sum(1)  # (n,)
        owners = torch.from_numpy(self.index.row_papers)  # (N,)
        v_sq = torch.from_numpy(self.index.squared_norms)  # (N,)
        best = torch.full((self.index.n_papers,), float("inf"))
        for start in range(0, self.index.n_sentences, rows_per_step):
            with warnings.catch_warnings():  # a read-only memory map, only ever read here
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                v = torch.from_numpy(np.asarray(self.index.vectors[start : start + rows_per_step], dtype=np.float32))
            sq = q_sq[:, None] + v_sq[start : start + len(v)][None, :] - 2.0 * (q @ v.T)  # (n, chunk) squared L2
            d = sq.clamp_min(0).amin(0).sqrt()  # (chunk,) nearest query sentence per row
            best.scatter_reduce_(0, owners[start : start + len(v)], d, reduce="amin")
        return best

    def scorer(self, method: str, config: SearchConfig):
        """The scorer behind a re-ranking method (cached)."""
        key = (method, config.ot_tau, config.ot_eps, config.ot_tol, config.ot_max_iter, config.passage_window)
        if key not in self._scorers:
            kwargs = {}
            if method == "ot":
                kwargs = dict(tau=config.ot_tau, eps=config.ot_eps, tol=config.ot_tol, max_iter=config.ot_max_iter)
            elif method == "maxpassage":
                kwargs = dict(window=config.passage_window)
            self._scorers[key] = get_scorer(method, **kwargs)
        return self._scorers[key]

    # ---- explanations -------------------------------------------------------------------------------
    @staticmethod
    def _texts(query: DocBatch, i: int, hit_sentences: list[str], j: int) -> tuple[str, str]:
        q_text = query.sentences[0][i] if query.sentences and i < len(query.sentences[0]) else ""
        return q_text, hit_sentences[j]

    def _explain_min_l2(self, query: DocBatch, papers: np.ndarray, scores: np.ndarray) -> list[Hit]:
        """Hits whose pairs are each selected query sentence with its nearest hit sentence, nearest first."""
        if len(papers) == 0:
            return []
        hits = self.index.gather(papers, device=query.device, dtype=query.emb.dtype, texts=False)
        dist, idx = nearest_pairs(query, hits)  # (C, Sq)
        n = int(query.mask[0].sum())
        order = torch.argsort(dist, dim=1)[:, :n]  # (C, n) selected query sentences, nearest first
        out = []
        for c, paper in enumerate(papers.tolist()):
            pairs, sentences = [], self.index.sentences[paper]  # read once a hit (it may be on disk)
            for i in order[c].tolist():
                j = int(idx[c, i])
                pairs.append(AlignedPair(i, j, float(dist[c, i]), 1.0, *self._texts(query, i, sentences, j)))
            out.append(Hit(c + 1, self.index.paper_ids[paper], self.index.titles[paper], float(scores[c]), pairs))
        return out

    def _explain_ot(self, query: DocBatch, papers: np.ndarray, scores: np.ndarray, plan: torch.Tensor,
                    cost: torch.Tensor) -> list[Hit]:
        """Hits whose pairs follow the transport plan `(C, Sq, Sc)`: each selected query sentence with
        the hit sentence receiving most of its mass (`weight` = that share), largest mass first."""
        row_mass = plan.sum(dim=2).clamp_min(torch.finfo(plan.dtype).tiny)  # (C, Sq)
        mass, idx = plan.max(dim=2)  # (C, Sq)
        mass = mass.masked_fill(~query.mask, -1.0)
        share = mass / row_mass  # (C, Sq)
        n = int(query.mask[0].sum())
        order = torch.argsort(mass, dim=1, descending=True)[:, :n]  # (C, n)
        out = []
        for c, paper in enumerate(papers.tolist()):
            pairs, sentences = [], self.index.sentences[paper]  # read once a hit (it may be on disk)
            for i in order[c].tolist():
                j = int(idx[c, i])
                pairs.append(AlignedPair(i, j, float(cost[c, i, j]), float(share[c, i]), *self._texts(query, i, sentences, j)))
            out.append(Hit(c + 1, self.index.paper_ids[paper], self.index.titles[paper], float(scores[c]), pairs))
        return out


def cross_depth(searcher, cfg: SearchConfig) -> SearchConfig:
    """The config the stages before the cross-encoder run with: `k` raised to `cross_top` when the stage is on
    (it needs a model: SearchArgumentError otherwise), and a re-ranker's `shortlist` to at least that, so that the
    stage reads the `cross_top` best papers it is documented to (a shortlist of 20 gave it 20 of 50, and warned of
    a small index); `cfg` itself when it is off."""
    if not cfg.cross_encoder:
        return cfg
    if searcher.cross_encoder is None:
        raise SearchArgumentError("cross_encoder: the cross-encoder stage is on but no cross-encoder is loaded "
                                  "(give --cross-encoder DIR, or Searcher(..., cross_encoder=load_cross_stage(DIR)))")
    k = max(cfg.k, cfg.cross_top)
    return replace(cfg, k=k, shortlist=max(cfg.shortlist, k) if cfg.rerank != "none" else cfg.shortlist)


def search_timed(searcher, query, cross_encoder: bool | None = None, **options) -> tuple[list, float | None]:
    """`searcher.search(query, cross_encoder=..., **options)` and the milliseconds its cross-encoder stage took
    (None when the stage was off for this search: `cross_encoder`, else the searcher's config, says)."""
    on = searcher.config.cross_encoder if cross_encoder is None else cross_encoder
    before = cross_seconds(searcher)
    hits = searcher.search(query, cross_encoder=cross_encoder, **options)
    return hits, round(1000 * (cross_seconds(searcher) - before), 2) if on else None


if __name__ == "__main__":  # `python -m aspire.search ...` (as configs/index.yaml writes it): the `aspire search` command
    import runpy

    runpy.run_module("aspire.cli.search", run_name="__main__", alter_sys=True)
