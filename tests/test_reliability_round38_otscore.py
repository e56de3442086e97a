"""Round 38: the OT top-k, chunked and max-passage scoring checked against brute force."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aspire.batch import DocBatch
from aspire.scoring import get_scorer
from aspire.scoring.chunked import score_chunked
from aspire.scoring.ot_topk import ot_dist_lower_bound, ot_top_k_dist
from aspire.scoring.passage import maxpassage_match
from aspire.scoring.scorers import _ot_from_cost, ot_weights


def _brute(cost, q_mask, c_mask, tau, eps):
    """Every candidate solved at once, as `OTScorer` does: distances (P,)."""
    invalid = ~(q_mask[:, :, None] & c_mask[:, None, :])
    return _ot_from_cost(cost.masked_fill(invalid, 0.0), q_mask, c_mask, tau, eps, tol=1e-4).dist


# ---- a negative cost: the bound's slack used max C alone, so all-negative costs lifted the bound above the OT value
# and pruned a nearer candidate (top-1 was candidate 0 at -0.99995 where candidate 1 is at -1.0) --------------------
def test_ot_top_k_negative_costs_keep_the_nearest():
    cost = torch.tensor([[[0.0, -1.9999]], [[-1.0, -1.0]]])  # (2, 1, 2): one query sentence, the plan is forced
    q_mask = torch.ones(2, 1, dtype=torch.bool)
    c_mask = torch.ones(2, 2, dtype=torch.bool)
    ref = _brute(cost, q_mask, c_mask, float("inf"), 0.05)  # -0.99995, -1.0
    res = ot_top_k_dist(cost, q_mask, c_mask, 1, tau=float("inf"), eps=0.05, first=1)
    assert int(torch.argmin(ref)) == 1
    assert bool(res.exact[1]), "the nearest candidate was pruned"
    assert int(torch.argmin(res.dist)) == 1
    assert torch.allclose(res.dist[1], ref[1], atol=1e-6)


def test_ot_top_k_matches_brute_force_on_random_problems():
    g = torch.Generator().manual_seed(0)
    for trial in range(12):
        P, S, T = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((1, 30), (1, 5), (1, 7)))
        cost = torch.cdist(torch.randn(S, 4, generator=g)[None].expand(P, -1, -1), torch.randn(P, T, 4, generator=g))
        if trial % 2:
            cost = cost - 3.0  # costs of either sign
        q_mask = torch.rand(P, S, generator=g) < 0.7
        q_mask[:, 0] = True
        c_mask = torch.rand(P, T, generator=g) < 0.7
        c_mask[:, -1] = True
        cost = cost.masked_fill(~(q_mask[:, :, None] & c_mask[:, None, :]), float("nan"))  # never read
        tau, eps = (0.1, 1.0, float("inf"))[trial % 3], (0.05, 0.5, 0.02)[trial % 3]
        ref = _brute(cost, q_mask, c_mask, tau, eps)
        far = cost.masked_fill(~(q_mask[:, :, None] & c_mask[:, None, :]), torch.inf)
        minima = far.amin(-1), far.amin(-2)
        x, y = ot_weights(cost, q_mask, c_mask, tau, minima)
        assert bool((ot_dist_lower_bound(far, x, y, minima, q_mask, c_mask) <= ref + 1e-3).all())
        k = int(torch.randint(1, P + 3, (1,), generator=g))  # k above P too: every candidate solved
        res = ot_top_k_dist(cost, q_mask, c_mask, k, tau=tau, eps=eps, budget_bytes=(64, 3000, 1e9)[trial % 3])
        kk = min(k, P)
        top = torch.argsort(ref, stable=True)[:kk]
        got = torch.argsort(res.dist, stable=True)[:kk]
        assert bool(res.exact[got].all())
        assert torch.allclose(res.dist[got], ref[top], atol=1e-5)
        assert bool((res.dist[~res.exact] <= ref[~res.exact] + 1e-5).all())  # bounds, never above the value
        if k >= P:
            assert bool(res.exact.all())


def _batch(B, S, g, D=6):
    mask = torch.rand(B, S, generator=g) < 0.6
    mask[torch.arange(B), torch.randint(0, S, (B,), generator=g)] = True
    emb = torch.randn(B, S, D, generator=g) * mask[..., None]
    return DocBatch(emb, mask, [f"p{i}" for i in range(B)], [["s"] * S for _ in range(B)], torch.randn(B, D, generator=g))


def test_score_chunked_equals_one_call_for_every_budget():
    g = torch.Generator().manual_seed(1)
    q, c = _batch(5, 5, g), _batch(9, 8, g)
    for name in ("minl2", "ot", "attention", "maxpassage"):
        scorer = get_scorer(name)
        full = scorer.score(q, c)
        for budget in (1, 64, 700, 5000, float("inf")):  # 1: below a single pair's cells
            assert torch.allclose(score_chunked(scorer, q, c, budget_bytes=budget), full, atol=1e-4), (name, budget)


def test_maxpassage_equals_a_hand_loop_over_windows():
    g = torch.Generator().manual_seed(2)
    q, c = _batch(3, 4, g), _batch(5, 7, g)
    for window in (1, 2, 3, 7, 50):
        match = maxpassage_match(q.emb, q.mask, c.emb, c.mask, window)
        for i in range(3):
            qv = q.emb[i][q.mask[i]].double().mean(0)
            for j in range(5):
                sel = c.emb[j][c.mask[j]].double()
                w = min(window, len(sel))
                cos = [float(F.cosine_similarity(qv, sel[s:s + w].mean(0), dim=0)) for s in range(len(sel) - w + 1)]
                best = max(range(len(cos)), key=cos.__getitem__)
                assert abs(float(match.dist[i, j]) - (1 - cos[best])) < 1e-5
                assert int(match.start[i, j]) == best
        assert torch.allclose(get_scorer("maxpassage", window=window).score(q, c), -match.dist, atol=1e-6)
