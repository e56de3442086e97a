"""The Sinkhorn kernel's honesty about convergence, and its paths against references (correctness sweep, round 14):
`converged` and the warning follow the error of the plan as returned (float32 plans at a tol below their precision
read as converged, silently), a plan within tol after the last allowed iteration is converged, the OT top-k takes an
integral float k, and one pair's plan is the same alone (trimmed to its sentences) as inside a ragged batch whose
padding holds NaN, on every path, against POT."""

from __future__ import annotations

import warnings

import numpy as np
import ot
import pytest
import torch

from aspire.scoring import SinkhornConvergenceWarning, sinkhorn
from aspire.scoring.ot_topk import ot_top_k_dist
from aspire.scoring.scorers import _ot_from_cost

PATHS = ["compiled", "autograd", "implicit"]


def _problems(B, N, M, seed, dtype=torch.float32, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    cost = scale * torch.rand(B, N, M, generator=g, dtype=dtype)
    a = torch.softmax(2 * torch.randn(B, N, generator=g, dtype=dtype), 1)
    b = torch.softmax(2 * torch.randn(B, M, generator=g, dtype=dtype), 1)
    return cost, a, b


def _solve(path, cost, a, b, eps, **kw):
    """sinkhorn on one path: "compiled" (CPU, no tape), "autograd" or "implicit" (cost requires a gradient)."""
    cost = cost.clone().requires_grad_(path != "compiled")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = sinkhorn(cost, a, b, eps, grad="implicit" if path == "implicit" else "autograd", **kw)
    warned = [w for w in caught if issubclass(w.category, SinkhornConvergenceWarning)]
    return res, warned


def _l1_error(res, a, b):
    plan = res.plan.detach().double()
    return (plan.sum(2) - a.double()).abs().sum(1) + (plan.sum(1) - b.double()).abs().sum(1)


# ---- converged read True where the float32 plan missed tol: its iterates met it, the plan as rounded did not ----------
@pytest.mark.parametrize("path", PATHS)
def test_converged_means_the_returned_float32_plan_meets_tol(path):
    # tol 1e-7 is below a float32 plan's rounding: before, 22 / 23 / 38 of 40 problems (compiled / implicit /
    # autograd) read as converged with err up to 2e-7 / 3e-7 / 1.2e-6 > tol, and no warning
    cost, a, b = _problems(40, 10, 9, seed=3)
    res, warned = _solve(path, cost, a, b, 0.1, tol=1e-7, max_iter=3000)
    err = _l1_error(res, a, b)
    # err is that of the plan returned (the batched paths sum it in float32, to ~1e-7)
    torch.testing.assert_close(res.err.double(), err, atol=1e-8 if path == "compiled" else 3e-7, rtol=0)
    assert torch.equal(res.converged, res.err <= 1e-7)
    assert not res.converged.all() and warned
    assert "met tol in the iterations but not in the plan as rounded to torch.float32" in str(warned[0].message)


def test_batched_float32_path_flags_a_plan_that_misses_the_default_tol():
    # the default tol, cost / eps up to 500 under autograd's tape (float32 potentials): before, every problem read as
    # converged (no warning) while one plan's marginal error was 1.05e-4 > tol = 1e-4
    cost, a, b = _problems(10, 10, 9, seed=1, scale=10.0)
    res, warned = _solve("autograd", cost, a, b, 0.02, tol=1e-4, max_iter=20_000)
    err = _l1_error(res, a, b)
    assert (res.n_iter < 20_000).all()  # every problem's iterates met tol
    assert not bool((res.converged & (err > 1e-4)).any())
    assert int((~res.converged).sum()) == 1 and len(warned) == 1


@pytest.mark.parametrize("path", PATHS)
def test_a_plan_within_tol_at_max_iter_is_converged(path):
    # eps far above the costs: one iteration gives the plan to 1e-6; before, max_iter=1 left it unconverged, with a
    # warning of a "marginal error up to 1.4e-06 > tol"
    cost, a, b = _problems(2, 3, 3, seed=0, dtype=torch.float64)
    res, warned = _solve(path, cost, a, b, 100.0, tol=1e-4, max_iter=1)
    assert (res.n_iter == 1).all() and (res.err <= 1e-4).all()
    assert res.converged.all() and not warned


def test_a_nan_cost_between_real_sentences_is_not_called_a_precision_floor():
    cost, a, b = _problems(2, 3, 3, seed=0, dtype=torch.float64)
    cost[0, 1, 1] = float("nan")
    with pytest.warns(SinkhornConvergenceWarning) as caught:
        res = sinkhorn(cost, a, b, 0.05, max_iter=300)
    assert res.converged.tolist() == [False, True]
    assert "precision" not in str(caught[0].message)


# ---- ot_top_k_dist accepted k = 5.0 (integral) and crashed slicing the candidates with it --------------------------
def test_ot_top_k_takes_an_integral_float_k():
    g = torch.Generator().manual_seed(7)
    q, c = torch.randn(4, 8, generator=g), torch.randn(30, 6, 8, generator=g)
    cost = torch.cdist(q[None].expand(30, 4, 8), c)  # (30, 4, 6)
    q_mask, c_mask = torch.ones(30, 4, dtype=torch.bool), torch.rand(30, 6, generator=g) < 0.7
    c_mask[:, 0] = True
    ref = ot_top_k_dist(cost, q_mask, c_mask, 5, tau=1.0, eps=0.05)
    got = ot_top_k_dist(cost, q_mask, c_mask, 5.0, tau=1.0, eps=0.05)
    assert torch.equal(got.solved, ref.solved) and torch.equal(got.dist, ref.dist)
    # and the k nearest are those of solving every candidate
    every = _ot_from_cost(cost, q_mask, c_mask, 1.0, 0.05).dist
    assert torch.equal(torch.sort(got.dist[got.exact]).values[:5], torch.sort(every).values[:5])


# ---- checked and correct: one pair alone, trimmed, vs in a ragged batch with NaN padding, on every path; POT ----------
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_pair_alone_equals_it_inside_a_ragged_nan_padded_batch_and_pot(path, dtype):
    sizes = [(9, 8), (1, 3), (4, 1), (1, 1), (5, 6)]  # one-sentence documents included
    g = torch.Generator().manual_seed(2)
    cost = 3 * torch.rand(len(sizes), 9, 8, generator=g, dtype=dtype)
    a, b = torch.zeros(len(sizes), 9, dtype=dtype), torch.zeros(len(sizes), 8, dtype=dtype)
    for p, (n, m) in enumerate(sizes):
        a[p, :n] = torch.softmax(torch.randn(n, generator=g, dtype=dtype), 0)
        b[p, :m] = torch.softmax(torch.randn(m, generator=g, dtype=dtype), 0)
    cost = cost.masked_fill(~((a > 0)[:, :, None] & (b > 0)[:, None, :]), float("nan"))  # never read
    eps, tol = 0.05, (1e-5 if dtype == torch.float32 else 1e-9)
    full, _ = _solve(path, cost, a, b, eps, tol=tol, max_iter=5000)
    assert full.converged.all() and torch.isfinite(full.value).all()
    for p, (n, m) in enumerate(sizes):
        alone, _ = _solve(path, cost[p : p + 1, :n, :m].contiguous(), a[p : p + 1, :n].contiguous(),
                          b[p : p + 1, :m].contiguous(), eps, tol=tol, max_iter=5000)
        # the batched paths' float32 products round differently at another batch shape
        torch.testing.assert_close(alone.plan[0].detach(), full.plan[p, :n, :m].detach(),
                                   atol=5e-7 if dtype == torch.float32 else 1e-12, rtol=0)
        assert (full.plan[p, n:] == 0).all() and (full.plan[p, :, m:] == 0).all()
        ra, rb = a[p, :n].double(), b[p, :m].double()
        ref = ot.sinkhorn(ra.numpy(), (rb * ra.sum() / rb.sum()).numpy(), cost[p, :n, :m].double().numpy(), eps,
                          method="sinkhorn_log", stopThr=1e-13, numItermax=20_000)
        np.testing.assert_allclose(full.plan[p, :n, :m].detach().double().numpy(), ref,
                                   atol=1e-5 if dtype == torch.float32 else 1e-8, rtol=0)
        assert abs(float(full.value[p].detach()) - float((ref * cost[p, :n, :m].double().numpy()).sum())) < (
            1e-5 if dtype == torch.float32 else 1e-8)
