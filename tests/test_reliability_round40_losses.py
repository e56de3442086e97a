"""Round 40: the matrix losses against float64 loops of their published formulas and torch's cross_entropy, and
the cross-encoder's mix against a hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aspire.losses.bce import PairBCELoss
from aspire.losses.multi_similarity import MultiSimilarityLoss
from aspire.losses.ranking import MultipleNegativesRankingLoss
from aspire.scoring.crossencoder import mix_rerank


def _case(B=3, K=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    sim = torch.rand(B, K, generator=g, dtype=torch.float64) * 2 - 1
    mask = torch.rand(B, K, generator=g) > 0.3
    mask[0, :] = False  # an all-masked row
    mask[1, 0] = True
    return sim, mask


def _allowed(mask, b):
    return [k for k in range(mask.shape[1]) if k == b or bool(mask[b, k])]


def test_mnrl_equals_cross_entropy_with_masks_and_k_above_b():
    sim, mask = _case()
    for scale in (1.0, 20.0, 0.05):
        loss, has = MultipleNegativesRankingLoss(scale=scale)(sim, mask)
        for b in range(sim.shape[0]):
            cols = _allowed(mask, b)
            ref = F.cross_entropy(scale * sim[b, cols][None], torch.tensor([cols.index(b)]))
            assert loss[b].item() == pytest.approx(ref.item(), abs=1e-9)
            assert bool(has[b]) == (len(cols) > 1)
    assert loss[0].item() == 0.0 and not has[0]  # nothing to rank against: zero, flagged


def test_mnrl_symmetric_and_term_scale_by_hand():
    sim, mask = _case(B=3, K=4, seed=1)
    m = MultipleNegativesRankingLoss(scale=5.0, symmetric=True, term_scale={"minl2": 2.0})
    for term, s in ((None, 5.0), ("minl2", 2.0), ("other", 5.0)):
        loss, has = m(sim, mask, term=term)
        for b in range(3):
            fwd = _allowed(mask, b)
            back = [a for a in range(3) if a == b or bool(mask[a, b])]
            lf = math.log(sum(math.exp(s * sim[b, k].item()) for k in fwd))
            lb = math.log(sum(math.exp(s * sim[a, b].item()) for a in back))
            assert loss[b].item() == pytest.approx((lf + lb) / 2 - s * sim[b, b].item(), abs=1e-9)
            assert bool(has[b]) == (len(fwd) > 1 or len(back) > 1)


def test_mnrl_distillation_is_kl_by_hand_and_gradients_finite():
    sim, mask = _case(B=3, K=5, seed=2)
    sim = sim.clone().requires_grad_(True)
    teacher = torch.rand(3, 5, dtype=torch.float64)
    teacher[2, 2] = float("nan")  # row 2 unscored: ranking loss
    teacher[1, 3] = float("nan")
    m = MultipleNegativesRankingLoss(scale=3.0, teacher_scale=7.0)
    loss, has = m(sim, mask, teacher=teacher)
    plain, _ = m(sim, mask)
    for b in range(3):
        if b == 2:
            assert loss[b].item() == pytest.approx(plain[b].item())
            continue
        cols = [k for k in _allowed(mask, b) if not math.isnan(teacher[b, k].item())]
        t = np.array([7.0 * teacher[b, k].item() for k in cols])
        s = np.array([3.0 * sim[b, k].item() for k in cols])
        p = np.exp(t - t.max()) / np.exp(t - t.max()).sum()
        q = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        assert loss[b].item() == pytest.approx(float((p * np.log(p / q)).sum()), abs=1e-9)
        assert bool(has[b]) == (len(cols) > 1)
    loss.sum().backward()
    assert torch.isfinite(sim.grad).all()


def test_bce_by_hand():
    sim, mask = _case(seed=3)
    loss, has = PairBCELoss(scale=4.0, threshold=0.2)(sim, mask)

    def bce(b, k, y):
        return F.binary_cross_entropy_with_logits(4.0 * (sim[b, k] - 0.2), torch.tensor(y, dtype=torch.float64)).item()

    for b in range(3):
        negs = [k for k in _allowed(mask, b) if k != b]
        neg = sum(bce(b, k, 0.0) for k in negs) / max(len(negs), 1)
        assert loss[b].item() == pytest.approx((bce(b, b, 1.0) + neg) / 2, abs=1e-9)
        assert bool(has[b]) == bool(negs)


def test_multi_similarity_by_hand_and_gradients_finite():
    sim, mask = _case(seed=4)
    sim[2, 4] = float("nan") if not mask[2, 4] else sim[2, 4]
    sim = sim.clone().requires_grad_(True)
    loss, has = MultiSimilarityLoss(alpha=2.0, beta=10.0, base=0.3)(sim, mask)
    for b in range(3):
        negs = [k for k in _allowed(mask, b) if k != b]
        ref = math.log(1 + math.exp(-2.0 * (sim[b, b].item() - 0.3))) / 2.0
        ref += math.log(1 + sum(math.exp(10.0 * (sim[b, k].item() - 0.3)) for k in negs)) / 10.0
        assert loss[b].item() == pytest.approx(ref, abs=1e-9)
        assert bool(has[b]) == bool(negs)
    loss.sum().backward()
    assert torch.isfinite(sim.grad).all()


def _z(v):
    v = np.asarray(v, dtype=np.float64)
    return (v - v.mean()) / v.std() if v.std() > 0 else np.zeros_like(v)


def test_mix_rerank_by_hand_only_top_n_rescored():
    first = [("a", 0.9), ("b", 0.8), ("c", 0.5), ("d", 0.4), ("e", 0.4), ("f", 0.1)]
    cross = {"a": -1.0, "b": 2.0, "c": 0.5, "d": 99.0}  # d is outside the top 3: never read
    out = mix_rerank(first, cross, top_n=3, weight=0.3)
    z1, z2 = _z([-1.0, 2.0, 0.5]), _z([0.9, 0.8, 0.5])
    want = {d: 0.3 * x + 0.7 * y for d, x, y in zip("abc", z1, z2)}
    head = sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))
    assert [d for d, _ in out[:3]] == [d for d, _ in head]
    assert [s for _, s in out[:3]] == pytest.approx([s for _, s in head])
    assert [d for d, _ in out[3:]] == ["d", "e", "f"]
    assert all(s < min(s for _, s in out[:3]) for _, s in out[3:])
    assert [s for _, s in out[3:]] == sorted((s for _, s in out[3:]), reverse=True)


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_mnrl_infinite_teacher_similarity_is_named(value):
    sim, mask = torch.rand(2, 3), torch.ones(2, 3, dtype=torch.bool)
    teacher = torch.rand(2, 3)
    teacher[0, 1] = value  # was a NaN loss for anchor 0, unsaid
    with pytest.raises(ValueError, match="anchor 0 to candidate 1"):
        MultipleNegativesRankingLoss()(sim, mask, teacher=teacher)


@pytest.mark.parametrize("top_n", [True, 2.5, 2.0])
def test_mix_rerank_top_n_must_be_a_whole_number(top_n):
    first = [("a", 0.9), ("b", 0.8), ("c", 0.5)]
    with pytest.raises(ValueError, match="top_n must be a whole number"):  # True re-scored the top 1; 2.5 a TypeError
        mix_rerank(first, {"a": 1.0, "b": 0.0}, top_n=top_n, weight=0.5)
    assert [d for d, _ in mix_rerank(first, {"a": 0.0, "b": 1.0}, top_n=np.int64(2), weight=1.0)] == ["b", "a", "c"]
