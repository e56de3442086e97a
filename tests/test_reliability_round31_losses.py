"""Round 31, the matrix losses and score fusion against independent references.

Losses: each against a float64 loop over its formula or torch's own (`binary_cross_entropy_with_logits`,
`cross_entropy`), gradcheck in float64, masks, empty batches and extreme similarities. Fusion: by hand with ties,
a document missing from a list, single-document and constant lists; one defect pinned: normalisation of finite
scores past the float range's square root (or subnormal ones) gave 0s or NaN, and an unknown method was min-max.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aspire.losses.bce import PairBCELoss
from aspire.losses.multi_similarity import MultiSimilarityLoss
from aspire.losses.ranking import MultipleNegativesRankingLoss
from aspire.scoring.fusion import fuse_ranked, normalise

# ------------------------------------------------------------------ losses


def _batch(B: int = 5, K: int = 8, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    sim = torch.randn(B, K, generator=gen, dtype=torch.float64)
    mask = torch.rand(B, K, generator=gen) > 0.4
    mask[2] = False  # an anchor with no negative
    negatives = mask & ~torch.eye(B, K, dtype=torch.bool)
    return sim, mask, negatives


def test_pair_bce_equals_torchs_bce_with_logits_per_anchor():
    sim, mask, negatives = _batch()
    loss, valid = PairBCELoss(scale=3.0, threshold=0.2)(sim, mask)
    for b in range(len(sim)):
        logits = 3.0 * (sim[b] - 0.2)
        pos = F.binary_cross_entropy_with_logits(logits[b], torch.tensor(1.0, dtype=torch.float64))
        cols = [k for k in range(sim.shape[1]) if negatives[b, k]]
        neg = F.binary_cross_entropy_with_logits(logits[cols], torch.zeros(len(cols), dtype=torch.float64)) if cols else 0.0
        assert loss[b].item() == pytest.approx(float((pos + neg) / 2), abs=1e-12)
        assert bool(valid[b]) == bool(cols)


def test_multi_similarity_equals_the_published_formula_by_loop():
    sim, mask, negatives = _batch()
    alpha, beta, base = 2.0, 10.0, 0.3
    loss, valid = MultiSimilarityLoss(alpha, beta, base)(sim, mask)
    for b in range(len(sim)):
        s = sim[b].tolist()
        neg = sum(math.exp(beta * (s[k] - base)) for k in range(len(s)) if negatives[b, k])
        ref = math.log1p(math.exp(-alpha * (s[b] - base))) / alpha + math.log1p(neg) / beta
        assert loss[b].item() == pytest.approx(ref, abs=1e-12)
    assert valid.tolist() == negatives.any(dim=1).tolist()


def test_mnrl_and_its_distillation_equal_cross_entropy_and_kl_by_row():
    sim, mask, negatives = _batch()
    B, K = sim.shape
    loss, _ = MultipleNegativesRankingLoss(scale=4.0)(sim, mask)
    teacher = torch.randn(B, K, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    teacher[1, 1] = float("nan")  # row 1 unscored: keeps the ranking loss
    teacher[0, 3] = float("nan")  # one candidate of row 0 unscored: left out of its softmax
    distilled, _ = MultipleNegativesRankingLoss(scale=4.0, teacher_scale=7.0)(sim, mask, teacher=teacher)
    for b in range(B):
        cols = [b] + [k for k in range(K) if negatives[b, k]]
        ce = F.cross_entropy(4.0 * sim[b, cols][None], torch.tensor([0])).item()
        assert loss[b].item() == pytest.approx(ce, abs=1e-12)
        if b == 1:
            assert distilled[b].item() == pytest.approx(ce, abs=1e-12)
            continue
        cols = [k for k in cols if not math.isnan(teacher[b, k])]
        p, log_q = torch.softmax(7.0 * teacher[b, cols], 0), torch.log_softmax(4.0 * sim[b, cols], 0)
        assert distilled[b].item() == pytest.approx(float((p * (p.log() - log_q)).sum()), abs=1e-12)


@pytest.mark.parametrize("make", [lambda: PairBCELoss(3.0, 0.2), lambda: MultiSimilarityLoss(2.0, 10.0, 0.3),
                                  lambda: MultipleNegativesRankingLoss(4.0),
                                  lambda: MultipleNegativesRankingLoss(4.0, symmetric=True)])
def test_matrix_losses_pass_gradcheck_stay_finite_at_extremes_and_take_an_empty_batch(make):
    loss_fn = make()
    sim, mask, _ = _batch()
    assert torch.autograd.gradcheck(lambda x: loss_fn(x, mask)[0], (sim.clone().requires_grad_(),))
    for extreme in (sim * 1e6, torch.zeros_like(sim), -sim * 1e30):
        x = extreme.clone().requires_grad_()
        loss, _ = loss_fn(x, mask)
        loss.sum().backward()
        assert torch.isfinite(loss).all() and torch.isfinite(x.grad).all()
    for shape in ((0, 3), (0, 0)):
        loss, valid = loss_fn(torch.zeros(shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.bool))
        assert loss.shape == valid.shape == (0,)


# ------------------------------------------------------------------ fusion


def test_fusion_by_hand_with_ties_a_missing_document_and_single_document_lists():
    lists = [{"a": 3.0, "b": 1.0, "c": 1.0, "d": -1.0}, {"a": 0.0, "c": 2.0}, {"e": 5.0}]
    # list 0: mean 1, population sd sqrt(2): a sqrt(2), b 0, c 0, d -sqrt(2); list 1: a -1, c 1; list 2 (one
    # document, constant): e 0
    z = dict(fuse_ranked(lists, [1.0, 2.0, 1.0], "z"))
    assert z == pytest.approx({"a": math.sqrt(2) - 2, "b": 0.0, "c": 2.0, "d": -math.sqrt(2), "e": 0.0})
    mm = dict(fuse_ranked(lists, [1.0, 2.0, 1.0], "minmax"))
    assert mm == pytest.approx({"a": 1.0, "b": 0.5, "c": 2.5, "d": 0.0, "e": 0.0})
    # rrf, k 10: tied b and c take ranks 2 and 3 in the list's order
    rrf = dict(fuse_ranked(lists, [1.0, 2.0, 1.0], "rrf", rrf_k=10.0))
    assert rrf == pytest.approx({"a": 1 / 11 + 2 / 12, "b": 1 / 12, "c": 1 / 13 + 2 / 11, "d": 1 / 14, "e": 1 / 11})
    assert [d for d, _ in fuse_ranked(lists, [1.0, 2.0, 1.0], "z")] == ["c", "b", "e", "a", "d"]  # ties by id


@pytest.mark.parametrize("scale", [1e308, 1e200, 1e-320])
def test_normalising_finite_scores_at_the_ends_of_the_float_range_equals_normalising_them_scaled(scale):
    # 1e308 - -1e308 overflowed (min-max NaN), 1e200 squared overflowed and 1e-320 squared underflowed (z-scores 0)
    ref = np.array([1.0, -1.0, 0.5, 0.5]) if scale > 1 else np.array([1.0, 3.0, 2.0, 2.0])
    values = ref * scale
    for method in ("z", "minmax"):
        np.testing.assert_allclose(normalise(values, method), normalise(ref, method), rtol=1e-12, atol=1e-12)
    ranked = fuse_ranked([dict(zip("abcd", values.tolist())), {"d": 1.0}], method="minmax")
    assert all(math.isfinite(s) for _, s in ranked)
    assert ranked[0][0] == ("a" if scale > 1 else "b")


def test_normalise_refuses_an_unknown_method_and_takes_an_empty_array_either_way():
    with pytest.raises(ValueError, match="unknown normalisation 'rrf'; valid: z, minmax"):
        normalise(np.array([1.0, 2.0]), "rrf")  # was min-max, unsaid
    for method in ("z", "minmax"):  # min-max of nothing was numpy's zero-size reduction error
        assert normalise(np.array([]), method).shape == (0,)
