"""Round 45: the Newton tail (`aspire.scoring._newton`, `_newton_cpu`) through `sinkhorn`'s public entry.

Reference: POT's log-domain Sinkhorn (`ot.bregman.sinkhorn_log`, float64, stopThr 1e-13) on hard problems
(eps 0.01, cost / eps up to ~500, ragged padding), and plain Sinkhorn (`newton_after=None`) for the iteration count.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from aspire.scoring._newton import _newton_tail, _newton_tail_torch
from aspire.scoring.sinkhorn import sinkhorn

ot = pytest.importorskip("ot")


def _problems():
    rng = np.random.default_rng(0)
    B, N, M = 3, 6, 7
    C = rng.random((B, N, M)) * 3
    C[2] *= 1.7
    a, b = rng.random((B, N)) + 0.05, rng.random((B, M)) + 0.05
    a[1, 4:], b[1, 5:] = 0, 0  # ragged padding
    return C, a / a.sum(1, keepdims=True), b / b.sum(1, keepdims=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_newton_tail_matches_pot_faster_than_plain_sinkhorn_and_leaves_padding_empty(dtype):
    C, a, b = _problems()
    eps, tol = 0.01, 1e-6
    args = [torch.tensor(x, dtype=dtype) for x in (C, a, b)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sinkhorn(*args, eps, tol=tol, max_iter=20000, newton_after=50)
        plain = sinkhorn(*args, eps, tol=tol, max_iter=20000, newton_after=None)
    assert res.converged.all() and (res.err <= tol).all()
    assert int(res.n_iter[0]) < 100 < 600 < int(plain.n_iter[0])  # 62 against 627 seen
    assert int(res.n_iter[2]) < 100 < 1500 < int(plain.n_iter[2])  # 65 against 1819 seen
    for i in range(3):
        n, m = int((a[i] > 0).sum()), int((b[i] > 0).sum())
        ref = ot.bregman.sinkhorn_log(a[i][:n], b[i][:m], C[i][:n, :m], eps, stopThr=1e-13, numItermax=200_000)
        P = res.plan[i].double().numpy()
        assert np.abs(P[:n, :m] - ref).max() < 1e-6
        assert P[n:].sum() == 0 and P[:, m:].sum() == 0
        assert abs(float(res.value[i]) - float((ref * C[i][:n, :m]).sum())) < 1e-6


def test_compiled_and_batched_tails_agree():
    C, a, b = _problems()
    Ct, at, bt = torch.tensor(C), torch.tensor(a), torch.tensor(b)
    F0, G0 = torch.zeros(3, 6, dtype=torch.float64), torch.zeros(3, 7, dtype=torch.float64)
    x = _newton_tail(Ct, at, bt, F0, G0, 0.01, 1e-9, 40)
    y = _newton_tail_torch(Ct, at, bt, F0, G0, 0.01, 1e-9, 40)
    assert x[4].all() and y[4].all() and torch.equal(x[3], y[3])
    assert (x[2] - y[2]).abs().max() < 1e-12 and (x[2] <= 1e-9).all()
    # potentials may differ along the gauge (F + s, G - s); the plans F_i + G_j may not
    sx, sy = x[0][:, :, None] + x[1][:, None], y[0][:, :, None] + y[1][:, None]
    real = (at[:, :, None] > 0) & (bt[:, None] > 0)
    assert (sx - sy)[real].abs().max() < 1e-8
