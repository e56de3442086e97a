"""Multi-similarity loss (Wang et al., CVPR 2019) over an in-batch similarity matrix, without mining.

Matrix convention as in `aspire.losses.ranking`: anchor b's positive is column b, its negatives the
allowed other columns. For anchor b with positive similarity s_p and negative similarities s_n:

    loss_b = 1/alpha * log(1 + exp(-alpha * (s_p - base))) + 1/beta * log(1 + sum_n exp(beta * (s_n - base)))

`base` is the similarity the loss pivots on (the paper's lambda; 0.5 for cosine similarities, as in the
authors' code and pytorch-metric-learning's default, while the paper's text sets lambda = 1); for
distance-based similarities (minus a distance, at most 0) pick a base on that scale. The mining step of the
paper is left out: every allowed negative counts.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aspire.losses.ranking import check_matrix, check_setting


class MultiSimilarityLoss(nn.Module):
    """Per-anchor multi-similarity loss; see the module docstring for the formula."""

    SETTINGS = {"alpha": "ms_alpha", "beta": "ms_beta", "base": "ms_base"}  # constructor argument -> loss.* key

    def __init__(self, alpha: float = 2.0, beta: float = 50.0, base: float = 0.5) -> None:
        super().__init__()
        self.alpha, self.beta = check_setting("ms_alpha", alpha), check_setting("ms_beta", beta)
        self.base = check_setting("ms_base", base, positive=False)

    def forward(self, sim: Tensor, neg_mask: Tensor) -> tuple[Tensor, Tensor]:
        _, negatives = check_matrix(sim, neg_mask)
        pos_term = nn.functional.softplus(-self.alpha * (sim.diagonal() - self.base)) / self.alpha  # (B,)
        neg_logits = (self.beta * (sim - self.base)).masked_fill(~negatives, float("-inf"))  # (B, K)
        zero = neg_logits.new_zeros(len(sim), 1)  # the "1 +" inside the log
        neg_term = torch.cat([zero, neg_logits], dim=1).logsumexp(dim=1) / self.beta  # (B,)
        return pos_term + neg_term, negatives.any(dim=1)
