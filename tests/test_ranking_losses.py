"""The in-batch ranking losses: equal to sentence-transformers' own losses on the same vectors where
those apply (nothing masked), equal to a brute-force loop where a mask or another formula applies."""

from __future__ import annotations

import math

import pytest
import torch
from sentence_transformers.sentence_transformer.losses import (
    MultipleNegativesRankingLoss as STMultipleNegativesRankingLoss,
)
from sentence_transformers.sentence_transformer.losses import (
    MultipleNegativesSymmetricRankingLoss as STMultipleNegativesSymmetricRankingLoss,
)
from sentence_transformers.util import cos_sim

from aspire.losses import MATRIX_LOSSES, masked_anchor_mean
from aspire.losses.bce import PairBCELoss
from aspire.losses.multi_similarity import MultiSimilarityLoss
from aspire.losses.ranking import MultipleNegativesRankingLoss


def vectors(B: int = 6, H: int = 0, D: int = 8, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, D, generator=gen) for n in (B, B, H)]


@pytest.mark.parametrize("hard", [0, 6])
@pytest.mark.parametrize("scale", [20.0, 7.5])
def test_mnrl_equals_sentence_transformers_on_the_same_vectors(hard, scale):
    a, p, h = vectors(H=hard)
    sim = cos_sim(a, torch.cat([p, h]))  # (B, B + H): every positive and every hard negative
    mask = torch.ones_like(sim, dtype=torch.bool)  # nothing masked: sentence-transformers' setting
    per_anchor, valid = MultipleNegativesRankingLoss(scale)(sim, mask)
    ours = masked_anchor_mean(per_anchor, valid)
    theirs = STMultipleNegativesRankingLoss(None, scale=scale).compute_loss_from_embeddings(
        [a, p] + ([h] if hard else []), None)
    assert valid.all()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)


def test_symmetric_mnrl_equals_sentence_transformers():
    a, p, _ = vectors(B=7, seed=3)
    per_anchor, _ = MultipleNegativesRankingLoss(20.0, symmetric=True)(cos_sim(a, p), torch.ones(7, 7, dtype=torch.bool))
    theirs = STMultipleNegativesSymmetricRankingLoss(None).compute_loss_from_embeddings([a, p], None)
    assert per_anchor.mean().item() == pytest.approx(theirs.item(), rel=1e-6)


def test_mnrl_leaves_masked_candidates_out_and_never_the_positive():
    a, p, _ = vectors(B=4, seed=1)
    sim = cos_sim(a, p)
    mask = torch.tensor([[True, False, True, True],   # the diagonal is ignored either way
                         [True, False, False, True],
                         [False, False, False, False],  # no negative at all: not valid
                         [True, True, True, False]])
    per_anchor, valid = MultipleNegativesRankingLoss(10.0)(sim, mask)
    assert valid.tolist() == [True, True, False, True]
    for b in range(4):
        cols = [b] + [k for k in range(4) if mask[b, k] and k != b]
        logits = 10.0 * sim[b, cols]
        assert per_anchor[b].item() == pytest.approx((logits.logsumexp(0) - logits[0]).item(), rel=1e-6)
    assert per_anchor[2].item() == pytest.approx(0.0, abs=1e-6)  # the positive alone: log 1


def test_mnrl_gradient_pulls_the_positive_and_pushes_negatives():
    sim = torch.tensor([[0.2, 0.5], [0.1, 0.3]], requires_grad=True)
    per_anchor, _ = MultipleNegativesRankingLoss(5.0)(sim, torch.ones(2, 2, dtype=torch.bool))
    per_anchor.sum().backward()
    assert (sim.grad.diagonal() < 0).all()  # a step against the gradient raises the positive's similarity
    assert sim.grad[0, 1] > 0 and sim.grad[1, 0] > 0


def test_multi_similarity_equals_the_formula_by_loop():
    a, p, h = vectors(B=5, H=3, seed=2)
    sim = cos_sim(a, torch.cat([p, h]))
    mask = torch.rand(5, 8, generator=torch.Generator().manual_seed(0)) > 0.3
    alpha, beta, base = 2.0, 50.0, 0.5
    per_anchor, valid = MultiSimilarityLoss(alpha, beta, base)(sim, mask)
    for b in range(5):
        negs = [sim[b, k].item() for k in range(8) if mask[b, k] and k != b]
        want = math.log1p(math.exp(-alpha * (sim[b, b].item() - base))) / alpha
        want += math.log1p(sum(math.exp(beta * (s - base)) for s in negs)) / beta
        assert per_anchor[b].item() == pytest.approx(want, rel=1e-5)
        assert bool(valid[b]) == bool(negs)


def test_pair_bce_known_answer():
    sim = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.4, 0.8]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    per_anchor, valid = PairBCELoss(scale=10.0, threshold=0.5)(sim, mask)
    bce = lambda s, y: torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor(10 * (s - 0.5)), torch.tensor(y)).item()  # noqa: E731
    assert per_anchor[0].item() == pytest.approx((bce(0.9, 1.0) + bce(0.1, 0.0)) / 2, rel=1e-5)
    assert per_anchor[1].item() == pytest.approx((bce(0.4, 1.0) + (bce(0.2, 0.0) + bce(0.8, 0.0)) / 2) / 2, rel=1e-5)
    assert valid.all()


@pytest.mark.parametrize("name", sorted(MATRIX_LOSSES))
def test_every_matrix_loss_refuses_bad_shapes_and_ranks_the_positive_first(name):
    loss = MATRIX_LOSSES[name]()
    with pytest.raises(ValueError, match="K >= B"):
        loss(torch.zeros(3, 2), torch.ones(3, 2, dtype=torch.bool))
    good = torch.tensor([[0.9, 0.1], [0.1, 0.9]])  # each anchor closest to its positive
    bad = good.flip(1)  # each anchor closest to the other's positive
    mask = torch.ones(2, 2, dtype=torch.bool)
    assert (loss(good, mask)[0] < loss(bad, mask)[0]).all()
