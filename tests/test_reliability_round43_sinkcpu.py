"""Round 43 sweep of `aspire.scoring._sinkhorn_cpu` (the compiled CPU Sinkhorn): against POT's float64
`sinkhorn_log`, each problem solved alone, padding, extreme scales and the honesty of `converged`."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
import torch

from tests.test_sinkhorn import pot_plan, random_problem

sk = importlib.import_module("aspire.scoring.sinkhorn")


def solve(cost, a, b, eps, tol, max_iter=20_000):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sk.sinkhorn(cost, a, b, eps, tol=tol, max_iter=max_iter, newton_after=None)


def test_compiled_plans_match_pot_and_do_not_depend_on_the_batch():
    cost, a, b = random_problem(8, 6, 5, seed=1)
    res = solve(cost, a, b, 0.05, 1e-8)
    assert res.converged.all()
    for p in range(8):
        np.testing.assert_allclose(res.plan[p].numpy(), pot_plan(cost[p], a[p], b[p], 0.05), atol=1e-7, rtol=0)
        alone = solve(cost[p:p + 1], a[p:p + 1], b[p:p + 1], 0.05, 1e-8)
        assert torch.equal(alone.plan[0], res.plan[p]) and alone.n_iter[0] == res.n_iter[p]
    assert (res.plan[a == 0] == 0).all() and (res.plan.transpose(1, 2)[b == 0] == 0).all()
    assert (res.f[a == 0] == 0).all() and (res.g[b == 0] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tiny_eps_huge_costs_stay_finite_and_converged_is_honest(dtype):
    cost, a, b = random_problem(6, 6, 5, seed=1, dtype=dtype, scale=1e4)
    res = solve(cost, a, b, 0.005, 1e-4, max_iter=300)
    for t in (res.plan, res.value, res.f, res.g, res.err):
        assert torch.isfinite(t).all()
    err = (res.plan.sum(2) - a).abs().sum(1) + (res.plan.sum(1) - b).abs().sum(1)
    assert not (res.converged & (err > 1e-4)).any()


def test_a_budget_too_small_is_reported_unconverged():
    cost, a, b = random_problem(8, 6, 5, seed=2)
    res = solve(cost, a, b, 0.005, 1e-9, max_iter=3)
    assert not res.converged.all()
    assert not (res.converged & (res.err > 1e-9)).any()
