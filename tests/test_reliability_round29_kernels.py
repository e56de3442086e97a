"""Round 29: the compiled CPU Sinkhorn kernels (`aspire.scoring._sinkhorn_cpu`) against independent references."""

import numpy as np
import pytest
import torch

from aspire.scoring.sinkhorn import sinkhorn

ot = pytest.importorskip("ot")


def _ragged_batch(dtype):
    """Problems of very different sizes (1 x 1, 1 x 7, 9 x 1, 3 x 40, 12 x 12) padded into one batch, padding cost
    NaN (never read as mass), squared-L2 costs of random vectors and random weights."""
    rng = np.random.default_rng(0)
    probs = []
    for n, m in [(1, 1), (1, 7), (9, 1), (3, 40), (12, 12)]:
        x, y = rng.normal(size=(n, 8)), rng.normal(size=(m, 8))
        a, b = rng.random(n) + 0.1, rng.random(m) + 0.1
        probs.append((((x[:, None] - y[None]) ** 2).sum(-1), a / a.sum(), b / b.sum()))
    N, M = max(p[0].shape[0] for p in probs), max(p[0].shape[1] for p in probs)
    cost = torch.full((len(probs), N, M), float("nan"), dtype=torch.float64)
    A, B = torch.zeros(len(probs), N, dtype=torch.float64), torch.zeros(len(probs), M, dtype=torch.float64)
    for k, (c, a, b) in enumerate(probs):
        cost[k, : len(a), : len(b)], A[k, : len(a)], B[k, : len(b)] = map(torch.from_numpy, (c, a, b))
    return probs, cost.to(dtype), A.to(dtype), B.to(dtype)


@pytest.mark.parametrize("dtype, tol, atol", [(torch.float64, 1e-7, 1e-6), (torch.float32, 1e-4, 1e-4)])
@pytest.mark.parametrize("eps", [0.05, 5.0])
def test_ragged_batch_matches_pot_and_keeps_padding_empty(dtype, tol, atol, eps):
    probs, cost, a, b = _ragged_batch(dtype)
    res = sinkhorn(cost, a, b, eps, tol=tol, max_iter=5000)
    assert bool(res.converged.all()) and float(res.err.max()) <= tol
    for k, (c, wa, wb) in enumerate(probs):
        ref = ot.bregman.sinkhorn_log(wa, wb, c, reg=eps, numItermax=100000, stopThr=1e-13)
        plan = res.plan[k].double().numpy()
        n, m = c.shape
        assert not plan[n:].any() and not plan[:, m:].any()  # no mass on padding
        np.testing.assert_allclose(plan[:n, :m], ref, atol=atol)
        np.testing.assert_allclose(float(res.value[k]), (ref * c).sum(), rtol=10 * atol)


def test_small_eps_reaches_emd_identical_sets_zero():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(6, 4)), rng.normal(size=(8, 4))
    c = ((x[:, None] - y[None]) ** 2).sum(-1)
    a, b = np.full(6, 1 / 6), np.full(8, 1 / 8)
    res = sinkhorn(*(torch.tensor(t)[None] for t in (c, a, b)), 1e-3, tol=1e-6, max_iter=5000)
    assert bool(res.converged.all())
    np.testing.assert_allclose(float(res.value[0]), ot.emd2(a, b, c), rtol=1e-5)
    z = torch.tensor(x)
    same = torch.cdist(z, z) ** 2
    w = torch.full((1, 6), 1 / 6, dtype=torch.float64)
    assert abs(float(sinkhorn(same[None], w, w.clone(), 1e-3, tol=1e-8).value[0])) < 1e-8


def test_all_denormal_weights_refused():
    """Weights whose every entry is below the dtype's smallest normal have a positive mass but, made padding, no
    point left: the compiled path returned a zero plan, value 0, converged True."""
    a = torch.tensor([[1e-39, 1e-39], [0.5, 0.5]], dtype=torch.float32)
    with pytest.raises(ValueError, match=r"among them \[0\]"):
        sinkhorn(torch.rand(2, 2, 2), a, a.clone(), 0.1)
