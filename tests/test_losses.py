"""Known-answer and property tests of the triplet loss and in-batch negative bookkeeping."""

from __future__ import annotations

import pytest
import torch

from aspire.batch import DocBatch
from aspire.losses import (
    aligned_sentence_dist,
    in_batch_negative_mask,
    mean_pool_doc,
    pairwise_vector_l2_dist,
    pick_one_negative,
    triplet_margin_dist_loss,
    vector_l2_dist,
)


def test_triplet_known_answer_and_sign():
    pos = torch.tensor([0.5, 3.0])
    neg = torch.tensor([[2.0, 0.0], [1.0, 5.0]])
    mask = torch.tensor([[True, False], [True, True]])
    # anchor 0: relu(0.5 - 2 + 1) = 0 ; anchor 1: (relu(3 - 1 + 1) + relu(3 - 5 + 1)) / 2 = 1.5
    loss = triplet_margin_dist_loss(pos, neg, mask, margin=1.0)
    assert loss.item() == pytest.approx(0.75)
    # a larger margin makes anchor 0's negative count too: (relu(0.5 - 2 + 2) + (4 + 0)/2) / 2 = 1.25
    assert triplet_margin_dist_loss(pos, neg, mask, margin=2.0).item() == pytest.approx(1.25)


def test_triplet_gradient_pulls_positive_and_pushes_negative():
    pos = torch.tensor([1.0], requires_grad=True)
    neg = torch.tensor([[1.0]], requires_grad=True)
    triplet_margin_dist_loss(pos, neg, torch.ones(1, 1, dtype=torch.bool)).backward()
    assert pos.grad.item() > 0  # descending shrinks the positive distance
    assert neg.grad.item() < 0  # and grows the negative distance


def test_triplet_skips_anchors_without_negatives():
    pos = torch.tensor([1.0, 100.0])
    neg = torch.tensor([[0.0], [0.0]])
    mask = torch.tensor([[True], [False]])
    assert triplet_margin_dist_loss(pos, neg, mask).item() == pytest.approx(2.0)
    empty = triplet_margin_dist_loss(pos, neg, torch.zeros(2, 1, dtype=torch.bool))
    assert empty.item() == 0.0


def test_in_batch_mask_excludes_own_set():
    group = torch.tensor([[0, 1, 2], [3, 4, -1], [5, 6, -1]])
    cands = torch.tensor([1, 4, 2])  # positives of the three examples
    allowed = in_batch_negative_mask(group, cands)
    expected = torch.tensor([[False, True, False], [True, False, True], [True, True, True]])
    assert torch.equal(allowed, expected)


def test_pick_one_negative_takes_next_allowed_and_flags_none():
    allowed = torch.tensor([[False, False, True, True], [True, False, False, False],
                            [False, False, False, False], [False, True, True, False]])
    idx, valid = pick_one_negative(allowed)
    assert idx[[0, 1, 3]].tolist() == [2, 0, 1]
    assert valid.tolist() == [True, True, False, True]
    chosen = allowed[torch.arange(4), idx]
    assert bool((chosen == valid).all())


def test_aligned_sentence_dist_matches_loop_and_refuses_padding():
    torch.manual_seed(0)
    a = DocBatch.from_list([torch.randn(3, 4), torch.randn(2, 4)])
    b = DocBatch.from_list([torch.randn(2, 4), torch.randn(4, 4)])
    ai, bi = torch.tensor([2, 1]), torch.tensor([0, 3])
    got = aligned_sentence_dist(a, b, ai, bi)
    want = torch.stack([(a.emb[i, ai[i]] - b.emb[i, bi[i]]).norm() for i in range(2)])
    assert torch.allclose(got, want)
    with pytest.raises(ValueError, match="padded"):
        aligned_sentence_dist(a, b, torch.tensor([0, 2]), bi)


def test_vector_distances_and_pooling():
    torch.manual_seed(1)
    docs = DocBatch.from_list([torch.randn(3, 5), torch.randn(1, 5)])
    pooled = mean_pool_doc(docs)
    assert pooled.emb.shape == (2, 1, 5)
    assert torch.allclose(pooled.emb[0, 0], docs.emb[0, :3].mean(0))
    assert torch.allclose(pooled.emb[1, 0], docs.emb[1, 0])
    other = mean_pool_doc(DocBatch.from_list([torch.randn(2, 5), torch.randn(2, 5)]))
    full = vector_l2_dist(pooled, other)
    assert torch.allclose(torch.diagonal(full), pairwise_vector_l2_dist(pooled, other), atol=1e-6)
    assert torch.allclose(full[0, 1], (pooled.emb[0, 0] - other.emb[1, 0]).norm(), atol=1e-6)
