"""The one distance routine: L2 distances between sentence vectors, by the expansion
|x - y|^2 = |x|^2 + |y|^2 - 2 x.y (one batched matrix product, no (.., N, M, D) difference tensor).

`l2_cost` pairs row b of x with row b of y (aligned pairs, (B, N, M)); `cross_l2_cost` compares
every x with every y (all pairs, (Bq, Bc, S, T)); `gathered_l2_cost` is `l2_cost` of vectors read by row
number from where they are stored (aligned pairs, without gathering them first). The scorers (min-L2, OT,
attention), the search re-ranking (`aspire.search.nearest_pairs`), the page's transport plans and the single-vector
losses all take their distances from here.

Precision: the expansion cancels for near pairs. Its squared distance carries a rounding error of up to ~10 ulps of
|x|^2 + |y|^2 (the GEMM sums x.y in another order than the norms' reduction), so a distance below ~|x| sqrt(eps)
(float32: ~5e-4 |x|) would be mostly rounding (float32 vectors of D = 384 and norm 5: two equal vectors came out up
to ~5e-3 apart, not 0). So every path recomputes the entries whose squared distance is within `_NEAR` of
|x|^2 + |y|^2 by summing (x - y)^2 directly: equal vectors are exactly 0 apart, a near pair is off by float
rounding of its own distance, and the gradient there is (x - y) / |x - y| (0 for equal vectors). Just past that
share the expansion's relative error is largest: float32, up to ~3e-4 of the distance (|x|^2 + |y|^2 = 50:
1.7e-4 measured at a distance of 0.3); far pairs ~1e-7. `l2_cost` and `cross_l2_cost` gather those few entries
(`_exact_near`; its `nonzero` is a device sync off the CPU) and write them into the expansion's result
(differentiable); `gathered_l2_cost`'s compiled pass sums them in place.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

_HALF = (torch.float16, torch.bfloat16)

# A squared distance within this share of |x|^2 + |y|^2 is mostly the expansion's rounding: summed directly instead
# (the compiled pass's `_distance_cpu._NEAR`, the same value)
_NEAR = 2.0 ** -10


def widened(x: Tensor) -> Tensor:
    """`x` in float32 when it is float16 / bfloat16 (their sums and the gradients through a small temperature need
    the range and digits), else as it is (float64 is not cut to float32)."""
    return x.float() if x.dtype in _HALF else x


def _safe_sqrt(sq: Tensor) -> Tensor:
    """sqrt(max(sq, 0)) whose gradient is 0 (not NaN/inf) where sq <= 0; NaN stays NaN (a NaN vector is no
    distance 0 from everything)."""
    pos = sq > 0
    return torch.where(pos, torch.sqrt(torch.where(pos, sq, 1.0)), sq.clamp_min(0.0) * 0.0)


def _exact_near(sq: Tensor, x_sq: Tensor, y_sq: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """The expansion's squared distances sq (L, N, M) with the entries within `_NEAR` of |x|^2 + |y|^2 replaced by
    sum (x - y)^2 of their rows, x (L, N, D), y (L, M, D), whose squared norms are x_sq (L, N), y_sq (L, M): a new
    tensor, differentiable in x and y, or sq itself where no entry is near.

    A row's near entries lie within its reach _NEAR (|x|^2 + max |y|^2) (NaN norms left out of the max): one
    reduction finds the rows whose minimum does (a row holding a NaN is kept), one comparison with their reach the
    candidate entries, and each candidate's own |x|^2 + |y|^2 decides. Zero rows (padding) are left alone: against
    each other the expansion gives them exactly 0."""
    if sq.numel() == 0:
        return sq
    with torch.no_grad():
        reach = _NEAR * (x_sq + y_sq.nan_to_num(nan=0.0).amax(-1, keepdim=True))  # (L, N)
        lead, i = torch.nonzero(~(sq.amin(-1) > reach) & (x_sq > 0), as_tuple=True)  # NaN minimum: kept
        if i.numel() == 0:
            return sq
        r, j = torch.nonzero(sq[lead, i] <= reach[lead, i][:, None], as_tuple=True)  # (R, M) rows, few entries
        lead, i = lead[r], i[r]
        total = x_sq[lead, i] + y_sq[lead, j]
        keep = (sq[lead, i, j] <= total * _NEAR) & (total > 0)
        lead, i, j = lead[keep], i[keep], j[keep]
        if i.numel() == 0:
            return sq
    return sq.index_put((lead, i, j), (x[lead, i] - y[lead, j]).square().sum(-1))


def _sq_norms(x: Tensor) -> Tensor:
    """Squared L2 norms over the last dim, (...,). Summed by torch's reduction, not in the matrix product's order:
    |x - x| comes out 0 only where the two sums happen to round alike (short vectors, often; D = 768, often not)."""
    return (x * x).sum(-1)


def _check_pair(x: Tensor, y: Tensor, aligned: bool) -> None:
    """ValueError unless x and y are batches of vectors (3-d) of one width and one dtype (and, `aligned`, one batch
    size): torch's own errors named neither ("expected scalar type Float but found Half", a reshape's size), and a
    half x with a float32 y was computed in half. Shapes and dtypes only."""
    shape = "(B, N, D), (B, M, D)" if aligned else "(Bq, S, D), (Bc, T, D)"
    if x.dim() != 3 or y.dim() != 3 or x.shape[-1] != y.shape[-1] or (aligned and x.shape[0] != y.shape[0]):
        raise ValueError(f"expected vectors {shape}; got {tuple(x.shape)}, {tuple(y.shape)}")
    _check_same_dtype(x, y)


def _check_same_dtype(x: Tensor, y: Tensor) -> None:
    if x.dtype != y.dtype:
        raise ValueError(f"the vectors are {x.dtype} and {y.dtype}: give both one floating-point dtype")


def l2_cost(x: Tensor, y: Tensor) -> Tensor:
    """Aligned pairwise L2 distances: x (B, N, D), y (B, M, D) -> (B, N, M), both of one dtype (else ValueError).

    Computed as sqrt(|x|^2 + |y|^2 - 2 x.y) (one batched matmul adding into the norms), near pairs summed directly
    (`_exact_near`: equal vectors exactly 0 apart); the gradient is 0 where two vectors coincide, never NaN.
    """
    _check_pair(x, y, aligned=True)
    if x.dtype in _HALF:  # squared norms overflow float16 from |x| ~ 256: expand in float32
        return l2_cost(x.float(), y.float()).to(x.dtype)
    x_sq, y_sq = _sq_norms(x), _sq_norms(y)
    sq = torch.baddbmm(x_sq[:, :, None] + y_sq[:, None, :], x, y.transpose(1, 2), alpha=-2.0)
    return _safe_sqrt(_exact_near(sq, x_sq, y_sq, x, y))


def cross_l2_cost(x: Tensor, y: Tensor) -> Tensor:
    """All-pairs L2 distances: x (Bq, S, D), y (Bc, T, D) -> (Bq, Bc, S, T), one GEMM (one dtype, else ValueError),
    near pairs summed directly as in `l2_cost`."""
    _check_pair(x, y, aligned=False)
    if x.dtype in _HALF:  # as in l2_cost
        return cross_l2_cost(x.float(), y.float()).to(x.dtype)
    Bq, S, D = x.shape
    Bc, T, _ = y.shape
    xf, yf = x.reshape(Bq * S, D), y.reshape(Bc * T, D)
    x_sq, y_sq = _sq_norms(xf), _sq_norms(yf)
    sq = torch.addmm(x_sq[:, None] + y_sq[None, :], xf, yf.T, alpha=-2.0)  # (Bq S, Bc T)
    sq = _exact_near(sq[None], x_sq[None], y_sq[None], xf[None], yf[None])[0]
    return _safe_sqrt(sq).reshape(Bq, S, Bc, T).permute(0, 2, 1, 3)


def gathered_l2_cost(q_vectors: Tensor, q_rows: Tensor, c_vectors: Tensor, c_rows: Tensor) -> Tensor:
    """Aligned pairwise L2 distances of stored vectors: `l2_cost(q_vectors[q_rows], c_vectors[c_rows])`, 0 on
    padding, without the (B, N, D) copies.

    q_vectors (Pq, D), c_vectors (Pc, D) (may be the same store); q_rows (B, N), c_rows (B, M) long row
    numbers, -1 marking padding -> cost (B, N, M).

    On a CPU without autograd's tape (float32 / float64) each pair reads its rows where they are and writes
    its distances directly (`aspire.scoring._distance_cpu`, numba): the vectors are never copied, no
    temporary holds their squared norms, and equal vectors are exactly 0 apart (near pairs are summed
    directly, not by the expansion). Elsewhere (other devices, half precision, a gradient to the vectors) the
    rows are gathered and `l2_cost` compares them, so the result is differentiable; the two agree to float
    rounding (tests/test_scorers.py).
    """
    return gathered_l2_minima(q_vectors, q_rows, c_vectors, c_rows)[0]


def compiled_cost(x: Tensor, y: Tensor) -> bool:
    """Whether the compiled CPU pass (`aspire.scoring._distance_cpu`) computes the distances of x and y: both on a
    CPU in float32 or float64 (one dtype) and no gradient to take (autograd's tape needs the torch path)."""
    taped = torch.is_grad_enabled() and (x.requires_grad or y.requires_grad)
    return (x.device.type == "cpu" and y.device.type == "cpu" and not taped and x.dtype == y.dtype
            and x.dtype in (torch.float32, torch.float64))


def compiled_weights(x: Tensor, y: Tensor, tau: float) -> bool:
    """Whether the compiled pass also makes the OT scorer's weights (`gathered_l2_weights`): `compiled_cost` of the
    vectors, and a temperature tau > 0."""
    return compiled_cost(x, y) and tau > 0


def as_store(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """A padded batch x (B, N, D) with its mask (B, N) as a store of rows (B N, D) (a view where x is contiguous)
    and the row numbers (B, N) of `gathered_l2_minima`, -1 where the mask is off. ValueError unless the mask is bool
    and shaped (B, N) (a (B, 1) or (N,) mask was broadcast: every sentence of a paper, or one pattern for all)."""
    if x.dim() != 3 or mask.shape != x.shape[:2] or mask.dtype != torch.bool:
        raise ValueError(f"expected vectors (B, N, D) and a bool mask (B, N); got {tuple(x.shape)}, mask "
                         f"{tuple(mask.shape)} {mask.dtype}")
    B, N, D = x.shape
    rows = torch.arange(B * N, device=x.device).reshape(B, N)
    return x.reshape(B * N, D), rows.masked_fill(~mask, -1)


def gathered_l2_minima(q_vectors: Tensor, q_rows: Tensor, c_vectors: Tensor,
                       c_rows: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`gathered_l2_cost` (B, N, M) with, from the same pass, each sentence's distance to the nearest real
    sentence of the other side, (B, N) and (B, M), +inf on padding (`scorers.valid_minima`'s)."""
    _check_rows(q_vectors, q_rows, c_vectors, c_rows)
    if compiled_cost(q_vectors, c_vectors):
        return _gathered_l2_cpu(q_vectors, q_rows, c_vectors, c_rows)
    pad = (q_rows < 0)[:, :, None] | (c_rows < 0)[:, None, :]  # (B, N, M)
    x, y = q_vectors[q_rows.clamp_min(0)], c_vectors[c_rows.clamp_min(0)]  # (B, N, D), (B, M, D)
    cost = l2_cost(x, y).masked_fill(pad, 0.0)
    far = cost.masked_fill(pad, torch.inf)
    B, N, M = far.shape  # amin has nothing to reduce over an empty side: +inf, as the compiled pass gives
    row_min = far.amin(-1) if M else far.new_full((B, N), torch.inf)
    col_min = far.amin(-2) if N else far.new_full((B, M), torch.inf)
    return cost, row_min, col_min


def _check_rows(q_vectors: Tensor, q_rows: Tensor, c_vectors: Tensor, c_rows: Tensor) -> None:
    """Raise unless the vectors are stores (Pq, D), (Pc, D) of one dtype and the rows (B, N), (B, M) integer numbers
    in them or -1 (float rows were truncated by the compiled pass, refused by the torch one)."""
    if q_vectors.dim() != 2 or c_vectors.dim() != 2 or q_vectors.shape[1] != c_vectors.shape[1]:
        raise ValueError(f"expected vectors (Pq, D), (Pc, D); got {tuple(q_vectors.shape)}, {tuple(c_vectors.shape)}")
    _check_same_dtype(q_vectors, c_vectors)
    if q_rows.dim() != 2 or c_rows.dim() != 2 or q_rows.shape[0] != c_rows.shape[0]:
        raise ValueError(f"expected rows (B, N), (B, M); got {tuple(q_rows.shape)}, {tuple(c_rows.shape)}")
    if q_rows.dtype.is_floating_point or c_rows.dtype.is_floating_point or torch.bool in (q_rows.dtype, c_rows.dtype):
        raise ValueError(f"rows must be integer row numbers; got {q_rows.dtype}, {c_rows.dtype}")
    for name, rows, store in (("q_rows", q_rows, q_vectors), ("c_rows", c_rows, c_vectors)):
        low, high = (int(v) for v in torch.aminmax(rows)) if rows.numel() else (0, -1)
        if low < -1 or high >= store.shape[0]:
            raise ValueError(f"{name} must lie in [-1, {store.shape[0]}) (-1: padding); got [{low}, {high}]")


def gathered_l2_weights(q_vectors: Tensor, q_rows: Tensor, c_vectors: Tensor, c_rows: Tensor,
                        tau: float) -> tuple[Tensor, Tensor, Tensor]:
    """`gathered_l2_cost` (B, N, M) with the OT scorer's sentence weights (B, N), (B, M) from the same compiled pass:
    softmax(-minima / tau) over each side's real sentences (`scorers.ot_weights`; 0 on padding). The pass writes
    the softmax's logits and one vectorised exp finishes them. Only where that pass runs (`compiled_weights`);
    elsewhere `scorers.gathered_ot_match` takes `gathered_l2_minima` and `ot_weights`."""
    if not compiled_weights(q_vectors, c_vectors, tau):
        raise ValueError("gathered_l2_weights needs CPU float32 / float64 vectors without a gradient, and tau > 0; "
                         f"got {q_vectors.device} {q_vectors.dtype}, tau {tau}")
    _check_rows(q_vectors, q_rows, c_vectors, c_rows)
    return _gathered_l2_cpu(q_vectors, q_rows, c_vectors, c_rows, tau)


def _gathered_l2_cpu(q_vectors, q_rows, c_vectors, c_rows, tau: float = 0.0):
    """The compiled pass: cost and minima, or with tau > 0 cost and weights (`gathered_l2_weights`)."""
    import numba

    from aspire.scoring._distance_cpu import gathered_l2, normalize_rows
    from aspire.scoring._newton import torch_thread_count

    (B, N), M, dtype = q_rows.shape, c_rows.shape[1], q_vectors.dtype
    cost, row_min, col_min = torch.empty(B, N, M, dtype=dtype), torch.empty(B, N, dtype=dtype), torch.empty(B, M, dtype=dtype)
    qv, qr, cv, cr = (t.detach().contiguous().numpy() for t in (q_vectors, q_rows.long(), c_vectors, c_rows.long()))
    shared = c_vectors is q_vectors
    with torch_thread_count():
        q_sq = _store_norms(qv, q_rows.numel() + (c_rows.numel() if shared else 0))
        c_sq = q_sq if shared else _store_norms(cv, c_rows.numel())
        tau = max(tau, torch.finfo(dtype).tiny) if tau > 0 else 0.0  # a tau under it is 0 to the dtype (0 / 0)
        gathered_l2(qv, qr, cv, cr, q_sq, c_sq, cost.numpy(), row_min.numpy(), col_min.numpy(), float(tau),
                    numba.get_num_threads())
        if tau > 0:  # the pass left the logits: exp (numpy's, vectorised), then each row over its sum
            for logits in (row_min.numpy(), col_min.numpy()):
                np.exp(logits, out=logits)
                normalize_rows(logits)
    return cost, row_min, col_min


def _store_norms(vectors: np.ndarray, reads: int) -> np.ndarray:
    """Room for the store's squared norms (R,), NaN until a pair sums one (`_distance_cpu.gathered_l2`), where it
    holds no more rows than the pairs read (`reads`); else an empty array: each pair then sums its own rows'."""
    return np.full(len(vectors) if len(vectors) <= reads else 0, np.nan, vectors.dtype)
