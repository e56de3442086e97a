"""Round 52: `sinkhorn`'s documented handling of non-finite costs, on every path (compiled CPU, batched tensors,
autograd's tape, the implicit backward's forward), in float64 and float32."""

import importlib
import warnings
from unittest import mock

import pytest
import torch

S = importlib.import_module("aspire.scoring.sinkhorn")

PATHS = ("compiled", "batched", "autograd", "implicit", "implicit_batched")


def _run(cost, a, b, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", S.SinkhornConvergenceWarning)
        if path in ("compiled", "batched"):
            with torch.no_grad(), mock.patch.object(S, "_compiled", lambda c: path == "compiled"):
                return S.sinkhorn(cost, a, b, 0.1)
        cost = cost.clone().requires_grad_()
        with mock.patch.object(S, "_compiled", lambda c: path != "implicit_batched"):
            return S.sinkhorn(cost, a, b, 0.1, grad="autograd" if path == "autograd" else "implicit")


def _problem(dtype):
    cost = torch.rand(1, 4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(dtype)
    a = torch.full((1, 4), 0.25, dtype=dtype)
    b = torch.full((1, 3), 1 / 3, dtype=dtype)
    return cost, a, b


@pytest.mark.parametrize("dtype", (torch.float64, torch.float32))
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bad", (float("nan"), float("inf"), float("-inf")))
def test_nonfinite_cost_on_padding_is_read_as_zero(bad, path, dtype):
    cost, _, b = _problem(dtype)
    a = torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0]], dtype=dtype)
    ref = _run(cost, a, b, path)
    dirty = cost.clone()
    dirty[0, 3, :] = bad
    res = _run(dirty, a, b, path)
    assert bool(res.converged.all()) and bool(torch.isfinite(res.value).all())
    torch.testing.assert_close(res.value.detach(), ref.value.detach())
    torch.testing.assert_close(res.plan.detach(), ref.plan.detach())
    assert bool((res.plan[0, 3] == 0).all())


@pytest.mark.parametrize("dtype", (torch.float64, torch.float32))
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bad", (float("nan"), float("-inf")))
def test_nan_or_minus_inf_between_real_points_makes_results_nan(bad, path, dtype):
    cost, a, b = _problem(dtype)
    cost[0, 1, 2] = bad
    res = _run(cost, a, b, path)
    assert bool(torch.isnan(res.value).all()) and bool(torch.isnan(res.err).all())
    assert bool(torch.isnan(res.plan).any())
    assert not bool(res.converged.any())


@pytest.mark.parametrize("dtype", (torch.float64, torch.float32))
@pytest.mark.parametrize("path", PATHS)
def test_plus_inf_between_real_points_forbids_the_pair_and_value_is_nan(path, dtype):
    cost, a, b = _problem(dtype)
    cost[0, 1, 2] = float("inf")
    res = _run(cost, a, b, path)
    assert bool(torch.isnan(res.value).all())  # <cost, plan> holds inf * 0
    plan = res.plan.detach()
    assert bool(torch.isfinite(plan).all()) and float(plan[0, 1, 2]) == 0.0
    assert bool(res.converged.all()) and float(res.err) <= 1e-4
    # the plan is that of the problem with the pair forbidden: a huge finite cost there gives the same plan
    big = cost.clone()
    big[0, 1, 2] = 1e4
    ref = _run(big, a, b, path)
    torch.testing.assert_close(plan, ref.plan.detach(), atol=2e-4, rtol=0)
    # its transport cost over the allowed pairs matches POT's sinkhorn on the same forbidden pair
    ot = pytest.importorskip("ot")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # POT's own stop test at stopThr 1e-10
        pot = ot.sinkhorn(a[0].double().numpy(), b[0].double().numpy(), big[0].double().numpy(), 0.1,
                          stopThr=1e-10, numItermax=10000)
    torch.testing.assert_close(plan[0].double(), torch.from_numpy(pot), atol=2e-4, rtol=0)


def test_docstring_states_the_plus_inf_case():
    doc = S.sinkhorn.__doc__
    assert "+inf forbids that pair" in doc and "NaN or -inf" in doc
    assert "makes its problem's results NaN" not in doc  # false for +inf: the plan and err stay finite
