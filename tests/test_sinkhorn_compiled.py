"""The compiled CPU Sinkhorn iterations (`aspire.scoring._sinkhorn_cpu`, what `sinkhorn` runs on a CPU without
a tape) against the batched tensor iterations (what it runs on other devices and under autograd): the same
plans, on ragged padding, float32 and float64, and where the exp domain overflows and the log domain takes
over."""

from __future__ import annotations

import importlib

import numpy as np
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


def test_exp_start_is_the_log_domain_first_iteration():
    """`_exp_start` (one exp pass) gives the potentials of the log-domain row and column updates from G = 0, and
    the kernel absorbed at them (1 on padding)."""
    from aspire.scoring._sinkhorn_cpu import _exp_start, _log_cols, _log_rows

    cost, a, b = random_problem(40, 9, 7, seed=5, scale=3.0)  # ragged padding
    Ce, a, b = (cost / 0.05).numpy(), a.numpy(), b.numpy()
    for p in range(len(Ce)):
        F, G, K = np.empty(9), np.empty(7), np.empty((9, 7))
        assert _exp_start(Ce[p], a[p], b[p], F, G, K)
        with np.errstate(divide="ignore"):
            la, lb = np.log(a[p]), np.log(b[p])
        F0, G0 = np.empty(9), np.zeros(7)
        _log_rows(Ce[p], lb, G0, F0)
        _log_cols(Ce[p], la, F0, G0)
        ra, rb = a[p] > 0, b[p] > 0
        np.testing.assert_allclose(F[ra], F0[ra], atol=1e-12, rtol=0)
        np.testing.assert_allclose(G[rb], G0[rb], atol=1e-12, rtol=0)
        real = ra[:, None] & rb[None, :]
        np.testing.assert_allclose(K[real], np.exp(F[:, None] + G[None, :] - Ce[p])[real], rtol=1e-12, atol=0)
        assert (K[~real] == 1).all()


def test_a_column_beyond_exp_range_starts_in_the_log_domain():
    """A column farther than exp's range (in units of eps) from every row's nearest column underflows the exp
    start: that problem starts in the log domain and reaches the batched iterations' plan."""
    from aspire.scoring._sinkhorn_cpu import _exp_start

    cost, a, b = random_problem(6, 5, 4, seed=6, ragged=False)
    cost[:, :, 0] += 60.0  # 1200 eps above the rest at eps = 0.05: exp(-1200) is 0 in float64
    F, G, K = np.empty(5), np.empty(4), np.empty((5, 4))
    assert not _exp_start((cost[0] / 0.05).numpy(), a[0].numpy(), b[0].numpy(), F, G, K)
    plan_b, _, conv_b = batched(cost, a, b, 0.05, 1e-9, None)
    with torch.no_grad():
        res = sk.sinkhorn(cost, a, b, 0.05, tol=1e-9, max_iter=100_000, newton_after=None)
    assert conv_b.all() and res.converged.all()
    torch.testing.assert_close(res.plan, plan_b, atol=2e-8, rtol=0)


def test_a_column_whose_exp_start_sum_is_denormal_starts_in_the_log_domain():
    """One real row, a column 731 eps beyond its nearest: s_j = exp(-731) is a denormal, not 0, and 1 / s_j
    overflows. That problem starts in the log domain (before: infinite potentials, then a ZeroDivisionError or NaN
    plans) and reaches the exact plan: the row's mass spread as b, potentials with f_0 + g_j = C_0j."""
    from aspire.scoring._sinkhorn_cpu import _exp_start

    row = torch.tensor([34.75, 14.1875, 14.1875, 50.75])  # a hypothesis case of test_hardening's property test
    cost = torch.stack([row, torch.full((4,), 21.5), torch.full((4,), 14.9), torch.full((4,), 23.25)])[None]
    a = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    b = torch.tensor([[0.2498, 0.2504, 0.2504, 0.2494]])
    F, G, K = np.empty(4), np.empty(4), np.empty((4, 4))
    assert not _exp_start((cost[0].double() / 0.05).numpy(), a[0].double().numpy(), b[0].double().numpy(), F, G, K)
    with torch.no_grad():
        res = sk.sinkhorn(cost, a, b, 0.05, tol=1e-4, max_iter=3000, newton_after=100)
    assert res.converged.all() and torch.isfinite(res.f).all() and torch.isfinite(res.g).all()
    torch.testing.assert_close(res.plan[0, 0], b[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(res.f[0, 0] + res.g[0], cost[0, 0], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize(("dtype", "scale", "eps", "newton_after"), [
    (torch.float32, 1.0, 0.05, 100),
    (torch.float64, 2.0, 0.02, 5),  # slow problems: their plans come from the potentials the Newton tail leaves
    (torch.float64, 200.0, 0.5, None),  # the log domain takes over: plans from the potentials too
])
def test_compiled_plan_value_and_error_are_those_of_the_returned_potentials(dtype, scale, eps, newton_after):
    """On the compiled path the plan comes from the iterations (diag(u) K diag(v)) where they end in the exp
    domain, else from the float64 potentials; either way it is the plan of the returned potentials, and value and
    err are the returned plan's."""
    cost, a, b = random_problem(64, 9, 7, seed=8, dtype=dtype, scale=scale)
    tol = 1e-4 if dtype == torch.float32 else 1e-9
    with torch.no_grad():
        res = sk.sinkhorn(cost, a, b, eps, tol=tol, max_iter=100_000, newton_after=newton_after)
    assert res.converged.all() and res.plan.dtype == dtype and res.value.dtype == dtype
    if newton_after is not None and dtype == torch.float64:
        assert (res.n_iter > newton_after).any()  # some problems reached the Newton tail
    rebuilt = sk._plan(cost.double(), a.double(), b.double(), res.f.double(), res.g.double(), eps)
    torch.testing.assert_close(res.plan.double(), rebuilt, atol=2e-6 if dtype == torch.float32 else 1e-12, rtol=0)
    plan = res.plan.double()
    torch.testing.assert_close(res.value.double(), (plan * cost.double()).sum((1, 2)), atol=1e-6, rtol=1e-6)
    err = (plan.sum(2) - a.double()).abs().sum(1) + (plan.sum(1) - b.double()).abs().sum(1)
    torch.testing.assert_close(res.err.double(), err, atol=1e-7 if dtype == torch.float32 else 1e-14, rtol=1e-5)
    assert (res.err <= tol).all()
    assert (res.plan[a == 0] == 0).all() and (res.plan.transpose(1, 2)[b == 0] == 0).all()


def test_compiled_path_names_the_problems_with_bad_weights():
    cost, a, b = random_problem(5, 4, 3, seed=9, dtype=torch.float32)
    for bad in (float("nan"), -0.5, float("inf")):
        wa = a.clone()
        wa[3, 0] = bad
        with torch.no_grad(), pytest.raises(ValueError, match=r"finite and non-negative.*among them \[3\]"):
            sk.sinkhorn(cost, wa, b, 0.05)


def test_compiled_path_makes_denormal_weights_padding():
    """A float32 weight below the smallest normal carries no mass float arithmetic sees: it is padding, as the
    batched path makes it."""
    cost, a, b = random_problem(4, 5, 6, seed=10, dtype=torch.float32, ragged=False)
    a[:, 2] = 1e-42
    a = a / a.sum(1, keepdim=True)
    zeroed = torch.where(a >= torch.finfo(torch.float32).tiny, a, 0.0)
    with torch.no_grad():
        res = sk.sinkhorn(cost, a, b, 0.05, tol=1e-5)
        ref = sk.sinkhorn(cost, zeroed, b, 0.05, tol=1e-5)
    assert (res.plan[:, 2] == 0).all() and torch.isfinite(res.f).all()
    torch.testing.assert_close(res.plan, ref.plan, atol=0, rtol=0)
