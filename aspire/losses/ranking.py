"""Multiple-negatives ranking loss (InfoNCE) over an in-batch similarity matrix.

The convention shared by the matrix losses (`MATRIX_LOSSES`): `sim` (B, K), K >= B, holds the
similarity (higher is better) of anchor b to candidate k; candidate b (< B) is anchor b's positive,
the other first B columns are the other anchors' positives and any further columns hard negatives.
`neg_mask` (B, K) says which candidates anchor b may treat as negatives (papers co-cited with it are
not); the positive column is never a negative whatever the mask says. Each loss returns the
loss of every anchor (B,) and which anchors had a negative (B,) bool, so the trainer can average per
task. With nothing masked this is the maths of sentence-transformers' `MultipleNegativesRankingLoss`
(and, `symmetric`, of `MultipleNegativesSymmetricRankingLoss`), tested against them on the same vectors.

Distillation: given a teacher's similarities of the same (B, K) candidates, an anchor's row becomes the
KL divergence from the teacher's softmax over its positive and allowed negatives to the model's
(soft targets, as in Hinton et al. 2015, over the in-batch candidates); rows the teacher did not score
stay the one-hot ranking loss above.

Precision: float16 / bfloat16 similarities (and teacher similarities) are scaled and reduced in float32
(`aspire.scoring.distance.widened`), the loss coming back in their dtype: at a scale of 20 a row's bfloat16 log-partition
rounds by up to ~0.06, which put each anchor's loss that far off (losses of 0.01-0.03 came out 0) and every softmax
weight of the row up to ~6% off (measured: the gradient 3% off).
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor, nn

from aspire.scoring.distance import widened


def check_matrix(sim: Tensor, neg_mask: Tensor) -> tuple[Tensor, Tensor]:
    """(positive (B, K) bool, negatives (B, K) bool) of a candidate matrix; ValueError on bad shapes or a non-bool mask."""
    if sim.dim() != 2 or sim.shape != neg_mask.shape or sim.shape[1] < sim.shape[0]:
        raise ValueError(f"sim and neg_mask must be (B, K) with K >= B, got {tuple(sim.shape)} and {tuple(neg_mask.shape)}")
    if neg_mask.dtype != torch.bool:  # else masked_fill's or bitwise_and's error, naming no argument
        raise ValueError(f"neg_mask must be a bool tensor, got {neg_mask.dtype}")
    B, K = sim.shape
    positive = torch.eye(B, K, dtype=torch.bool, device=sim.device)
    return positive, neg_mask & ~positive


def check_setting(key: str, value, positive: bool = True) -> float:
    """`value` of the `loss.<key>` setting as a float; ValueError naming the key unless it is a finite number (and
    > 0 where `positive`): a scale of 0 gives every pair the same logit (a constant loss that trains nothing), a
    NaN or infinite one a NaN loss."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (positive and not value > 0):
        raise ValueError(f"loss.{key} must be a finite number{' > 0' if positive else ''}, got {value!r}")
    return float(value)


class MultipleNegativesRankingLoss(nn.Module):
    """Cross-entropy of each anchor's positive among its positive and allowed negatives.

    `loss_b = logsumexp_k(scale * sim[b, k]) - scale * sim[b, b]` over k in {b} ∪ negatives(b).
    `symmetric` adds the other direction (each positive against the anchors, first B columns only)
    and averages the two log-partitions, as `MultipleNegativesSymmetricRankingLoss` does; an anchor then counts
    (the second tensor returned) where either direction has a negative.
    `scale` is 1 / temperature (20 for cosine similarities, as in sentence-transformers); `term_scale`
    {term: scale} overrides it for the document model's term `term` (a distance such as min-L2 spreads wider
    than a cosine, so the same temperature would make its softmax sharper).

    With `teacher` (B, K) similarities (NaN where the teacher has no vector of the anchor or the
    candidate; an infinite one is a ValueError naming the anchor and candidate), a row whose positive the teacher scored is `KL(softmax(teacher_scale * teacher) ||
    softmax(scale * sim))` over its positive and the allowed negatives the teacher scored; the other
    rows keep the ranking loss. `symmetric` does not combine with a teacher.
    """

    SETTINGS = {"scale": "scale", "symmetric": "symmetric", "teacher_scale": "teacher_scale",
                "term_scale": "term_scale"}  # constructor argument -> loss.* key

    def __init__(self, scale: float = 20.0, symmetric: bool = False, teacher_scale: float = 20.0,
                 term_scale: dict[str, float] | None = None) -> None:
        super().__init__()
        if not isinstance(symmetric, bool):  # a string ("false", "no") is truthy: it turned the symmetric loss on, unsaid
            raise ValueError(f"loss.symmetric must be a boolean, got {symmetric!r}")
        self.scale, self.symmetric = check_setting("scale", scale), symmetric
        self.teacher_scale = check_setting("teacher_scale", teacher_scale)
        self.term_scale = {term: check_setting(f"term_scale.{term}", s) for term, s in (term_scale or {}).items()}

    def forward(self, sim: Tensor, neg_mask: Tensor, teacher: Tensor | None = None,
                term: str | None = None) -> tuple[Tensor, Tensor]:
        positive, negatives = check_matrix(sim, neg_mask)
        B = sim.shape[0]
        logits = widened(sim) * self.term_scale.get(term, self.scale)  # (B, K), float32 for a half dtype
        pos = logits.diagonal()  # (B,)
        log_z = logits.masked_fill(~(positive | negatives), float("-inf")).logsumexp(dim=1)  # (B,)
        if self.symmetric:  # positive b against every anchor that may treat it as a negative
            if teacher is not None:
                raise ValueError("mnrl: symmetric does not combine with teacher similarities (loss.symmetric=false)")
            back = logits[:, :B].T  # (B, B): row b = positive b's similarity to each anchor
            allowed = (positive | negatives)[:, :B].T
            log_z = (log_z + back.masked_fill(~allowed, float("-inf")).logsumexp(dim=1)) / 2
            # row b counts where either direction has a negative: an anchor whose own row masks every candidate
            # still has the backward term of its positive against the anchors that may treat it as a negative
            return (log_z - pos).to(sim.dtype), negatives.any(dim=1) | negatives[:, :B].any(dim=0)
        loss = log_z - pos
        if teacher is None:
            return loss.to(sim.dtype), negatives.any(dim=1)
        if teacher.shape != sim.shape:
            raise ValueError(f"teacher similarities {tuple(teacher.shape)} for a matrix of {tuple(sim.shape)}")
        if teacher.isinf().any():  # an infinite one made its row's loss NaN (0 * inf in the KL), unsaid
            b, k = (int(i) for i in teacher.isinf().nonzero()[0])
            raise ValueError(f"teacher similarity of anchor {b} to candidate {k} is {teacher[b, k].item()}: "
                             "teacher similarities must be finite (NaN where the teacher has no vector)")
        scored = ~teacher.isnan()
        soft = scored.diagonal()  # (B,) rows the teacher scored
        # a row the teacher did not score keeps its positive column only, so no softmax is over nothing
        cols = torch.where(soft[:, None], (positive | negatives) & scored, positive)  # (B, K)
        target = (self.teacher_scale * widened(teacher).nan_to_num(0.0)).masked_fill(~cols, float("-inf")).log_softmax(dim=1)
        student = logits.masked_fill(~cols, float("-inf")).log_softmax(dim=1)
        kl = (target.exp() * (target - student).masked_fill(~cols, 0.0)).sum(dim=1)  # (B,)
        has_neg = torch.where(soft, (negatives & scored).any(dim=1), negatives.any(dim=1))
        return torch.where(soft, kl, loss).to(torch.promote_types(sim.dtype, teacher.dtype)), has_neg
