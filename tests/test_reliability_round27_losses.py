"""Round 27, the triplet margin loss and its helpers (`aspire.losses.triplet`) and the loss registry: one negative
is picked for an empty batch instead of failing in argmax, aligned sentence positions of the wrong shape or into a
paper without sentences are the documented ValueError (a (B, 1) column gave (B, B) distances, S = 0 an IndexError),
the registry's docstring names where a loss's name goes; and checks against brute-force loops, gradcheck in float64
on the min-L2 and single-vector distances, zero loss and gradient for satisfied triplets, non-finite values of left-out
entries, and dtypes taken from the inputs."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import aspire.losses.registry as registry
from aspire.batch import DocBatch
from aspire.losses import LOSS_KEYS, LOSS_KINDS, MATRIX_LOSSES, matrix_loss
from aspire.losses.triplet import (
    aligned_sentence_dist,
    in_batch_negative_mask,
    masked_anchor_mean,
    mean_pool_doc,
    pick_one_negative,
    triplet_margin_dist_loss,
    triplet_margin_dist_per_anchor,
)
from aspire.train.config import ModelConfig
from aspire.train.terms import ScorerDist, VectorDist, make_scorer


def _loop_per_anchor(pos, neg, mask, margin):
    out = []
    for b in range(pos.shape[0]):
        hinges = [max(0.0, pos[b].item() - neg[b, k].item() + margin) for k in range(neg.shape[1]) if mask[b, k]]
        out.append(sum(hinges) / len(hinges) if hinges else 0.0)
    return out


# ---- fixes ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0, 0), (3, 0)])
def test_pick_one_negative_with_no_candidates_flags_every_anchor_instead_of_failing_in_argmax(shape):
    index, valid = pick_one_negative(torch.zeros(shape, dtype=torch.bool))  # was IndexError from argmax
    assert index.shape == valid.shape == (shape[0],)
    assert index.dtype == torch.long and valid.dtype == torch.bool and not bool(valid.any())


def test_aligned_sentence_dist_refuses_a_column_of_positions_instead_of_giving_b_by_b_distances():
    g = torch.Generator().manual_seed(0)
    a = DocBatch(torch.randn(3, 4, 2, generator=g), torch.ones(3, 4, dtype=torch.bool))
    b = DocBatch(torch.randn(3, 4, 2, generator=g), torch.ones(3, 4, dtype=torch.bool))
    idx = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match=r"\(B,\)"):  # was a (3, 3) tensor of distances
        aligned_sentence_dist(a, b, idx[:, None], idx[:, None])
    with pytest.raises(ValueError, match=r"\(B,\)"):
        aligned_sentence_dist(a, b, idx, idx[:, None])


def test_aligned_sentence_dist_into_a_paper_without_sentences_is_the_documented_value_error():
    empty = DocBatch(torch.zeros(1, 0, 2), torch.zeros(1, 0, dtype=torch.bool))
    full = DocBatch(torch.ones(1, 2, 2), torch.ones(1, 2, dtype=torch.bool))
    for a, b in ((empty, full), (full, empty)):  # was IndexError: the clamp to 0..S-1 read position -1 of nothing
        with pytest.raises(ValueError, match="out of range"):
            aligned_sentence_dist(a, b, torch.tensor([0]), torch.tensor([0]))


def test_aligned_sentence_dist_equals_its_loop_and_still_refuses_every_bad_position():
    g = torch.Generator().manual_seed(1)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    a = DocBatch(torch.randn(2, 3, 4, dtype=torch.float64, generator=g), mask)
    b = DocBatch(torch.randn(2, 3, 4, dtype=torch.float64, generator=g), mask)
    a_idx, b_idx = torch.tensor([1, 2], dtype=torch.int32), torch.tensor([0, 1])
    want = [math.dist(a.emb[i, a_idx[i]].tolist(), b.emb[i, b_idx[i]].tolist()) for i in range(2)]
    assert aligned_sentence_dist(a, b, a_idx, b_idx).tolist() == pytest.approx(want, rel=1e-12)
    for bad in ([2, 0], [-1, 0], [3, 0], [0, 3]):  # padded, "no aligned sentence", past the end (both papers)
        with pytest.raises(ValueError, match="out of range or points at a padded"):
            aligned_sentence_dist(a, b, torch.tensor(bad), b_idx)
    with pytest.raises(ValueError, match="papers with"):
        aligned_sentence_dist(a, b, torch.tensor([0]), b_idx)
    empty = DocBatch(torch.zeros(0, 2, 4), torch.zeros(0, 2, dtype=torch.bool))
    none = torch.zeros(0, dtype=torch.long)
    assert aligned_sentence_dist(empty, empty, none, none).shape == (0,)


def test_the_registry_docstring_says_where_a_new_loss_name_and_its_keys_go():
    assert "LOSS_KEYS" in registry.__doc__  # said LOSS_KINDS, which is only LOSS_KEYS' names
    assert LOSS_KINDS == tuple(LOSS_KEYS)
    for kind, cls in MATRIX_LOSSES.items():
        assert set(cls.SETTINGS.values()) == set(LOSS_KEYS[kind]), kind


# ---- checks against references (these held before the round) --------------------------------------------------


def test_triplet_equals_its_loop_over_anchors_and_negatives_with_masks_and_margins():
    g = torch.Generator().manual_seed(2)
    for _ in range(40):
        B, K = torch.randint(0, 6, (2,), generator=g).tolist()
        pos = torch.rand(B, dtype=torch.float64, generator=g) * 3
        neg = torch.rand(B, K, dtype=torch.float64, generator=g) * 3
        mask = torch.rand(B, K, generator=g) > 0.4
        margin = float(torch.rand((), generator=g)) * 2
        per_anchor, valid = triplet_margin_dist_per_anchor(pos, neg, mask, margin)
        want = _loop_per_anchor(pos, neg, mask, margin)
        assert per_anchor.tolist() == pytest.approx(want, rel=1e-12, abs=1e-15)
        assert valid.tolist() == [bool(mask[b].any()) for b in range(B)]
        kept = [want[b] for b in range(B) if mask[b].any()]
        total = triplet_margin_dist_loss(pos, neg, mask, margin)
        assert total.item() == pytest.approx(sum(kept) / len(kept) if kept else 0.0, rel=1e-12, abs=1e-15)


def test_an_empty_batch_gives_a_zero_loss_that_keeps_the_graph():
    pos = torch.zeros(0, dtype=torch.float64, requires_grad=True)
    for K in (0, 3):
        loss = triplet_margin_dist_loss(pos, torch.zeros(0, K, dtype=torch.float64), torch.zeros(0, K, dtype=torch.bool))
        assert loss.item() == 0.0 and loss.requires_grad and loss.dtype == torch.float64
        loss.backward()


def _docs(g, B, S, D, mask):
    return torch.randn(B, S, D, dtype=torch.float64, generator=g).requires_grad_(), mask


def test_triplet_on_min_l2_equals_the_sentence_pair_loop_and_passes_gradcheck():
    g = torch.Generator().manual_seed(3)
    B, S, D = 3, 3, 2
    mask = torch.ones(B, S, dtype=torch.bool)
    mask[0, 2] = False
    mask[1, 1:] = False
    minl2 = ScorerDist(make_scorer("minl2", ModelConfig(kind="minl2")), "minl2")
    neg_mask = ~torch.eye(B, dtype=torch.bool)
    neg_mask[2, 0] = False

    def loss(xa, xb):
        a, b = DocBatch(xa, mask), DocBatch(xb, mask)
        return triplet_margin_dist_loss(minl2.pairwise_dist(a, b), minl2.dist(a, b), neg_mask, margin=1.5)

    xa, _ = _docs(g, B, S, D, mask)
    xb, _ = _docs(g, B, S, D, mask)

    def min_l2(i, j):
        return min(math.dist(xa[i, s].tolist(), xb[j, t].tolist())
                   for s in range(S) if mask[i, s] for t in range(S) if mask[j, t])

    dist = torch.tensor([[min_l2(i, j) for j in range(B)] for i in range(B)], dtype=torch.float64)
    want = _loop_per_anchor(dist.diagonal(), dist, neg_mask, 1.5)
    assert loss(xa, xb).item() == pytest.approx(sum(want) / B, rel=1e-9)
    assert torch.autograd.gradcheck(loss, (xa, xb), atol=1e-6, rtol=1e-5)
    loss(xa, xb).backward()
    assert xa.grad[0, 2].abs().max() == 0 and xa.grad[1, 1:].abs().max() == 0  # padded sentences: no gradient


def test_triplet_on_single_vectors_equals_its_loop_and_passes_gradcheck():
    g = torch.Generator().manual_seed(4)
    B, S, D = 4, 3, 3
    mask = torch.rand(B, S, generator=g) > 0.3
    mask[:, 0] = True
    vec = VectorDist()
    neg_mask = ~torch.eye(B, dtype=torch.bool)

    def loss(xa, xb):
        a, b = mean_pool_doc(DocBatch(xa, mask)), mean_pool_doc(DocBatch(xb, mask))
        return triplet_margin_dist_loss(vec.pairwise_dist(a, b), vec.dist(a, b), neg_mask, margin=0.7)

    xa = torch.randn(B, S, D, dtype=torch.float64, generator=g).requires_grad_()
    xb = torch.randn(B, S, D, dtype=torch.float64, generator=g).requires_grad_()
    means = [[xa[i][mask[i]].mean(0).tolist() for i in range(B)], [xb[i][mask[i]].mean(0).tolist() for i in range(B)]]
    dist = torch.tensor([[math.dist(means[0][i], means[1][j]) for j in range(B)] for i in range(B)],
                        dtype=torch.float64)
    want = _loop_per_anchor(dist.diagonal(), dist, neg_mask, 0.7)
    assert loss(xa, xb).item() == pytest.approx(sum(want) / B, rel=1e-9)
    assert torch.autograd.gradcheck(loss, (xa, xb), atol=1e-6, rtol=1e-5)


def test_satisfied_triplets_give_zero_loss_and_zero_gradient_even_at_the_margin():
    pos = torch.tensor([0.5, 1.0], dtype=torch.float64, requires_grad=True)
    neg = torch.tensor([[1.5, 3.0], [2.0, 9.0]], dtype=torch.float64, requires_grad=True)  # 1.5 and 2.0: exactly at it
    loss = triplet_margin_dist_loss(pos, neg, torch.ones(2, 2, dtype=torch.bool), margin=1.0)
    loss.backward()
    assert loss.item() == 0.0 and pos.grad.abs().max() == 0 and neg.grad.abs().max() == 0
    pos.grad = neg.grad = None
    loss = triplet_margin_dist_loss(pos, neg, torch.ones(2, 2, dtype=torch.bool), margin=1.25)  # now both violate
    loss.backward()
    assert loss.item() == pytest.approx((0.25 / 2 + 0.25 / 2) / 2)
    assert pos.grad.tolist() == [0.25, 0.25] and neg.grad.tolist() == [[-0.25, 0.0], [-0.25, 0.0]]


def test_non_finite_values_of_masked_negatives_and_left_out_anchors_reach_neither_value_nor_gradient():
    pos = torch.tensor([0.5, float("nan"), 1.0], dtype=torch.float64, requires_grad=True)
    neg = torch.tensor([[float("nan"), 1.0], [0.0, 0.0], [float("inf"), float("-inf")]], dtype=torch.float64,
                       requires_grad=True)
    mask = torch.tensor([[False, True], [False, False], [True, False]])
    loss = triplet_margin_dist_loss(pos, neg, mask, margin=1.0)
    loss.backward()
    assert loss.item() == pytest.approx(0.5 / 2)  # anchor 0: 0.5; anchor 2: an infinitely far negative, 0
    assert pos.grad.tolist() == [0.5, 0.0, 0.0]
    assert neg.grad.tolist() == [[0.0, -0.5], [0.0, 0.0], [0.0, 0.0]]
    bad = triplet_margin_dist_loss(pos.detach(), neg.detach(), torch.tensor([[True, True], [False] * 2, [True] * 2]))
    assert math.isnan(bad.item())  # an allowed NaN negative is not hidden


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_comes_from_the_inputs_whatever_the_margin_type(dtype):
    pos = torch.tensor([1.0, 2.0], dtype=dtype)
    neg = torch.tensor([[1.5, 0.5], [4.0, 1.0]], dtype=dtype)
    mask = torch.tensor([[True, True], [True, False]])
    for margin in (1, 1.0, np.float64(1.0), np.float32(1.0)):
        per_anchor, _ = triplet_margin_dist_per_anchor(pos, neg, mask, margin)
        loss = triplet_margin_dist_loss(pos, neg, mask, margin)
        assert per_anchor.dtype == loss.dtype == dtype
        assert per_anchor.tolist() == [1.0, 0.0] and loss.item() == 0.5
    for margin in (float("nan"), float("inf"), -0.5, True, torch.tensor(1.0)):
        with pytest.raises(ValueError, match="loss.margin"):
            triplet_margin_dist_loss(pos, neg, mask, margin)


def test_in_batch_mask_and_pick_one_negative_equal_their_loops():
    g = torch.Generator().manual_seed(5)
    for _ in range(20):
        B, G = torch.randint(1, 7, (2,), generator=g).tolist()
        group = torch.randint(-1, 8, (B, G), generator=g)
        cand = torch.randint(0, 8, (B,), generator=g)
        allowed = in_batch_negative_mask(group, cand)
        assert allowed.tolist() == [[cand[k].item() not in group[b].tolist() for k in range(B)] for b in range(B)]
        index, valid = pick_one_negative(allowed)
        for b in range(B):
            after = [(b + j) % B for j in range(1, B + 1)]
            first = next((k for k in after if allowed[b, k]), None)
            assert bool(valid[b]) == (first is not None)
            if first is not None:
                assert index[b].item() == first


def test_the_registry_gives_none_for_triplet_and_names_every_kind_for_an_unknown_one():
    assert matrix_loss(SimpleNamespace(kind="triplet")) is None
    for kind in ("nope", "Triplet", "", None):
        with pytest.raises(ValueError, match="unknown loss kind") as info:
            matrix_loss(SimpleNamespace(kind=kind))
        assert all(name in str(info.value) for name in LOSS_KINDS)


def test_masked_anchor_mean_equals_the_mean_over_valid_anchors():
    per_anchor = torch.tensor([2.0, 5.0, 1.0], dtype=torch.float64, requires_grad=True)
    valid = torch.tensor([True, False, True])
    mean = masked_anchor_mean(per_anchor, valid)
    mean.backward()
    assert mean.item() == 1.5 and per_anchor.grad.tolist() == [0.5, 0.0, 0.5]
