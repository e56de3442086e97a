"""Max-over-passage scoring: a candidate scores as its best passage (a window of its sentences).

A passage is `window` consecutive selected sentences of the candidate (all of them when it has
fewer); its vector is the mean of their vectors. The query is the mean of its selected sentence
vectors (an aspect-conditional query: its aspect's sentences). A candidate's distance is the
smallest cosine distance, 1 - cos, between the query vector and any of its passages, so its
similarity (`score`) is the best passage's cosine minus 1. `window=1` scores a candidate by its single
best sentence; a window as long as the paper, by the mean of all its sentence vectors (not its
whole-abstract vector `DocBatch.whole`, the mean of its word pieces).

In search, `aspire.retrieval.rerank` mixes this score with the first stage's by the weight β
(`SearchConfig.passage_beta`); in the evaluators it is the scorer `maxpassage` (`--window`), and
its run can be fused with a first-stage run (`fuse`, `fuse-runs`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from aspire.batch import DocBatch
from aspire.config import is_whole
from aspire.encoders.pooling import masked_mean
from aspire.scoring.base import _check_inputs, _Scorer, zero_padding
from aspire.scoring.distance import widened


@dataclass
class PassageMatch:
    """Max-passage distances and where the best passage starts. (...) = (Bq, Bc) or (B,)."""

    dist: Tensor  # (...) 1 - cosine of the query vector and the best passage's vector
    start: Tensor  # (...) long, the best passage's first sentence (position among the selected sentences)


def selected_first(emb: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Each row's selected sentences moved to the front, in order: emb (B, S, D), mask (B, S) ->
    the same shapes, masks now a prefix (an aspect-conditional selection becomes contiguous)."""
    order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)  # (B, S) selected first
    return emb.gather(1, order[..., None].expand_as(emb)), mask.gather(1, order)


def passage_vectors(emb: Tensor, mask: Tensor, window: int) -> tuple[Tensor, Tensor]:
    """Mean vectors of every window of `window` selected sentences: emb (B, S, D), mask (B, S) ->
    (passages (B, S, D) indexed by first sentence, valid (B, S)); a row with fewer than `window`
    selected sentences has one passage, all of them. `window` is an integer >= 1 (ValueError naming it; a fractional
    one failed in torch's gather); any window past S is read as S (one passage of each row's whole selection, as
    it is: a window near 2^63 overflowed the window ends into negative indices)."""
    if not is_whole(window, 1):
        raise ValueError(f"passage window must be an integer >= 1, got {window!r}")
    emb, mask = selected_first(emb, mask)
    B, S, D = emb.shape
    window = min(int(window), max(S, 1))
    n = mask.sum(1)  # (B,) selected sentences
    zero = emb.new_zeros(B, 1, D)
    sums = torch.cat([zero, zero_padding(emb, mask).cumsum(1)], dim=1)  # (B, S + 1, D)
    starts = torch.arange(S, device=emb.device)  # (S,)
    ends = torch.minimum(starts[None, :] + window, n[:, None])  # (B, S) exclusive end, within the selection
    passages = sums.gather(1, ends[..., None].expand(B, S, D)) - sums[:, :S]  # (B, S, D) window sums
    counts = (ends - starts[None, :]).clamp_min(1)  # (B, S)
    valid = starts[None, :] < (n - window + 1).clamp_min(1)[:, None]  # (B, S) full windows (or the one short one)
    return passages / counts[..., None], valid & mask


def maxpassage_match(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor, window: int = 1) -> PassageMatch:
    """All pairs (Bq, Bc): q_emb (Bq, S, D), q_mask (Bq, S), c_emb (Bc, T, D), c_mask (Bc, T)."""
    _check_inputs(q_emb, q_mask, c_emb, c_mask, aligned=False)
    q = F.normalize(masked_mean(widened(q_emb), q_mask), dim=-1)  # (Bq, D)
    passages, valid = passage_vectors(widened(c_emb), c_mask, window)  # (Bc, T, D), (Bc, T)
    cos = torch.einsum("qd,ctd->qct", q, F.normalize(passages, dim=-1))  # (Bq, Bc, T)
    best, start = cos.masked_fill(~valid[None], -torch.inf).max(dim=-1)  # (Bq, Bc)
    return PassageMatch((1.0 - best).to(c_emb.dtype), start)


def pairwise_maxpassage_match(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor,
                              window: int = 1) -> PassageMatch:
    """Aligned rows (B,): q_emb (B, S, D), q_mask (B, S), c_emb (B, T, D), c_mask (B, T)."""
    _check_inputs(q_emb, q_mask, c_emb, c_mask, aligned=True)
    q = F.normalize(masked_mean(widened(q_emb), q_mask), dim=-1)  # (B, D)
    passages, valid = passage_vectors(widened(c_emb), c_mask, window)  # (B, T, D), (B, T)
    cos = torch.einsum("bd,btd->bt", q, F.normalize(passages, dim=-1))  # (B, T)
    best, start = cos.masked_fill(~valid, -torch.inf).max(dim=-1)  # (B,)
    return PassageMatch((1.0 - best).to(c_emb.dtype), start)


class MaxPassageScorer(_Scorer):
    """Max over passages: similarity = the best window's cosine with the query's mean vector, minus 1.

    Args: window: sentences per passage (>= 1).
    """

    def __init__(self, window: int = 1) -> None:
        super().__init__()
        # an integer, or a float with an integer's value (int() of inf / NaN / None failed with an OverflowError or
        # a message naming no option)
        whole = isinstance(window, numbers.Integral) or (
            isinstance(window, numbers.Real) and math.isfinite(window) and int(window) == window)
        if isinstance(window, bool) or not whole or window < 1:
            raise ValueError(f"passage window must be an integer >= 1, got {window!r}")
        self.window = int(window)

    def extra_repr(self) -> str:
        return f"window={self.window}"

    def dist_details(self, queries: DocBatch, cands: DocBatch) -> PassageMatch:
        return maxpassage_match(queries.emb, queries.mask, cands.emb, cands.mask, self.window)

    def pairwise_dist_details(self, queries: DocBatch, cands: DocBatch) -> PassageMatch:
        return pairwise_maxpassage_match(queries.emb, queries.mask, cands.emb, cands.mask, self.window)
