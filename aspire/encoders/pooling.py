"""Pooling word-piece vectors into one vector per span (a sentence, or a whole text)."""

from __future__ import annotations

import torch
from torch import Tensor


def masked_mean(hidden: Tensor, mask: Tensor) -> Tensor:
    """Mean of hidden (N, T, D) over positions where mask (N, T) is true (or nonzero) -> (N, D); a row with none
    is 0. A left-out position is read as 0, so what it holds (even NaN or inf) changes no mean and gets no gradient
    (the scorers pool a caller's own DocBatch with it, `aspire.scoring.base.zero_padding`). Summed and counted in
    float32 at least, as `ContextualSentenceEncoder.forward` pools, and returned in `hidden`'s dtype: a float16 sum
    of 512 pieces of 200 is inf, and a bfloat16 count stops being exact past 256. A mask of another shape than
    (N, T) is a ValueError (broadcast, a (N, 1) mask gave the sum over T, not the mean)."""
    if hidden.dim() != 3 or mask.shape != hidden.shape[:2]:
        raise ValueError(f"masked_mean: hidden must be (N, T, D) and mask (N, T), got {tuple(hidden.shape)} and "
                         f"{tuple(mask.shape)}")
    keep = mask.bool()
    wide = hidden.to(torch.promote_types(hidden.dtype, torch.float32))
    total = torch.where(keep[..., None], wide, 0.0).sum(1)
    return (total / keep.sum(1, keepdim=True).to(wide.dtype).clamp_min(1.0)).to(hidden.dtype)
