"""Scorers comparing two papers' sentence sets: single match, OT multi match, attention.

Sign convention, stated once: a scorer's `score` / `pairwise_score` return a *similarity* (higher
is better) equal to minus a distance; every function or method returning a distance has `dist` in
its name. All-pairs forms compare every query with every candidate, `(Bq, Bc)`; `pairwise_` forms
compare row i with row i, `(B,)`. The cost between two sentences is their L2 distance.

Padding: padded (or, for aspect-conditional queries, unselected) sentences carry zero mass in OT
and attention and are masked with +inf in min-L2; their vectors are read as zeros
(`base.zero_padding`), so what a caller's batch holds there (even NaN) changes no score and gets no gradient.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
from torch import Tensor

from aspire.batch import DocBatch
from aspire.config import is_whole
from aspire.encoders.pooling import masked_mean
from aspire.scoring.base import _check_inputs, _Scorer, zero_padding
from aspire.scoring.distance import (
    _HALF,
    as_store,
    compiled_cost,
    compiled_weights,
    cross_l2_cost,
    gathered_l2_minima,
    gathered_l2_weights,
    l2_cost,
    widened,
)
from aspire.scoring.passage import MaxPassageScorer
from aspire.scoring.sinkhorn import GRAD_MODES, sinkhorn
from aspire.scoring.vector import _unit


def _all_pairs(q_mask: Tensor, c_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Masks (Bq, S), (Bc, T) -> broadcast (Bq, Bc, S), (Bq, Bc, T)."""
    Bq, Bc = q_mask.shape[0], c_mask.shape[0]
    return q_mask[:, None, :].expand(Bq, Bc, -1), c_mask[None, :, :].expand(Bq, Bc, -1)


# ---- single match: minimum L2 ------------------------------------------------------------------
@dataclass
class MinL2Match:
    """Min-L2 distances with the matched sentence pair. Shapes (...) = (Bq, Bc) or (B,)."""

    dist: Tensor  # (...) min over valid sentence pairs of the L2 distance
    query_sent: Tensor  # (...) long, index of the matched query sentence
    cand_sent: Tensor  # (...) long, index of the matched candidate sentence


def _minl2_from_cost(cost: Tensor, q_mask: Tensor, c_mask: Tensor) -> MinL2Match:
    """cost (..., S, T), q_mask (..., S), c_mask (..., T) -> MinL2Match of shape (...).

    Masked pairs are +inf, and where every valid pair is +inf too (a distance past the dtype's range: float16 from
    65504) the match is the first valid pair: masked with the dtype's largest finite value, such a paper came out
    that far (65504, not inf) and matched through a masked sentence."""
    valid = q_mask[..., :, None] & c_mask[..., None, :]  # (..., S, T)
    masked = cost.masked_fill(~valid, torch.inf)
    dist, flat = masked.flatten(-2).min(dim=-1)  # (...)
    flat = torch.where(dist == torch.inf, valid.flatten(-2).to(torch.uint8).argmax(dim=-1), flat)
    T = cost.shape[-1]
    return MinL2Match(dist, flat // T, flat % T)


def minl2_match(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor) -> MinL2Match:
    """All pairs: q_emb (Bq, S, D), q_mask (Bq, S), c_emb (Bc, T, D), c_mask (Bc, T) -> (Bq, Bc)."""
    _check_inputs(q_emb, q_mask, c_emb, c_mask, aligned=False)
    return _minl2_from_cost(cross_l2_cost(zero_padding(q_emb, q_mask), zero_padding(c_emb, c_mask)),
                            *_all_pairs(q_mask, c_mask))


def pairwise_minl2_match(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor) -> MinL2Match:
    """Aligned rows: q_emb (B, S, D), q_mask (B, S), c_emb (B, T, D), c_mask (B, T) -> (B,)."""
    _check_inputs(q_emb, q_mask, c_emb, c_mask, aligned=True)
    return _minl2_from_cost(l2_cost(zero_padding(q_emb, q_mask), zero_padding(c_emb, c_mask)), q_mask, c_mask)


def minl2_dist(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor) -> Tensor:
    """(Bq, Bc) minimum L2 distance over valid sentence pairs (see `minl2_match`)."""
    return minl2_match(q_emb, q_mask, c_emb, c_mask).dist


def pairwise_minl2_dist(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor) -> Tensor:
    """(B,) minimum L2 distance of aligned rows (see `pairwise_minl2_match`)."""
    return pairwise_minl2_match(q_emb, q_mask, c_emb, c_mask).dist


# ---- multi match: optimal transport ------------------------------------------------------------
@dataclass
class OTMatch:
    """OT distances with what is needed to show the alignment. (...) = (Bq, Bc) or (B,)."""

    dist: Tensor  # (...) <cost, plan>
    plan: Tensor  # (..., S, T) transport plan (zero on padding)
    query_weights: Tensor  # (..., S) sentence masses of the query (sum 1)
    cand_weights: Tensor  # (..., T) sentence masses of the candidate (sum 1)
    cost: Tensor  # (..., S, T) L2 distances between sentences (aligned pairs: 0 where either is masked; all pairs:
    # where either is masked, the distance to a zero vector, see `base.zero_padding`)
    err: Tensor  # (...) L1 marginal error reached by Sinkhorn
    n_iter: Tensor  # (...) Sinkhorn iterations used


def valid_minima(cost: Tensor, q_mask: Tensor, c_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Each sentence's distance to the nearest valid sentence of the other side.

    cost (..., S, T), q_mask (..., S), c_mask (..., T) -> row minima (..., S), column minima (..., T);
    +inf where the other side has no valid sentence (and on the padded pairs' rows/columns).
    """
    valid = q_mask[..., :, None] & c_mask[..., None, :]
    far = cost.masked_fill(~valid, torch.inf)
    return far.amin(-1), far.amin(-2)


def ot_weights(cost: Tensor, q_mask: Tensor, c_mask: Tensor, tau: float,
               minima: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """Sentence masses x = softmax(-min_j D_ij / tau) over each side's valid sentences.

    cost (..., S, T), q_mask (..., S), c_mask (..., T) -> x (..., S), y (..., T); zero on padding,
    uniform over valid sentences as tau -> inf, all on the least minima as tau -> 0. `minima`:
    `valid_minima(cost, q_mask, c_mask)` when the caller has them already.

    The logits are shifted by each side's least minimum before the division (softmax is shift-invariant):
    -minima / tau alone overflowed to -inf at every sentence for a tau small enough (float32: about 1e-39), NaN
    weights; a tau below the dtype's smallest normal is taken as that (0 to the dtype: 0 / 0 at the least).
    """
    row_min, col_min = minima if minima is not None else valid_minima(cost, q_mask, c_mask)
    tau = max(tau, torch.finfo(row_min.dtype).tiny)
    return _shifted_softmax(row_min, q_mask, tau), _shifted_softmax(col_min, c_mask, tau)  # (..., S), (..., T)


def _shifted_softmax(minima: Tensor, mask: Tensor, tau: float) -> Tensor:
    """softmax(-minima / tau) over `mask`, computed as softmax(-(minima - least) / tau) (`ot_weights`)."""
    least = minima.detach().masked_fill(~mask, torch.inf).amin(-1, keepdim=True)
    return torch.softmax((-(minima - least) / tau).masked_fill(~mask, -torch.inf), dim=-1)


def _ot_from_cost(cost: Tensor, q_mask: Tensor, c_mask: Tensor, tau: float, eps: float,
                  weights: tuple[Tensor, Tensor] | None = None, out_dtype: torch.dtype | None = None,
                  **sinkhorn_kw) -> OTMatch:
    """cost (..., S, T) with masks (..., S), (..., T) -> OTMatch of shape (...).

    float16 / bfloat16 costs get their weights and plan in float32 (a half-precision softmax does
    not even sum to 1 within the solver's mass check); the outputs come back in the input dtype. `weights`:
    `ot_weights(cost, q_mask, c_mask, tau)` when the caller has them already (in float32 for a half-precision cost).
    `out_dtype`: the half dtype of vectors whose cost the caller computed in float32 (`_work_vectors`): the outputs
    come back in it.

    The cost between two selected sentences must be finite (ValueError naming the problems and a sentence pair; vectors
    that are NaN, infinite or whose squared norms overflow the dtype give such costs): a sentence whose every cost was
    +inf got weight 0 and was silently dropped from a finite distance, and a NaN cost raised Sinkhorn's error about
    the weights. The cost is read whole only once something is already off (a selected sentence's weight below the
    dtype's smallest normal, which Sinkhorn treats as padding, a non-finite distance, or Sinkhorn refusing the
    weights): no pass over it on finite input.
    """
    lead, (S, T) = cost.shape[:-2], cost.shape[-2:]
    half = out_dtype if out_dtype in _HALF else (cost.dtype if cost.dtype in _HALF else None)
    work = cost.float() if half else cost
    x, y = weights if weights is not None else ot_weights(work, q_mask, c_mask, tau)
    try:
        res = sinkhorn(work.reshape(-1, S, T), x.reshape(-1, S), y.reshape(-1, T), eps, **sinkhorn_kw)
    except ValueError as err:  # NaN weights: from a NaN or -inf minimum, or +inf ones at tau = inf
        _refuse_nonfinite_cost(work, q_mask, c_mask, err)
        raise
    # a +inf, NaN or -inf cost between two sentences of positive weight makes the value NaN (`sinkhorn`); between a
    # sentence whose every cost is +inf and any other, its weight is 0 (padding to Sinkhorn) and the value finite
    tiny = torch.finfo(x.dtype).tiny
    if (not bool(torch.isfinite(res.value).all()) or bool(((x < tiny) & q_mask).any())
            or bool(((y < tiny) & c_mask).any())):
        _refuse_nonfinite_cost(work, q_mask, c_mask)
    out = OTMatch(
        res.value.reshape(lead), res.plan.reshape(cost.shape), x, y, cost,
        res.err.reshape(lead), res.n_iter.reshape(lead),
    )
    if half:
        out.dist, out.plan, out.query_weights, out.cand_weights, out.err, out.cost = (
            t.to(half) for t in (out.dist, out.plan, out.query_weights, out.cand_weights, out.err, out.cost))
    return out


def _refuse_nonfinite_cost(cost: Tensor, q_mask: Tensor, c_mask: Tensor, cause: Exception | None = None,
                          scorer: str = "OT") -> None:
    """ValueError naming the problems (indices into cost's leading dims (...)) with a NaN or infinite cost between
    two selected sentences, and the first such sentence pair; nothing if there is none. cost (..., S, T), masks
    (..., S), (..., T); `scorer` names the scorer in the message ("OT", "attention")."""
    with torch.no_grad():
        bad_pair = ~torch.isfinite(cost) & q_mask[..., :, None] & c_mask[..., None, :]  # (..., S, T)
        bad = bad_pair.flatten(-2).any(-1)  # (...)
        if not bool(bad.any()):
            return
        where = bad.nonzero()  # (n, len(...))
        first = tuple(where[0].tolist())
        s, t = (int(i) for i in bad_pair[first].nonzero()[0])
        value = float(cost[first + (s, t)])
    names = where.flatten().tolist() if where.shape[1] == 1 else [tuple(w) for w in where.tolist()]
    dims = "aligned rows" if where.shape[1] == 1 else "(query, candidate) pairs"
    raise ValueError(
        f"{scorer} needs finite costs between selected sentences: {len(where)} problem(s) have a NaN or infinite one, among "
        f"them {dims} {names[:5]}; {'row' if where.shape[1] == 1 else 'pair'} {names[0]} has cost {value} "
        f"between query sentence {s} and candidate sentence {t} (non-finite vectors, or vectors too large for the "
        f"dtype's squared norms)") from cause


def _work_vectors(emb: Tensor, mask: Tensor) -> Tensor:
    """The vectors an OT or attention cost is computed from: padding zeroed (`zero_padding`), float16 / bfloat16
    widened to float32. The cost then stays float32 into the solver: its gradient through the weights' softmax scales with
    1 / tau, and a half-precision cost in the graph overflowed it to inf (float16 from 65504), which the cost's
    backward turned into NaN gradients of every vector, though they cancel to small finite values."""
    return widened(zero_padding(emb, mask))


def ot_match(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor, *, tau: float = 1.0,
             eps: float = 0.05, **sinkhorn_kw) -> OTMatch:
    """All pairs (Bq, Bc): q_emb (Bq, S, D), q_mask (Bq, S), c_emb (Bc, T, D), c_mask (Bc, T).

    `sinkhorn_kw` go to `aspire.scoring.sinkhorn` (tol, max_iter, check_every, grad). tau and eps must be > 0, as
    `OTScorer` has them (ValueError).
    """
    _check_temperatures(tau, eps)
    _check_inputs(q_emb, q_mask, c_emb, c_mask, aligned=False)
    cost = cross_l2_cost(_work_vectors(q_emb, q_mask), _work_vectors(c_emb, c_mask))
    return _ot_from_cost(cost, *_all_pairs(q_mask, c_mask), tau, eps, out_dtype=q_emb.dtype, **sinkhorn_kw)


def pairwise_ot_match(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor, *, tau: float = 1.0,
                      eps: float = 0.05, **sinkhorn_kw) -> OTMatch:
    """Aligned rows (B,): q_emb (B, S, D), q_mask (B, S), c_emb (B, T, D), c_mask (B, T).

    On a CPU without a tape (float32 / float64) the batches are read as stores of rows (`distance.as_store`) by
    `gathered_ot_match`'s compiled pass (the cost, then 0 on padding, and the weights' minima in one pass over the
    vectors); elsewhere `l2_cost` gives the cost, differentiable. The two agree to float rounding, and on both the
    returned `cost` is 0 where either sentence is masked (the plan carries no mass there). tau and eps must be > 0,
    as `OTScorer` has them (ValueError)."""
    _check_temperatures(tau, eps)
    _check_inputs(q_emb, q_mask, c_emb, c_mask, aligned=True)
    if compiled_cost(q_emb, c_emb):
        return gathered_ot_match(*as_store(q_emb, q_mask), *as_store(c_emb, c_mask), tau=tau, eps=eps, **sinkhorn_kw)
    cost = l2_cost(_work_vectors(q_emb, q_mask), _work_vectors(c_emb, c_mask))
    cost = cost.masked_fill(~(q_mask[:, :, None] & c_mask[:, None, :]), 0.0)
    return _ot_from_cost(cost, q_mask, c_mask, tau, eps, out_dtype=q_emb.dtype, **sinkhorn_kw)


def gathered_ot_match(q_vectors: Tensor, q_rows: Tensor, c_vectors: Tensor, c_rows: Tensor, *, tau: float = 1.0,
                      eps: float = 0.05, **sinkhorn_kw) -> OTMatch:
    """Aligned rows (B,) of stored sentence vectors: `pairwise_ot_match` of q_vectors[q_rows] and c_vectors[c_rows]
    without gathering them. q_vectors (Pq, D), c_vectors (Pc, D); q_rows (B, S), c_rows (B, T) long row numbers,
    -1 marking padding (the masks are rows >= 0).

    The cost and the weights' minima come from one pass over the stored rows (`aspire.scoring.distance`; on a CPU
    without a tape the compiled pass also makes them the weights, `gathered_l2_weights`); the result equals
    `pairwise_ot_match`'s to float rounding, `cost` too (0 where either sentence is padding, on both). tau and eps
    must be > 0, as `OTScorer` has them (ValueError).
    """
    _check_temperatures(tau, eps)
    q_mask, c_mask = q_rows >= 0, c_rows >= 0
    _check_inputs(q_vectors, q_mask, c_vectors, c_mask)
    if compiled_weights(q_vectors, c_vectors, tau):
        cost, x, y = gathered_l2_weights(q_vectors, q_rows, c_vectors, c_rows, tau)
    else:
        cost, row_min, col_min = gathered_l2_minima(q_vectors, q_rows, c_vectors, c_rows)
        # half-precision weights in float32, as `_ot_from_cost` makes them
        work = torch.float32 if cost.dtype in _HALF else cost.dtype
        x, y = ot_weights(cost, q_mask, c_mask, tau, minima=(row_min.to(work), col_min.to(work)))
    return _ot_from_cost(cost, q_mask, c_mask, tau, eps, weights=(x, y), **sinkhorn_kw)


def ot_dist(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor, **kw) -> Tensor:
    """(Bq, Bc) OT distance <D, P> (see `ot_match`)."""
    return ot_match(q_emb, q_mask, c_emb, c_mask, **kw).dist


def pairwise_ot_dist(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor, **kw) -> Tensor:
    """(B,) OT distance <D, P> of aligned rows (see `pairwise_ot_match`)."""
    return pairwise_ot_match(q_emb, q_mask, c_emb, c_mask, **kw).dist


# ---- attention aggregation (the paper's ablation) -----------------------------------------------
@dataclass
class AttentionMatch:
    """Attention-aggregated distances. (...) = (Bq, Bc) or (B,)."""

    dist: Tensor  # (...) <D, A>
    attention: Tensor  # (..., S, T) A = softmax(-D / tau) over valid pairs (sums to 1)


def _attention_from_cost(cost: Tensor, q_mask: Tensor, c_mask: Tensor, tau: float,
                         out_dtype: torch.dtype | None = None) -> AttentionMatch:
    """cost (..., S, T) with masks (..., S), (..., T) -> AttentionMatch of shape (...), weighed in float32 for a
    float16 / bfloat16 cost (-cost / tau overflows float16 for small tau). `out_dtype`: the half dtype of vectors whose
    cost the caller computed in float32 (`_work_vectors`): the outputs come back in it.

    The cost between two selected sentences must be finite (ValueError naming the problems and a sentence pair, as
    `_ot_from_cost` has it; vectors that are NaN, infinite or whose squared norms overflow the dtype give such costs):
    such a cost made the problem's distance NaN, returned silently; the refusal reads the cost whole only once a
    distance is non-finite. Padding's cost is left out whatever it holds (+inf too), and the logits are shifted by
    each problem's least cost, so a tiny tau (even one where -cost / tau overflows) attends to the least costs."""
    half = out_dtype if out_dtype in _HALF else (cost.dtype if cost.dtype in _HALF else None)
    if half:
        match = _attention_from_cost(cost.float(), q_mask, c_mask, tau)
        return AttentionMatch(match.dist.to(half), match.attention.to(half))
    valid = q_mask[..., :, None] & c_mask[..., None, :]  # (..., S, T)
    selected = cost.masked_fill(~valid, 0.0)  # padding's cost out of the sum (a padded +inf gave 0 * inf = NaN)
    # shifted by each problem's least cost (softmax is shift-invariant): -cost / tau alone overflowed to -inf at every
    # pair for a tau small enough (float32: cost 1 at tau 1e-40), a NaN softmax; shifted, the least cost's logit is 0
    least = selected.detach().masked_fill(~valid, torch.inf).amin((-2, -1), keepdim=True)  # (..., 1, 1)
    # a tau below the dtype's smallest normal would be 0 to it (0 / 0 = NaN at the least cost); at that tau already
    # only the least costs get attention
    logits = (-(selected - least) / max(tau, torch.finfo(cost.dtype).tiny)).masked_fill(~valid, -torch.inf)
    att = torch.softmax(logits.flatten(-2), dim=-1).reshape(cost.shape)  # (..., S, T)
    dist = (att * selected).sum((-2, -1))  # (...)
    # a NaN or +-inf cost between selected sentences makes the distance NaN (0 * inf, or a NaN softmax)
    if not bool(torch.isfinite(dist).all()):
        _refuse_nonfinite_cost(cost, q_mask, c_mask, scorer="attention")
    return AttentionMatch(dist, att)


def attention_match(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor, *, tau: float = 1.0) -> AttentionMatch:
    """All pairs (Bq, Bc): q_emb (Bq, S, D), q_mask (Bq, S), c_emb (Bc, T, D), c_mask (Bc, T); tau > 0."""
    _positive("tau", tau)
    _check_inputs(q_emb, q_mask, c_emb, c_mask, aligned=False)
    cost = cross_l2_cost(_work_vectors(q_emb, q_mask), _work_vectors(c_emb, c_mask))
    return _attention_from_cost(cost, *_all_pairs(q_mask, c_mask), tau, out_dtype=q_emb.dtype)


def pairwise_attention_match(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor, *,
                             tau: float = 1.0) -> AttentionMatch:
    """Aligned rows (B,): q_emb (B, S, D), q_mask (B, S), c_emb (B, T, D), c_mask (B, T); tau > 0."""
    _positive("tau", tau)
    _check_inputs(q_emb, q_mask, c_emb, c_mask, aligned=True)
    cost = l2_cost(_work_vectors(q_emb, q_mask), _work_vectors(c_emb, c_mask))
    return _attention_from_cost(cost, q_mask, c_mask, tau, out_dtype=q_emb.dtype)


def attention_dist(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor, *, tau: float = 1.0) -> Tensor:
    """(Bq, Bc) attention-aggregated distance <D, softmax(-D / tau)>."""
    return attention_match(q_emb, q_mask, c_emb, c_mask, tau=tau).dist


def pairwise_attention_dist(q_emb: Tensor, q_mask: Tensor, c_emb: Tensor, c_mask: Tensor, *,
                            tau: float = 1.0) -> Tensor:
    """(B,) attention-aggregated distance of aligned rows."""
    return pairwise_attention_match(q_emb, q_mask, c_emb, c_mask, tau=tau).dist


# ---- scorer modules -------------------------------------------------------------------------------
class MinL2Scorer(_Scorer):
    """Single match: distance = min L2 over (query sentence, candidate sentence) pairs."""

    def dist_details(self, queries: DocBatch, cands: DocBatch) -> MinL2Match:
        return minl2_match(queries.emb, queries.mask, cands.emb, cands.mask)

    def pairwise_dist_details(self, queries: DocBatch, cands: DocBatch) -> MinL2Match:
        return pairwise_minl2_match(queries.emb, queries.mask, cands.emb, cands.mask)


def _positive(name: str, value: float) -> float:
    """A scorer's temperature or regularisation: ValueError unless > 0 (inf allowed: a negative tau would weigh the
    farthest sentences most, and a zero one divides by zero)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def _check_temperatures(tau: float, eps: float) -> None:
    """The OT functions' tau and eps, as `OTScorer` checks them (`_positive`): called directly, a negative tau weighed
    the farthest sentences most, silently (and on the compiled path too: its weights' pass is skipped for tau <= 0),
    a zero tau failed as NaN weights in Sinkhorn's mass check, naming no option."""
    _positive("tau", tau)
    _positive("eps", eps)


def _count(name: str, value: int) -> int:
    """An iteration count of the OT scorer: ValueError unless an integer >= 1 (a string or float failed only when
    the first pair was scored, with a TypeError naming no option, or ran a fractional iteration budget)."""
    if not is_whole(value, 1):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


class OTScorer(_Scorer):
    """Multi match: distance = <D, P> with P the entropic OT plan between softmax-weighted sentences.

    Args:
        tau: weight temperature, x = softmax(-min_j D_ij / tau) (tau = inf: uniform weights).
        eps: entropic regularisation (paper: lambda = 20, eps = 0.05).
        tol, max_iter, check_every, grad: passed to `aspire.scoring.sinkhorn` (checked here: tol > 0, integer
            counts >= 1, a known grad mode).
    """

    def __init__(self, tau: float = 1.0, eps: float = 0.05, tol: float = 1e-4, max_iter: int = 1000,
                 check_every: int = 10, grad: str = "implicit") -> None:
        super().__init__()
        self.tau, self.eps = _positive("tau", tau), _positive("eps", eps)
        if not isinstance(grad, str) or grad not in GRAD_MODES:
            raise ValueError(f"unknown grad mode {grad!r}; valid: {', '.join(GRAD_MODES)}")
        self.sinkhorn_kw = dict(tol=_positive("tol", tol), max_iter=_count("max_iter", max_iter),
                                check_every=_count("check_every", check_every), grad=grad)

    def extra_repr(self) -> str:
        return f"tau={self.tau}, eps={self.eps}, " + ", ".join(f"{k}={v}" for k, v in self.sinkhorn_kw.items())

    def dist_details(self, queries: DocBatch, cands: DocBatch) -> OTMatch:
        return ot_match(queries.emb, queries.mask, cands.emb, cands.mask, tau=self.tau, eps=self.eps,
                        **self.sinkhorn_kw)

    def pairwise_dist_details(self, queries: DocBatch, cands: DocBatch) -> OTMatch:
        return pairwise_ot_match(queries.emb, queries.mask, cands.emb, cands.mask, tau=self.tau, eps=self.eps,
                                 **self.sinkhorn_kw)


class AttentionScorer(_Scorer):
    """Attention aggregation (ablation): distance = <D, softmax(-D / tau)> over valid pairs."""

    def __init__(self, tau: float = 1.0) -> None:
        super().__init__()
        self.tau = _positive("tau", tau)

    def extra_repr(self) -> str:
        return f"tau={self.tau}"

    def dist_details(self, queries: DocBatch, cands: DocBatch) -> AttentionMatch:
        return attention_match(queries.emb, queries.mask, cands.emb, cands.mask, tau=self.tau)

    def pairwise_dist_details(self, queries: DocBatch, cands: DocBatch) -> AttentionMatch:
        return pairwise_attention_match(queries.emb, queries.mask, cands.emb, cands.mask, tau=self.tau)


# ---- the hybrid: whole abstract + facet query + sentence matching, one encoder pass --------------------------
HYBRID_TERMS = ("whole", "facet", "minl2", "ot")
DEFAULT_HYBRID_WEIGHTS = {"whole": 1.0, "facet": 1.0}  # two cosines: one scale, no calibration needed
UNCALIBRATED = (0.0, 1.0)  # (mu, sigma) of a term given no calibration: its raw similarity


@dataclass
class HybridMatch:
    """The hybrid's distance and each term's similarity before weighting. (...) = (Bq, Bc) or (B,)."""

    dist: Tensor  # (...) minus the weighted sum of the standardised terms
    terms: dict[str, Tensor]  # term -> (...) raw similarity (cosine, -min L2, -OT distance)
    shares: dict[str, Tensor]  # term -> (...) its weighted, standardised contribution to the score


def _pooled(batch: DocBatch) -> Tensor:
    """(B, D) mean of the selected sentence vectors: the facet query's vector from the contextual pass."""
    return masked_mean(batch.emb, batch.mask)


def _whole(batch: DocBatch, role: str) -> Tensor:
    if batch.whole is None:
        raise ValueError(f"the hybrid scorer needs the {role}s' whole-abstract vectors (DocBatch.whole): encode them "
                         "with the contextual encoder, whose pass returns them")
    return batch.whole


class HybridScorer(_Scorer):
    """One model's score from one encoder pass: score = sum_t w_t (s_t - mu_t) / sigma_t over the terms

    - `whole`: cosine of the query's and the candidate's whole-abstract vectors (`DocBatch.whole`);
    - `facet`: cosine of the mean of the query's *selected* sentence vectors and the candidate's whole vector
      (aspect-conditional: a narrower query mask moves this term and the two below, never `whole`);
    - `minl2`: minus the min-L2 distance of the selected query sentences and the candidate's sentences;
    - `ot`: minus the OT distance (`OTScorer` with `tau`, `eps`).

    `calibration` {term: (mu, sigma)} puts the terms on one scale (`calibrate` fits it on any sample of paper
    pairs, no labels needed); `weights` {term: w} are the caller's to choose, on dev data (default: whole + facet,
    the two cosines, which share a scale; the default was kept with test figures in view, see
    experiments/results/aspect_model.md §19). A term with weight 0 is not computed.
    Scores are pairwise functions of (query, candidate), so they rank the same in a pool, in chunks and in a
    re-rank stage of `aspire search`.
    """

    def __init__(self, weights: dict[str, float] | None = None, calibration: dict[str, tuple[float, float]] | None = None,
                 tau: float = 1.0, eps: float = 0.05) -> None:
        super().__init__()
        for name, value in (("weights", weights), ("calibration", calibration)):
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"hybrid {name} must be a mapping {{term: ...}} over {list(HYBRID_TERMS)}, got {value!r}")
        weights = dict(weights if weights is not None else DEFAULT_HYBRID_WEIGHTS)
        unknown = sorted(set(weights) - set(HYBRID_TERMS)) + sorted(set(calibration or {}) - set(HYBRID_TERMS))
        if unknown:
            raise ValueError(f"unknown hybrid terms {unknown}; valid: {list(HYBRID_TERMS)}")
        for t, w in weights.items():  # a NaN or infinite weight made every score NaN or infinite
            if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w):
                raise ValueError(f"hybrid weight of {t!r} must be a finite number, got {w!r}")
        if not any(weights.values()):
            raise ValueError("the hybrid scorer needs at least one term with a non-zero weight")
        self.weights = {t: float(w) for t, w in weights.items() if w}
        self.calibration = {}
        for t, pair in (calibration or {}).items():  # a NaN mean made every score NaN; an infinite sigma zeroed the term
            ok = isinstance(pair, (tuple, list)) and len(pair) == 2 and all(
                isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in pair)
            if not ok:
                raise ValueError(f"hybrid calibration of {t!r} must be a pair of finite numbers (mu, sigma), got {pair!r}")
            self.calibration[t] = (float(pair[0]), float(pair[1]))
        bad = [t for t, (_, sd) in self.calibration.items() if not sd > 0]
        if bad:
            raise ValueError(f"hybrid calibration of {bad}: sigma must be > 0")
        self.ot = OTScorer(tau=tau, eps=eps)

    def extra_repr(self) -> str:
        return f"weights={self.weights}, calibration={self.calibration}, tau={self.ot.tau}, eps={self.ot.eps}"

    def _terms(self, queries: DocBatch, cands: DocBatch, pairwise: bool, needed) -> dict[str, Tensor]:
        # an empty selection is refused whichever terms are weighted; the cosine terms would broadcast one query
        # against B candidates into B "aligned" scores
        _check_inputs(queries.emb, queries.mask, cands.emb, cands.mask, aligned=pairwise)
        out = {}
        if "whole" in needed or "facet" in needed:
            c_whole = _unit(_whole(cands, "candidate"))
            for term, q in (("whole", lambda: _whole(queries, "query")), ("facet", lambda: _pooled(queries))):
                if term in needed:
                    qv = _unit(q())
                    out[term] = (qv * c_whole).sum(-1) if pairwise else qv @ c_whole.T
        if "minl2" in needed:
            fn = pairwise_minl2_match if pairwise else minl2_match
            out["minl2"] = -fn(queries.emb, queries.mask, cands.emb, cands.mask).dist
        if "ot" in needed:
            out["ot"] = -(self.ot.pairwise_dist(queries, cands) if pairwise else self.ot.dist(queries, cands))
        return out

    def _match(self, queries: DocBatch, cands: DocBatch, pairwise: bool, needed=None) -> HybridMatch:
        terms = self._terms(queries, cands, pairwise, needed or self.weights)
        shares = {}
        for term, w in self.weights.items():
            mu, sd = self.calibration.get(term, UNCALIBRATED)
            shares[term] = w * (terms[term] - mu) / sd
        return HybridMatch(-sum(shares.values()), terms, shares)

    def dist_details(self, queries: DocBatch, cands: DocBatch) -> HybridMatch:
        return self._match(queries, cands, pairwise=False)

    def pairwise_dist_details(self, queries: DocBatch, cands: DocBatch) -> HybridMatch:
        return self._match(queries, cands, pairwise=True)

    def term_scores(self, queries: DocBatch, cands: DocBatch, terms=HYBRID_TERMS) -> dict[str, Tensor]:
        """Every term's raw similarity (Bq, Bc), weighted or not (for calibration and choosing weights).

        `terms`: names of `HYBRID_TERMS` (one name as a string); ValueError for another, listing the valid ones (an
        unknown name was left out of the result without a word, and a string was read by substring)."""
        terms = (terms,) if isinstance(terms, str) else tuple(terms)
        unknown = [t for t in terms if t not in HYBRID_TERMS]
        if unknown:
            raise ValueError(f"unknown hybrid terms {unknown}; valid: {list(HYBRID_TERMS)}")
        return self._terms(queries, cands, False, terms)

    @staticmethod
    def calibrate(term_scores: dict[str, Tensor]) -> dict[str, tuple[float, float]]:
        """{term: (mean, std)} of raw term similarities over a sample of paper pairs."""
        return {t: (float(s.float().mean()), float(s.float().std().clamp_min(1e-8))) for t, s in term_scores.items()}


SCORERS: dict[str, type[_Scorer]] = {"minl2": MinL2Scorer, "ot": OTScorer, "attention": AttentionScorer,
                                     "maxpassage": MaxPassageScorer, "hybrid": HybridScorer}


def get_scorer(name: str, **kwargs) -> _Scorer:
    """The scorer registered as `name`, built with `kwargs`; ValueError lists the valid names."""
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; valid: {', '.join(SCORERS)}")
    return SCORERS[name](**kwargs)

