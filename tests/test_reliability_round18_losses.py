"""Round 18, the training losses and terms: a left-out anchor's non-finite loss stays out of the anchor mean, the
single-vector distances refuse inputs they used to read wrongly (one paper broadcast against B, a paper's first
sentence taken for the paper, an unselected vector), mean pooling refuses a paper with no selected sentence; and
checks against brute-force loops and finite differences (float64) at the settings' edges and through the OT term."""

from __future__ import annotations

import math

import pytest
import torch

from aspire.batch import DocBatch
from aspire.losses import (
    masked_anchor_mean,
    mean_pool_doc,
    pairwise_vector_l2_dist,
    triplet_margin_dist_loss,
    triplet_margin_dist_per_anchor,
    vector_l2_dist,
)
from aspire.losses.bce import PairBCELoss
from aspire.losses.multi_similarity import MultiSimilarityLoss
from aspire.losses.ranking import MultipleNegativesRankingLoss
from aspire.train.config import ModelConfig
from aspire.train.terms import ScorerDist, VectorDist, make_scorer


def _single(vectors, ids=None, mask=None) -> DocBatch:
    emb = torch.tensor(vectors, dtype=torch.float64)[:, None, :]
    mask = torch.ones(len(emb), 1, dtype=torch.bool) if mask is None else torch.tensor(mask)[:, None]
    return DocBatch(emb, mask, ids or [f"p{i}" for i in range(len(emb))])


def test_a_non_finite_loss_of_a_left_out_anchor_changes_neither_the_anchor_mean_nor_its_gradient():
    per_anchor = torch.tensor([1.0, float("inf"), float("nan"), 3.0], dtype=torch.float64, requires_grad=True)
    valid = torch.tensor([True, False, False, True])
    mean = masked_anchor_mean(per_anchor, valid)  # was (x * valid).sum(): inf * 0 = NaN
    mean.backward()
    assert mean.item() == 2.0
    assert per_anchor.grad.tolist() == [0.5, 0.0, 0.0, 0.5]
    # as the losses give it: an anchor with no negative whose positive similarity is -inf has loss -inf - (-inf)
    sim = torch.tensor([[-math.inf, 0.2, 0.1], [0.3, 0.9, 0.1], [0.2, 0.4, 0.8]], dtype=torch.float64)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[0] = False
    loss, counted = MultipleNegativesRankingLoss(scale=2.0)(sim, mask)
    assert math.isnan(loss[0].item()) and counted.tolist() == [False, True, True]
    ref = sum(math.log(sum(math.exp(2 * s) for s in sim[b].tolist())) - 2 * sim[b, b].item() for b in (1, 2)) / 2
    assert masked_anchor_mean(loss, counted).item() == pytest.approx(ref)
    with pytest.raises(ValueError, match="valid must be a bool tensor"):
        masked_anchor_mean(per_anchor, valid.double())


def test_pairwise_vector_distance_refuses_one_paper_against_several_instead_of_broadcasting():
    a = _single([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]])
    one = _single([[0.0, 0.0]])
    with pytest.raises(ValueError, match=r"\(3, 1, 2\) and \(1, 1, 2\)"):  # was [0, 5, 10], three "aligned" pairs
        pairwise_vector_l2_dist(a, one)
    with pytest.raises(ValueError, match=r"\(3, 1, 2\) and \(1, 1, 2\)"):
        VectorDist().pairwise_dist(a, one)


def test_vector_distances_refuse_several_vectors_a_paper_and_an_unselected_vector():
    two = DocBatch(torch.tensor([[[0.0, 0.0], [30.0, 40.0]]], dtype=torch.float64), torch.ones(1, 2, dtype=torch.bool),
                   ["m"])
    one = _single([[0.0, 0.0]])
    for fn in (vector_l2_dist, pairwise_vector_l2_dist):  # were 0: the paper's first sentence alone
        with pytest.raises(ValueError, match="single-vector papers"):
            fn(two, one)
    unselected = _single([[3.0, 4.0], [1.0, 1.0]], ids=["x", "y"], mask=[True, False])
    for fn in (vector_l2_dist, pairwise_vector_l2_dist):  # were 5 and sqrt(2): y's vector compared as a paper
        with pytest.raises(ValueError, match=r"\['y'\] of a have no selected vector"):
            fn(unselected, _single([[0.0, 0.0], [0.0, 0.0]]))
    # valid inputs still give the loop's distances
    a, b = _single([[0.0, 1.0], [2.0, -1.0]]), _single([[3.0, 5.0], [0.0, 0.0], [1.0, 1.0]])
    full = vector_l2_dist(a, b)
    for i in range(2):
        for j in range(3):
            ref = math.dist(a.emb[i, 0].tolist(), b.emb[j, 0].tolist())
            assert full[i, j].item() == pytest.approx(ref, abs=1e-9)
    assert pairwise_vector_l2_dist(a, b.index(torch.tensor([0, 2]))).tolist() == pytest.approx([5.0, math.sqrt(5)])


def test_mean_pooling_refuses_a_paper_with_no_selected_sentence_naming_it():
    emb = torch.arange(12, dtype=torch.float64).reshape(2, 3, 2)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    with pytest.raises(ValueError, match=r"no selected sentence in papers \['q'\]"):  # was a zero vector, mask True
        mean_pool_doc(DocBatch(emb, mask, ["p", "q"]))
    with pytest.raises(ValueError, match=r"no selected sentence in papers \[1\]"):  # no ids: the row
        mean_pool_doc(DocBatch(emb, mask))
    pooled = mean_pool_doc(DocBatch(emb[:1], mask[:1], ["p"]))
    assert pooled.emb[0, 0].tolist() == [1.0, 2.0] and pooled.mask.tolist() == [[True]]


def _loops(sim, mask, name, **kw):
    """Per-anchor losses of each matrix loss by explicit loops over its definition (float64 Python floats)."""
    B, K = sim.shape
    out = []
    for b in range(B):
        negs = [k for k in range(K) if k != b and mask[b, k]]
        sp, sn = sim[b, b].item(), [sim[b, k].item() for k in negs]
        if name == "mnrl":
            s = kw["scale"]
            zf = max([s * sp] + [s * x for x in sn])
            out.append(zf + math.log(sum(math.exp(s * x - zf) for x in [sp, *sn])) - s * sp)
        elif name == "ms":
            a, be, base = kw["alpha"], kw["beta"], kw["base"]
            pos = max(-a * (sp - base), 0) + math.log1p(math.exp(-abs(a * (sp - base))))
            top = max([0.0] + [be * (x - base) for x in sn])
            neg = top + math.log(math.exp(-top) + sum(math.exp(be * (x - base) - top) for x in sn))
            out.append(pos / a + neg / be)
        else:  # bce
            s, t = kw["scale"], kw["threshold"]
            softplus = lambda x: max(x, 0) + math.log1p(math.exp(-abs(x)))  # noqa: E731
            mean_neg = sum(softplus(s * (x - t)) for x in sn) / len(sn) if sn else 0.0
            out.append((softplus(-s * (sp - t)) + mean_neg) / 2)
    return out


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e4])
def test_matrix_losses_equal_their_loops_at_the_edges_of_their_settings_and_never_give_nan(scale):
    g = torch.Generator().manual_seed(3)
    sim = torch.randn(4, 6, dtype=torch.float64, generator=g).requires_grad_()
    mask = torch.rand(4, 6, generator=g) > 0.3
    mask[1] = False  # an all-masked row: a value, counted False, no NaN
    cases = [("mnrl", MultipleNegativesRankingLoss(scale=scale), {"scale": scale}),
             ("ms", MultiSimilarityLoss(alpha=scale, beta=scale, base=-0.2), {"alpha": scale, "beta": scale, "base": -0.2}),
             ("bce", PairBCELoss(scale=scale, threshold=0.1), {"scale": scale, "threshold": 0.1})]
    for name, loss, kw in cases:
        got, counted = loss(sim, mask)
        assert got.tolist() == pytest.approx(_loops(sim.detach(), mask, name, **kw), rel=1e-9, abs=1e-9), name
        assert counted.tolist() == [bool((mask[b] & (torch.arange(6) != b)).any()) for b in range(4)]
        (grad,) = torch.autograd.grad(masked_anchor_mean(got, counted), sim)
        assert torch.isfinite(grad).all() and torch.all(grad[1] == 0), name  # the left-out row adds nothing


def test_triplet_equals_its_loop_and_finite_differences_through_the_ot_term():
    """The otAspire objective end to end: triplet margin loss on the OT distance, gradients by finite differences
    in float64 (the implicit Sinkhorn gradient), and no gradient to a padded sentence."""
    g = torch.Generator().manual_seed(0)
    B, S, D = 3, 3, 2
    mask = torch.ones(B, S, dtype=torch.bool)
    mask[0, 2] = False
    mask[2, 1:] = False
    ot = ScorerDist(make_scorer("ot", ModelConfig(kind="ot", ot_eps=1.0, ot_tol=1e-10, ot_max_iter=5000)), "ot")
    neg_mask = ~torch.eye(B, dtype=torch.bool)
    neg_mask[1, 0] = False

    def loss(xa, xb):
        a, b = DocBatch(xa, mask), DocBatch(xb, mask)
        return triplet_margin_dist_loss(ot.pairwise_dist(a, b), ot.dist(a, b), neg_mask, margin=5.0)

    xa = torch.randn(B, S, D, dtype=torch.float64, generator=g).requires_grad_()
    xb = torch.randn(B, S, D, dtype=torch.float64, generator=g).requires_grad_()
    with torch.no_grad():
        a, b = DocBatch(xa, mask), DocBatch(xb, mask)
        pos, neg = ot.pairwise_dist(a, b), ot.dist(a, b)
    per_b = [sum(max(0.0, pos[i].item() - neg[i, k].item() + 5.0) for k in range(B) if neg_mask[i, k])
             / int(neg_mask[i].sum()) for i in range(B)]
    assert loss(xa, xb).item() == pytest.approx(sum(per_b) / B, rel=1e-12)
    assert triplet_margin_dist_per_anchor(pos, neg, neg_mask, 5.0)[0].tolist() == pytest.approx(per_b, rel=1e-12)
    assert torch.allclose(pos, neg.diagonal(), atol=1e-9)
    assert torch.autograd.gradcheck(loss, (xa, xb), atol=1e-5, rtol=1e-4, fast_mode=True)
    loss(xa, xb).backward()
    assert xa.grad[0, 2].abs().max() == 0 and xa.grad[2, 1:].abs().max() == 0
    assert xb.grad[0, 2].abs().max() == 0 and xb.grad[2, 1:].abs().max() == 0
