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
not after every `check_every` iterations. The first (log-domain) iteration is computed with one exp pass,
shifted by each row's least cost, which also gives the kernel absorbed at its potentials (`_exp_start`: one
exp per entry where the log-domain iteration and the kernel took three); a problem whose shifted sums under-
or overflow starts in the log domain instead. Float64 throughout; `tests/test_sinkhorn_compiled.py` checks
the two versions agree.

The rest of a no-tape `sinkhorn` call is here too: `prepare_weights` (the weights' check and denormal padding, one
pass), each problem's cost / eps made in a scratch array as it starts (no (L, N, M) float64 copy), the plan of a
problem whose iterations end in the exp domain written from the kernel and scalings at hand (`_write_plan`: no
second exp pass), `centred_potentials`, and `finish_problems` for the plans of the others (log domain, Newton),
rebuilt from the potentials.

Every function compiles with `aspire.scoring._jit.njit` (numba's `error_model="numpy"`): a float division by zero
gives inf or NaN, and the chunk that meets it is found unsafe and redone in the log domain. Numba's default
("python") raised ZeroDivisionError out of the solver instead, where a scaling underflowed to 0.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from aspire.scoring._jit import njit


@njit()
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


@njit()
def _log_rows(C, lb, G, F):
    """F_i = -LSE_j(lb_j + G_j - C_ij), in place on F (N,)."""
    _neg_lse_rows((lb + G).reshape(1, -1) - C, F)


@njit()
def _log_cols(C, la, F, G):
    """G_j = -LSE_i(la_i + F_i - C_ij), in place on G (M,)."""
    _neg_lse_rows((la + F).reshape(1, -1) - C.T, G)


@njit()
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


@njit()
def _exp_start(C, a, b, F, G, K):
    """The first iteration (the log-domain row and column updates from G = 0) with one exp pass, and the kernel
    absorbed at its potentials, in place on F (N,), G (M,) and K (N, M). With m_i = min over real columns of
    C_ij and E_ij = exp(m_i - C_ij) (<= 1):
        F_i = m_i - log r_i,  r_i = sum_j b_j E_ij   (= -LSE_j(log b_j - C_ij), r_i >= the b of m_i's column)
        G_j = -log s_j,       s_j = sum_i a_i E_ij / r_i   (= -LSE_i(log a_i + F_i - C_ij))
        K_ij = exp(F_i + G_j - C_ij) = E_ij / (r_i s_j),  1 on padding (as `_exp_chunk` builds it).
    Potentials are 0 on padding (which no real entry reads). Returns False, having written nothing the caller
    keeps, where a column's s_j or 1 / s_j under- or overflows (the caller runs the log-domain iteration instead)."""
    N, M = C.shape
    for i in range(N):
        m = math.inf
        for j in range(M):
            if b[j] > 0:
                m = min(m, C[i, j])
        r = 0.0
        for j in range(M):  # E_ij (<= 1 on padded columns too: they carry b_j = 0)
            e = math.exp(min(m - C[i, j], 0.0))
            K[i, j] = e
            r += b[j] * e
        F[i] = m - math.log(r) if a[i] > 0 else 0.0
        inv = 1.0 / r
        for j in range(M):
            K[i, j] *= inv
    G[:] = 0.0  # s_j, summed a row of K at a time
    for i in range(N):
        ai = a[i]
        for j in range(M):
            G[j] += ai * K[i, j]
    for j in range(M):
        inv = 1.0 / G[j]  # s_j = 0 gives inf, s_j = inf gives 0, NaN stays NaN (IEEE division)
        if b[j] > 0 and not (inv > 0 and inv < math.inf):  # a denormal s_j overflows here: not only s_j = 0
            return False
        G[j] = inv if b[j] > 0 else 1.0  # 1 / s_j for now
    for i in range(N):
        for j in range(M):
            K[i, j] *= G[j]
    for j in range(M):
        G[j] = math.log(G[j]) if b[j] > 0 else 0.0  # -log s_j
    for i in range(N):  # padding: 1
        for j in range(M):
            if a[i] <= 0 or b[j] <= 0:
                K[i, j] = 1.0
    return True


@njit(fastmath={"reassoc", "contract", "nsz"})
def _exp_chunk(C, a, b, F, G, k, stop_tol, log_limit, K, u, v, Kv, dF, dG, build):
    """Up to k exp-domain iterations on the kernel absorbed at (F, G), stopping after the first whose row
    error is <= stop_tol (the error comes free: the next row update's K v gives it) or whose scalings have
    moved half way to `log_limit` (then absorbed); (F, G) updated in place when the chunk is safe. `build`:
    build K from (F, G) (False: K holds it already, as `_exp_start` leaves it).
    Returns (row error, iterations done, safe)."""
    N, M = C.shape
    if build:  # K = plan / (a b^T) (one vectorised exp); 1 on padding, so a padded row's scaling is 0
        for i in range(N):
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
        v[:] = 0.0  # column update: v = b / (K^T u), K^T u summed a row of K at a time (contiguous)
        for i in range(N):
            ui = u[i]
            for j in range(M):
                v[j] += ui * K[i, j]
        for j in range(M):
            v[j] = b[j] / v[j]
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
        for i in range(N):  # (no short-circuit: the loops vectorise)
            drifted |= (u[i] > a[i] * drift) | (u[i] * drift < a[i])
        for j in range(M):
            drifted |= (v[j] > b[j] * drift) | (v[j] * drift < b[j])
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


@njit(parallel=True)
def sinkhorn_iterations(cost, eps, a, b, F, G, n_iter, log_mode, until, start, check_every, stop_tol, log_limit,
                        plan, value, plan_err, planned):
    """Sinkhorn chunks for each problem until its error is <= stop_tol or its n_iter reaches until (L,).

    cost (L, N, M) float32 or float64 (each problem's cost / eps is made in float64 in a scratch array: no
    (L, N, M) float64 copy), a (L, N), b (L, M) float64 weights (zeros: padding); in place on the scaled
    potentials F (L, N), G (L, M), the iteration counts n_iter (L,) and log_mode (L,) bool (the problem
    iterates in the log domain). `start`: begin with the log-domain iteration from G = 0 (one iteration).
    Where planned (L,) is not empty, a problem whose last chunk ran in the exp domain writes its plan
    diag(u) K diag(v) (the kernel and scalings at hand: no exp) into plan (L, N, M), with its value <cost, P> and
    error (`_write_plan`), and is marked in planned; the others are left to `finish_problems`.
    Returns the row error (L,) after each problem's last chunk (inf where no chunk ran).
    """
    L, N, M = cost.shape
    err_out = np.full(L, np.inf)
    write = planned.shape[0] > 0
    # blocks of problems, each allocating its scratch arrays once; 16 blocks or more keep a machine's threads busy
    # (the count is not read here: a function reading it cannot be cached on disk)
    size = max(1, min(64, L // 16))
    for blk in numba.prange((L + size - 1) // size):
        la, lb = np.empty(N), np.empty(M)
        K, u, v, Kv = np.empty((N, M)), np.empty(N), np.empty(M), np.empty(N)
        dF, dG, Fn, cols, Ce = np.empty(N), np.empty(M), np.empty(N), np.empty(M), np.empty((N, M))
        for p in range(blk * size, min(L, (blk + 1) * size)):
            _scaled(cost[p], eps, Ce)
            err_out[p], in_exp = _iterate(Ce, a[p], b[p], F[p], G[p], n_iter, log_mode, until, p, start,
                                          check_every, stop_tol, log_limit, la, lb, K, u, v, Kv, dF, dG, Fn)
            if write:
                planned[p] = in_exp
                if in_exp:
                    value[p], plan_err[p] = _write_plan(K, u, v, cost[p], a[p], b[p], plan[p], cols)
    return err_out


@njit()
def _scaled(cost, eps, out):
    """out = cost / eps in float64, (N, M) in place."""
    for i in range(cost.shape[0]):
        for j in range(cost.shape[1]):
            out[i, j] = cost[i, j] / eps


@njit()
def _write_plan(K, u, v, cost, a, b, plan, cols):
    """plan = diag(u) K diag(v) (N, M) in plan's dtype (0 on padding, where u or v is 0); returns (<cost, plan>,
    |plan 1 - a|_1 + |plan^T 1 - b|_1) of the plan as written (its entries rounded to the output dtype), summed in
    float64."""
    N, M = K.shape
    total, err = 0.0, 0.0
    cols[:] = 0.0
    for i in range(N):
        row = 0.0
        ui = u[i]
        for j in range(M):
            plan[i, j] = ui * K[i, j] * v[j]
            x = float(plan[i, j])
            row += x
            cols[j] += x
            total += x * cost[i, j]
        err += abs(row - a[i])
    for j in range(M):
        err += abs(cols[j] - b[j])
    return total, err


@njit()
def _logs(w, out):
    """out = log(w), -inf where w = 0 (padding)."""
    for i in range(w.shape[0]):
        out[i] = math.log(w[i]) if w[i] > 0 else -math.inf


@njit()
def _iterate(C, ap, bp, Fp, Gp, n_iter, log_mode, until, p, start, check_every, stop_tol, log_limit,
             la, lb, K, u, v, Kv, dF, dG, Fn):
    """`sinkhorn_iterations` for problem p (C, ap, bp, Fp, Gp its rows), on the block's scratch arrays; returns
    its row error and whether its last chunk ran in the exp domain (K, u, v then hold its plan)."""
    logs = False  # la, lb computed when the log domain first needs them
    built = False  # K holds the kernel absorbed at (F, G)
    if start:
        built = not log_mode[p] and _exp_start(C, ap, bp, Fp, Gp, K)
        if not built:  # the log domain: stable for any scale
            _logs(ap, la)
            _logs(bp, lb)
            logs = True
            Gp[:] = 0.0
            _log_rows(C, lb, Gp, Fp)
            _log_cols(C, la, Fp, Gp)
        n_iter[p] = 1
    err = np.inf
    in_exp = False
    while n_iter[p] < until[p]:
        k = min(check_every, until[p] - n_iter[p])  # the log domain checks every check_every iterations
        safe, done = False, k
        if not log_mode[p]:  # the exp domain checks every iteration and absorbs only when it must
            # (its own budget: an unsafe chunk is redone as k log-domain iterations, not the rest of the budget
            # unchecked, which ran a problem that converged in 10 log iterations to `until`)
            err, done, safe = _exp_chunk(C, ap, bp, Fp, Gp, until[p] - n_iter[p], stop_tol, log_limit, K, u, v, Kv,
                                         dF, dG, not built)
            built = False
            log_mode[p] = not safe  # unsafe: redo this chunk in the log domain, and stay there
        in_exp = safe
        if not safe:
            if not logs:
                _logs(ap, la)
                _logs(bp, lb)
                logs = True
            err, done = _log_chunk(C, ap, la, lb, Fp, Gp, k, Fn), k
        n_iter[p] += done
        if err <= stop_tol:
            break
    return err, in_exp

@njit()
def centred_potentials(F, G, a, b, eps, f, g):
    """`sinkhorn._centre` in place on the scaled potentials F (L, N), G (L, M): (F - s, G + s) with s balancing the
    real rows' and columns' mean potentials, 0 on padding; and those times eps into f, g (the input's dtype). One
    call where the tensor version takes a dozen small operations. F, G, a, b float64."""
    L, N = F.shape
    M = G.shape[1]
    for p in range(L):
        sf, nf, sg, ng = 0.0, 0, 0.0, 0
        for i in range(N):
            if a[p, i] > 0:
                sf += F[p, i]
                nf += 1
        for j in range(M):
            if b[p, j] > 0:
                sg += G[p, j]
                ng += 1
        s = 0.5 * (sf / nf - sg / ng)
        for i in range(N):
            F[p, i] = F[p, i] - s if a[p, i] > 0 else 0.0
            f[p, i] = F[p, i] * eps
        for j in range(M):
            G[p, j] = G[p, j] + s if b[p, j] > 0 else 0.0
            g[p, j] = G[p, j] * eps


@njit()
def prepare_weights(a, b, tiny, rtol, a64, b64):
    """`sinkhorn`'s weights for the compiled path, one pass: a64 (L, N), b64 (L, M) in float64, those below `tiny`
    (denormals: no mass float arithmetic sees) made padding (0), in place. Returns bad (L,) bool: the problems whose
    weights are negative or not finite, or whose masses are not positive and equal to relative `rtol`, or with no
    weight left on a side once its denormals are padding (a positive mass of denormals only: every point padding,
    which gave a zero plan with value 0, read as converged) (the caller names them, as `sinkhorn._check_weights`
    does)."""
    L = a.shape[0]
    bad = np.zeros(L, dtype=np.bool_)
    for p in range(L):  # one light pass: not worth the threads
        mass_a, neg_a, real_a = _side_weights(a[p], tiny, a64[p])
        mass_b, neg_b, real_b = _side_weights(b[p], tiny, b64[p])
        finite = math.isfinite(mass_a) and math.isfinite(mass_b)
        bad[p] = (neg_a or neg_b or not finite or mass_a <= 0 or abs(mass_a - mass_b) > rtol * max(mass_a, mass_b)
                  or not (real_a and real_b))
    return bad


@njit()
def _side_weights(w, tiny, out):
    """One side of one problem for `prepare_weights`: out (N,) = w (N,) with its entries below `tiny` 0, in
    float64; returns (w's mass, whether an entry is negative, whether one is at least `tiny`)."""
    mass, neg, real = 0.0, False, False
    for i in range(w.shape[0]):
        x = w[i]
        mass += x
        neg |= x < 0
        real |= x >= tiny
        out[i] = x if x >= tiny else 0.0
    return mass, neg, real


@njit(parallel=True)
def finish_problems(cost, eps, a, b, F, G, plan, value, err, planned):
    """The plan of each problem not `planned` (by `sinkhorn_iterations`) rebuilt from the centred scaled potentials
    (`centred_potentials`), in float64 and in the log domain, P_ij = exp(log a_i + F_i + log b_j + G_j - cost_ij / eps) (0
    on padding), written into plan (L, N, M) in its dtype; value (L,) = <cost, P> and err (L,) = |P 1 - a|_1 +
    |P^T 1 - b|_1 of the plan as written (its entries in the output dtype), summed in float64. One pass where the
    tensor version takes a dozen (B, N, M) operations."""
    L, N, M = cost.shape
    size = max(1, min(64, L // 16))  # blocks of problems, each allocating its scratch arrays once
    for blk in numba.prange((L + size - 1) // size):
        E, la, lb, cols, ones_n, ones_m = np.empty((N, M)), np.empty(N), np.empty(M), np.empty(M), np.ones(N), np.ones(M)
        for p in range(blk * size, min(L, (blk + 1) * size)):
            if planned[p]:
                continue
            for i in range(N):
                la[i] = math.log(a[p, i]) + F[p, i] if a[p, i] > 0 else -math.inf
            for j in range(M):
                lb[j] = math.log(b[p, j]) + G[p, j] if b[p, j] > 0 else -math.inf
            for i in range(N):
                for j in range(M):
                    E[i, j] = la[i] + lb[j] - cost[p, i, j] / eps
            E[:, :] = np.exp(E)  # -inf (padding) gives 0
            value[p], err[p] = _write_plan(E, ones_n, ones_m, cost[p], a[p], b[p], plan[p], cols)
