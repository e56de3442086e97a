"""`aspire.scoring.distance.gathered_l2_cost` for CPU tensors without a tape, compiled with numba.

Each (query, candidate) pair reads its sentence vectors where they are stored, by row number, and writes its
(N, M) distances straight into the output: no (B, N, D) copies of the gathered vectors, no temporary of their
squared norms, no batched product over tiny matrices. The dot products run two query rows by four candidate
rows at a time (each vector element loaded once for several products). The same pass keeps each sentence's
distance to the nearest real sentence of the other side (the OT scorer's weights need them;
`scorers.valid_minima`).
Problems run in parallel over numba's threads (the caller sets their count: `_newton.torch_thread_count`).
"""

from __future__ import annotations

import math

import numba
import numpy as np

# reassociation lets LLVM vectorise the dot products' sums; no 'nnan' / 'ninf', so inf and NaN keep their meaning
_FAST = {"reassoc", "contract", "nsz"}


@numba.njit(cache=True, fastmath=_FAST)
def _dot(x, y):
    """x . y of two (D,) rows, summed in the rows' dtype."""
    s = x.dtype.type(0)
    for d in range(x.shape[0]):
        s += x[d] * y[d]
    return s


@numba.njit(cache=True, fastmath=_FAST)
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


@numba.njit(cache=True, parallel=True, fastmath=_FAST)
def gathered_l2(q_vectors, q_rows, c_vectors, c_rows, out, row_min, col_min):
    """out[p, i, j] = |q_vectors[q_rows[p, i]] - c_vectors[c_rows[p, j]]|, in place.

    q_vectors (Pq, D), c_vectors (Pc, D) one float dtype; q_rows (B, N), c_rows (B, M) int64, -1 = padding
    (distance 0 to anything); out (B, N, M), row_min (B, N), col_min (B, M) in the vectors' dtype. row_min /
    col_min: each sentence's least distance to a real sentence of the other side (+inf on padding and where
    the other side has none), as `valid_minima` gives them.
    """
    B, N = q_rows.shape
    M = c_rows.shape[1]
    for p in numba.prange(B):
        qr, cr = q_rows[p], c_rows[p]
        q_sq, c_sq, dots = np.empty(N, out.dtype), np.empty(M, out.dtype), np.empty((N, M), out.dtype)
        for i in range(N):
            q_sq[i] = _dot(q_vectors[qr[i]], q_vectors[qr[i]]) if qr[i] >= 0 else 0.0
        for j in range(M):
            c_sq[j] = _dot(c_vectors[cr[j]], c_vectors[cr[j]]) if cr[j] >= 0 else 0.0
        for i in range(0, N, 2):  # blocks of 2 x 4 (at the edges a block repeats its last row / column)
            i1 = min(i + 1, N - 1)
            q0, q1 = q_vectors[max(qr[i], 0)], q_vectors[max(qr[i1], 0)]
            for j in range(0, M, 4):
                s = _dots_2x4(q0, q1, c_vectors[max(cr[j], 0)], c_vectors[max(cr[min(j + 1, M - 1)], 0)],
                              c_vectors[max(cr[min(j + 2, M - 1)], 0)], c_vectors[max(cr[min(j + 3, M - 1)], 0)])
                for t in range(min(4, M - j)):
                    dots[i, j + t] = s[t]
                    dots[i1, j + t] = s[4 + t]
        for j in range(M):
            col_min[p, j] = math.inf
        for i in range(N):
            row_min[p, i] = math.inf
            for j in range(M):
                if qr[i] < 0 or cr[j] < 0:
                    out[p, i, j] = 0.0
                    continue
                sq = q_sq[i] + c_sq[j] - 2.0 * dots[i, j]  # |x|^2 + |y|^2 - 2 x.y
                d = math.sqrt(sq) if sq > 0 else 0.0
                out[p, i, j] = d
                row_min[p, i] = min(row_min[p, i], d)
                col_min[p, j] = min(col_min[p, j], d)
