"""Pooling word-piece vectors into one vector per span (a sentence, or a whole text)."""

from __future__ import annotations

from torch import Tensor


def masked_mean(hidden: Tensor, mask: Tensor) -> Tensor:
    """Mean of hidden (N, T, D) over positions where mask (N, T) is true -> (N, D)."""
    weights = mask.to(hidden.dtype).unsqueeze(-1)  # (N, T, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0)
