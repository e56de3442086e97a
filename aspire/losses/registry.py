"""`MATRIX_LOSSES`: loss.kind -> the module computing it from a (B, K) similarity matrix, and `matrix_loss`.

Each class names its settings: SETTINGS maps a constructor argument to the key of the `loss` config section
it reads (`matrix_loss`). A new objective is one module in this package, one line in this registry and its
name with its keys in `aspire.losses.LOSS_KEYS`, whose names `LOSS_KINDS` is (tests/test_recipes.py checks the two
agree).
"""

from __future__ import annotations

from aspire.losses import LOSS_KINDS
from aspire.losses.bce import PairBCELoss
from aspire.losses.multi_similarity import MultiSimilarityLoss
from aspire.losses.ranking import MultipleNegativesRankingLoss

MATRIX_LOSSES = {"mnrl": MultipleNegativesRankingLoss, "multi_similarity": MultiSimilarityLoss, "bce": PairBCELoss}


def matrix_loss(loss_cfg):
    """The matrix loss `loss_cfg.kind` names, built with the `loss` settings its class names (`SETTINGS`);
    None for `triplet`; ValueError listing the kinds for an unknown one."""
    if loss_cfg.kind == "triplet":
        return None
    if loss_cfg.kind not in MATRIX_LOSSES:
        raise ValueError(f"unknown loss kind {loss_cfg.kind!r}; valid: {', '.join(LOSS_KINDS)}")
    cls = MATRIX_LOSSES[loss_cfg.kind]
    return cls(**{arg: getattr(loss_cfg, key) for arg, key in cls.SETTINGS.items()})
