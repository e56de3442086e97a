"""Round 46: max-passage scores against a brute-force reading of the docstring, and the pruned OT top-k
against solving every candidate (ids, order and distances), with adversarial bounds."""

from __future__ import annotations

import pytest
import torch

from aspire.scoring.ot_topk import ot_top_k_dist
from aspire.scoring.passage import maxpassage_match, pairwise_maxpassage_match
from aspire.scoring.scorers import _ot_from_cost


# ---- max passage -------------------------------------------------------------------------------------------------
def brute_passage(q, qm, c, cm, window):
    """(dist, start) by the module docstring: windows of `window` consecutive selected sentences (all of them when
    fewer), mean vectors, 1 - the best cosine with the query's mean selected vector. float64 loops."""
    qv = q[qm].double().mean(0)
    sel = c[cm].double()
    n = len(sel)
    w = min(window, n)
    best, start = -2.0, -1
    for s in range(n - w + 1):
        p = sel[s : s + w].mean(0)
        cos = float(torch.dot(qv, p) / (qv.norm() * p.norm()))
        if cos > best:
            best, start = cos, s
    return 1.0 - best, start


def random_batch(g, B, S, D, dtype=torch.float64):
    emb = torch.randn(B, S, D, generator=g, dtype=dtype)
    mask = torch.rand(B, S, generator=g) < 0.6
    mask[torch.arange(B), torch.randint(0, S, (B,), generator=g)] = True
    return emb, mask


@pytest.mark.parametrize("window", [1, 2, 3, 5, 9, 10 ** 12])
def test_maxpassage_equals_brute_force(window):
    g = torch.Generator().manual_seed(window % 1000)
    q, qm = random_batch(g, 3, 5, 4)
    c, cm = random_batch(g, 6, 7, 4)
    match = maxpassage_match(q, qm, c, cm, window)
    for i in range(3):
        for j in range(6):
            d, s = brute_passage(q[i], qm[i], c[j], cm[j], window)
            assert abs(float(match.dist[i, j]) - d) < 1e-9, (i, j)
            assert int(match.start[i, j]) == s, (i, j)
    pair = pairwise_maxpassage_match(q, qm, c[:3], cm[:3], window)
    torch.testing.assert_close(pair.dist, match.dist[torch.arange(3), torch.arange(3)])
    torch.testing.assert_close(pair.start, match.start[torch.arange(3), torch.arange(3)])


# ---- OT top-k ----------------------------------------------------------------------------------------------------
OT = dict(tau=1.0, eps=0.05, tol=1e-4)


def ot_problems(seed, P=40, S=4, T=6, shift=0.0, dups=0):
    g = torch.Generator().manual_seed(seed)
    cost = torch.rand(P, S, T, generator=g, dtype=torch.float64) * 2 + shift
    q_mask = torch.ones(P, S, dtype=torch.bool)
    q_mask[:, 1] = False  # an aspect
    c_mask = torch.arange(T)[None, :] < torch.randint(1, T + 1, (P,), generator=g)[:, None]
    for d in range(dups):  # equal candidates
        cost[2 * d + 1], c_mask[2 * d + 1] = cost[2 * d], c_mask[2 * d]
    return cost, q_mask, c_mask


def reference(cost, q_mask, c_mask, **kw):
    return _ot_from_cost(cost, q_mask, c_mask, kw.get("tau", OT["tau"]), kw.get("eps", OT["eps"]),
                         tol=kw.get("tol", OT["tol"])).dist


@pytest.mark.parametrize("seed, shift, k, dups, budget", [
    (0, 0.0, 1, 0, 1 << 28), (1, 0.0, 5, 3, 1 << 28), (2, -1.0, 5, 0, 1 << 28), (3, -3.0, 3, 4, 1 << 28),
    (4, 0.0, 7, 2, 64 * 4 * 6 * 3), (5, -2.5, 60, 0, 1 << 28), (6, 1.0, 40, 0, 64 * 4 * 6)])
def test_ot_top_k_equals_solving_every_candidate(seed, shift, k, dups, budget):
    cost, q_mask, c_mask = ot_problems(seed, shift=shift, dups=dups)
    ref = reference(cost, q_mask, c_mask)
    out = ot_top_k_dist(cost, q_mask, c_mask, k, budget_bytes=budget, **OT)
    kk = min(k, len(ref))
    ref_top = torch.topk(ref, kk, largest=False, sorted=True)
    got_top = torch.topk(out.dist, kk, largest=False, sorted=True)
    torch.testing.assert_close(got_top.values, ref_top.values, rtol=0, atol=1e-9)
    # ids: the same set (equal candidates may swap within their tie), exactly where there is no tie
    assert set(got_top.indices.tolist()) == set(ref_top.indices.tolist()) or dups
    assert out.exact[got_top.indices].all()
    unsolved = ~out.exact
    assert (out.dist[unsolved] > got_top.values[-1]).all()  # the docstring: a bound above the k-th distance
    assert (out.dist[unsolved] <= ref[unsolved] + 1e-12).all()  # ... and below the candidate's distance
    if k >= len(ref):
        assert out.exact.all()


@pytest.mark.parametrize("seed", range(6))
def test_ot_bound_never_above_the_distance_adversarial(seed):
    """Narrow gaps (near-equal candidates), negative and mixed costs, a cold tau, a small eps: the slackened bound
    must stay below every candidate's solved distance, else a true top-k one is pruned."""
    g = torch.Generator().manual_seed(100 + seed)
    P, S, T = 30, 3, 5
    base = torch.randn(1, S, T, generator=g, dtype=torch.float64)
    cost = base + 1e-6 * torch.randn(P, S, T, generator=g, dtype=torch.float64)
    cost = cost * [1.0, 10.0, 0.01, 100.0, 1.0, 1.0][seed] + [0.0, -20.0, 0.0, 50.0, -1.0, 3.0][seed]
    q_mask = torch.ones(P, S, dtype=torch.bool)
    c_mask = torch.ones(P, T, dtype=torch.bool)
    c_mask[::2, -1] = False
    tau, eps = [1.0, 0.1, 5.0, 1.0, 0.05, float("inf")][seed], [0.05, 0.5, 0.01, 1.0, 0.05, 0.05][seed]
    ref = reference(cost, q_mask, c_mask, tau=tau, eps=eps)
    for k in (1, 4, 29):
        out = ot_top_k_dist(cost, q_mask, c_mask, k, tau=tau, eps=eps, tol=1e-4, first=1, budget_bytes=64 * S * T)
        top = torch.topk(ref, k, largest=False).values[-1]
        # every candidate at the true k-th distance or nearer was solved
        assert out.exact[ref <= top].all(), (k, (ref <= top).sum(), out.exact.sum())
        torch.testing.assert_close(torch.sort(out.dist[out.exact]).values[:k], torch.sort(ref).values[:k],
                                   rtol=0, atol=1e-7 * (1 + float(cost.abs().max())))


@pytest.mark.parametrize("k", [0, -1, 2.5, float("nan"), float("inf"), None, True, "3"])
def test_bad_k_refused_naming_it(k):
    cost, q_mask, c_mask = ot_problems(0)
    with pytest.raises(ValueError, match="k"):
        ot_top_k_dist(cost, q_mask, c_mask, k, **OT)


def test_ot_top_k_refuses_integer_masks_and_cost_naming_them():
    """A 0/1 integer mask (or an integer cost) failed in torch's masked_fill / a cast with a RuntimeError naming
    neither; now a ValueError as the scorers' `_check_inputs` gives."""
    cost, q_mask, c_mask = ot_problems(0, P=4)
    with pytest.raises(ValueError, match="bool masks"):
        ot_top_k_dist(cost, q_mask.long(), c_mask, 2, **OT)
    with pytest.raises(ValueError, match="c_mask"):
        ot_top_k_dist(cost, q_mask, c_mask.long(), 2, **OT)
    with pytest.raises(ValueError, match="floating-point cost"):
        ot_top_k_dist((cost * 4).long(), q_mask, c_mask, 2, **OT)
