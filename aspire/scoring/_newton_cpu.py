"""The Newton tail of `sinkhorn` for CPU tensors, compiled with numba.

Same method as `aspire.scoring._newton._newton_tail_torch` (its docstring has the derivation):
damped (Levenberg-Marquardt) Newton steps on the scaled dual potentials through the Schur
complement on the columns, a backtracking line search accepting a length where the dual increases
or the marginal error falls, mu = c * error with c divided after a full step and multiplied
otherwise. Every constant of the method comes in as an argument, from the one place both versions
read them (`aspire.scoring._newton.NEWTON`); as arguments, not globals, a change to them cannot be
hidden by numba's on-disk cache of this file's compiled code. On a CPU the batched torch version spends its time dispatching ~150 small tensor
operations a step on a handful of problems; here each problem runs its own loop in compiled code
(problems in parallel), so a step costs its arithmetic. `tests/test_sinkhorn.py` checks the two
agree.
Compiled with `aspire.scoring._jit.njit` (IEEE division: inf / NaN, never a ZeroDivisionError).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from aspire.scoring._jit import njit


@njit(fastmath=False)
def _dual_terms(Ce, la, lb, a, b, F, G, P, r, c):
    """Fill P (N, M), r (N), c (M) for potentials (F, G); return (L1 marginal error, dual)."""
    N, M = Ce.shape
    c[:] = 0.0
    dual = 0.0
    for i in range(N):
        ri = 0.0
        base = la[i] + F[i]
        for j in range(M):
            p = math.exp(base + lb[j] + G[j] - Ce[i, j])
            P[i, j] = p
            ri += p
            c[j] += p
        r[i] = ri
        dual += a[i] * F[i] - ri
    err = 0.0
    for i in range(N):
        err += abs(r[i] - a[i])
    for j in range(M):
        err += abs(c[j] - b[j])
        dual += b[j] * G[j]
    return err, dual


@njit()
def _cholesky_solve(S, rhs, out):
    """Solve S out = rhs for symmetric positive definite S (M, M) in place; False if not SPD."""
    M = S.shape[0]
    for k in range(M):  # S <- its Cholesky factor L (lower), column by column
        d = S[k, k]
        for m in range(k):
            d -= S[k, m] * S[k, m]
        if not d > 0.0:
            return False
        d = math.sqrt(d)
        S[k, k] = d
        for i in range(k + 1, M):
            s = S[i, k]
            for m in range(k):
                s -= S[i, m] * S[k, m]
            S[i, k] = s / d
    for i in range(M):  # L y = rhs
        s = rhs[i]
        for m in range(i):
            s -= S[i, m] * out[m]
        out[i] = s / S[i, i]
    for i in range(M - 1, -1, -1):  # L^T out = y
        s = out[i]
        for m in range(i + 1, M):
            s -= S[m, i] * out[m]
        out[i] = s / S[i, i]
    return True


@njit(parallel=True)
def newton_tail(Ce, a, b, F, G, tol, max_steps, halvings, c_start, c_down, c_up, c_min, c_max, mu_floor):
    """Damped Newton steps for each problem, in place on F (L, N) and G (L, M) (float64).

    Ce (L, N, M) = cost / eps; a (L, N), b (L, M) weights of equal mass (zeros: padding).
    `halvings` ... `mu_floor`: the method's constants (`aspire.scoring._newton.NewtonSettings`).
    Returns the L1 marginal error (L,) and the steps taken (L,) per problem; a problem whose error is not
    finite (a NaN input, potentials whose plan overflows) takes no step and returns that error.
    """
    L, N, M = Ce.shape
    err_out = np.empty(L)
    steps_out = np.zeros(L, dtype=np.int64)
    for p in numba.prange(L):
        Cp, ap, bp, Fp, Gp = Ce[p], a[p], b[p], F[p], G[p]
        la = np.empty(N)
        lb = np.empty(M)
        for i in range(N):
            la[i] = math.log(ap[i]) if ap[i] > 0 else -math.inf
        for j in range(M):
            lb[j] = math.log(bp[j]) if bp[j] > 0 else -math.inf
        P, r, c = np.empty((N, M)), np.empty(N), np.empty(M)
        Pt, rt, ct = np.empty((N, M)), np.empty(N), np.empty(M)
        Ft, Gt = np.empty(N), np.empty(M)
        S, rhs, dG, dF, w = np.empty((M, M)), np.empty(M), np.empty(M), np.empty(N), np.empty(N)
        Pw, gw = np.empty((N, M)), np.empty(N)
        bmax = 0.0
        for j in range(M):
            bmax = max(bmax, bp[j])
        e, d = _dual_terms(Cp, la, lb, ap, bp, Fp, Gp, P, r, c)
        c_mu = c_start
        steps = 0
        # a non-finite error stops: NaN compares False, and an infinite one (an overflowed plan) makes mu inf,
        # so no step could move (each would fail its Cholesky); it is returned as it is, with no steps counted
        while steps < max_steps and tol < e < math.inf:
            steps += 1
            mu = max(c_mu * e, mu_floor * bmax)
            # Schur complement S = diag(c + mu) - P^T diag(1 / (r + mu)) P (one BLAS product) and
            # rhs = gb - P^T (ga / (r + mu))
            for i in range(N):
                wi = 1.0 / (r[i] + mu)
                w[i] = wi
                gw[i] = (ap[i] - r[i]) * wi
                for j in range(M):
                    Pw[i, j] = P[i, j] * wi
            S[:, :] = np.dot(P.T, Pw)
            for j in range(M):
                s = bp[j] - c[j]
                for i in range(N):
                    s -= P[i, j] * gw[i]
                rhs[j] = s
                for k in range(M):
                    S[j, k] = -S[j, k]
                S[j, j] += c[j] + mu
            solved = _cholesky_solve(S, rhs, dG)
            if solved:
                for i in range(N):
                    s = ap[i] - r[i]
                    for j in range(M):
                        s -= P[i, j] * dG[j]
                    dF[i] = s * w[i]
                    solved = solved and math.isfinite(dF[i])
                for j in range(M):
                    solved = solved and math.isfinite(dG[j])
            t = 0.0
            if solved:  # backtracking: 1, 1/2, ..., 2^-halvings; accept where the dual rises or the error falls
                length = 1.0
                for _ in range(halvings + 1):
                    for i in range(N):
                        Ft[i] = Fp[i] + length * dF[i]
                    for j in range(M):
                        Gt[j] = Gp[j] + length * dG[j]
                    et, dt = _dual_terms(Cp, la, lb, ap, bp, Ft, Gt, Pt, rt, ct)
                    if dt > d or et < e:
                        t = length
                        break
                    length *= 0.5
            if t > 0.0:
                Fp[:] = Ft
                Gp[:] = Gt
                P, Pt = Pt, P
                r, rt = rt, r
                c, ct = ct, c
                e, d = et, dt
            c_mu = c_mu / c_down if t == 1.0 else c_mu * c_up
            c_mu = min(max(c_mu, c_min), c_max)
        err_out[p] = e
        steps_out[p] = steps
    return err_out, steps_out
