"""The batched Sinkhorn (every device but the CPU) solves untaped problems in float64, as the compiled CPU path does.

On an H200 (experiments/gpu_check.py, 2026-11-30) float32 iterations left problems unconverged that the CPU solved:
the OT scorers warned at tol 1e-5 and two training steps' gradients differed from the CPU's by 3.5e-4. The batched
path is forced here on CPU tensors through `sinkhorn._compiled`."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch

sk = importlib.import_module("aspire.scoring.sinkhorn")  # the module (the package exports its function by the name)


def large_cost_problems(B=16, N=9, M=7, seed=7, scale=7.0):
    """float32 problems with cost / eps up to ~1300 at eps 0.05 (L2 costs up to 65; `scale` 7)."""
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randn(B, N, 16, generator=gen) * scale, torch.randn(B, M, 16, generator=gen) * scale
    a = torch.softmax(torch.randn(B, N, generator=gen), 1)
    b = torch.softmax(torch.randn(B, M, generator=gen), 1)
    return torch.cdist(x, y), a, b


@pytest.fixture()
def batched(monkeypatch):
    monkeypatch.setattr(sk, "_compiled", lambda cost: False)


def compiled_reference(cost, a, b, **kwargs):
    return sk.sinkhorn(cost, a, b, 0.05, **kwargs)


def test_untaped_batched_solve_meets_tol_where_float32_iterations_did_not(batched):
    cost, a, b = large_cost_problems()
    with warnings.catch_warnings():
        warnings.simplefilter("error", sk.SinkhornConvergenceWarning)  # 6 of 16 warned in float32
        res = sk.sinkhorn(cost, a, b, 0.05)
    assert bool(res.converged.all()) and float(res.err.max()) <= 1e-4
    assert res.plan.dtype == res.value.dtype == res.f.dtype == res.g.dtype == torch.float32
    torch.testing.assert_close(res.plan.sum(2), a, atol=1e-4, rtol=0)
    undo = sk._compiled
    sk._compiled = lambda cost: True  # the compiled CPU path on the same problems
    try:
        ref = compiled_reference(cost, a, b)
    finally:
        sk._compiled = undo
    # two plans within tol of the marginals may differ in value by up to tol * the largest cost (6.5e-3 here)
    torch.testing.assert_close(res.value, ref.value, atol=1e-4 * float(cost.max()), rtol=0)


def test_untaped_batched_solve_with_grad_enabled_but_no_input_needing_it_is_float64_too(batched):
    """Grad mode on, no input requiring a gradient: no tape, so the same float64 solve."""
    cost, a, b = large_cost_problems(seed=8)
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", sk.SinkhornConvergenceWarning)
        res = sk.sinkhorn(cost, a, b, 0.05)
    assert bool(res.converged.all()) and not res.plan.requires_grad


def test_implicit_gradient_from_the_batched_float64_forward_matches_the_compiled_one(monkeypatch):
    """At tol 1e-6 (float32 iterations cannot write such a plan at these costs), costs up to ~19 (C / eps ~ 380);
    the implicit gradient amplifies marginal errors by C / eps, so both sides solve tightly to compare it."""
    cost, a, b = large_cost_problems(B=8, seed=9, scale=2.0)
    grads = []
    for compiled in (True, False):
        monkeypatch.setattr(sk, "_compiled", lambda c, compiled=compiled: compiled)
        leaf = cost.clone().requires_grad_(True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", sk.SinkhornConvergenceWarning)
            res = sk.sinkhorn(leaf, a, b, 0.05, grad="implicit", tol=1e-6)
        res.value.sum().backward()
        grads.append((res.value.detach(), leaf.grad))
    (v_ref, g_ref), (v_got, g_got) = grads
    torch.testing.assert_close(v_got, v_ref, atol=1e-4 * float(cost.max()), rtol=0)
    torch.testing.assert_close(g_got, g_ref, atol=1e-3, rtol=1e-3)


def test_inputs_on_two_devices_are_refused_naming_them():
    """A CPU cost with weights elsewhere reached `a.numpy()` (a TypeError naming no argument). The meta device
    stands in for a GPU here."""
    cost, a, b = large_cost_problems(B=2)
    with pytest.raises(ValueError, match=r"cost, a, b must be on one device; got cpu, meta, cpu"):
        sk.sinkhorn(cost, a.to("meta"), b, 0.05)
