"""Round 13, the training losses: checked against brute-force loops, torch's own losses and invariants (batch order,
padding columns, dtype), and the `loss` settings reaching the loss that reads them."""

import math

import pytest
import torch
import torch.nn.functional as F

from aspire.batch import DocBatch
from aspire.losses import LOSS_KEYS, MATRIX_LOSSES, masked_anchor_mean, mean_pool_doc, triplet_margin_dist_per_anchor
from aspire.losses.bce import PairBCELoss
from aspire.losses.multi_similarity import MultiSimilarityLoss
from aspire.losses.ranking import MultipleNegativesRankingLoss
from aspire.losses.registry import matrix_loss
from aspire.scoring import get_scorer
from aspire.train.config import LossConfig
from aspire.train.terms import PassCosine, ScorerDist, VectorDist

B, K = 5, 8


def _matrix(seed=0):
    g = torch.Generator().manual_seed(seed)
    sim = torch.randn(B, K, dtype=torch.float64, generator=g)
    mask = torch.rand(B, K, generator=g) > 0.3
    mask[2] = False  # anchor 2 has no forward negative
    mask[:, 2] = False  # and no anchor may take positive 2 as a negative: it counts in neither direction
    mask[4, :] = False  # anchor 4 has no forward negative, but anchor 0 may take positive 4 as one
    mask[0, 4] = True
    return sim, mask


def _mnrl_loop(sim, mask, scale, symmetric):
    """Per-anchor loss and which anchors count, by loops over the definition."""
    losses, counts = [], []
    for b in range(B):
        fwd = [b] + [k for k in range(K) if k != b and mask[b, k]]
        loss = torch.logsumexp(scale * sim[b, fwd], 0) - scale * sim[b, b]
        has = len(fwd) > 1
        if symmetric:
            back = [b] + [a for a in range(B) if a != b and mask[a, b]]
            loss = (loss + torch.logsumexp(scale * sim[back, b], 0) - scale * sim[b, b]) / 2
            has = has or len(back) > 1
        losses.append(loss)
        counts.append(has)
    return torch.stack(losses), torch.tensor(counts)


@pytest.mark.parametrize("symmetric", [False, True])
def test_mnrl_with_a_mask_equals_the_loop_and_counts_every_anchor_with_a_negative_either_way(symmetric):
    sim, mask = _matrix()
    loss, valid = MultipleNegativesRankingLoss(scale=7.0, symmetric=symmetric)(sim, mask)
    ref, ref_valid = _mnrl_loop(sim, mask, 7.0, symmetric)
    assert torch.allclose(loss, ref)
    assert valid.tolist() == ref_valid.tolist()


def test_symmetric_mnrl_keeps_the_backward_term_of_an_anchor_whose_own_row_masks_everything():
    # anchor 0 is co-cited with positive 1 (no forward negative), but anchor 1 may take positive 0 as a negative:
    # the pair (positive 0, anchor 1) must train, as in sentence-transformers' symmetric loss
    sim = torch.tensor([[0.9, 0.2], [0.7, 0.8]], dtype=torch.float64)
    mask = torch.tensor([[False, False], [True, False]])
    loss, valid = MultipleNegativesRankingLoss(scale=1.0, symmetric=True)(sim, mask)
    backward = (torch.logsumexp(sim[:, 0], 0) - sim[0, 0]) / 2
    assert loss[0].item() == pytest.approx(backward.item())
    assert valid.tolist() == [True, True]
    assert masked_anchor_mean(loss, valid).item() == pytest.approx(loss.mean().item())


def test_multi_similarity_and_pair_bce_with_a_mask_equal_their_definitions():
    sim, mask = _matrix(1)
    ms, ms_valid = MultiSimilarityLoss(alpha=2.0, beta=10.0, base=0.3)(sim, mask)
    bce, bce_valid = PairBCELoss(scale=3.0, threshold=0.2)(sim, mask)
    for b in range(B):
        negs = [k for k in range(K) if k != b and mask[b, k]]
        ms_ref = (math.log1p(math.exp(-2.0 * (sim[b, b] - 0.3))) / 2.0
                  + math.log1p(sum(math.exp(10.0 * (sim[b, k] - 0.3)) for k in negs)) / 10.0)
        assert ms[b].item() == pytest.approx(ms_ref)
        logits = 3.0 * (sim[b] - 0.2)
        pos = F.binary_cross_entropy_with_logits(logits[b], torch.tensor(1.0, dtype=torch.float64))
        neg = (F.binary_cross_entropy_with_logits(logits[negs], torch.zeros(len(negs), dtype=torch.float64))
               if negs else torch.tensor(0.0, dtype=torch.float64))
        assert bce[b].item() == pytest.approx(((pos + neg) / 2).item())
        assert bool(ms_valid[b]) == bool(bce_valid[b]) == bool(negs)


LOSSES = [MultipleNegativesRankingLoss(5.0), MultipleNegativesRankingLoss(5.0, symmetric=True), MultiSimilarityLoss(),
          PairBCELoss()]


@pytest.mark.parametrize("loss", LOSSES, ids=["mnrl", "mnrl-symmetric", "ms", "bce"])
def test_matrix_losses_follow_the_batch_order_ignore_masked_columns_and_agree_across_dtypes(loss):
    sim, mask = _matrix(2)
    perm = torch.tensor([3, 0, 4, 1, 2])
    cols = torch.cat([perm, torch.arange(B, K)])
    base, valid = loss(sim, mask)
    shuffled, shuffled_valid = loss(sim[perm][:, cols], mask[perm][:, cols])
    assert torch.allclose(base[perm], shuffled) and torch.equal(valid[perm], shuffled_valid)
    # three more columns, masked and NaN: same value, no gradient to them
    padded = torch.cat([sim, torch.full((B, 3), float("nan"), dtype=torch.float64)], 1).requires_grad_()
    wide_mask = torch.cat([mask, torch.zeros(B, 3, dtype=torch.bool)], 1)
    wide, _ = loss(padded, wide_mask)
    (grad,) = torch.autograd.grad(masked_anchor_mean(wide, valid), padded)
    assert torch.allclose(wide, base) and torch.all(grad[:, K:] == 0) and torch.isfinite(grad).all()
    assert torch.allclose(loss(sim.float(), mask)[0].double(), base, atol=1e-4)


def test_triplet_refuses_distances_of_the_wrong_rank_instead_of_broadcasting():
    pos, neg, mask = torch.tensor([1.0, 2.0, 3.0]), torch.full((3, 1), 2.0), torch.ones(3, 1, dtype=torch.bool)
    per_anchor, valid = triplet_margin_dist_per_anchor(pos, neg, mask, 1.0)
    assert per_anchor.tolist() == [0.0, 1.0, 2.0] and masked_anchor_mean(per_anchor, valid).item() == 1.0
    with pytest.raises(ValueError, match="shapes differ"):  # was a (3, 3) "per-anchor" loss and a mean of 9
        triplet_margin_dist_per_anchor(pos[:, None], neg, mask, 1.0)
    with pytest.raises(ValueError, match="one \\(B,\\) shape"):
        masked_anchor_mean(per_anchor[:, None], valid)


def test_one_negative_triplet_equals_torchs_triplet_loss():
    g = torch.Generator().manual_seed(3)
    a, p, n = (torch.randn(6, 4, dtype=torch.float64, generator=g) for _ in range(3))
    ref = F.triplet_margin_with_distance_loss(a, p, n, distance_function=lambda x, y: (x - y).norm(dim=-1), margin=0.7)
    per_anchor, valid = triplet_margin_dist_per_anchor((a - p).norm(dim=-1), (a - n).norm(dim=-1)[:, None],
                                                       torch.ones(6, 1, dtype=torch.bool), 0.7)
    assert masked_anchor_mean(per_anchor, valid).item() == pytest.approx(ref.item())


@pytest.mark.parametrize("kind", sorted(MATRIX_LOSSES))
def test_every_setting_of_a_matrix_loss_reaches_it(kind):
    cls = MATRIX_LOSSES[kind]
    assert set(cls.SETTINGS.values()) == set(LOSS_KEYS[kind])
    values = {"scale": 3.0, "symmetric": True, "teacher_scale": 4.0, "term_scale": {"ot": 2.0}, "ms_alpha": 1.5,
              "ms_beta": 7.0, "ms_base": 0.25, "bce_threshold": 0.1}
    built = matrix_loss(LossConfig(kind=kind, **{key: values[key] for key in LOSS_KEYS[kind]}))
    for arg, key in cls.SETTINGS.items():
        assert getattr(built, arg) == values[key], (kind, key)


def test_training_terms_ignore_padded_sentences_in_value_and_gradient():
    def docs(extra):
        g = torch.Generator().manual_seed(4)
        emb = torch.randn(3, 4, 5, dtype=torch.float64, generator=g)
        whole = torch.randn(3, 5, dtype=torch.float64, generator=g)
        mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
        emb = torch.cat([emb, torch.randn(3, extra, 5, dtype=torch.float64, generator=g)], 1)
        mask = torch.cat([mask, torch.zeros(3, extra, dtype=torch.bool)], 1)
        emb = emb.masked_fill(~mask[..., None], float("nan")) if extra else emb  # padding holding NaN
        return DocBatch(emb.requires_grad_(), mask, whole=whole)

    for term in (VectorDist(), PassCosine("facet"), ScorerDist(get_scorer("minl2"), "minl2")):
        sims = []
        for extra in (0, 2):
            a, b = docs(extra), docs(extra)
            a_in, b_in = (mean_pool_doc(a), mean_pool_doc(b)) if isinstance(term, VectorDist) else (a, b)
            sim = term.sim(a_in, b_in)
            # all-pairs L2 expands |a|^2 + |b|^2 - 2ab (`cross_l2_cost`): a vector against itself is sqrt of a rounding
            # error, 1.5e-8 in float64 on some CPUs' BLAS, where the pairwise form gives 0
            assert torch.allclose(sim.diagonal(), term.pairwise_sim(a_in, b_in), atol=1e-6)
            (grad,) = torch.autograd.grad(sim.sum(), a.emb)
            assert torch.all(grad[~a.mask] == 0) and torch.isfinite(grad).all()
            sims.append(sim.detach())
        assert torch.allclose(sims[0], sims[1]), term
