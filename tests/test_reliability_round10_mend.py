"""Round 10, items earlier sweeps saw and left: padded costs that are not finite, ..."""

import importlib
import warnings

import pytest
import torch

from aspire.scoring.sinkhorn import sinkhorn


def _padded_problems(dtype=torch.float64):
    torch.manual_seed(0)
    B, N, M = 16, 7, 9
    cost = torch.rand(B, N, M, dtype=dtype)
    a, b = torch.rand(B, N, dtype=dtype), torch.rand(B, M, dtype=dtype)
    a[:8, 5:] = 0  # half the problems have padded rows, every other one padded columns
    b[::2, 6:] = 0
    a, b = a / a.sum(1, keepdim=True), b / b.sum(1, keepdim=True)
    pad = (a <= 0)[:, :, None] | (b <= 0)[:, None, :]
    return cost, a, b, pad


@pytest.mark.parametrize("fill", [float("nan"), float("inf"), -float("inf")])
def test_sinkhorn_reads_non_finite_costs_on_padding_as_zero(fill):
    cost, a, b, pad = _padded_problems()
    ref = sinkhorn(cost, a, b, 0.05)
    got = sinkhorn(cost.masked_fill(pad, fill), a, b, 0.05)  # was NaN for every padded problem
    assert torch.equal(got.value, ref.value) and torch.equal(got.plan, ref.plan)
    assert torch.equal(got.f, ref.f) and bool(got.converged.all())
    half = sinkhorn(cost.masked_fill(pad, fill).half(), a.half(), b.half(), 0.05)
    assert torch.allclose(half.value.double(), ref.value, atol=1e-3)


@pytest.mark.parametrize("grad", ["autograd", "implicit"])
def test_sinkhorn_gradients_stay_finite_with_non_finite_padded_costs(grad):
    cost, a, b, pad = _padded_problems()
    clean = cost.clone().requires_grad_()
    sinkhorn(clean, a, b, 0.05, grad=grad).value.sum().backward()
    dirty = cost.masked_fill(pad, float("nan")).requires_grad_()
    value = sinkhorn(dirty, a, b, 0.05, grad=grad).value
    value.sum().backward()
    assert torch.isfinite(value).all() and torch.isfinite(dirty.grad).all()
    assert torch.equal(dirty.grad, clean.grad) and float(dirty.grad[pad].abs().max()) == 0.0


def test_sinkhorn_a_non_finite_cost_between_real_sentences_stays_nan():
    cost, a, b, _ = _padded_problems()
    cost[1, 0, 0] = float("nan")  # a real row and column of problem 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = sinkhorn(cost, a, b, 0.05).value
    assert torch.isnan(value[1]) and torch.isfinite(value[torch.arange(16) != 1]).all()


@pytest.mark.parametrize("spent", [0, 5])
def test_batched_solve_keeps_max_iter_for_a_problem_newton_gave_up_on(spent, monkeypatch):
    # the batched path (other devices than a CPU) handed a problem Newton gave up on back to a
    # lockstep chunk of check_every iterations, past max_iter
    sk = importlib.import_module("aspire.scoring.sinkhorn")  # the module (the package re-exports the function)

    def gives_up(cost, a, b, F, G, eps, tol, max_steps):  # spends all but `spent` of its budget, then gives up
        n = len(a)
        return F, G, torch.ones(n, dtype=F.dtype), torch.full((n,), max_steps - spent), torch.zeros(n, dtype=torch.bool)

    monkeypatch.setattr(sk, "_newton_tail", gives_up)
    torch.manual_seed(1)
    cost = torch.rand(3, 6, 5, dtype=torch.float64)
    a, b = torch.full((3, 6), 1 / 6, dtype=torch.float64), torch.full((3, 5), 1 / 5, dtype=torch.float64)
    with torch.no_grad():
        batched = sk._solve_batched(cost, a, b, 0.05, 1e-14, 40, 10, 2)
        compiled = sk._solve_cpu(cost, a, b, 0.05, 1e-14, 40, 10, 2)
    assert batched[2].tolist() == [40, 40, 40]  # was 45 and 50: 2 Sinkhorn, 38 - spent Newton, then 10 more
    assert compiled[2].tolist() == [40, 40, 40] and not batched[3].any()
