"""The Sinkhorn iterations of `sinkhorn` for CPU tensors without a tape, compiled with numba.

The same method as the batched version in `aspire.scoring.sinkhorn` (its module docstring describes it):
one log-domain iteration from G = 0, then chunks of `check_every` exp-domain iterations on the kernel
absorbed at the potentials, the row error checked after each chunk, a chunk whose scalings overflow, vanish
or move more than `log_limit` redone in the log domain (that problem stays there). Here each problem runs
its own loop (problems in parallel), so an iteration costs its arithmetic, not the dispatch of a dozen
batched tensor operations over the still-active rows: at the OT scorer's sizes (10-50 sentences) that
dispatch is most of the batched version's time. Two differences follow from that: an exp-domain chunk
checks the error after every iteration (it costs nothing extra here: the next row update's K v gives it),
so a problem does the iterations it needs, not the next multiple of `check_every`; and it absorbs the
scalings into the potentials (one exp over the kernel) only when they have moved half way to `log_limit`,
not after every `check_every` iterations. Float64 throughout; `tests/test_sinkhorn.py` checks the
two versions agree.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True)
def _neg_lse_rows(T, out):
    """out_i = -LSE_j(T_ij) for T (N, M), in place on out (N,); +inf where a row is all -inf. One
    vectorised exp over T."""
    N, M = T.shape
    top = np.empty(N)
    for i in range(N):
        t = -math.inf
        for j in range(M):
            t = max(t, T[i, j])
        top[i] = t if t > -math.inf else 0.0  # an all -inf row sums to 0 below
    E = np.exp(T - top.reshape(N, 1))
    for i in range(N):
        s = E[i].sum()
        out[i] = -(top[i] + math.log(s)) if s > 0 else math.inf


@numba.njit(cache=True)
def _log_rows(C, lb, G, F):
    """F_i = -LSE_j(lb_j + G_j - C_ij), in place on F (N,)."""
    _neg_lse_rows((lb + G).reshape(1, -1) - C, F)


@numba.njit(cache=True)
def _log_cols(C, la, F, G):
    """G_j = -LSE_i(la_i + F_i - C_ij), in place on G (M,)."""
    _neg_lse_rows((la + F).reshape(1, -1) - C.T, G)


@numba.njit(cache=True)
def _log_chunk(C, a, la, lb, F, G, k, Fn):
    """k log-domain iterations in place on (F, G); returns the row error of the plan (columns exact)."""
    for _ in range(k):
        _log_rows(C, lb, G, F)
        _log_cols(C, la, F, G)
    _log_rows(C, lb, G, Fn)
    err = 0.0
    for i in range(F.shape[0]):
        err += abs(a[i] * math.expm1(F[i] - Fn[i]))
    return err


@numba.njit(cache=True)
def _exp_chunk(C, a, b, F, G, k, stop_tol, log_limit, K, u, v, Kv, dF, dG):
    """Up to k exp-domain iterations on the kernel absorbed at (F, G), stopping after the first whose row
    error is <= stop_tol (the error comes free: the next row update's K v gives it) or whose scalings have
    moved half way to `log_limit` (then absorbed); (F, G) updated in place when the chunk is safe.
    Returns (row error, iterations done, safe)."""
    N, M = C.shape
    for i in range(N):  # K = plan / (a b^T) (one vectorised exp); 1 on padding, so a padded row's scaling is 0
        for j in range(M):
            K[i, j] = 0.0 if (a[i] <= 0 or b[j] <= 0) else F[i] + G[j] - C[i, j]
    K[:, :] = np.exp(K)
    for i in range(N):  # K v with v = b
        s = 0.0
        for j in range(M):
            s += K[i, j] * b[j]
        Kv[i] = s
    err, done = math.inf, 0
    drift = math.exp(0.5 * log_limit)
    while done < k:
        for i in range(N):  # row update: u = a / (K v)
            u[i] = a[i] / Kv[i]
        for j in range(M):  # column update: v = b / (K^T u)
            s = 0.0
            for i in range(N):
                s += u[i] * K[i, j]
            v[j] = b[j] / s
        err = 0.0
        for i in range(N):  # row marginals of diag(u) K diag(v) (columns exact), and the next K v
            s = 0.0
            for j in range(M):
                s += K[i, j] * v[j]
            Kv[i] = s
            err += abs(u[i] * s - a[i])
        done += 1
        if err <= stop_tol:
            break
        drifted = False  # a scaling half way to `log_limit`: absorb it now, while the chunk is still safe
        for i in range(N):
            drifted = drifted or u[i] > a[i] * drift or u[i] * drift < a[i]
        for j in range(M):
            drifted = drifted or v[j] > b[j] * drift or v[j] * drift < b[j]
        if drifted:
            break
    safe = math.isfinite(err)
    for i in range(N):  # absorb: F += log(u / a) on real rows
        dF[i] = math.log(u[i] / a[i]) if a[i] > 0 else 0.0
        safe = safe and abs(dF[i]) < log_limit
    for j in range(M):
        dG[j] = math.log(v[j] / b[j]) if b[j] > 0 else 0.0
        safe = safe and abs(dG[j]) < log_limit
    if safe:
        for i in range(N):
            F[i] += dF[i]
        for j in range(M):
            G[j] += dG[j]
    return err, done, safe


@numba.njit(cache=True, parallel=True)
def sinkhorn_iterations(Ce, a, b, F, G, n_iter, log_mode, until, start, check_every, stop_tol, log_limit):
    """Sinkhorn chunks for each problem until its error is <= stop_tol or its n_iter reaches until (L,).

    Ce (L, N, M) = cost / eps, a (L, N), b (L, M) float64 weights (zeros: padding); in place on the scaled
    potentials F (L, N), G (L, M), the iteration counts n_iter (L,) and log_mode (L,) bool (the problem
    iterates in the log domain). `start`: begin with the log-domain iteration from G = 0 (one iteration).
    Returns the row error (L,) after each problem's last chunk (inf where no chunk ran).
    """
    L, N, M = Ce.shape
    err_out = np.full(L, np.inf)
    for p in numba.prange(L):
        C, ap, bp, Fp, Gp = Ce[p], a[p], b[p], F[p], G[p]
        la, lb = np.empty(N), np.empty(M)
        for i in range(N):
            la[i] = math.log(ap[i]) if ap[i] > 0 else -math.inf
        for j in range(M):
            lb[j] = math.log(bp[j]) if bp[j] > 0 else -math.inf
        K, u, v, Kv = np.empty((N, M)), np.empty(N), np.empty(M), np.empty(N)
        dF, dG, Fn = np.empty(N), np.empty(M), np.empty(N)
        if start:
            Gp[:] = 0.0
            _log_rows(C, lb, Gp, Fp)
            _log_cols(C, la, Fp, Gp)
            n_iter[p] = 1
        err = np.inf
        while n_iter[p] < until[p]:
            k = min(check_every, until[p] - n_iter[p])  # the log domain checks every check_every iterations
            safe, done = False, k
            if not log_mode[p]:  # the exp domain checks every iteration and absorbs only when it must
                k = until[p] - n_iter[p]
                err, done, safe = _exp_chunk(C, ap, bp, Fp, Gp, k, stop_tol, log_limit, K, u, v, Kv, dF, dG)
                log_mode[p] = not safe  # unsafe: redo this chunk in the log domain, and stay there
            if not safe:
                err, done = _log_chunk(C, ap, la, lb, Fp, Gp, k, Fn), k
            n_iter[p] += done
            if err <= stop_tol:
                break
        err_out[p] = err
    return err_out
