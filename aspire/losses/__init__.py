"""Training losses and the in-batch negative bookkeeping.

This module holds the triplet margin loss over distances (lower = closer) and the helpers every loss
shares; the in-batch ranking losses, which take a similarity matrix, are one module each:
`ranking` (multiple-negatives ranking / InfoNCE, optionally symmetric), `multi_similarity`,
`bce` (binary cross-entropy on labelled pairs). `MATRIX_LOSSES` names them for the trainer.

Sign convention: scorers return similarities (higher is better, `sim = -dist`); every function
here takes or returns *distances* and says `dist` in its name. The triplet margin loss is
`max(0, d(a, p) - d(a, n) + margin)`: it is zero once the negative is `margin` farther than
the positive, and it pushes the positive closer otherwise.
"""

from __future__ import annotations

import torch
from torch import Tensor

from aspire.batch import DocBatch
from aspire.scoring.distance import cross_l2_cost


def triplet_margin_dist_per_anchor(pos_dist: Tensor, neg_dist: Tensor, neg_mask: Tensor,
                                   margin: float = 1.0) -> tuple[Tensor, Tensor]:
    """Triplet margin loss of each anchor, averaged over its allowed negatives.

    Args:
        pos_dist: (B,) distance of each anchor to its positive.
        neg_dist: (B, K) distance of each anchor to K candidate negatives.
        neg_mask: (B, K) bool, True where candidate k is an allowed negative of anchor b.
        margin: the margin (1 in the paper).

    Returns:
        per_anchor (B,): the mean of `relu(pos_dist[b] - neg_dist[b, k] + margin)` over anchor b's
        allowed negatives (0 where it has none), and valid (B,) bool: the anchor has a negative.
    """
    if neg_dist.shape != neg_mask.shape or neg_dist.shape[0] != pos_dist.shape[0]:
        raise ValueError(f"shapes differ: pos {tuple(pos_dist.shape)}, neg {tuple(neg_dist.shape)}, "
                         f"mask {tuple(neg_mask.shape)}")
    hinge = torch.relu(pos_dist[:, None] - neg_dist + margin)  # (B, K)
    hinge = hinge.masked_fill(~neg_mask, 0.0)
    count = neg_mask.sum(dim=1)  # (B,)
    return hinge.sum(dim=1) / count.clamp(min=1), count > 0


def masked_anchor_mean(per_anchor: Tensor, valid: Tensor) -> Tensor:
    """() mean of `per_anchor` (B,) over the `valid` (B,) anchors; zero, keeping the graph, if none is."""
    return (per_anchor * valid).sum() / valid.sum().clamp(min=1)


def triplet_margin_dist_loss(pos_dist: Tensor, neg_dist: Tensor, neg_mask: Tensor, margin: float = 1.0) -> Tensor:
    """Mean triplet margin loss over the allowed (anchor, negative) pairs.

    Shapes as in `triplet_margin_dist_per_anchor`. Returns () the mean over anchors of each anchor's
    mean over its negatives (each anchor weighted equally). Anchors without any allowed negative are
    left out; a batch with none at all gives a zero that keeps the graph.
    """
    return masked_anchor_mean(*triplet_margin_dist_per_anchor(pos_dist, neg_dist, neg_mask, margin))


def in_batch_negative_mask(group_ids: Tensor, cand_ids: Tensor) -> Tensor:
    """Which in-batch candidates may serve as an anchor's negative.

    A candidate is allowed unless it is a paper of the anchor's own co-cited set (which holds the
    anchor, its positive and every other paper cited with them).

    Args:
        group_ids: (B, G) long, the integer paper ids of each anchor's co-cited set, padded with -1.
        cand_ids: (K,) long, the integer paper id of each candidate.

    Returns:
        (B, K) bool, True where candidate k is an allowed negative of anchor b.
    """
    same = cand_ids[None, :, None] == group_ids[:, None, :]  # (B, K, G)
    return ~same.any(dim=-1)


def pick_one_negative(allowed: Tensor) -> tuple[Tensor, Tensor]:
    """One negative per anchor: the first allowed candidate after the anchor's own row, cyclically.

    The batch order is a seeded random permutation, so "the next allowed one" is a random
    in-batch negative, chosen without a Python loop.

    Args:
        allowed: (B, K) bool from `in_batch_negative_mask` (K = B, candidate b = example b's positive).

    Returns:
        index (B,) long, the chosen candidate (arbitrary where none is allowed), and
        valid (B,) bool, False for anchors with no allowed candidate.
    """
    B, K = allowed.shape
    offsets = torch.arange(1, K + 1, device=allowed.device)  # (K,) 1..K, the anchor's own row last
    order = (torch.arange(B, device=allowed.device)[:, None] + offsets[None, :]) % K  # (B, K)
    rolled = allowed.gather(1, order)  # (B, K)
    first = rolled.to(torch.int8).argmax(dim=1)  # (B,) first True (0 if none)
    return order.gather(1, first[:, None]).squeeze(1), rolled.any(dim=1)


def aligned_sentence_dist(a: DocBatch, b: DocBatch, a_idx: Tensor, b_idx: Tensor) -> Tensor:
    """L2 distance between one chosen sentence of each paper (the co-citation-aligned pair).

    Args:
        a, b: DocBatch (B, S_a, D) and (B, S_b, D).
        a_idx, b_idx: (B,) long, the aligned sentence position in a[i] and in b[i].

    Returns:
        (B,) `||a.emb[i, a_idx[i]] - b.emb[i, b_idx[i]]||_2`.
    """
    rows = torch.arange(len(a), device=a.emb.device)
    if not bool(a.mask[rows, a_idx].all() and b.mask[rows, b_idx].all()):
        raise ValueError("an aligned sentence index points at a padded or unselected sentence")
    diff = a.emb[rows, a_idx] - b.emb[rows, b_idx]  # (B, D)
    return torch.linalg.vector_norm(diff, dim=-1)


def mean_pool_doc(batch: DocBatch) -> DocBatch:
    """One vector a paper: the mean of its selected sentence vectors, as a (B, 1, D) DocBatch."""
    weights = batch.mask.to(batch.emb.dtype)  # (B, S)
    pooled = (batch.emb * weights[..., None]).sum(dim=1) / weights.sum(dim=1, keepdim=True).clamp(min=1)  # (B, D)
    mask = torch.ones(len(batch), 1, dtype=torch.bool, device=batch.emb.device)
    return DocBatch(pooled[:, None, :], mask, batch.paper_ids, batch.sentences)


def vector_l2_dist(a: DocBatch, b: DocBatch) -> Tensor:
    """All-pairs L2 distance between single-vector papers: (Bq, 1, D), (Bc, 1, D) -> (Bq, Bc)."""
    return cross_l2_cost(a.emb, b.emb)[:, :, 0, 0]


def pairwise_vector_l2_dist(a: DocBatch, b: DocBatch) -> Tensor:
    """Aligned-pair L2 distance between single-vector papers: (B, 1, D), (B, 1, D) -> (B,)."""
    return torch.linalg.vector_norm(a.emb[:, 0] - b.emb[:, 0], dim=-1)


from aspire.losses.bce import PairBCELoss  # noqa: E402  (the modules below import the helpers above)
from aspire.losses.multi_similarity import MultiSimilarityLoss  # noqa: E402
from aspire.losses.ranking import MultipleNegativesRankingLoss  # noqa: E402

# loss.kind -> the module computing it from a (B, K) similarity matrix (see `aspire.losses.ranking`). Each class
# names its settings: SETTINGS maps a constructor argument to the key of the `loss` config section it reads
# (`matrix_loss`). A new objective is one module here and one line in this registry.
MATRIX_LOSSES = {"mnrl": MultipleNegativesRankingLoss, "multi_similarity": MultiSimilarityLoss, "bce": PairBCELoss}
LOSS_KINDS = ("triplet", *MATRIX_LOSSES)  # loss.kind: the triplet margin loss over distances, or a matrix loss


def matrix_loss(loss_cfg):
    """The matrix loss `loss_cfg.kind` names, built with the `loss` settings its class names (`SETTINGS`);
    None for `triplet`; ValueError listing the kinds for an unknown one."""
    if loss_cfg.kind == "triplet":
        return None
    if loss_cfg.kind not in MATRIX_LOSSES:
        raise ValueError(f"unknown loss kind {loss_cfg.kind!r}; valid: {', '.join(LOSS_KINDS)}")
    cls = MATRIX_LOSSES[loss_cfg.kind]
    return cls(**{arg: getattr(loss_cfg, key) for arg, key in cls.SETTINGS.items()})
