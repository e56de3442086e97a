"""The first stage of search: ANN, BM25 or both fused, and the BM25 stage itself.

`first_stage(searcher, query, cfg, exclude)` runs the stages `cfg.stages` names over the searcher's index and
fuses their lists (`aspire.scoring.fusion`, the fusion every benchmark uses); `LexicalStage` is BM25 at query
time over the index's stored BM25 (`aspire.index.lexical.stored_bm25`). A query's text is its selected
sentences (`selected_text`), so an aspect-conditional query is matched by its aspect's words.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from aspire.scoring.fusion import fuse_ranked, fusion_weights, parse_fusion
from aspire.scoring.lexical import BM25Index


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

    def top(self, text: str, n: int, exclude: Sequence[int] = (), fill: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The `n` best papers for `text`, `exclude` positions left out, best first (ties: lower position).

        With `fill`, `n` means `n` papers: the papers sharing no word with the query all score 0 and, when
        fewer than `n` papers score above 0, fill the list in index order (tied at 0, below every matching
        paper); fewer come back only when the index holds fewer papers besides `exclude`. Without it (a list
        to fuse, whose z-scores the zeros would move), only the papers scoring above 0.
        """
        scores = self.bm25.scores([text])[0].astype(np.float64)  # (P,)
        keep = np.ones(len(scores), dtype=bool)
        if len(exclude):
            keep[np.asarray(exclude, dtype=np.int64)] = False
        candidates = np.flatnonzero(keep)  # (C,) ascending positions
        matched = scores[candidates] > 0
        hits, rest = candidates[matched], candidates[~matched]
        top = best_positions(scores, hits, n)
        top = np.concatenate([top, rest[: n - len(top)] if fill else rest[:0]]).astype(np.int64)  # zero-score fill
        return top, scores[top]


def best_positions(scores: np.ndarray, candidates: np.ndarray, n: int) -> np.ndarray:
    """The `n` best of `candidates` (ascending positions into `scores (P,)`) by score, best first, ties by lower
    position, also where tied papers straddle the n-th place (a partial sort alone keeps an arbitrary few of them).
    A NaN score among the candidates is a ValueError naming its positions."""
    m = min(n, len(candidates))
    if m == 0:
        return candidates[:0]
    values = scores[candidates]  # (C,)
    nan = np.isnan(values)
    if nan.any():  # a NaN as the m-th best score equals none and exceeds none: every paper went missing, unsaid
        raise ValueError(f"{int(nan.sum())} candidate(s) score NaN (positions {candidates[nan][:10].tolist()}): "
                         "they cannot be ranked")
    cut = -np.partition(-values, m - 1)[m - 1]  # the m-th best score
    above = candidates[values > cut]
    top = np.concatenate([above, candidates[values == cut][: m - len(above)]])  # ties at the cut: lowest positions
    return top[np.lexsort((top, -scores[top]))]


def whole_stage(searcher, query, limit: int, drop: Sequence[int]) -> dict[str, float]:
    """The `limit` papers, but those at positions `drop`, whose whole-abstract vectors are nearest the query's by
    cosine (exact, over every paper: one product of the query vector with the stored (P, D) whole vectors) ->
    {paper id: cosine}, best first (ties: lower position)."""
    index = searcher.index
    whole, norms = index.whole_vectors("first stage 'whole'")
    if query.whole is None:
        raise ValueError("first stage 'whole' needs the query's whole-abstract vector (encode it with the contextual "
                         "encoder, whose pass returns it)")
    q = query.whole[0].detach().float().cpu().numpy()
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    sims = np.empty(index.n_papers, dtype=np.float32)
    for start in range(0, index.n_papers, 65536):  # a memory map is read a block at a time
        block = np.asarray(whole[start : start + 65536], dtype=np.float32)
        sims[start : start + len(block)] = block @ q / np.maximum(norms[start : start + len(block)], 1e-12)
    keep = np.ones(index.n_papers, dtype=bool)
    keep[np.asarray(drop, dtype=np.int64)] = False
    top = best_positions(sims, np.flatnonzero(keep), limit)  # ties: lower position
    return {index.paper_ids[p]: float(sims[p]) for p in top.tolist()}


def first_stage_depth(config) -> int:
    """The papers `config`'s first stage lists: `shortlist` (at least `k`) where a re-ranker reads them or two lists
    are fused (each list that deep: z / minmax normalise a list by its own papers, and rrf adds only the papers a
    list holds, so lists `k` deep gave the k best of one query other scores and another order at each k), else `k`
    (its `k` best are the answer)."""
    if config.rerank != "none" or config.stages == "ann,bm25":
        return max(config.shortlist, config.k)
    return config.k


def first_stage(searcher, query, cfg, exclude: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict]:
    """A `Searcher`'s first stage: ANN, BM25, both fused, or the whole-abstract vectors (`cfg.stages`, `cfg.fuse`) -> (paper
    positions, scores, per-paper stage scores), best first, `shortlist` papers when re-ranking or fusing (each fused
    list that deep, whatever k: `first_stage_depth`), else `k`."""
    stages = cfg.stages.split(",")
    limit = first_stage_depth(cfg)
    drop = [searcher.index.positions[pid] for pid in exclude if pid in searcher.index.positions]
    lists: list[dict[str, float]] = []
    if "ann" in stages:
        candidates = searcher.retrieve(query, cfg, exclude)
        lists.append({searcher.index.paper_ids[p]: -float(d) for p, d in zip(candidates.papers, candidates.dist)})
    if "whole" in stages:
        lists.append(whole_stage(searcher, query, limit, drop))
    if "bm25" in stages:
        text = selected_text(query)
        papers, scores = searcher.lexical(cfg).top(text, limit, drop, fill=stages == ["bm25"])  # k means k
        if not (scores > 0).any() and searcher.index.n_papers > len(set(drop)):  # once an index-order list, unsaid
            name = f"query {query.paper_ids[0]!r}" if query.paper_ids else "the query"
            searcher.say(f"{name}: no paper shares a word of its text {text[:80]!r} (stop words left out, excluded "
                         "papers aside): BM25 scores every paper 0, "
                         + ("its papers are the first in index order" if stages == ["bm25"]
                            else "the fused list is the other stage's alone"))
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
    if len(ranked) < cfg.k and stages != ["ann"]:  # the ANN stage alone says why it fell short (`Searcher.retrieve`)
        # fused: the ANN list reaches what the faiss structure does (said so, not "the index holds N papers")
        searcher.short_of_papers(len(ranked), cfg.k, len(set(drop)), ann="ann" in stages)
    papers = np.array([searcher.index.positions[pid] for pid, _ in ranked], dtype=np.int64)
    return papers, np.array([x for _, x in ranked], dtype=np.float64), stage_scores
