"""Round 37: the compiled Newton tail (`aspire.scoring._newton_cpu`) against independent references.

References: POT's log-domain Sinkhorn (`ot.sinkhorn(..., method="sinkhorn_log")`) run to 1e-14, and the plan
rebuilt here from the returned potentials with numpy (its marginal error is what the tail must report).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aspire.scoring._newton import NEWTON, _newton_tail
from aspire.scoring._newton_cpu import newton_tail

ot = pytest.importorskip("ot")

SETTINGS = (NEWTON.halvings, NEWTON.c_start, NEWTON.c_down, NEWTON.c_up, NEWTON.c_min, NEWTON.c_max, NEWTON.mu_floor)


def _plan(Ce, a, b, F, G):
    """numpy plan exp(log a + F + log b + G - Ce) (0 on zero weights)."""
    with np.errstate(divide="ignore"):
        la, lb = np.log(a), np.log(b)
    return np.exp(la[:, None] + F[:, None] + lb[None] + G[None] - Ce)


def _l1_err(P, a, b):
    return np.abs(P.sum(1) - a).sum() + np.abs(P.sum(0) - b).sum()


@pytest.mark.parametrize("N, M, eps", [(1, 1, 0.05), (3, 5, 0.05), (5, 3, 1.0), (6, 6, 0.01), (4, 7, 10.0)])
def test_tail_matches_pot_and_reports_its_plans_error(N, M, eps):
    rng = np.random.default_rng(N * 10 + M)
    C = rng.random((N, M))
    a, b = rng.random(N) + 0.01, rng.random(M) + 0.01  # uneven marginals
    a, b = a / a.sum(), b / b.sum()
    F0, G0 = torch.zeros(1, N, dtype=torch.float64), torch.zeros(1, M, dtype=torch.float64)
    F, G, err, steps, ok = _newton_tail(torch.tensor(C)[None], torch.tensor(a)[None], torch.tensor(b)[None],
                                        F0, G0, eps, 1e-12, 40)
    assert bool(ok[0]) and 0 < int(steps[0]) <= NEWTON.max_steps
    P = _plan(C / eps, a, b, F[0].numpy(), G[0].numpy())
    assert abs(_l1_err(P, a, b) - float(err[0])) < 1e-14
    assert _l1_err(P, a, b) <= 1e-12
    ref = ot.sinkhorn(a, b, C, eps, method="sinkhorn_log", stopThr=1e-14, numItermax=200_000)
    np.testing.assert_allclose(P, ref, atol=1e-12, rtol=0)


def test_tail_on_padded_and_near_zero_weights_matches_pot():
    rng = np.random.default_rng(3)
    L, N, M, eps = 3, 5, 6, 0.03
    C = rng.random((L, N, M))
    a, b = rng.random((L, N)) + 0.05, rng.random((L, M)) + 0.05
    a[1, 3:], b[1, 4:] = 0, 0  # padding
    a[2, 0] = 1e-12  # a near-zero weight (real, not padding)
    a, b = a / a.sum(1, keepdims=True), b / b.sum(1, keepdims=True)
    F, G, err, steps, ok = _newton_tail(torch.tensor(C), torch.tensor(a), torch.tensor(b),
                                        torch.zeros(L, N, dtype=torch.float64), torch.zeros(L, M, dtype=torch.float64),
                                        eps, 1e-12, 40)
    assert ok.all()
    assert (F[1, 3:] == 0).all() and (G[1, 4:] == 0).all()  # padding keeps potential 0
    for p, (n, m) in enumerate([(N, M), (3, 4), (N, M)]):
        P = _plan(C[p, :n, :m] / eps, a[p, :n], b[p, :m], F[p, :n].numpy(), G[p, :m].numpy())
        assert abs(_l1_err(P, a[p, :n], b[p, :m]) - float(err[p])) < 1e-14
        ref = ot.sinkhorn(a[p, :n], b[p, :m], C[p, :n, :m], eps, method="sinkhorn_log", stopThr=1e-14,
                          numItermax=200_000)
        np.testing.assert_allclose(P, ref, atol=1e-12, rtol=0)


def _small_problem():
    rng = np.random.default_rng(5)
    return rng.random((1, 3, 3)) / 0.05, np.full((1, 3), 1 / 3), np.full((1, 3), 1 / 3)


def test_tail_gives_up_with_ok_false_below_the_precision_floor():
    Ce, a, b = _small_problem()
    F, G = np.zeros((1, 3)), np.zeros((1, 3))
    err, steps = newton_tail(Ce, a, b, F, G, 1e-30, 40, *SETTINGS)
    assert steps[0] == 40 and err[0] > 1e-30  # every step spent, the error reported as it is
    assert _l1_err(_plan(Ce[0], a[0], b[0], F[0], G[0]), a[0], b[0]) == pytest.approx(err[0], abs=1e-15)
    _, _, _, _, ok = _newton_tail(torch.tensor(Ce), torch.tensor(a), torch.tensor(b), torch.zeros(1, 3,
                                  dtype=torch.float64), torch.zeros(1, 3, dtype=torch.float64), 1.0, 1e-30, 40)
    assert not ok[0]


def test_tail_stops_on_nan_error_without_moving():
    Ce, a, b = _small_problem()
    Ce[0, 0, 0] = np.nan
    F, G = np.zeros((1, 3)), np.zeros((1, 3))
    err, steps = newton_tail(Ce, a, b, F, G, 1e-12, 40, *SETTINGS)
    assert np.isnan(err[0]) and steps[0] == 0 and (F == 0).all() and (G == 0).all()


def test_tail_stops_on_infinite_error_without_counting_steps():
    # potentials whose plan overflows (exp(800)): the error is inf, mu = c * inf is inf, and no step can move.
    # The loop's comment said a non-finite error stops; it ran all 40 steps (each a failed Cholesky) and charged
    # them to the problem's iteration count (sinkhorn adds them to n_iter, shrinking the Sinkhorn budget it gets back)
    Ce, a, b = _small_problem()
    F, G = np.zeros((1, 3)), np.zeros((1, 3))
    F[0, 0] = 800.0
    err, steps = newton_tail(Ce, a, b, F, G, 1e-12, 40, *SETTINGS)
    assert np.isinf(err[0])
    assert steps[0] == 0
    assert F[0, 0] == 800.0 and (F[0, 1:] == 0).all() and (G == 0).all()  # returned as it came


def test_both_tails_stop_on_an_infinite_error_without_counting_steps():
    # the batched (torch) tail had the compiled one's old loop condition: an overflowed plan's inf error ran every
    # step (each a failed factorisation) and charged them all; both now stop at once and agree
    from aspire.scoring._newton import _newton_tail_torch

    C = torch.tensor([[0.1, 0.5, 0.9], [0.4, 0.2, 0.7], [0.8, 0.6, 0.3]], dtype=torch.float64)[None]
    a = b = torch.full((1, 3), 1 / 3, dtype=torch.float64)
    F, G = torch.zeros(1, 3, dtype=torch.float64), torch.zeros(1, 3, dtype=torch.float64)
    F[0, 0] = 800.0  # scaled potentials: exp(800) overflows the plan
    for name, tail in (("compiled", _newton_tail), ("batched", _newton_tail_torch)):
        Fn, Gn, err, steps, ok = tail(C, a, b, F, G, 0.05, 1e-12, 40)
        assert torch.isinf(err).all() and int(steps[0]) == 0 and not bool(ok[0]), name
        assert torch.equal(Fn, F) and torch.equal(Gn, G), name
