"""The batched Sinkhorn kernel against POT and geomloss, and its properties and gradients."""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
import warnings
from unittest import mock

import numpy as np
import ot
import pytest
import torch

from aspire.scoring import GRAD_MODES, SinkhornConvergenceWarning, sinkhorn

F64 = torch.float64


def random_problem(B, N, M, seed, dtype=F64, ragged=True, scale=1.0):
    """Cost (B, N, M) and weights with random padding per row (at least one real point per side)."""
    g = torch.Generator().manual_seed(seed)
    cost = scale * torch.rand(B, N, M, generator=g, dtype=dtype)
    n_real = torch.randint(1, N + 1, (B,), generator=g) if ragged else torch.full((B,), N)
    m_real = torch.randint(1, M + 1, (B,), generator=g) if ragged else torch.full((B,), M)
    a = torch.rand(B, N, generator=g, dtype=dtype) + 0.1
    b = torch.rand(B, M, generator=g, dtype=dtype) + 0.1
    a = a * (torch.arange(N) < n_real[:, None])
    b = b * (torch.arange(M) < m_real[:, None])
    return cost, a / a.sum(1, keepdim=True), b / b.sum(1, keepdim=True)


def pot_plan(cost, a, b, eps):
    """POT's log-domain Sinkhorn on the real (unpadded) part, run to convergence, padded back."""
    ra, rb = a > 0, b > 0
    plan = np.zeros(cost.shape)
    sub = ot.sinkhorn(a[ra].numpy(), b[rb].numpy(), cost[ra][:, rb].numpy(), eps, method="sinkhorn_log",
                      stopThr=1e-14, numItermax=200_000)
    plan[np.ix_(ra.numpy(), rb.numpy())] = sub
    return plan


@pytest.mark.parametrize("shape,eps,seed", [((6, 4, 7), 0.05, 0), ((5, 10, 10), 0.05, 1), ((4, 20, 13), 0.1, 2),
                                            ((3, 9, 5), 0.02, 3), ((4, 6, 6), 1.0, 4)])
def test_matches_pot_sinkhorn_log_with_ragged_padding(shape, eps, seed):
    cost, a, b = random_problem(*shape, seed=seed)
    res = sinkhorn(cost, a, b, eps, tol=1e-12, max_iter=200_000)
    assert res.converged.all()
    for i in range(shape[0]):
        ref = pot_plan(cost[i], a[i], b[i], eps)
        np.testing.assert_allclose(res.plan[i].numpy(), ref, atol=1e-5, rtol=0)
        assert abs(res.value[i].item() - (ref * cost[i].numpy()).sum()) < 1e-5
    # padding carries no mass
    assert (res.plan[a == 0] == 0).all() and (res.plan.transpose(1, 2)[b == 0] == 0).all()


def test_matches_geomloss_at_constant_eps():
    """geomloss.ot.solve_batch with its annealing replaced by a constant eps (plain symmetric Sinkhorn)."""
    import geomloss.ot
    import geomloss.ot._implementations.matrix as gm

    cost, a, b = random_problem(5, 8, 6, seed=5)
    eps = 0.05
    res = sinkhorn(cost, a, b, eps, tol=1e-12, max_iter=100_000)
    real = gm.annealing_parameters
    with mock.patch.object(gm, "annealing_parameters", lambda **kw: real(**{**kw, "scaling": 1.0})):
        ref = geomloss.ot.solve_batch(cost, reg=eps, a=a, b=b, max_iter=2000)
    torch.testing.assert_close(res.plan, ref.plan, atol=1e-8, rtol=0)
    # geomloss reports the entropic objective <C, P> + eps KL(P | a b^T) = <a, f> + <b, g>
    dual = (a * res.f).sum(1) + (b * res.g).sum(1)
    torch.testing.assert_close(dual, ref.value, atol=1e-8, rtol=0)


def test_value_approaches_emd_as_eps_shrinks():
    cost, a, b = random_problem(3, 6, 5, seed=6, ragged=False)
    exact = torch.tensor([ot.emd2(a[i].numpy(), b[i].numpy(), cost[i].numpy()) for i in range(3)], dtype=F64)
    gaps = []
    for eps in (0.3, 0.03, 0.003):
        res = sinkhorn(cost, a, b, eps, tol=1e-10, max_iter=500_000)
        gap = (res.value - exact).abs().max().item()
        assert gap <= eps * math.log(6 * 5)  # entropic bias is O(eps log(NM))
        gaps.append(gap)
    assert gaps[2] < gaps[1] < gaps[0]
    assert gaps[2] < 2e-3


def test_plans_meet_marginals_float32():
    cost, a, b = random_problem(200, 10, 10, seed=7, dtype=torch.float32, scale=2.0)
    res = sinkhorn(cost, a, b, 0.05, tol=1e-4, max_iter=5000)
    assert res.plan.dtype == torch.float32 and res.converged.all()
    assert (res.err <= 2e-4).all()  # err is of the rebuilt plan; the stop test used the iterates
    err = (res.plan.sum(2) - a).abs().sum(1) + (res.plan.sum(1) - b).abs().sum(1)
    torch.testing.assert_close(err, res.err)
    a64, b64 = a.double() / a.double().sum(1, keepdim=True), b.double() / b.double().sum(1, keepdim=True)
    ref = sinkhorn(cost.double(), a64, b64, 0.05, tol=1e-9, max_iter=100_000)
    assert (res.value.double() - ref.value).abs().max() < 1e-3


def test_symmetric_cost_gives_symmetric_value():
    cost, a, b = random_problem(6, 7, 7, seed=8)
    cost = cost + cost.transpose(1, 2)
    ab = sinkhorn(cost, a, b, 0.05, tol=1e-12, max_iter=100_000)
    ba = sinkhorn(cost, b, a, 0.05, tol=1e-12, max_iter=100_000)
    torch.testing.assert_close(ab.value, ba.value, atol=1e-9, rtol=0)
    torch.testing.assert_close(ab.plan, ba.plan.transpose(1, 2), atol=1e-9, rtol=0)


def test_permutation_cost_recovers_the_permutation():
    g = torch.Generator().manual_seed(9)
    B, n = 8, 7
    perms = torch.stack([torch.randperm(n, generator=g) for _ in range(B)])  # (B, n)
    cost = 1.0 + torch.rand(B, n, n, generator=g, dtype=F64)
    cost.scatter_(2, perms[:, :, None], 0.0)  # zero cost on i -> perm[i]
    w = torch.full((B, n), 1.0 / n, dtype=F64)
    res = sinkhorn(cost, w, w, 0.01, tol=1e-10, max_iter=10_000)
    assert (res.plan.argmax(2) == perms).all()
    assert res.value.abs().max() < 1e-6


def test_exp_domain_overflow_falls_back_to_log_domain():
    """eps far below the cost scale: exp-domain scalings would overflow; the result must match POT."""
    cost, a, b = random_problem(4, 5, 6, seed=10, scale=200.0)
    eps = 0.5
    res = sinkhorn(cost, a, b, eps, tol=1e-11, max_iter=200_000)
    assert torch.isfinite(res.plan).all() and res.converged.all()
    for i in range(4):
        np.testing.assert_allclose(res.plan[i].numpy(), pot_plan(cost[i], a[i], b[i], eps), atol=1e-6, rtol=0)
    res32 = sinkhorn(cost.float(), a.float(), b.float(), eps, tol=1e-4, max_iter=200_000)
    assert torch.isfinite(res32.plan).all() and res32.converged.all()


def test_batch_equals_problems_solved_alone():
    """Per-problem early stop: each problem's answer does not depend on its batch mates."""
    cost, a, b = random_problem(6, 8, 9, seed=11, scale=3.0)
    res = sinkhorn(cost, a, b, 0.05, tol=1e-9, max_iter=50_000)
    assert len(set(res.n_iter.tolist())) > 1  # problems stopped at different iterations
    for i in range(6):
        alone = sinkhorn(cost[i : i + 1], a[i : i + 1], b[i : i + 1], 0.05, tol=1e-9, max_iter=50_000)
        assert alone.n_iter.item() == res.n_iter[i].item()
        torch.testing.assert_close(alone.plan[0], res.plan[i], atol=1e-12, rtol=0)


def test_warns_when_stopped_unconverged():
    cost, a, b = random_problem(4, 10, 10, seed=12, scale=5.0)
    with pytest.warns(SinkhornConvergenceWarning, match=r"max_iter=5\)"):
        res = sinkhorn(cost, a, b, 0.01, tol=1e-9, max_iter=5)
    # the unconverged stop at max_iter; one that meets tol earlier stops there (compiled CPU iterations check each one)
    assert not res.converged.all() and (res.n_iter[~res.converged] == 5).all() and (res.n_iter <= 5).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sinkhorn(cost, a, b, 0.5, tol=1e-6, max_iter=10_000)


def test_rejects_bad_inputs():
    cost, a, b = random_problem(2, 3, 4, seed=13)
    with pytest.raises(ValueError, match="equal positive mass"):
        sinkhorn(cost, a, 2 * b)
    with pytest.raises(ValueError, match="equal positive mass"):
        sinkhorn(cost, torch.zeros_like(a), torch.zeros_like(b))
    with pytest.raises(ValueError, match="valid: autograd, implicit"):
        sinkhorn(cost, a, b, grad="unrolled")
    with pytest.raises(ValueError, match=r"cost \(B, N, M\)"):
        sinkhorn(cost, b, a)


def _softmax_weights(logits, mask):
    return torch.softmax(logits.masked_fill(~mask, -torch.inf), dim=1)


@pytest.mark.parametrize("grad", GRAD_MODES)
def test_gradcheck_cost_and_weights(grad):
    g = torch.Generator().manual_seed(14)
    B, N, M = 3, 3, 4
    cost = torch.rand(B, N, M, generator=g, dtype=F64).requires_grad_()
    la = torch.randn(B, N, generator=g, dtype=F64).requires_grad_()
    lb = torch.randn(B, M, generator=g, dtype=F64).requires_grad_()
    ma = torch.ones(B, N, dtype=torch.bool)
    ma[1, 2] = False
    mb = torch.ones(B, M, dtype=torch.bool)
    mb[2, 3:] = False

    def fn(cost, la, lb):  # weights stay on the simplex under finite differences
        res = sinkhorn(cost, _softmax_weights(la, ma), _softmax_weights(lb, mb), 0.2, tol=1e-12,
                       max_iter=100_000, grad=grad)
        return res.value, res.plan

    assert torch.autograd.gradcheck(fn, (cost, la, lb), atol=1e-6, rtol=1e-5)


def test_implicit_and_autograd_gradients_agree_float32():
    cost, a, b = random_problem(50, 10, 10, seed=15, dtype=torch.float32, scale=1.5)
    grads = {}
    for grad in GRAD_MODES:
        c = cost.clone().requires_grad_()
        la = a.log().clone().requires_grad_()
        res = sinkhorn(c, torch.softmax(la, 1), b, 0.05, tol=1e-6, max_iter=10_000, grad=grad)
        grads[grad] = torch.autograd.grad(res.value.sum(), (c, la))
    for g_auto, g_impl in zip(grads["autograd"], grads["implicit"]):
        assert torch.isfinite(g_impl).all()
        torch.testing.assert_close(g_impl, g_auto, atol=2e-3, rtol=0)


def test_implicit_gradient_is_finite_where_the_plan_joins_two_blocks_by_a_subnormal():
    # a fresh hypothesis run of test_hardening's property test found it: a paper's sentences at 0, 0, 29.06
    # and 24.14 against themselves at eps 0.05 give a plan whose two blocks are joined by exp(-98), a float32
    # subnormal, and float32 eigh returned NaN for the Schur complement, so every gradient was NaN
    pos = torch.tensor([0.0, 0.0, 0.96875, 0.8046875]) * 30
    grads = {}
    for grad in GRAD_MODES:
        x = pos.clone().requires_grad_()
        cost = (x[:, None] - x[None, :]).abs()[None]
        w = torch.full((1, 4), 0.25)
        res = sinkhorn(cost, w, w, 0.05, tol=1e-6, max_iter=3000, grad=grad)
        assert 0 < float(res.plan.detach()[0, 2, 3]) < torch.finfo(torch.float32).tiny  # the subnormal join
        (grads[grad],) = torch.autograd.grad(res.value.sum(), x)
    assert torch.isfinite(grads["implicit"]).all()
    torch.testing.assert_close(grads["implicit"], grads["autograd"], atol=1e-6, rtol=0)


def test_newton_tail_matches_plain_sinkhorn_in_fewer_iterations(newton_tail):
    cost, a, b = random_problem(100, 10, 10, seed=16, scale=2.0)
    plain = sinkhorn(cost, a, b, 0.05, tol=1e-9, max_iter=100_000, newton_after=None)
    newton = sinkhorn(cost, a, b, 0.05, tol=1e-9, max_iter=100_000, newton_after=50)
    assert plain.converged.all() and newton.converged.all()
    assert newton.n_iter.max() < plain.n_iter.max() // 5  # the slow tail is cut short
    assert (newton.n_iter[plain.n_iter <= 50] == plain.n_iter[plain.n_iter <= 50]).all()
    torch.testing.assert_close(newton.plan, plain.plan, atol=1e-7, rtol=0)
    assert (newton.err <= 1e-9).all()


def block_problem(dtype, shift):
    """Two blocks of points 3.0 apart (exp(-60) coupling at eps 0.05) whose masses differ by 2 shift:
    the potentials must move ~60 units to carry that mass across, and plain Sinkhorn moves them by
    about log(1 + 4 shift) a step (thousands of iterations for a small shift)."""
    cost = torch.full((4, 4), 3.0, dtype=dtype)
    cost[:2, :2] = torch.tensor([[0.0, 0.3], [0.3, 0.0]], dtype=dtype)
    cost[2:, 2:] = torch.tensor([[0.0, 0.4], [0.4, 0.1]], dtype=dtype)
    a = torch.tensor([0.25 + shift, 0.25 + shift, 0.25 - shift, 0.25 - shift], dtype=dtype)
    b = torch.full((4,), 0.25, dtype=dtype)
    return cost[None], a[None], b[None]


@pytest.fixture(params=["compiled", "batched"])
def newton_tail(request, monkeypatch):
    """Run the test with the CPU's compiled Newton tail and with the batched torch one (other devices')."""
    sk = importlib.import_module("aspire.scoring.sinkhorn")  # the module (the package re-exports the function)

    if request.param == "batched":
        monkeypatch.setattr(sk, "_newton_tail", sk._newton_tail_torch)
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_newton_tail_moves_mass_between_weakly_joined_blocks(dtype, newton_tail):
    cost, a, b = block_problem(dtype, shift=0.002)
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    with pytest.warns(SinkhornConvergenceWarning):
        plain = sinkhorn(cost, a, b, 0.05, tol=tol, max_iter=2000, newton_after=None)
    assert not plain.converged.any()  # plain Sinkhorn is still far off after 2,000 iterations
    res = sinkhorn(cost, a, b, 0.05, tol=tol, max_iter=2000, newton_after=20)
    assert res.converged.all() and res.n_iter.item() < 60 and res.err.item() <= tol
    # the 0.004 of extra mass on rows 0-1 crosses to columns 2-3
    assert abs(res.plan[0, :2, 2:].sum().item() - 0.004) < 1e-4
    ref = pot_plan(cost[0].double(), a[0].double(), b[0].double(), 0.05)
    np.testing.assert_allclose(res.plan[0].double().numpy(), ref, atol=2e-4 if dtype == torch.float32 else 1e-9, rtol=0)


def test_newton_tail_keeps_potentials_centred_when_masses_differ_by_rounding(newton_tail):
    # float32 weights whose masses differ in the last bits (as a softmax's do): the dual then has a
    # slope along the gauge direction (f + c, g - c), which a lightly damped Newton step follows a
    # long way; potentials far from 0 lose the plan's precision when it is rebuilt in float32.
    for extra in (1e-6, 5e-5):  # masses differ by float rounding (both pass the input check)
        cost, a, b = block_problem(torch.float32, shift=0.1)
        b = b.clone()
        b[0, 0] += extra
        res = sinkhorn(cost, a, b, 0.05, tol=1e-4, max_iter=2000)
        assert res.converged.all() and res.err.item() <= 1e-4, (extra, res.err.item())
        scale = float(cost.amax())
        assert res.f.abs().max() <= 2 * scale and res.g.abs().max() <= 2 * scale  # centred, not drifted


def test_compiled_newton_tail_leaves_torch_thread_count_alone():
    # numba's OpenMP pool starts on the compiled tail's first use and sets the calling thread's
    # OpenMP count, which torch shares, to NUMBA_NUM_THREADS: a fresh process shows whether torch
    # keeps the count it was started with (a training run's resume is bit-exact only if it does)
    code = """
import torch
from aspire.scoring import sinkhorn
from test_sinkhorn import block_problem
cost, a, b = block_problem(torch.float64, shift=0.002)
before = torch.get_num_threads()
res = sinkhorn(cost, a, b, 0.05, tol=1e-10, max_iter=2000, newton_after=20)
print(before, torch.get_num_threads(), bool(res.converged.all()), int(res.n_iter.max()))
"""
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "2",
           "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after, converged, n_iter = out.stdout.split()
    assert converged == "True" and int(n_iter) < 60  # converged this fast only through the Newton tail
    assert (before, after) == ("1", "1")


@pytest.mark.parametrize("N,M,scale", [(10, 10, 2.0), (20, 13, 3.0), (7, 25, 1.5)])
def test_compiled_and_batched_newton_tails_agree(N, M, scale):
    # the same damped Newton method, per problem in compiled code (CPU) and batched in torch
    sk = importlib.import_module("aspire.scoring.sinkhorn")  # the module (the package re-exports the function)

    cost, a, b = random_problem(40, N, M, seed=N + M, scale=scale)
    eps = 0.05
    Ce = cost / eps
    F = sk._log_rows(Ce, sk._safe_log(b), torch.zeros_like(b))  # one log-domain iteration as a start
    G = sk._log_cols(Ce, sk._safe_log(a), F)
    out = {}
    for name, tail in (("compiled", sk._newton_tail), ("batched", sk._newton_tail_torch)):
        Fn, Gn, err, steps, ok = tail(cost, a, b, F, G, eps, 1e-10, 200)
        assert ok.all() and (err <= 1e-10).all() and (steps >= 5).any()  # real Newton work was done
        out[name] = (sk._plan(cost, a, b, Fn * eps, Gn * eps, eps), steps)
    torch.testing.assert_close(out["compiled"][0], out["batched"][0], atol=1e-9, rtol=0)
    assert (out["compiled"][1] - out["batched"][1]).abs().max() <= 1  # same steps (but for rounding)


def test_both_newton_tails_take_their_settings_from_one_place(monkeypatch):
    # a step budget and a damping set in `_newton.NEWTON` bind the compiled (CPU) and the batched tail alike
    import dataclasses

    sk = importlib.import_module("aspire.scoring.sinkhorn")
    nt = importlib.import_module("aspire.scoring._newton")
    cost, a, b = random_problem(40, 10, 10, seed=20, scale=2.0)
    eps = 0.05
    F = sk._log_rows(cost / eps, sk._safe_log(b), torch.zeros_like(b))
    G = sk._log_cols(cost / eps, sk._safe_log(a), F)
    tails = {"compiled": nt._newton_tail, "batched": nt._newton_tail_torch}
    free = {name: tail(cost, a, b, F, G, eps, 1e-10, 200)[3] for name, tail in tails.items()}
    assert all(int(steps.max()) > 3 for steps in free.values())
    monkeypatch.setattr(nt, "NEWTON", dataclasses.replace(nt.NEWTON, max_steps=3))
    for name, tail in tails.items():
        assert int(tail(cost, a, b, F, G, eps, 1e-10, 200)[3].max()) == 3, name
    monkeypatch.setattr(nt, "NEWTON", dataclasses.replace(nt.NEWTON, c_start=1e4, c_min=1e4))  # damped to a crawl
    for name, tail in tails.items():
        slow = tail(cost, a, b, F, G, eps, 1e-10, 200)
        assert not slow[4].all() and int(slow[3].max()) == nt.NEWTON.max_steps, name
