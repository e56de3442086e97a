"""Round 15, secondary scorers and losses: OT top-k's settings are checked as the OT scorer checks them, and the
multiple-negatives loss refuses a `symmetric` that is not a boolean."""

from __future__ import annotations

import math

import pytest
import torch

from aspire.losses.ranking import MultipleNegativesRankingLoss
from aspire.scoring.ot_topk import ot_top_k_dist
from aspire.scoring.scorers import OTScorer


def _problem(P: int = 6, S: int = 3, T: int = 5):
    gen = torch.Generator().manual_seed(0)
    cost = torch.rand(P, S, T, generator=gen) * 2
    return cost, torch.ones(P, S, dtype=torch.bool), torch.ones(P, T, dtype=torch.bool)


@pytest.mark.parametrize("tau", [0.0, -1.0, math.nan])
def test_ot_top_k_refuses_the_temperatures_the_ot_scorer_refuses(tau):
    # was: tau 0 or NaN gave every candidate a NaN bound and solved none (no error); -1 weighed the farthest
    # sentences most and ranked by it
    cost, q_mask, c_mask = _problem()
    with pytest.raises(ValueError, match="tau must be"):
        OTScorer(tau=tau)
    with pytest.raises(ValueError, match="tau must be"):
        ot_top_k_dist(cost, q_mask, c_mask, 2, tau=tau, eps=0.05)


def test_ot_top_k_refuses_a_nan_tolerance_and_budget():
    cost, q_mask, c_mask = _problem()
    with pytest.raises(ValueError, match="tol must be"):  # was: every distance NaN, nothing solved
        ot_top_k_dist(cost, q_mask, c_mask, 2, tau=1.0, eps=0.05, tol=math.nan)
    for budget in (0, -5, math.nan):  # was: read as one candidate a call
        with pytest.raises(ValueError, match="budget_bytes must be a number > 0"):
            ot_top_k_dist(cost, q_mask, c_mask, 2, tau=1.0, eps=0.05, budget_bytes=budget)
    for first in (2.5, 0, -3, True):  # 2.5 was a TypeError slicing the candidates
        with pytest.raises(ValueError, match="first must be an integer >= 1"):
            ot_top_k_dist(cost, q_mask, c_mask, 2, tau=1.0, eps=0.05, first=first)


def test_ot_top_k_still_ranks_with_valid_settings():
    cost, q_mask, c_mask = _problem()
    ref = ot_top_k_dist(cost, q_mask, c_mask, 2, tau=math.inf, eps=0.05)  # inf: uniform weights, as OTScorer allows
    full = OTScorer(tau=math.inf, eps=0.05)  # the scorer accepts the same
    assert full.tau == math.inf
    low = ot_top_k_dist(cost, q_mask, c_mask, 2, tau=math.inf, eps=0.05, first=1)  # below k: read as k
    assert torch.equal(torch.argsort(ref.dist)[:2], torch.argsort(low.dist)[:2])
    assert torch.isfinite(ref.dist).all()


@pytest.mark.parametrize("value", ["false", "no", 1, None])
def test_mnrl_symmetric_must_be_a_boolean(value):
    # was: "false" (a truthy string) silently trained the symmetric loss; its per-anchor losses differ
    sim = torch.tensor([[0.9, 0.1, 0.4], [0.2, 0.8, 0.7], [0.5, 0.3, 0.6]])
    mask = torch.ones(3, 3, dtype=torch.bool)
    one, _ = MultipleNegativesRankingLoss(symmetric=False)(sim, mask)
    two, _ = MultipleNegativesRankingLoss(symmetric=True)(sim, mask)
    assert not torch.allclose(one, two)  # the setting matters
    with pytest.raises(ValueError, match="loss.symmetric must be a boolean"):
        MultipleNegativesRankingLoss(symmetric=value)
