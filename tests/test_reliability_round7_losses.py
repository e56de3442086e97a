"""Round 7 checks of the training losses: masked candidates and left-out sentences never reach a value or a
gradient, aligned positions out of range are refused, the masks must be bool, and the smooth losses'
gradients agree with finite differences (float64 gradcheck)."""

from __future__ import annotations

import pytest
import torch

from aspire.batch import DocBatch
from aspire.losses import (
    aligned_sentence_dist,
    in_batch_negative_mask,
    mean_pool_doc,
    triplet_margin_dist_per_anchor,
)
from aspire.losses.bce import PairBCELoss
from aspire.losses.multi_similarity import MultiSimilarityLoss
from aspire.losses.ranking import MultipleNegativesRankingLoss

MATRIX = [MultipleNegativesRankingLoss(scale=5.0), MultipleNegativesRankingLoss(scale=3.0, symmetric=True),
          PairBCELoss(scale=4.0, threshold=0.3), MultiSimilarityLoss(alpha=2.0, beta=10.0, base=0.5)]


def matrix(B: int = 3, K: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, K) float64 similarities and a mask leaving out (0, 1) and (2, 4)."""
    sim = torch.randn(B, K, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(B, K, dtype=torch.bool)
    mask[0, 1] = mask[2, 4] = False
    return sim, mask


@pytest.mark.parametrize("loss", MATRIX, ids=lambda m: type(m).__name__)
def test_a_nan_similarity_of_a_masked_candidate_reaches_neither_value_nor_gradient(loss):
    sim, mask = matrix()
    want = loss(sim, mask)[0]
    bad = sim.clone()
    bad[0, 1] = float("nan")
    bad.requires_grad_(True)
    got = loss(bad, mask)[0]
    got.sum().backward()
    assert torch.allclose(got.detach(), want)
    assert bool(bad.grad.isfinite().all()) and bad.grad[0, 1] == 0  # PairBCELoss gave a NaN gradient here


@pytest.mark.parametrize("loss", MATRIX, ids=lambda m: type(m).__name__)
def test_matrix_losses_pass_gradcheck_and_give_masked_candidates_no_gradient(loss):
    sim, mask = matrix()
    sim.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s: loss(s, mask)[0], (sim,))
    loss(sim, mask)[0].sum().backward()
    assert sim.grad[0, 1] == 0 and sim.grad[2, 4] == 0


def test_distillation_is_kl_teacher_to_student_and_passes_gradcheck():
    sim, mask = matrix()
    teacher = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    teacher[1, 3] = teacher[2, 2] = float("nan")  # row 2: no teacher score of the positive -> ranking loss
    loss = MultipleNegativesRankingLoss(scale=5.0, teacher_scale=2.0)
    got = loss(sim, mask, teacher=teacher)[0]
    cols = [[0, 2, 3, 4], [0, 1, 2, 4]]
    for b in range(2):
        p = torch.softmax(2.0 * teacher[b, cols[b]], 0)
        q = torch.log_softmax(5.0 * sim[b, cols[b]], 0)
        assert torch.isclose(got[b], (p * (p.log() - q)).sum())
    assert torch.isclose(got[2], torch.logsumexp(5.0 * sim[2, :4], 0) - 5.0 * sim[2, 2])
    sim.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s: loss(s, mask, teacher=teacher)[0], (sim,))


def test_a_paper_twice_in_the_batch_is_never_its_own_negative():
    # example 1 has example 0's positive (paper 7); example 2's positive is example 0's anchor (paper 5)
    group = torch.tensor([[5, 7, -1], [6, 7, -1], [8, 9, 5]])
    allowed = in_batch_negative_mask(group, torch.tensor([7, 7, 5]))
    assert allowed.tolist() == [[False, False, False], [False, False, True], [True, True, False]]


def test_aligned_positions_out_of_range_are_refused_not_wrapped():
    docs = DocBatch.from_list([torch.randn(3, 4), torch.randn(3, 4)])
    with pytest.raises(ValueError, match="out of range"):  # -1 read the last sentence, silently
        aligned_sentence_dist(docs, docs, torch.tensor([0, -1]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="out of range"):  # torch's IndexError (a device assert on a GPU)
        aligned_sentence_dist(docs, docs, torch.tensor([0, 3]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="positions"):
        aligned_sentence_dist(docs, docs.index([0, 1, 0]), torch.tensor([0, 1]), torch.tensor([0, 1]))


def test_a_non_finite_left_out_sentence_does_not_reach_the_pooled_vector():
    emb = torch.randn(2, 3, 4)
    emb[0, 2] = float("inf")  # selected out below
    emb.requires_grad_(True)
    docs = DocBatch(emb, torch.ones(2, 3, dtype=torch.bool)).with_mask(torch.tensor([[1, 1, 0], [1, 1, 1]]))
    pooled = mean_pool_doc(docs)
    pooled.emb.sum().backward()
    assert torch.allclose(pooled.emb[0, 0], emb[0, :2].mean(0))  # was NaN (inf * 0)
    assert bool((emb.grad[0, 2] == 0).all()) and bool((emb.grad[0, :2] == 0.5).all())


def test_a_mask_that_is_not_bool_is_a_clear_error():
    sim, mask = matrix()
    for loss in MATRIX:
        with pytest.raises(ValueError, match="bool"):
            loss(sim, mask.long())
    with pytest.raises(ValueError, match="bool"):
        triplet_margin_dist_per_anchor(sim[:, 0], sim, mask.float())
