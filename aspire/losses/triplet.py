"""The triplet margin loss over distances and the helpers every loss shares (in-batch negative masks,
the masked anchor mean, aligned-sentence and single-vector distances).

Sign convention: scorers return similarities (higher is better, `sim = -dist`); every function
here that takes or returns *distances* says `dist` in its name. The triplet margin loss is
`max(0, d(a, p) - d(a, n) + margin)`: it is zero once the negative is `margin` farther than
the positive, and it pushes the positive closer otherwise.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor, nn

from aspire.batch import DocBatch
from aspire.scoring.distance import cross_l2_cost


def triplet_margin_dist_per_anchor(pos_dist: Tensor, neg_dist: Tensor, neg_mask: Tensor,
                                   margin: float = 1.0) -> tuple[Tensor, Tensor]:
    """Triplet margin loss of each anchor, averaged over its allowed negatives.

    Args:
        pos_dist: (B,) distance of each anchor to its positive.
        neg_dist: (B, K) distance of each anchor to K candidate negatives.
        neg_mask: (B, K) bool, True where candidate k is an allowed negative of anchor b.
        margin: the margin (1 in the paper): a finite number >= 0, else ValueError (`loss.margin`).

    Returns:
        per_anchor (B,): the mean of `relu(pos_dist[b] - neg_dist[b, k] + margin)` over anchor b's
        allowed negatives (0 where it has none), and valid (B,) bool: the anchor has a negative.
    """
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not math.isfinite(margin) or margin < 0:
        # a NaN margin gives a NaN loss, an infinite one an infinite loss, a negative one a loss that is 0 while
        # the negative is nearer than the positive
        raise ValueError(f"loss.margin must be a finite number >= 0, got {margin!r}")
    # a (B, 1) pos_dist would broadcast against neg_dist into a (B, B, K) hinge and a silently wrong loss
    if pos_dist.dim() != 1 or neg_dist.dim() != 2 or neg_dist.shape != neg_mask.shape or neg_dist.shape[0] != pos_dist.shape[0]:
        raise ValueError(f"shapes differ: pos {tuple(pos_dist.shape)}, neg {tuple(neg_dist.shape)}, "
                         f"mask {tuple(neg_mask.shape)}")
    if neg_mask.dtype != torch.bool:  # else masked_fill's error, naming no argument
        raise ValueError(f"neg_mask must be a bool tensor, got {neg_mask.dtype}")
    hinge = torch.relu(pos_dist[:, None] - neg_dist + margin)  # (B, K)
    hinge = hinge.masked_fill(~neg_mask, 0.0)
    count = neg_mask.sum(dim=1)  # (B,)
    return hinge.sum(dim=1) / count.clamp(min=1), count > 0


def masked_anchor_mean(per_anchor: Tensor, valid: Tensor) -> Tensor:
    """() mean of `per_anchor` (B,) over the `valid` (B,) bool anchors; zero, keeping the graph, if none is. What a
    left-out anchor holds (even NaN or inf) changes neither the mean nor its gradient. ValueError where the two are
    not one (B,) shape (a (B, 1) loss times a (B,) mask would broadcast to (B, B)) or `valid` is not bool."""
    if per_anchor.dim() != 1 or per_anchor.shape != valid.shape:
        raise ValueError(f"per-anchor loss {tuple(per_anchor.shape)} and valid {tuple(valid.shape)} must be one (B,) shape")
    if valid.dtype != torch.bool:  # else torch.where's error, naming no argument
        raise ValueError(f"valid must be a bool tensor, got {valid.dtype}")
    # selected, not multiplied by the mask: an inf or NaN loss of a left-out anchor times 0 is NaN
    return torch.where(valid, per_anchor, per_anchor.new_zeros(())).sum() / valid.sum().clamp(min=1)


def triplet_margin_dist_loss(pos_dist: Tensor, neg_dist: Tensor, neg_mask: Tensor, margin: float = 1.0) -> Tensor:
    """Mean triplet margin loss over the allowed (anchor, negative) pairs.

    Shapes as in `triplet_margin_dist_per_anchor`. Returns () the mean over anchors of each anchor's
    mean over its negatives (each anchor weighted equally). Anchors without any allowed negative are
    left out; a batch with none at all gives a zero that keeps the graph.
    """
    return masked_anchor_mean(*triplet_margin_dist_per_anchor(pos_dist, neg_dist, neg_mask, margin))


def in_batch_negative_mask(group_ids: Tensor, cand_ids: Tensor) -> Tensor:
    """Which in-batch candidates may serve as an anchor's negative.

    A candidate is allowed unless it is one of the anchor's members (`aspire.train.data.Example.members`:
    for a co-cited pair, the anchor, its positive, every other paper of the sets holding the pair and every
    paper co-cited with the anchor elsewhere in its split, each with its other versions).

    Args:
        group_ids: (B, G) long, the integer paper ids of each anchor's members, padded with -1.
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
    if K == 0:  # argmax over no candidates (an empty batch's (0, 0)) was an IndexError
        return torch.zeros(B, dtype=torch.long, device=allowed.device), torch.zeros(B, dtype=torch.bool,
                                                                                  device=allowed.device)
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

    ValueError where an index is not one (B,) row (a (B, 1) one gave (B, B) distances), the four lengths differ or
    an index is outside 0..S-1 (a -1, the data's "no aligned sentence", would count from the end) or points at a
    padded or unselected sentence.
    """
    if a_idx.dim() != 1 or b_idx.dim() != 1:
        raise ValueError(f"aligned positions must be (B,), got {tuple(a_idx.shape)} and {tuple(b_idx.shape)}")
    if not len(a) == len(b) == len(a_idx) == len(b_idx):
        raise ValueError(f"aligned pairs of {len(a)} and {len(b)} papers with {len(a_idx)} and {len(b_idx)} positions")
    rows = torch.arange(len(a), device=a.emb.device)
    S_a, S_b = a.mask.shape[1], b.mask.shape[1]
    a_in = (a_idx >= 0) & (a_idx < S_a)
    b_in = (b_idx >= 0) & (b_idx < S_b)
    # an index out of range reads an added False column (clamped into 0..S-1 it was an IndexError for S = 0)
    a_ok = nn.functional.pad(a.mask, (0, 1))[rows, torch.where(a_in, a_idx, S_a)]
    b_ok = nn.functional.pad(b.mask, (0, 1))[rows, torch.where(b_in, b_idx, S_b)]
    if not bool((a_ok & b_ok).all()):
        raise ValueError("an aligned sentence index is out of range or points at a padded or unselected sentence")
    diff = a.emb[rows, a_idx] - b.emb[rows, b_idx]  # (B, D)
    return torch.linalg.vector_norm(diff, dim=-1)


def _paper_names(batch: DocBatch, rows: Tensor) -> list:
    """The paper ids of `rows` (B,) bool of `batch`, or their row numbers where the batch has no ids."""
    picked = rows.nonzero().flatten().tolist()
    return [batch.paper_ids[i] for i in picked] if batch.paper_ids else picked


def mean_pool_doc(batch: DocBatch) -> DocBatch:
    """One vector a paper: the mean of its selected sentence vectors, as a (B, 1, D) DocBatch. ValueError naming the
    papers with no selected sentence (their vector would be a made-up zero, compared as a real paper)."""
    empty = ~batch.mask.any(dim=1)  # (B,)
    if bool(empty.any()):
        raise ValueError(f"mean pooling: no selected sentence in papers {_paper_names(batch, empty)}")
    weights = batch.mask.to(batch.emb.dtype)  # (B, S)
    kept = batch.emb.masked_fill(~batch.mask[..., None], 0.0)  # a non-finite left-out row would give 0 * inf = NaN
    pooled = kept.sum(dim=1) / weights.sum(dim=1, keepdim=True).clamp(min=1)  # (B, D)
    mask = torch.ones(len(batch), 1, dtype=torch.bool, device=batch.emb.device)
    return DocBatch(pooled[:, None, :], mask, batch.paper_ids, batch.sentences)


def _check_single_vectors(a: DocBatch, b: DocBatch, aligned: bool) -> None:
    """ValueError unless `a` and `b` hold one selected vector a paper (and, `aligned`, as many papers each): a
    (B, S, D) batch was read at its first sentence alone, an unselected vector was compared as a paper, and one
    paper against B was broadcast into B "aligned" distances."""
    if a.emb.shape[1] != 1 or b.emb.shape[1] != 1 or (aligned and len(a) != len(b)):
        want = "(B, 1, D), (B, 1, D)" if aligned else "(Bq, 1, D), (Bc, 1, D)"
        raise ValueError(f"single-vector papers {want} expected (mean_pool_doc), got {tuple(a.emb.shape)} and "
                         f"{tuple(b.emb.shape)}")
    for side, batch in (("a", a), ("b", b)):
        if not bool(batch.mask.all()):
            raise ValueError(f"papers {_paper_names(batch, ~batch.mask[:, 0])} of {side} have no selected vector")


def vector_l2_dist(a: DocBatch, b: DocBatch) -> Tensor:
    """All-pairs L2 distance between single-vector papers: (Bq, 1, D), (Bc, 1, D) -> (Bq, Bc). ValueError for more
    than one vector a paper or an unselected one."""
    _check_single_vectors(a, b, aligned=False)
    return cross_l2_cost(a.emb, b.emb)[:, :, 0, 0]


def pairwise_vector_l2_dist(a: DocBatch, b: DocBatch) -> Tensor:
    """Aligned-pair L2 distance between single-vector papers: (B, 1, D), (B, 1, D) -> (B,). ValueError for two batch
    sizes, more than one vector a paper or an unselected one."""
    _check_single_vectors(a, b, aligned=True)
    return torch.linalg.vector_norm(a.emb[:, 0] - b.emb[:, 0], dim=-1)
