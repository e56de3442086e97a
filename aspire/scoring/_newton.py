"""The Newton tail of `sinkhorn`: damped Newton steps on the potentials of the slow problems.

`_newton_tail` runs per problem in compiled code on a CPU (`aspire.scoring._newton_cpu`, numba)
and as batched tensor operations elsewhere (`_newton_tail_torch`, whose docstring derives the
method). The two share every setting from `NEWTON`, the one place they are defined.
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from aspire.scoring._implicit import _safe_log


@dataclass(frozen=True)
class NewtonSettings:
    """The damped Newton method's constants (both implementations read them from `NEWTON`).

    Damping mu = max(c * error, mu_floor * max(b)); c starts at `c_start`, is divided by `c_down`
    after a full step and multiplied by `c_up` otherwise, and is kept in [c_min, c_max].
    """

    halvings: int = 10  # step lengths 1, 1/2, ..., 2^-halvings tried by the line search
    # steps a problem may take before it is handed back to Sinkhorn iterations (the benchmark's
    # hardest problems need 10-15; more means Newton is not getting anywhere, or tol is below the
    # precision floor)
    max_steps: int = 40
    c_start: float = 0.1
    c_down: float = 10.0
    c_up: float = 4.0
    c_min: float = 1e-8
    c_max: float = 1e4
    mu_floor: float = 1e-12


NEWTON = NewtonSettings()


def _dual_terms(Ce, la, lb, a, b, F, G):
    """Plan, its row and column sums, L1 marginal error and the dual, over any leading dims.

    Ce (..., N, M); la, a, F (..., N); lb, b, G (..., M) (broadcast against each other).
    Returns P (..., N, M), r (..., N), c (..., M), err (...), dual (...).
    """
    P = torch.exp((la + F)[..., :, None] + (lb + G)[..., None, :] - Ce)
    r, c = P.sum(-1), P.sum(-2)
    err = (r - a).abs().sum(-1) + (c - b).abs().sum(-1)
    return P, r, c, err, (a * F).sum(-1) + (b * G).sum(-1) - r.sum(-1)


def _tail_inputs(cost, a, b, F, G, eps, work):
    """The Newton tail's inputs in dtype `work`: Ce = cost / eps, a, b, F, G (0 on padding).

    Masses that differ by float rounding give the dual a slope along the gauge direction
    (F + c, G - c), which no plan sees but a lightly damped step follows a long way (potentials
    in the thousands lose the plan's precision in float32): b is scaled to a's exact mass.
    """
    a, b = a.to(work), b.to(work)
    b = b * (a.sum(1, keepdim=True) / b.sum(1, keepdim=True))
    F, G = torch.where(a > 0, F.to(work), 0.0), torch.where(b > 0, G.to(work), 0.0)
    return cost.to(work) / eps, a, b, F, G


# one compiled (numba) call at a time in the process: numba's workqueue threading layer (what it runs on where TBB
# and its OpenMP layer are not usable) aborts the whole process when two Python threads run parallel code at once,
# as the search server's worker threads did under concurrent OT requests; and torch's thread count, set below, is
# process-wide. Re-entrant: a compiled call may run inside another's block (the Newton tail inside Sinkhorn's).
_COMPILED = threading.RLock()


@contextmanager
def torch_thread_count():
    """Compiled (numba) code inside runs on as many threads as torch has, and torch keeps its count after. One
    thread at a time runs such a block (`_COMPILED`): the compiled code uses every thread it is given already."""
    import numba

    with _COMPILED:
        threads = torch.get_num_threads()
        numba_threads = numba.get_num_threads()
        try:  # numba's count follows torch's for this call only, and is set back after it
            numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
            yield
        finally:
            # numba's OpenMP pool, launched on first use, sets the calling thread's OpenMP count to
            # NUMBA_NUM_THREADS, which is torch's count too: give torch back the count it had
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            numba.set_num_threads(numba_threads)


def _newton_tail(cost, a, b, F, G, eps, tol, max_steps):
    """Levenberg-Marquardt Newton steps on the scaled potentials of the hard problems.

    Returns F, G (in the input dtype), the L1 marginal error, the steps taken and `ok` (B,) bool
    (False: the method gave up on that problem, which then goes back to Sinkhorn iterations).
    On a CPU the steps run per problem in compiled code (`aspire.scoring._newton_cpu`, numba);
    on other devices as batched tensor operations (`_newton_tail_torch`, which documents the
    method). Both solve in float64 on the inputs `_tail_inputs` prepares (float32 on MPS, which has no float64).
    """
    if cost.device.type != "cpu":
        return _newton_tail_torch(cost, a, b, F, G, eps, tol, max_steps)
    from aspire.scoring._newton_cpu import newton_tail

    Ce, a64, b64, F64, G64 = (x.detach().contiguous() for x in _tail_inputs(cost, a, b, F, G, eps, torch.float64))
    with torch_thread_count():
        err, steps = newton_tail(Ce.numpy(), a64.numpy(), b64.numpy(), F64.numpy(), G64.numpy(),  # F64, G64 in place
                                 float(tol), int(min(max_steps, NEWTON.max_steps)), NEWTON.halvings,
                                 NEWTON.c_start, NEWTON.c_down, NEWTON.c_up, NEWTON.c_min, NEWTON.c_max,
                                 NEWTON.mu_floor)
    err, steps = torch.from_numpy(err), torch.from_numpy(steps)
    return F64.to(F.dtype), G64.to(G.dtype), err.to(F.dtype), steps, err <= tol


def _newton_tail_torch(cost, a, b, F, G, eps, tol, max_steps):
    """Levenberg-Marquardt Newton steps on the scaled potentials of the hard problems, batched.

    Returns F, G (in the input dtype), the L1 marginal error, the steps taken and `ok` (B,) bool
    (False: the method gave up on that problem, which then goes back to Sinkhorn iterations).

    The dual  D(F, G) = <a, F> + <b, G> - sum_ij P_ij,  P = exp(log a + F + log b + G - C / eps),
    is concave with gradient (a - P 1, b - P^T 1) and Hessian -[[diag(r), P], [P^T, diag(c)]].
    The slow Sinkhorn problems are those whose plan is split into blocks joined by entries of
    exp(-30) or less: the Hessian is singular far below working precision along the direction
    that moves mass between the blocks, so a plain (pseudo-inverse) Newton step cannot move
    there. Adding mu I to the Hessian (mu = c * error, c adapted per problem: /10 after a full
    step, *4 otherwise) keeps every step finite and still converges quadratically as mu -> 0.
    Line search: the full step is taken where the dual increases or the marginal error falls
    (near the solution the dual's change drops below float64 resolution); where it does not,
    the lengths 2^-1 ... 2^-10 are tried in one batched evaluation and the longest that passes
    is taken (none: no move, and more damping). A problem still above tol after
    `NEWTON.max_steps` steps is handed back to Sinkhorn. The work is done in float64 (few problems
    get here), whatever the input's float dtype; in float32 on MPS, which has no float64. At these sizes a step costs its number of
    tensor operations, not their arithmetic: finished problems are frozen in place (their step
    is zeroed) and the arrays compacted only once half of them are done.
    """
    out_dtype = F.dtype
    work = torch.float64 if cost.device.type != "mps" else torch.float32
    n, device = a.shape[0], a.device
    max_steps = min(max_steps, NEWTON.max_steps)
    Ce, a, b, F, G = _tail_inputs(cost, a, b, F, G, eps, work)
    la, lb = _safe_log(a), _safe_log(b)
    F_out, G_out = F, G
    err_out = torch.zeros(n, dtype=work, device=device)
    steps_out = torch.zeros(n, dtype=torch.long, device=device)
    # the step lengths tried at once when a full step fails the line search: 2^-1 ... 2^-halvings
    lengths = torch.tensor([0.5 ** k for k in range(1, NEWTON.halvings + 1)], dtype=work, device=device)  # (K,)
    zero = torch.zeros((), dtype=work, device=device)

    # the state of the rows still held; `live`: still stepping (a finished row is frozen in place
    # and written out when the arrays are compacted, once half of them are frozen, or at the end)
    idx = torch.arange(n, device=device)
    live = torch.ones(n, dtype=torch.bool, device=device)
    steps = torch.zeros(n, dtype=torch.long, device=device)
    P, r, c, e, d = _dual_terms(Ce, la, lb, a, b, F, G)
    mu_floor = NEWTON.mu_floor * b.amax(1)
    c_mu = torch.full((n,), NEWTON.c_start, dtype=work, device=device)

    def write_out(rows):
        nonlocal F_out, G_out, err_out, steps_out
        done = idx[rows]
        F_out, G_out = F_out.index_copy(0, done, F[rows]), G_out.index_copy(0, done, G[rows])
        err_out, steps_out = err_out.index_copy(0, done, e[rows]), steps_out.index_copy(0, done, steps[rows])

    for _ in range(max_steps):
        # a row stops at tol, or on a non-finite error: NaN > tol is False, and an infinite one (an overflowed plan)
        # makes mu inf, so no step could move; it stops with no steps counted, as the compiled tail does
        live = live & (e > tol) & (e < math.inf)
        n_live = int(live.sum())
        if n_live == 0:
            break
        if 2 * n_live <= len(live):  # compact: write out the frozen rows, keep the live ones
            write_out(~live)
            keep = torch.nonzero(live).flatten()
            idx, Ce, a, b, la, lb, F, G, P, r, c, e, d, c_mu, mu_floor, live, steps = (
                x.index_select(0, keep)
                for x in (idx, Ce, a, b, la, lb, F, G, P, r, c, e, d, c_mu, mu_floor, live, steps))
        steps = steps + live
        # damped Newton direction through the Schur complement on the columns
        mu = torch.maximum(c_mu * e, mu_floor)[:, None]  # (L, 1)
        inv_r = 1.0 / (r + mu)  # (L, N)
        ga, gb = a - r, b - c  # the dual's gradient
        Pt = P.transpose(1, 2)
        S = torch.diag_embed(c + mu) - torch.bmm(Pt, inv_r[:, :, None] * P)  # (L, M, M), SPD
        rhs = gb - torch.bmm(Pt, (ga * inv_r)[:, :, None])[:, :, 0]
        chol, info = torch.linalg.cholesky_ex(S)
        dG = torch.cholesky_solve(rhs[:, :, None], chol)[:, :, 0]
        dF = (ga - torch.bmm(P, dG[:, :, None])[:, :, 0]) * inv_r
        solved = live & (info == 0) & torch.isfinite(dF.sum(1) + dG.sum(1))
        dF, dG = torch.where(solved[:, None], dF, zero), torch.where(solved[:, None], dG, zero)
        # line search: the full step (the usual case), then the shorter lengths at once
        full = _dual_terms(Ce, la, lb, a, b, F + dF, G + dG)
        passed = solved & ((full[4] > d) | (full[3] < e))  # NaN compares False
        if bool(passed.all()):
            t = None
            P, r, c, e, d = full
        else:
            t = passed.to(work)
            P, r, c, e, d = (torch.where(passed.view(-1, *([1] * (y.dim() - 1))), y, x)
                             for x, y in zip((P, r, c, e, d), full))
            retry = torch.nonzero(solved & ~passed).flatten()
            if retry.numel() > 0:
                Fk = F[retry, None, :] + lengths[:, None] * dF[retry, None, :]  # (R, K, N)
                Gk = G[retry, None, :] + lengths[:, None] * dG[retry, None, :]  # (R, K, M)
                short = _dual_terms(Ce[retry, None], la[retry, None], lb[retry, None], a[retry, None],
                                    b[retry, None], Fk, Gk)
                ok = (short[4] > d[retry, None]) | (short[3] < e[retry, None])  # (R, K)
                k = ok.to(torch.uint8).argmax(1)  # the longest length that passed (0 if none did)
                moved = ok.any(1)
                rows = torch.arange(len(retry), device=device)
                t = t.index_copy(0, retry, torch.where(moved, lengths[k], zero))
                P, r, c, e, d = (
                    x.index_copy(0, retry, torch.where(moved.view(-1, *([1] * (x.dim() - 1))), y[rows, k], x[retry]))
                    for x, y in zip((P, r, c, e, d), short))
        if t is None:  # every live row took its full step
            F, G = F + dF, G + dG
            c_mu = c_mu / NEWTON.c_down
        else:
            F, G = F + t[:, None] * dF, G + t[:, None] * dG
            c_mu = torch.where(t == 1, c_mu / NEWTON.c_down, c_mu * NEWTON.c_up)
        c_mu = c_mu.clamp(NEWTON.c_min, NEWTON.c_max)
    write_out(torch.ones_like(live))
    return F_out.to(out_dtype), G_out.to(out_dtype), err_out.to(out_dtype), steps_out, err_out <= tol
