"""Pooling word-piece vectors into one vector per span (a sentence, or a whole text)."""

from __future__ import annotations

import torch
from torch import Tensor


def masked_mean(hidden: Tensor, mask: Tensor) -> Tensor:
    """Mean of hidden (N, T, D) over positions where mask (N, T) is true (or nonzero) -> (N, D); a row with none
    is 0. A left-out position is read as 0, so what it holds (even NaN or inf) changes no mean and gets no gradient
    (the scorers pool a caller's own DocBatch with it, `aspire.scoring.base.zero_padding`)."""
    keep = mask.bool()
    return torch.where(keep[..., None], hidden, 0.0).sum(1) / keep.sum(1, keepdim=True).to(hidden.dtype).clamp_min(1.0)
