"""What every scorer shares: the input check and the base class whose `score` is minus its distance.

Sign convention (`aspire.scoring.scorers`): `score` / `pairwise_score` return similarities, higher is
better, equal to minus the `dist` / `pairwise_dist` a subclass's match objects carry.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aspire.batch import DocBatch


def _check_inputs(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor, aligned: bool | None = None) -> None:
    """ValueError where queries and candidates cannot be compared: vectors of two widths (two models), of two dtypes
    or not floating point, or a row with no sentence selected. Batches (`aligned` False: all pairs, True: aligned
    rows) are also checked for bool masks shaped (B, S) like their vectors and, aligned, for one batch size: either
    would be broadcast into scores of other papers (a (B, 1) mask read as every sentence's, one query against B
    candidates returned as B aligned pairs); shapes only, ~1 us. `aligned` None: vectors in store form (no batch)."""
    if aligned is not None:
        qs, cs = q_emb.shape, c_emb.shape
        for name, shape, mask in (("query", qs, q_mask), ("candidate", cs, c_mask)):
            if mask.shape != shape[:-1]:
                raise ValueError(f"{name} mask shape {tuple(mask.shape)} does not match its vectors' (B, S) "
                                 f"{tuple(shape[:-1])}")
            if mask.dtype != torch.bool:  # a 0/1 integer mask failed deep in a masked_fill or where
                raise ValueError(f"{name} mask must be bool (True: a sentence), got {mask.dtype}")
        if aligned and qs[0] != cs[0]:
            raise ValueError(f"pairwise scoring needs equal batch sizes, got {qs[0]} queries and {cs[0]} candidates")
    if q_emb.shape[-1] != c_emb.shape[-1]:
        raise ValueError(f"query vectors are {q_emb.shape[-1]}-d and candidate vectors {c_emb.shape[-1]}-d: "
                         "encode both with one model")
    if q_emb.dtype != c_emb.dtype or not q_emb.dtype.is_floating_point:
        raise ValueError(f"query vectors are {q_emb.dtype} and candidate vectors {c_emb.dtype}: give both one "
                         "floating-point dtype")
    for name, mask in (("query", q_mask), ("candidate", c_mask)):
        empty = ~mask.any(-1)
        if bool(empty.any()):
            raise ValueError(f"{name} rows {empty.nonzero().flatten()[:5].tolist()} have no sentence selected")


def zero_padding(emb: Tensor, mask: Tensor) -> Tensor:
    """emb (..., S, D) with the sentences where mask (..., S) is off set to 0.

    A masked sentence carries no mass, but its vector still enters the distance GEMM and the sums: a NaN or inf
    there (a caller's own DocBatch; the encoders write zeros) made every score of its paper NaN, and every gradient
    of the batch. Where it is selected out, its value cannot matter, and its gradient is 0."""
    return torch.where(mask[..., None], emb, 0.0)


class _Scorer(nn.Module):
    """Base: `score` (Bq, Bc) and `pairwise_score` (B,) are similarities = -distance.

    Subclasses define `dist_details` / `pairwise_dist_details` (a match object with `.dist`).
    """

    def dist_details(self, queries: DocBatch, cands: DocBatch):
        raise NotImplementedError

    def pairwise_dist_details(self, queries: DocBatch, cands: DocBatch):
        raise NotImplementedError

    def dist(self, queries: DocBatch, cands: DocBatch) -> Tensor:
        """(Bq, Bc) distances, lower is closer; (0, Bc) or (Bq, 0) for an empty side, whatever its sentence slots (a
        hand-built (0, 0, D) batch has none to reduce over: min-L2, OT and max-passage raised IndexError)."""
        if len(queries) == 0 or len(cands) == 0:
            _check_inputs(queries.emb, queries.mask, cands.emb, cands.mask, aligned=False)
            return queries.emb.new_zeros(len(queries), len(cands))
        return self.dist_details(queries, cands).dist

    def pairwise_dist(self, queries: DocBatch, cands: DocBatch) -> Tensor:
        """(B,) distances of aligned rows, lower is closer; ValueError for two batch sizes (a scorer of its own,
        maxpassage's, would broadcast one query over every candidate)."""
        if len(queries) != len(cands):
            raise ValueError(f"pairwise scoring needs equal batch sizes, got {len(queries)} and {len(cands)}")
        if len(queries) == 0:
            _check_inputs(queries.emb, queries.mask, cands.emb, cands.mask, aligned=True)
            return queries.emb.new_zeros(0)
        return self.pairwise_dist_details(queries, cands).dist

    def score(self, queries: DocBatch, cands: DocBatch) -> Tensor:
        """(Bq, Bc) similarity, higher is better (= -dist)."""
        return -self.dist(queries, cands)

    def pairwise_score(self, queries: DocBatch, cands: DocBatch) -> Tensor:
        """(B,) similarity of aligned rows, higher is better (= -pairwise_dist)."""
        return -self.pairwise_dist(queries, cands)
