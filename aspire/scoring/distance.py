"""The one distance routine: L2 distances between sentence vectors, by the expansion
|x - y|^2 = |x|^2 + |y|^2 - 2 x.y (one batched matrix product, no (.., N, M, D) difference tensor).

`l2_cost` pairs row b of x with row b of y (aligned pairs, (B, N, M)); `cross_l2_cost` compares
every x with every y (all pairs, (Bq, Bc, S, T)). The scorers (min-L2, OT, attention), the search
re-ranking (`aspire.search.nearest_pairs`), the page's transport plans and the single-vector
losses all take their distances from here.
"""

from __future__ import annotations

import torch
from torch import Tensor

_HALF = (torch.float16, torch.bfloat16)


def _safe_sqrt(sq: Tensor) -> Tensor:
    """sqrt(max(sq, 0)) whose gradient is 0 (not NaN/inf) where sq <= 0."""
    pos = sq > 0
    return torch.where(pos, torch.sqrt(torch.where(pos, sq, 1.0)), 0.0)


def _sq_norms(x: Tensor) -> Tensor:
    """Squared L2 norms over the last dim, (...,), summed as the matrix product sums (so |x - x| is 0)."""
    return (x * x).sum(-1)


def l2_cost(x: Tensor, y: Tensor) -> Tensor:
    """Aligned pairwise L2 distances: x (B, N, D), y (B, M, D) -> (B, N, M).

    Computed as sqrt(|x|^2 + |y|^2 - 2 x.y) (one batched matmul adding into the norms); the
    gradient is 0 where two vectors coincide, never NaN.
    """
    if x.dtype in _HALF:  # squared norms overflow float16 from |x| ~ 256: expand in float32
        return l2_cost(x.float(), y.float()).to(x.dtype)
    sq = torch.baddbmm(_sq_norms(x)[:, :, None] + _sq_norms(y)[:, None, :], x, y.transpose(1, 2), alpha=-2.0)
    return _safe_sqrt(sq)


def cross_l2_cost(x: Tensor, y: Tensor) -> Tensor:
    """All-pairs L2 distances: x (Bq, S, D), y (Bc, T, D) -> (Bq, Bc, S, T), one GEMM."""
    if x.dtype in _HALF:  # as in l2_cost
        return cross_l2_cost(x.float(), y.float()).to(x.dtype)
    Bq, S, D = x.shape
    Bc, T, _ = y.shape
    xf, yf = x.reshape(Bq * S, D), y.reshape(Bc * T, D)
    sq = torch.addmm(_sq_norms(xf)[:, None] + _sq_norms(yf)[None, :], xf, yf.T, alpha=-2.0)  # (Bq S, Bc T)
    return _safe_sqrt(sq).reshape(Bq, S, Bc, T).permute(0, 2, 1, 3)
