"""Round 25: the OT kernel's backward paths (`aspire.scoring._implicit`, the Newton tail `aspire.scoring._newton` /
`_newton_cpu`) against independent references: finite differences in float64, the taped (unrolled) gradient at a
tight tolerance, POT's `sinkhorn2` / `emd2` for the value, and the marginals recomputed from the Newton tail's
potentials."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
import torch

from aspire.scoring._implicit import _safe_log
from aspire.scoring._newton import _dual_terms, _newton_tail, _newton_tail_torch, _tail_inputs
from aspire.scoring.sinkhorn import SinkhornConvergenceWarning, sinkhorn

F64 = torch.float64


def padded_problem(B=4, N=5, M=6, seed=1, scale=1.0, dtype=F64):
    """Random costs in [0, scale) and positive weights, with padded rows / columns in problems 0, 1 and 2 (mod B)."""
    g = torch.Generator().manual_seed(seed)
    cost = torch.rand(B, N, M, generator=g, dtype=F64) * scale
    a = torch.rand(B, N, generator=g, dtype=F64) + 0.2
    b = torch.rand(B, M, generator=g, dtype=F64) + 0.2
    a[0, -1] = 0
    b[1 % B, -2:] = 0
    a[2 % B, -2:] = 0
    b[2 % B, -1] = 0
    a, b = a / a.sum(1, keepdim=True), b / b.sum(1, keepdim=True)
    return cost.to(dtype), a.to(dtype), b.to(dtype)


def _gauge_fixed(ga, gb, a, b):
    """(ga, gb) with the per-problem mean of ga over real rows moved to gb: the weights' gradients are defined up to
    (c, -c) (equal masses), so two correct gradients agree after this."""
    ma = (a > 0).to(ga.dtype)
    s = (ga * ma).sum(1, keepdim=True) / ma.sum(1, keepdim=True)
    return (ga - s) * ma, (gb + s) * (b > 0)


def _grads(mode, cost, a, b, eps, tol, W, **kw):
    c, aa, bb = (t.clone().requires_grad_() for t in (cost, a, b))
    res = sinkhorn(c, aa, bb, eps, tol=tol, max_iter=100_000, grad=mode, **kw)
    gc, ga, gb = torch.autograd.grad(res.value.sum() + (res.plan * W).sum(), (c, aa, bb))
    return (res, gc, *_gauge_fixed(ga, gb, a, b))


@pytest.fixture(params=["compiled", "batched"])
def forward(request, monkeypatch):
    """The implicit path's untaped forward: compiled on the CPU, or the batched float64 one (other devices')."""
    if request.param == "batched":
        sk = importlib.import_module("aspire.scoring.sinkhorn")
        monkeypatch.setattr(sk, "_compiled", lambda cost: False)
    return request.param


# ---- the fix: a non-finite problem in a batch -----------------------------------------------------------------
def test_implicit_backward_of_a_batch_with_a_nan_cost_gives_that_problem_nan_and_the_others_theirs(forward):
    # was: the NaN plan of the problem with a NaN cost between real sentences made `eigh` raise (_LinAlgError "failed
    # to converge"), failing the whole batch's backward; the taped path gives NaN to that problem only, as
    # `sinkhorn`'s docstring promises ("a non-finite entry between two real sentences makes its problem's results NaN")
    cost, a, b = padded_problem(B=3, N=4, M=5, seed=2)
    cost[1, 0, 1] = float("nan")
    c = cost.clone().requires_grad_()
    with pytest.warns(SinkhornConvergenceWarning):
        res = sinkhorn(c, a, b, 0.1, tol=1e-10, grad="implicit")
    (gc,) = torch.autograd.grad(res.value.sum(), c)
    real = (a[1] > 0)[:, None] & (b[1] > 0)[None, :]
    assert torch.isnan(gc[1][real]).all() and (gc[1][~real] == 0).all()  # padding keeps its zero gradient
    keep = torch.tensor([0, 2])
    c2 = cost[keep].clone().requires_grad_()
    res2 = sinkhorn(c2, a[keep], b[keep], 0.1, tol=1e-10, grad="implicit")
    (gc2,) = torch.autograd.grad(res2.value.sum(), c2)
    torch.testing.assert_close(gc[keep], gc2, atol=1e-12, rtol=0)


# ---- checks against references (correct before this round; they pin the measured agreement) --------------------
@pytest.mark.parametrize("eps,scale", [(0.05, 1.0), (0.01, 1.0), (0.1, 10.0), (1.0, 0.1)])
def test_implicit_jacobian_matches_central_differences_in_float64(eps, scale):
    # measured: |J_implicit - J_fd| <= 2.6e-8 for |J| up to 1.5 (value and plan-weighted cost, w.r.t. the cost and the
    # logits of softmax weights with padding)
    g = torch.Generator().manual_seed(5)
    B, N, M = 3, 3, 4
    cost = torch.rand(B, N, M, generator=g, dtype=F64) * scale
    la, lb = torch.randn(B, N, generator=g, dtype=F64), torch.randn(B, M, generator=g, dtype=F64)
    ma = torch.ones(B, N, dtype=torch.bool)
    ma[1, 2] = False
    mb = torch.ones(B, M, dtype=torch.bool)
    mb[2, 2:] = False
    W = torch.randn(B, N, M, generator=g, dtype=F64)

    def fn(c, la, lb):
        wa = torch.softmax(la.masked_fill(~ma, -torch.inf), 1)
        wb = torch.softmax(lb.masked_fill(~mb, -torch.inf), 1)
        res = sinkhorn(c, wa, wb, eps, tol=1e-13, max_iter=200_000, grad="implicit")
        return torch.stack([res.value, (res.plan * W).sum((1, 2))])  # (2, B)

    inputs = (cost, la, lb)
    jac = torch.autograd.functional.jacobian(fn, inputs)
    h = 1e-6
    with torch.no_grad():
        for k, x in enumerate(inputs):
            flat = x.view(-1)
            for e in range(flat.numel()):
                old = float(flat[e])
                flat[e] = old + h
                plus = fn(*inputs)
                flat[e] = old - h
                minus = fn(*inputs)
                flat[e] = old
                fd = (plus - minus) / (2 * h)
                torch.testing.assert_close(jac[k].reshape(2, B, -1)[:, :, e], fd, atol=1e-6 * max(1.0, scale),
                                           rtol=1e-5)


@pytest.mark.parametrize("eps,scale", [(0.5, 1.0), (0.05, 1.5), (0.01, 1.0), (0.1, 10.0)])
def test_implicit_gradient_equals_the_taped_one_at_tight_tol_with_zero_gradient_on_padding(eps, scale, forward):
    # measured (float64, tol 1e-12): |dC| <= 2.3e-10, |da|, |db| <= 1.5e-8 (C / eps = 100) after the gauge fix
    cost, a, b = padded_problem(scale=scale)
    W = torch.randn(cost.shape, generator=torch.Generator().manual_seed(3), dtype=F64)
    ra, gca, gaa, gba = _grads("autograd", cost, a, b, eps, 1e-12, W)
    ri, gci, gai, gbi = _grads("implicit", cost, a, b, eps, 1e-12, W)
    assert ra.converged.all() and ri.converged.all()
    torch.testing.assert_close(gci, gca, atol=1e-8, rtol=0)
    torch.testing.assert_close(gai, gaa, atol=1e-6, rtol=0)
    torch.testing.assert_close(gbi, gba, atol=1e-6, rtol=0)
    pad = (a == 0)[:, :, None] | (b == 0)[:, None, :]
    assert (gci[pad] == 0).all() and (gai[a == 0] == 0).all() and (gbi[b == 0] == 0).all()


@pytest.mark.parametrize("eps", [0.05, 0.01, 0.002])
def test_float32_implicit_gradient_is_within_its_tolerance_of_float64(eps):
    # measured at tol 1e-6 (10 x 12, 40 problems): |dC| <= 1.7e-4 for |dC| up to 10.7; at the default tol 1e-4 the
    # forward's marginal error dominates (up to 4.9e-2 at eps 0.002: C / eps = 500 amplifies it)
    cost, a, b = padded_problem(B=20, N=10, M=12, seed=7)
    W = torch.randn(cost.shape, generator=torch.Generator().manual_seed(3), dtype=F64)
    _, gc64, ga64, _ = _grads("implicit", cost, a, b, eps, 1e-11, W)
    _, gc32, ga32, _ = _grads("implicit", cost.float(), a.float(), b.float(), eps, 1e-6, W.float())
    assert torch.isfinite(gc32).all()
    torch.testing.assert_close(gc32.double(), gc64, atol=1e-3 * max(1.0, float(gc64.abs().max())), rtol=0)
    torch.testing.assert_close(ga32.double(), ga64, atol=1e-3 * max(1.0, float(ga64.abs().max())), rtol=0)


def test_value_matches_pot():
    ot = pytest.importorskip("ot")
    for eps, scale in [(0.5, 1.0), (0.05, 1.5), (0.02, 1.0)]:  # measured: |value - POT| <= 1.1e-13
        cost, a, b = padded_problem(scale=scale)
        res = sinkhorn(cost, a, b, eps, tol=1e-12, max_iter=100_000)
        for i in range(len(cost)):
            ma, mb = a[i] > 0, b[i] > 0
            C = cost[i][ma][:, mb].numpy()
            ref = ot.sinkhorn2(a[i][ma].numpy(), b[i][mb].numpy(), C, eps, method="sinkhorn_log", stopThr=1e-14,
                               numItermax=100_000)
            assert abs(float(ref) - float(res.value[i])) < 1e-10
    cost, a, b = padded_problem()
    res = sinkhorn(cost, a, b, 1e-3, tol=1e-10, max_iter=100_000)  # measured: |value - emd2| <= 5.5e-8
    for i in range(len(cost)):
        ma, mb = a[i] > 0, b[i] > 0
        ref = ot.emd2(a[i][ma].numpy(), b[i][mb].numpy(), cost[i][ma][:, mb].numpy())
        assert abs(float(ref) - float(res.value[i])) < 1e-6


def test_implicit_gradient_of_an_unconverged_problem_is_warned_about(forward):
    cost, a, b = padded_problem(B=2, N=3, M=4, seed=0)
    c = cost.clone().requires_grad_()
    with pytest.warns(SinkhornConvergenceWarning, match="problems stopped unconverged"):
        res = sinkhorn(c, a, b, 0.005, max_iter=3, newton_after=1, grad="implicit")
    assert not res.converged.all()
    torch.autograd.grad(res.value.sum(), c)  # a gradient comes back, from a result the caller was warned about


# ---- the Newton tail ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps,start", [(0.05, "zero"), (0.01, "zero"), (0.02, "random"), (0.005, "zero")])
def test_newton_tails_meet_the_marginals_they_report_and_agree(eps, start):
    g = torch.Generator().manual_seed(0)
    B, N, M = 6, 5, 7
    cost = torch.rand(B, N, M, generator=g, dtype=F64) * 2.0
    a = torch.rand(B, N, generator=g, dtype=F64) + 0.1
    b = torch.rand(B, M, generator=g, dtype=F64) + 0.1
    a[0, -1] = 0
    b[1, -2:] = 0
    a[2, :2] = 0
    b[3, 0] = 0
    a, b = a / a.sum(1, keepdim=True), b / b.sum(1, keepdim=True)
    F = torch.zeros(B, N, dtype=F64) if start == "zero" else torch.randn(B, N, generator=g, dtype=F64)
    G = torch.zeros(B, M, dtype=F64) if start == "zero" else torch.randn(B, M, generator=g, dtype=F64)
    F, G = torch.where(a > 0, F, 123.0), torch.where(b > 0, G, -77.0)  # anything on padding
    tol = 1e-9
    plans = []
    for tail in (_newton_tail, _newton_tail_torch):
        Fn, Gn, err, steps, ok = tail(cost, a, b, F.clone(), G.clone(), eps, tol, 40)
        Ce, a64, b64, F64_, G64_ = _tail_inputs(cost, a, b, Fn, Gn, eps, F64)
        P, r, c, e, _ = _dual_terms(Ce, _safe_log(a64), _safe_log(b64), a64, b64, F64_, G64_)
        torch.testing.assert_close(e, err, atol=1e-13, rtol=0)  # the error reported is the plan's
        assert ok.all() and (err <= tol).all() and (steps <= 40).all()
        assert (Fn[a == 0] == 0).all() and (Gn[b == 0] == 0).all()
        plans.append(P)
    torch.testing.assert_close(plans[0], plans[1], atol=1e-9, rtol=0)


def test_the_solver_with_a_newton_tail_gives_the_same_plan_and_gradient_as_without():
    cost, a, b = padded_problem(B=8, N=6, M=6, seed=4, scale=2.0)
    W = torch.randn(cost.shape, generator=torch.Generator().manual_seed(3), dtype=F64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rn, gcn, gan, _ = _grads("implicit", cost, a, b, 0.01, 1e-11, W, newton_after=5)
        rs, gcs, gas, _ = _grads("implicit", cost, a, b, 0.01, 1e-11, W, newton_after=None)
    assert (rn.n_iter < rs.n_iter).any()  # the tail ran
    torch.testing.assert_close(rn.plan, rs.plan, atol=1e-10, rtol=0)
    torch.testing.assert_close(gcn, gcs, atol=1e-7, rtol=0)
    torch.testing.assert_close(gan, gas, atol=1e-6, rtol=0)
    assert np.isfinite(gcn.numpy()).all()
