"""The pruned OT top-k (`aspire.scoring.ot_topk`): its lower bound holds (and is exact where it must
be), and the k nearest with their distances equal those of solving every candidate."""

from __future__ import annotations

import pytest
import torch

from aspire.scoring import cross_l2_cost
from aspire.scoring.ot_topk import ot_dist_lower_bound, ot_top_k_dist
from aspire.scoring.scorers import _ot_from_cost, ot_weights, valid_minima

OT = dict(tau=1.0, eps=0.05, tol=1e-4)


def problems(n_cands=300, dim=16, seed=0, max_len=12, query_len=5, drop_query=()):
    """One query against `n_cands` candidates of 1..max_len sentences: cost (P, S, T) and masks."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(query_len, dim, generator=g)
    lengths = torch.randint(1, max_len + 1, (n_cands,), generator=g)
    c = torch.randn(n_cands, max_len, dim, generator=g)
    c_mask = torch.arange(max_len)[None, :] < lengths[:, None]
    q_mask = torch.ones(n_cands, query_len, dtype=torch.bool)
    q_mask[:, list(drop_query)] = False  # an aspect: unselected query sentences carry no mass
    cost = cross_l2_cost(q[None], c)[0]  # (P, S, T)
    return cost, q_mask, c_mask


def far_cost(cost, q_mask, c_mask):
    """The cost with +inf on invalid pairs."""
    return cost.masked_fill(~(q_mask[:, :, None] & c_mask[:, None, :]), torch.inf)


def reference(cost, q_mask, c_mask, plans=False):
    """Every candidate solved in one batch, as `OTScorer` does: distances (P,) (and plans (P, S, T))."""
    match = _ot_from_cost(cost, q_mask, c_mask, OT["tau"], OT["eps"], tol=OT["tol"])
    return (match.dist, match.plan) if plans else match.dist


def test_lower_bound_holds_and_is_exact_for_one_query_sentence():
    cost, q_mask, c_mask = problems(seed=1)
    minima = valid_minima(cost, q_mask, c_mask)
    x, y = ot_weights(cost, q_mask, c_mask, 1.0, minima)
    bound = ot_dist_lower_bound(far_cost(cost, q_mask, c_mask), x, y, minima, q_mask, c_mask)
    dist = reference(cost, q_mask, c_mask)
    # Sinkhorn's plan meets its marginals to tol (L1): its value may sit below by tol x the largest cost
    c_max = cost.masked_fill(~c_mask[:, None, :], 0.0).flatten(1).amax(1)
    assert (bound - OT["tol"] * c_max <= dist).all()
    assert (dist - bound).max() > 0.01  # a bound, not the distance
    # one query sentence: all its mass goes to the columns by their weights, <C, P> = sum_j y_j C_1j
    one = cost[:, :1]
    minima = valid_minima(one, q_mask[:, :1], c_mask)
    x, y = ot_weights(one, q_mask[:, :1], c_mask, 1.0, minima)
    torch.testing.assert_close(ot_dist_lower_bound(far_cost(one, q_mask[:, :1], c_mask), x, y, minima, q_mask[:, :1], c_mask),
                               reference(one, q_mask[:, :1], c_mask), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k, drop_query, budget", [(1, (), 1 << 28), (10, (), 1 << 28), (10, (1, 3), 1 << 28),
                                                   (10, (), 64 * 5 * 12 * 7), (50, (), 1 << 28)])
def test_top_k_equals_solving_every_candidate(k, drop_query, budget):
    cost, q_mask, c_mask = problems(seed=2, drop_query=drop_query)
    res = ot_top_k_dist(cost, q_mask, c_mask, k, first=16, budget_bytes=budget, **OT)
    dist, exact = res.dist, res.exact
    ref, ref_plan = reference(cost, q_mask, c_mask, plans=True)
    top = torch.argsort(ref, stable=True)[:k]
    assert torch.equal(torch.argsort(dist, stable=True)[:k], top)
    assert exact[top].all()
    torch.testing.assert_close(dist[exact], ref[exact], rtol=1e-5, atol=1e-6)
    left_out = ~exact
    assert left_out.sum() > len(dist) // 2  # most candidates never reach Sinkhorn
    assert (dist[left_out] <= ref[left_out]).all() and (dist[left_out] > ref[top[-1]]).all()
    torch.testing.assert_close(res.plans(top), ref_plan[top], rtol=1e-4, atol=1e-6)  # the hits' alignments
    with pytest.raises(ValueError, match="not solved"):
        res.plans(left_out.nonzero()[:1, 0])


def test_every_candidate_is_solved_when_k_covers_them():
    cost, q_mask, c_mask = problems(n_cands=40, seed=3)
    res = ot_top_k_dist(cost, q_mask, c_mask, 40, first=8, **OT)
    dist, exact = res.dist, res.exact
    assert exact.all()
    torch.testing.assert_close(dist, reference(cost, q_mask, c_mask), rtol=1e-5, atol=1e-6)


def test_half_precision_costs_are_solved_in_float32():
    cost, q_mask, c_mask = problems(n_cands=60, seed=4)
    dist = ot_top_k_dist(cost.half(), q_mask, c_mask, 5, **OT).dist
    ref = reference(cost.half().float(), q_mask, c_mask)
    assert dist.dtype == torch.float32
    assert torch.equal(torch.argsort(dist, stable=True)[:5], torch.argsort(ref, stable=True)[:5])
