"""`aspire.scoring.distance.gathered_l2_cost` for CPU tensors without a tape, compiled with numba.

Each (query, candidate) pair reads its sentence vectors where they are stored, by row number, and writes its
(N, M) distances straight into the output: no (B, N, D) copies of the gathered vectors, no temporary of their
squared norms, no batched product over tiny matrices. Where each side's real rows are consecutive rows of its
store (a document's sentences as a store keeps them, or a padded batch read as a store: `distance.as_store`), the
pair's dot products are one small BLAS product over the rows where they lie (`_run_dots`: numpy's `dot` in numba,
scipy's BLAS; the products ~1.25x faster than the loop on 10 x 10 pairs of 384-d rows); otherwise they run two
query rows by four candidate (then two) rows at a time (each vector element loaded once for several products).
Distances come from the expansion |x|^2 + |y|^2 - 2 x.y, except a pair's near entries, whose (x - y)^2 is summed
directly (`_finish_pair`: equal vectors exactly 0 apart). The same pass keeps each sentence's distance to the
nearest real sentence of the other side (the OT scorer's weights need them; `scorers.valid_minima`), or turns them
into the weights' logits there, so that one vectorised exp (numpy's) and `normalize_rows` finish the weights (~4x
faster than a compiled scalar exp a sentence). Each stored row's squared norm is summed once, by the first pair that
reads it, where the store holds no more rows than the pairs read; else each pair sums its own rows' (a large store
read by a few pairs: no store-sized array).
Pairs run in the order of the rows they read (`pair_order`: nearby rows while they are in the caches), in
parallel over numba's threads (the caller sets their count: `_newton.torch_thread_count`).
Compiled with `aspire.scoring._jit.njit` (IEEE division: inf / NaN, never a ZeroDivisionError).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from aspire.scoring._jit import njit

# reassociation lets LLVM vectorise the dot products' sums; no 'nnan' / 'ninf', so inf and NaN keep their meaning
_FAST = {"reassoc", "contract", "nsz"}


@njit(fastmath=_FAST)
def _dot(x, y):
    """x . y of two (D,) rows, summed in the rows' dtype."""
    s = x.dtype.type(0)
    for d in range(x.shape[0]):
        s += x[d] * y[d]
    return s


@njit(fastmath=_FAST)
def _dots_2x4(q0, q1, c0, c1, c2, c3):
    """The eight dot products of rows q0, q1 with rows c0..c3, (q0.c0, .., q0.c3, q1.c0, .., q1.c3)."""
    z = q0.dtype.type(0)
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = z
    for d in range(q0.shape[0]):
        x, y = q0[d], q1[d]
        u0, u1, u2, u3 = c0[d], c1[d], c2[d], c3[d]
        a0 += x * u0
        a1 += x * u1
        a2 += x * u2
        a3 += x * u3
        b0 += y * u0
        b1 += y * u1
        b2 += y * u2
        b3 += y * u3
    return a0, a1, a2, a3, b0, b1, b2, b3


@njit(fastmath=_FAST)
def _dots_2x2(q0, q1, c0, c1):
    """The four dot products (q0.c0, q0.c1, q1.c0, q1.c1): the last columns of a pair, past its blocks of 4."""
    z = q0.dtype.type(0)
    a0 = a1 = b0 = b1 = z
    for d in range(q0.shape[0]):
        x, y = q0[d], q1[d]
        u0, u1 = c0[d], c1[d]
        a0 += x * u0
        a1 += x * u1
        b0 += y * u0
        b1 += y * u1
    return a0, a1, b0, b1


@njit(fastmath=_FAST)
def _pair_norms(vectors, rows, store_sq, out):
    """out[i] = |vectors[rows[i]]|^2 (0 on padding). store_sq: the store's norms, NaN until a pair first sums one
    (two threads may both sum it and write the same value); empty: summed here for this pair."""
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < 0:
            out[i] = 0.0
        elif store_sq.shape[0] > 0:
            if math.isnan(store_sq[r]):
                store_sq[r] = _dot(vectors[r], vectors[r])
            out[i] = store_sq[r]
        else:
            out[i] = _dot(vectors[r], vectors[r])


@njit(fastmath=_FAST)
def _pair_dots(q_vectors, qr, c_vectors, cr, dots):
    """dots[i, j] = q_vectors[qr[i]] . c_vectors[cr[j]] (padding reads row 0; `_finish_pair` overwrites it), in
    blocks of 2 x 4, then 2 x 2 (an odd last row or column is repeated)."""
    N, M = dots.shape
    for i in range(0, N, 2):
        i1 = min(i + 1, N - 1)
        q0, q1 = q_vectors[max(qr[i], 0)], q_vectors[max(qr[i1], 0)]
        for j in range(0, M - 3, 4):
            s = _dots_2x4(q0, q1, c_vectors[max(cr[j], 0)], c_vectors[max(cr[j + 1], 0)],
                          c_vectors[max(cr[j + 2], 0)], c_vectors[max(cr[j + 3], 0)])
            for t in range(4):
                dots[i, j + t] = s[t]
                dots[i1, j + t] = s[4 + t]
        for j in range(M - M % 4, M, 2):
            j1 = min(j + 1, M - 1)
            s2 = _dots_2x2(q0, q1, c_vectors[max(cr[j], 0)], c_vectors[max(cr[j1], 0)])
            dots[i, j], dots[i, j1], dots[i1, j], dots[i1, j1] = s2


# The most multiply-adds one BLAS call of `_run_dots` may hold: OpenBLAS (scipy's) runs a product on the calling thread
# below a size (measured with 0.3.30: a 60 x 20 x 384 product on one thread, 70 x 20 x 384 on two); a larger call
# would start BLAS's own threads inside numba's, one pass on every core whatever thread count the caller set
_BLAS_MACS = 1 << 18


@njit
def _run(rows, pos):
    """(first, count): the row `first` where the real rows of `rows` (not -1) are the consecutive store rows first,
    first + 1, .., in order, else -1; count of them. pos[:count]: their places in `rows`."""
    first, n, run = -1, 0, True
    for i in range(rows.shape[0]):
        r = rows[i]
        if r >= 0:
            if n == 0:
                first = r
            elif r != first + n:
                run = False
            pos[n] = i
            n += 1
    return (first if run else -1), n


@njit
def _blas_fits(qs, nq, cs, nc, D):
    """Whether `_run_dots` takes the pair: both sides runs of two rows or more (numpy's dot of one row is a matrix-vector
    product, which OpenBLAS spreads over its threads from a far smaller size), two query rows against the
    candidates within `_BLAS_MACS`, and vectors of at least one element (`_run_dots` steps by `_BLAS_MACS` over
    nc x D: zero-width vectors made a step of 0, a loop that never ended)."""
    return qs >= 0 and cs >= 0 and nq >= 2 and nc >= 2 and D >= 1 and 2 * nc * D <= _BLAS_MACS


@njit
def _run_dots(q_vectors, qs, nq, q_pos, c_vectors, cs, nc, c_pos, dots, scratch):
    """dots[q_pos[a], c_pos[b]] = q_vectors[qs + a] . c_vectors[cs + b] for the pair's real rows, runs of its stores
    (`_run`), by BLAS over the rows where they lie, in calls of at most `_BLAS_MACS` multiply-adds (a last single
    row joins the call before it); padding's entries 0 (`_finish_pair` overwrites them). Without padding the
    product lands in `dots` itself, else in `scratch` (N M,), then in place."""
    N, M = dots.shape
    whole = nq == N and nc == M
    res = dots if whole else scratch[:nq * nc].reshape(nq, nc)
    cand = c_vectors[cs:cs + nc].T  # (D, nc), BLAS's transpose of the stored rows: no copy
    step = _BLAS_MACS // (nc * q_vectors.shape[1])
    i = 0
    while i < nq:
        e = nq if nq - i <= step + 1 else i + step
        np.dot(q_vectors[qs + i:qs + e], cand, res[i:e])
        i = e
    if not whole:
        dots[:] = 0
        for a in range(nq):
            for b in range(nc):
                dots[q_pos[a], c_pos[b]] = res[a, b]


# A squared distance below this share of |x|^2 + |y|^2 is mostly the expansion's rounding (float32: ~1e-7 of the
# norms, a distance of ~1e-3 between equal vectors): `_finish_pair` sums such a pair's (x - y)^2 itself
_NEAR = 2.0 ** -10


@njit(fastmath=_FAST)
def _sq_diff(x, y):
    """|x - y|^2 of two (D,) rows, summed directly (exactly 0 for equal rows)."""
    s = x.dtype.type(0)
    for d in range(x.shape[0]):
        t = x[d] - y[d]
        s += t * t
    return s


@njit(fastmath=_FAST)
def _least(a, b):
    """min(a, b) that keeps a NaN of either, as torch's `amin` does (numba's `min` drops a NaN second argument: a
    real sentence with a NaN vector then had the minimum of the others, or +inf, read as padding: weight 0)."""
    return a if (a < b or a != a) else b


@njit(fastmath=_FAST)
def _finish_pair(q_vectors, qr, c_vectors, cr, q_sq, c_sq, dots, out, row_min, col_min):
    """One pair's distances from its dot products and squared norms, then its minima over real sentences:
    first a loop without branches (it vectorises) that also counts entries within `_NEAR` of 0, whose distances
    are then summed directly (whatever order BLAS or the loop summed the products and the norms in, equal vectors
    are exactly 0 apart, a row from itself too); then one pass that zeroes padding and keeps the minima, with
    selects rather than branches. A NaN distance between real sentences makes both their minima NaN (`_least`)."""
    N, M = dots.shape
    near = 0
    for i in range(N):
        for j in range(M):
            total = q_sq[i] + c_sq[j]
            sq = total - 2.0 * dots[i, j]  # |x|^2 + |y|^2 - 2 x.y
            near += sq <= _NEAR * total
            out[i, j] = math.sqrt(max(sq, 0.0))
    if near:
        for i in range(N):
            for j in range(M):
                qi, cj = qr[i], cr[j]
                if qi >= 0 and cj >= 0 and out[i, j] ** 2 <= _NEAR * (q_sq[i] + c_sq[j]):
                    out[i, j] = math.sqrt(_sq_diff(q_vectors[qi], c_vectors[cj]))
    for j in range(M):
        col_min[j] = math.inf
    for i in range(N):
        qi = qr[i]
        least = math.inf
        for j in range(M):
            cj = cr[j]
            pad = qi < 0 or cj < 0
            d = out.dtype.type(0) if pad else out[i, j]
            out[i, j] = d
            x = out.dtype.type(math.inf) if pad else d  # padding is no one's nearest sentence
            least = _least(least, x)
            col_min[j] = _least(col_min[j], x)
        row_min[i] = least


@njit(fastmath=_FAST)
def _logits(minima, tau):
    """One side's minima (N,) -> the OT weights' logits in place: -(minima - least) / tau, the least minimum's 0
    (tau in the minima's dtype, at least its smallest normal: `_gathered_l2_cpu`), -inf where the minimum is +inf
    (padding, or no real sentence opposite: weight 0); a NaN minimum stays NaN (its side's weights all NaN, as
    torch's softmax gives, which Sinkhorn refuses). Shifted before the division, as `scorers.ot_weights`: -minima /
    tau overflowed to -inf at every sentence for a tau small enough (float32: about 1e-39), NaN weights."""
    least = minima.dtype.type(math.inf)
    for i in range(minima.shape[0]):
        least = min(least, minima[i]) if minima[i] == minima[i] else least
    low = minima.dtype.type(-math.inf)
    for i in range(minima.shape[0]):  # all +inf (no real sentence): all -inf, NaN weights, as torch's softmax gives
        minima[i] = low if minima[i] == math.inf else -(minima[i] - least) / tau


@njit
def _first_real(rows):
    """The first real row number of a pair's side (not -1), or -1 where it has none."""
    for r in rows:
        if r >= 0:
            return r
    return -1


@njit
def pair_order(q_rows, c_rows, q_count, c_count):
    """The pairs (B,) in the order of their first real rows' places in the stores, the query's, then the
    candidate's (q_count, c_count: the stores' rows): pairs that read nearby rows run one after another, while
    those rows are still in the caches (1,000 random 10 x 10 pairs of a 2,620-row store: the pass ~8 % faster). The
    identity where the pairs already run in that order (one query against candidates in store order)."""
    B = q_rows.shape[0]
    key = np.empty(B, np.int64)
    wide = c_count + 1 < (1 << 62) // (q_count + 1)  # room for q * (c_count + 1) + c in int64
    for p in range(B):
        q, c = _first_real(q_rows[p]), _first_real(c_rows[p])
        key[p] = q * (c_count + 1) + c if wide else q
    for p in range(1, B):
        if key[p] < key[p - 1]:
            return np.argsort(key)
    return np.arange(B)


@njit(parallel=True, fastmath=_FAST)
def gathered_l2(q_vectors, q_rows, c_vectors, c_rows, q_store_sq, c_store_sq, out, row_min, col_min, tau, threads):
    """out[p, i, j] = |q_vectors[q_rows[p, i]] - c_vectors[c_rows[p, j]]|, in place.

    q_vectors (Pq, D), c_vectors (Pc, D) one float dtype; q_rows (B, N), c_rows (B, M) int64, -1 = padding
    (distance 0 to anything); q_store_sq (Pq,) / c_store_sq (Pc,): the stores' squared norms, NaN where not
    summed yet (filled in place as pairs reach them), or empty (each pair then sums its rows' own); out (B, N, M),
    row_min (B, N), col_min (B, M) in the vectors' dtype. row_min / col_min: each sentence's least distance to a
    real sentence of the other side (+inf on padding and where the other side has none), as `valid_minima` gives
    them; with tau > 0, the OT weights' logits instead (`_logits`: exp, then `normalize_rows`,
    gives `scorers.ot_weights`). The pairs run in `pair_order` (each writes its own out[p]), split into
    `threads` blocks (numba's thread count: one block a thread), each with its scratch arrays.
    """
    B, N = q_rows.shape
    M = c_rows.shape[1]
    t = out.dtype.type(tau)
    blocks = max(min(threads, B), 1)
    step = (B + blocks - 1) // blocks
    order = pair_order(q_rows, c_rows, q_vectors.shape[0], c_vectors.shape[0])
    for block in numba.prange(blocks):
        q_sq, c_sq, dots = np.empty(N, out.dtype), np.empty(M, out.dtype), np.empty((N, M), out.dtype)
        q_pos, c_pos, scratch = np.empty(N, np.int64), np.empty(M, np.int64), np.empty(N * M, out.dtype)
        for k in range(block * step, min(B, (block + 1) * step)):
            p = order[k]
            qr, cr = q_rows[p], c_rows[p]
            _pair_norms(q_vectors, qr, q_store_sq, q_sq)
            _pair_norms(c_vectors, cr, c_store_sq, c_sq)
            qs, nq = _run(qr, q_pos)
            cs, nc = _run(cr, c_pos)
            if _blas_fits(qs, nq, cs, nc, q_vectors.shape[1]):
                _run_dots(q_vectors, qs, nq, q_pos, c_vectors, cs, nc, c_pos, dots, scratch)
            else:
                _pair_dots(q_vectors, qr, c_vectors, cr, dots)
            _finish_pair(q_vectors, qr, c_vectors, cr, q_sq, c_sq, dots, out[p], row_min[p], col_min[p])
            if tau > 0:
                _logits(row_min[p], t)
                _logits(col_min[p], t)


@njit(fastmath=_FAST)
def normalize_rows(w):
    """w (B, N) -> each row divided by its sum, in place (the softmax's last step, after exp of `_logits`)."""
    for p in range(w.shape[0]):
        total = w.dtype.type(0)
        for i in range(w.shape[1]):
            total += w[p, i]
        inv = w.dtype.type(1) / total
        for i in range(w.shape[1]):
            w[p, i] *= inv
