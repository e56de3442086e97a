"""Binary cross-entropy on labelled pairs over an in-batch similarity matrix.

Matrix convention as in `aspire.losses.ranking`: (anchor b, candidate b) is a pair labelled 1, and
(anchor b, each allowed negative) a pair labelled 0. The logit of a pair is
`scale * (sim - threshold)`. Each anchor's loss weighs its positive pair and the mean over its
negative pairs equally, so the many in-batch negatives do not drown the one positive.
"""

from __future__ import annotations

from torch import Tensor, nn

from aspire.losses.ranking import check_matrix, check_setting


class PairBCELoss(nn.Module):
    """Per-anchor `(bce(positive, 1) + mean_n bce(negative_n, 0)) / 2`."""

    SETTINGS = {"scale": "scale", "threshold": "bce_threshold"}  # constructor argument -> its loss.* config key

    def __init__(self, scale: float = 20.0, threshold: float = 0.5) -> None:
        super().__init__()
        self.scale, self.threshold = check_setting("scale", scale), check_setting("bce_threshold", threshold, positive=False)

    def forward(self, sim: Tensor, neg_mask: Tensor) -> tuple[Tensor, Tensor]:
        _, negatives = check_matrix(sim, neg_mask)
        logits = self.scale * (sim - self.threshold)  # (B, K)
        pos = nn.functional.softplus(-logits.diagonal())  # -log sigmoid(logit), label 1
        # -log(1 - sigmoid(logit)), label 0; masked before softplus too, else a NaN similarity of a left-out candidate
        # gives softplus's backward 0 * NaN and a NaN gradient
        neg = nn.functional.softplus(logits.masked_fill(~negatives, 0.0)).masked_fill(~negatives, 0.0)
        count = negatives.sum(dim=1)
        return (pos + neg.sum(dim=1) / count.clamp(min=1)) / 2, count > 0
