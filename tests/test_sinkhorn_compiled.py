"""The compiled CPU Sinkhorn iterations (`aspire.scoring._sinkhorn_cpu`, what `sinkhorn` runs on a CPU without
a tape) against the batched tensor iterations (what it runs on other devices and under autograd): the same
plans, on ragged padding, float32 and float64, and where the exp domain overflows and the log domain takes
over."""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.test_sinkhorn import random_problem

sk = importlib.import_module("aspire.scoring.sinkhorn")  # the module (the package re-exports the function)


def batched(cost, a, b, eps, tol, newton_after):
    """`sinkhorn`'s result through the batched iterations: the tape is on, so `_solve` keeps to them (and
    leaves Newton out, as the compiled run below does)."""
    with torch.enable_grad():
        f, g, n_iter, converged = sk._solve(cost, a, b, eps, tol, 100_000, 10, newton_after)
    return sk._plan(cost, a, b, f, g, eps), n_iter, converged


@pytest.mark.parametrize(("dtype", "scale", "eps", "tol"), [
    (torch.float64, 1.0, 0.05, 1e-9),
    (torch.float32, 1.0, 0.05, 1e-4),
    (torch.float64, 200.0, 0.5, 1e-9),  # exp-domain scalings overflow: the log domain takes over
])
def test_compiled_and_batched_iterations_give_the_same_plans(dtype, scale, eps, tol):
    cost, a, b = random_problem(24, 9, 7, seed=3, dtype=dtype, scale=scale)
    plan_b, n_b, conv_b = batched(cost, a, b, eps, tol, None)
    with torch.no_grad():
        res = sk.sinkhorn(cost, a, b, eps, tol=tol, max_iter=100_000, newton_after=None)
    assert conv_b.all() and res.converged.all()
    # the compiled iterations stop at the first that meets tol, the batched ones at the next check
    assert (res.n_iter <= n_b).all() and (res.n_iter > n_b - 10).all()
    assert ((res.plan.sum(2) - a).abs().sum(1) + (res.plan.sum(1) - b).abs().sum(1)).max() <= tol
    torch.testing.assert_close(res.plan, plan_b, atol=20 * tol, rtol=0)
    assert (res.plan[a == 0] == 0).all() and (res.plan.transpose(1, 2)[b == 0] == 0).all()  # padding: no mass
