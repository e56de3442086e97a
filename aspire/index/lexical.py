"""The lexical (BM25) stage of search: BM25 over each indexed paper's title and sentences.

Built from the texts the index keeps (`SentenceIndex.titles`, `.sentences`), in index position
order, with `aspire.scoring.lexical.BM25Index` (bm25s; k1, b from the search config). `aspire index
build` (any save) writes it into the index generation with the build config's `search.bm25_k1` /
`search.bm25_b`; `stored_bm25` uses that stored one when a search asks for the same k1 and b, and
builds one (logging why) otherwise, or for an index saved before BM25 was stored. A query's text is
its selected sentences, so an aspect-conditional query is matched by its aspect's words.
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from aspire.scoring.fusion import fuse_ranked, fusion_weights, parse_fusion
from aspire.scoring.lexical import BM25Index, join_text

log = logging.getLogger(__name__)


def index_bm25(index, k1: float = 1.25, b: float = 0.75) -> BM25Index:
    """A new BM25 index over a `SentenceIndex`'s papers (title + sentences); its ids are positions."""
    return papers_bm25(index.titles, index.sentences, k1, b)


def papers_bm25(titles: Sequence[str], sentences: Sequence[Sequence[str]], k1: float, b: float) -> BM25Index:
    """A new BM25 index over papers given by their titles and sentences; its ids are positions."""
    texts = [join_text(title, sents) for title, sents in zip(titles, sentences)]
    return BM25Index(texts, [str(i) for i in range(len(texts))], k1=k1, b=b)


def stored_bm25(index, k1: float, b: float) -> BM25Index:
    """The index's stored BM25 when it has these k1 and b, else one built now (with a log line why)."""
    stored = index.bm25
    if stored is not None and (stored.k1, stored.b) == (k1, b):
        return stored
    why = ("the index holds no stored BM25 (saved before aspire kept it; rebuild or re-save it to store one)"
           if stored is None else f"the stored BM25 has k1={stored.k1:g}, b={stored.b:g}")
    log.info("building BM25 (k1=%g, b=%g) over %d papers at query time: %s", k1, b, index.n_papers, why)
    return index_bm25(index, k1, b)


def selected_text(query) -> str:
    """A query DocBatch's selected sentences (its mask) joined by spaces: the text BM25 and the
    cross-encoder stage read for an aspect-conditional query (ValueError when the batch holds no texts)."""
    if not query.sentences:
        raise ValueError("the query DocBatch holds no sentence texts, which BM25 and the cross-encoder read")
    return " ".join(query.sentences[0][i] for i in query.mask[0].nonzero()[:, 0].tolist())


class LexicalStage:
    """BM25 over an index's papers; `top` returns index positions and scores, best first."""

    def __init__(self, bm25: BM25Index) -> None:
        self.bm25 = bm25
        self.n_papers = len(bm25.ids)

    def top(self, text: str, n: int, exclude: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        """The `n` best papers for `text` with a positive BM25 score, `exclude` positions left out."""
        scores = self.bm25.scores([text])[0].astype(np.float64)  # (P,)
        if len(exclude):
            scores[np.asarray(exclude, dtype=np.int64)] = 0.0
        n = min(n, int((scores > 0).sum()))
        if n == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        top = np.argpartition(-scores, n - 1)[:n]
        top = top[np.lexsort((top, -scores[top]))]
        return top.astype(np.int64), scores[top]


def first_stage(searcher, query, cfg, exclude: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict]:
    """A `Searcher`'s first stage: ANN, BM25 or both fused (`cfg.stages`, `cfg.fuse`) -> (paper
    positions, scores, per-paper stage scores), best first, `shortlist` papers when re-ranking, else `k`."""
    stages = cfg.stages.split(",")
    limit = cfg.shortlist if cfg.rerank != "none" else cfg.k
    lists: list[dict[str, float]] = []
    if "ann" in stages:
        candidates = searcher.retrieve(query, cfg, exclude)
        lists.append({searcher.index.paper_ids[p]: -float(d) for p, d in zip(candidates.papers, candidates.dist)})
    if "bm25" in stages:
        text = selected_text(query)
        drop = [searcher.index.positions[pid] for pid in exclude if pid in searcher.index.positions]
        papers, scores = searcher.lexical(cfg).top(text, limit, drop)
        lists.append({searcher.index.paper_ids[p]: float(x) for p, x in zip(papers, scores)})
    if len(lists) == 1:
        ranked = sorted(lists[0].items(), key=lambda kv: -kv[1])
    else:
        method, value = parse_fusion(cfg.fuse)
        ranked = fuse_ranked(lists, fusion_weights(method, value, len(lists)), method, value)[:limit]
    stage_scores = {pid: {name: lst[pid] for name, lst in zip(stages, lists) if pid in lst} for pid, _ in ranked}
    if len(lists) > 1:
        for pid, score in ranked:
            stage_scores[pid]["fused"] = score
    papers = np.array([searcher.index.positions[pid] for pid, _ in ranked], dtype=np.int64)
    return papers, np.array([x for _, x in ranked], dtype=np.float64), stage_scores
