"""The whole-abstract cosine: one vector per paper (a `DocBatch` of one selected sentence slot a paper), compared by
cosine similarity. The evaluation's `abstract` scorer and the training term `cosine` both use it."""

from __future__ import annotations

import torch
from torch import Tensor

from aspire.batch import DocBatch
from aspire.scoring.distance import widened


def _check_vectors(a: DocBatch, b: DocBatch) -> None:
    """ValueError where the two sides' vectors cannot be compared (two widths: two models; two dtypes, or not
    floating point: integer vectors failed in the norm with torch's error), in place of a matmul's shape or dtype
    error. O(1)."""
    if a.emb.shape[-1] != b.emb.shape[-1] or a.emb.dtype != b.emb.dtype or not a.emb.dtype.is_floating_point:
        raise ValueError(f"query vectors are {a.emb.shape[-1]}-d {a.emb.dtype} and candidate vectors "
                         f"{b.emb.shape[-1]}-d {b.emb.dtype}: encode both with one model, in one floating-point dtype")


def _check_single(a: DocBatch, b: DocBatch, sides: tuple[str, str]) -> None:
    """ValueError unless both sides hold one selected vector a paper: a (B, S, D) batch of several sentences was read
    at its first sentence alone, and an unselected vector was compared as a paper (named by paper id, else row)."""
    if a.emb.shape[1] != 1 or b.emb.shape[1] != 1:
        raise ValueError(f"single-vector papers (B, 1, D) expected (one vector a paper: the abstract scorer's "
                         f"encodings, mean_pool_doc), got {sides[0]} {tuple(a.emb.shape)} and {sides[1]} "
                         f"{tuple(b.emb.shape)}")
    for side, batch in zip(sides, (a, b)):
        unselected = ~batch.mask[:, 0]
        if bool(unselected.any()):
            rows = unselected.nonzero().flatten().tolist()
            names = [batch.paper_ids[i] for i in rows] if batch.paper_ids else rows
            raise ValueError(f"papers {names} of the {side} have no selected vector")


def _unit(x: Tensor) -> Tensor:
    """x (..., D) over its L2 norm, in x's dtype, normalised in float32 for float16 / bfloat16 (F.normalize's 1e-12
    floor rounds to 0 in float16, so a zero vector came out NaN there). A vector whose norm overflows or falls below
    1e-12 is first divided by its largest |component| (in float32 a vector with components past ~1e19 had norm inf,
    unit vector 0, and one below ~1e-23 norm 0: both scored cosine 0 with everything, even with themselves); every
    other vector is divided by its norm directly, as before, to the bit. A zero vector, whose cosine is undefined, is
    scored as the vector 0 (cosine 0 with everything, distance 1) with gradient 0: through F.normalize's floor it had
    1e12 times the other side's unit vector (~1e11 a component), which one such paper in a batch put into every
    weight."""
    x_wide = widened(x)
    norm = x_wide.norm(dim=-1, keepdim=True)
    peak = x_wide.abs().amax(dim=-1, keepdim=True)
    zero = peak == 0
    rescaled = ~torch.isfinite(norm) | (norm < 1e-12)  # no device sync: both paths computed, one kept a row
    scaled = x_wide / torch.where(zero, torch.ones_like(peak), peak)  # largest |component| 1: norm in [1, sqrt(D)]
    scaled_norm = scaled.norm(dim=-1, keepdim=True)
    unit = torch.where(rescaled, scaled / torch.where(zero, torch.ones_like(scaled_norm), scaled_norm),
                       x_wide / torch.where(rescaled, torch.ones_like(norm), norm))
    return torch.where(zero, torch.zeros_like(unit), unit).to(x.dtype)


class VectorCosine:
    """Cosine of single-vector papers (B, 1, D): `score` all pairs (Bq, Bc), `pairwise_score` aligned pairs (B,);
    similarities, higher is better; `dist` / `pairwise_dist` are 1 - cosine. An all-zero vector scores cosine 0 with
    everything (distance 1), with gradient 0 (`_unit`). ValueError for more than one vector a paper or an unselected
    one, naming the papers."""

    def score(self, queries: DocBatch, cands: DocBatch) -> Tensor:
        _check_vectors(queries, cands)
        _check_single(queries, cands, ("queries", "candidates"))
        q = _unit(queries.emb[:, 0])  # (Bq, D)
        c = _unit(cands.emb[:, 0])  # (Bc, D)
        return q @ c.T  # (Bq, Bc)

    def pairwise_score(self, a: DocBatch, b: DocBatch) -> Tensor:
        if len(a) != len(b):  # else one paper against B would broadcast into B "aligned" scores
            raise ValueError(f"pairwise scoring needs equal batch sizes, got {len(a)} and {len(b)}")
        _check_vectors(a, b)
        _check_single(a, b, ("first papers", "second papers"))
        return (_unit(a.emb[:, 0]) * _unit(b.emb[:, 0])).sum(dim=-1)  # (B,)

    def dist(self, queries: DocBatch, cands: DocBatch) -> Tensor:
        return 1 - self.score(queries, cands)

    def pairwise_dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        return 1 - self.pairwise_score(a, b)
