"""All-pairs scoring of many queries against many candidates within a memory budget.

A scorer's working memory grows with Bq x Bc x Sq x Sc: every sentence pair of every paper pair,
each paper padded to the longest of its batch. `score_chunked` sorts queries and candidates by
length (last selected sentence), cuts each chunk's padding to its own longest paper, and scores
chunks whose sentence-pair cells times `cell_bytes` stay under `budget_bytes` (a chunk is never
smaller than one query against one candidate). Scores are those of one `scorer.score` call over
everything up to float rounding for min-L2 and attention (every pair is scored on its own, and
padding carries no mass) and within the Sinkhorn tolerance for OT (each problem stops on its own
check, whose rounding depends on the padded shape).
"""

from __future__ import annotations

import math
import numbers
import sys

import torch
from torch import Tensor

from aspire.batch import DocBatch

DEFAULT_BUDGET_BYTES = 256 << 20  # working memory of one scoring call
DEFAULT_CELL_BYTES = 64  # working bytes per (query sentence, candidate sentence) cell: ~16 float32 temporaries


def used_lengths(batch: DocBatch) -> Tensor:
    """(B,) position after each paper's last selected sentence (0 for a paper with none)."""
    S = batch.mask.shape[1]
    pos = torch.arange(1, S + 1, device=batch.mask.device)
    return (batch.mask * pos).amax(dim=1) if S else torch.zeros(len(batch), dtype=torch.long, device=batch.mask.device)


def trimmed(batch: DocBatch, rows: Tensor, length: int) -> DocBatch:
    """The papers at `rows`, their padding cut to `length` sentences (at least 1)."""
    length = max(int(length), 1)
    sub = batch.index(rows)
    return DocBatch(sub.emb[:, :length], sub.mask[:, :length], sub.paper_ids, sub.sentences, sub.whole)


def _refuse_empty(role: str, batch: DocBatch, lengths: Tensor, order: Tensor) -> None:
    """ValueError naming the papers of `batch` with no selected sentence (`lengths`: its `used_lengths`, 0 for
    those; `order`: their ascending order, so one look at the shortest) before any chunk is scored: the scorer's own
    check would name their rows within a sorted, trimmed chunk, that is other papers."""
    if len(order) and int(lengths[order[0]]) == 0:
        rows = (lengths == 0).nonzero().flatten().tolist()
        names = [batch.paper_ids[i] for i in rows] if batch.paper_ids else [f"row {i}" for i in rows]
        raise ValueError(f"{role} papers {names[:5]}{' and more' if len(names) > 5 else ''} have no sentence "
                         "selected")


def _runs(lengths: Tensor, order: Tensor, cells: int, factor: int) -> list[Tensor]:
    """Consecutive runs of `order` (ascending lengths), each as long as count x longest x `factor`
    stays within `cells` allows (at least one item)."""
    runs, start, n = [], 0, len(order)
    while start < n:
        end = start + 1
        while end < n and (end + 1 - start) * int(lengths[order[end]]) * factor <= cells:
            end += 1
        runs.append(order[start:end])
        start = end
    return runs


def score_chunked(scorer, queries: DocBatch, cands: DocBatch, budget_bytes: int = DEFAULT_BUDGET_BYTES,
                  cell_bytes: int | None = None) -> Tensor:
    """(Bq, Bc) `scorer.score(queries, cands)`, computed in length-bucketed chunks under `budget_bytes`.

    `cell_bytes` (default: the scorer's `cell_bytes` attribute, else 64) is the scorer's working
    memory per sentence-pair cell; the budget is divided by it to get the cells a chunk may hold.
    Both must be numbers > 0 (ValueError naming the option). A paper with no selected sentence is a
    ValueError naming it (by paper id, else its row in `queries` / `cands`) before any chunk is scored.
    """
    if cell_bytes is None:
        cell_bytes = getattr(scorer, "cell_bytes", DEFAULT_CELL_BYTES)
    for name, value in (("budget_bytes", budget_bytes), ("cell_bytes", cell_bytes)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
            raise ValueError(f"{name} must be a number > 0, got {value!r}")
    # an infinite budget is one chunk (inf // n is NaN, and max(1, NaN) was 1: a chunk of one cell)
    cells = sys.maxsize if budget_bytes == math.inf else max(1, int(min(budget_bytes // cell_bytes, sys.maxsize)))
    lq, lc = used_lengths(queries).cpu(), used_lengths(cands).cpu()  # (Bq,), (Bc,); 0: no sentence selected
    q_order, c_order = torch.argsort(lq, stable=True), torch.argsort(lc, stable=True)
    _refuse_empty("query", queries, lq, q_order)
    _refuse_empty("candidate", cands, lc, c_order)
    longest_c = int(lc.max()) if len(lc) else 1
    out = None
    for q_rows in _runs(lq, q_order, cells, longest_c):
        sq, nq = int(lq[q_rows[-1]]), len(q_rows)
        q = trimmed(queries, q_rows.to(queries.device), sq)
        for c_rows in _runs(lc, c_order, cells, nq * sq):
            sims = scorer.score(q, trimmed(cands, c_rows.to(cands.device), int(lc[c_rows[-1]])))  # (nq, nc)
            if out is None:
                out = sims.new_empty(len(queries), len(cands))
            out[q_rows.to(sims.device)[:, None], c_rows.to(sims.device)[None, :]] = sims
    if out is None:  # no query or no candidate
        return torch.empty(len(queries), len(cands), device=queries.emb.device, dtype=queries.emb.dtype)
    return out
