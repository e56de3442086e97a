"""Batched entropy-regularised optimal transport (Sinkhorn) for many small problems.

Problem (one per batch row b): given a cost `C (N, M)` and weights `a (N,)`, `b (M,)` of equal
mass (zeros allowed: padded points carry no mass), find the plan

    P = argmin_{P >= 0, P 1 = a, P^T 1 = b}  <C, P> + eps * KL(P | a b^T)

and report its transport cost `value = <C, P>`. At the optimum
`P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps)` with dual potentials `f (N,)`, `g (M,)` (the
geomloss convention; the plan equals POT's `sinkhorn_log` plan for `reg = eps`).

How it is solved (fast and stable for any eps and cost scale):

1. One log-domain Sinkhorn iteration from `g = 0`:
       f_i = -eps * LSE_j(log b_j + (g_j - C_ij) / eps),   g_j = -eps * LSE_i(log a_i + (f_i - C_ij) / eps).
2. Chunks of `check_every` exp-domain iterations on the *absorbed* kernel
   `K_ij = exp((f_i + g_j - C_ij) / eps)` (entries are plan / (a b^T), so they neither
   overflow nor vanish where the plan has mass), with scalings `u = a / (K v)`, `v = b / (K^T u)`:
   one batched mat-vec and one division per half step. After a chunk the scalings are absorbed
   into the potentials (`f += eps log(u / a)`, `g += eps log(v / b)`) and the row-marginal error
   of the plan `diag(u) K diag(v)` (whose column marginals are exact) is measured.
3. Sinkhorn converges linearly and, at small eps, a few problems of a batch can need thousands
   of iterations: their plan splits into blocks joined only by entries of exp(-30) or less, and
   mass must cross between the blocks. Problems still unconverged after `newton_after`
   iterations switch to Newton's method on the potentials (Sinkhorn-Newton, Brauer et al.
   2017) with a Levenberg-Marquardt damping mu I (mu proportional to the marginal error) that
   keeps the nearly singular direction between blocks solvable, and a backtracking line search
   on the concave dual. It runs in float64 and converges in about 5-15 steps where Sinkhorn
   needs thousands (see `_newton_tail_torch`); a problem Newton stalls on goes back to Sinkhorn
   iterations. Newton is used only when the iterations are not taped for autograd. At these
   sizes a batched step costs its ~150 tensor operations' dispatch, not their arithmetic, so on
   a CPU each problem runs its steps in compiled code instead (`aspire.scoring._newton_cpu`,
   numba; tested to agree with the batched version, which other devices use).
4. Problems whose error is <= `tol` stop (they leave the active set, so the rest of the batch runs
   on fewer rows). A problem whose exp-domain scalings overflow, vanish or leave a safe range
   during a chunk is rolled back and continues with log-domain iterations (step 1's updates),
   which are stable for any eps.
5. The plan is rebuilt from the potentials in the log domain, `value = <C, P>`, and `err` is the
   L1 marginal error of that plan: `|P 1 - a|_1 + |P^T 1 - b|_1`.

Gradients: `grad="autograd"` differentiates through the iterations (memory grows with them);
`grad="implicit"` runs the no-tape forward and differentiates the fixed point (P 1 = a,
P^T 1 = b) with one batched pseudo-inverse solve (symmetric eigendecomposition of an M x M
Schur complement), storing no iterations (exact at convergence).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

GRAD_MODES = ("autograd", "implicit")
_HALF = (torch.float16, torch.bfloat16)


class SinkhornConvergenceWarning(RuntimeWarning):
    """Some problems stopped at `max_iter` with a marginal error above `tol`."""


@dataclass
class SinkhornResult:
    """Output of `sinkhorn` for a batch of B problems of size N x M.

    Attributes:
        plan: (B, N, M) transport plan; padded rows/columns are zero.
        value: (B,) transport cost `<cost, plan>` (a distance when the cost is one).
        f: (B, N) dual potential of the rows (geomloss convention, see module docstring); 0 on padding.
        g: (B, M) dual potential of the columns; 0 on padding.
        err: (B,) L1 marginal error of `plan`: `|plan 1 - a|_1 + |plan^T 1 - b|_1`.
        n_iter: (B,) long, iterations used per problem: Sinkhorn iterations (one row and one
            column update each) plus Newton steps, if any.
        converged: (B,) bool, whether the problem met `tol` before `max_iter`.
    """

    plan: Tensor
    value: Tensor
    f: Tensor
    g: Tensor
    err: Tensor
    n_iter: Tensor
    converged: Tensor


def sinkhorn(
    cost: Tensor,
    a: Tensor,
    b: Tensor,
    eps: float = 0.05,
    *,
    tol: float = 1e-4,
    max_iter: int = 1000,
    check_every: int = 10,
    grad: str = "autograd",
    newton_after: int | None = 20,
) -> SinkhornResult:
    """Entropy-regularised OT for a batch of problems (see the module docstring for the method).

    Args:
        cost: (B, N, M) float cost matrices (any scale; device and dtype are taken from it;
            float16 and bfloat16 problems are solved in float32 and the results cast back).
        a: (B, N) non-negative row weights; zeros mark padding (log-weight -inf).
        b: (B, M) non-negative column weights with the same total mass as `a` per problem.
        eps: entropic regularisation (> 0); the ASPIRE paper uses lambda = 20, i.e. eps = 0.05.
        tol: stop a problem once the L1 marginal error of its plan is <= tol (the iterates are
            stopped at 0.9 tol, a margin for the rounding of the rebuilt plan).
        max_iter: at most this many iterations (Sinkhorn iterations plus Newton steps); problems
            still above `tol` then raise a `SinkhornConvergenceWarning`.
        check_every: iterations between convergence checks (and absorptions of the scalings).
        grad: "autograd" (differentiate through the iterations) or "implicit" (differentiate
            the fixed point; no iterations stored). Ignored when no input requires a gradient.
        newton_after: problems not converged after this many iterations continue with damped
            Newton steps (one step counts as one iteration); None: Sinkhorn only. Used only when
            the iterations are not taped for autograd (no-grad, or grad="implicit").

    Returns:
        A `SinkhornResult` with plan (B, N, M), value (B,), potentials f (B, N) and g (B, M),
        the marginal error err (B,), n_iter (B,) and converged (B,).
    """
    _check_inputs(cost, a, b, eps, tol, max_iter, check_every, grad)
    if newton_after is not None and newton_after < 1:
        raise ValueError(f"newton_after must be >= 1 or None, got {newton_after}")
    if cost.dtype in _HALF:  # 8-11 bit mantissas cannot carry the iterations: solve in float32
        a32, b32 = a.float(), b.float()
        b32 = b32 * (a32.sum(1, keepdim=True) / b32.sum(1, keepdim=True))  # equal up to half rounding (checked)
        res = sinkhorn(cost.float(), a32, b32, eps, tol=tol, max_iter=max_iter,
                       check_every=check_every, grad=grad, newton_after=newton_after)
        half = cost.dtype
        return SinkhornResult(res.plan.to(half), res.value.to(half), res.f.to(half), res.g.to(half),
                              res.err.to(half), res.n_iter, res.converged)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (cost, a, b))
    # Denormal weights (a softmax at a small temperature underflows there) carry no mass that
    # float arithmetic can see, but their logs' gradients (1 / w) overflow: make them padding.
    tiny = torch.finfo(cost.dtype).tiny
    a, b = torch.where(a >= tiny, a, 0.0), torch.where(b >= tiny, b, 0.0)
    if needs_grad and grad == "implicit":
        with torch.no_grad():
            f, g, n_iter, converged = _solve(cost, a, b, eps, tol, max_iter, check_every, newton_after)
        plan, value = _ImplicitPlan.apply(cost, a, b, f, g, eps)
        f, g = f.detach(), g.detach()
    else:
        with torch.set_grad_enabled(needs_grad):
            f, g, n_iter, converged = _solve(cost, a, b, eps, tol, max_iter, check_every, newton_after)
            plan = _plan(cost, a, b, f, g, eps)
            value = (plan * cost).sum(dim=(1, 2))
    with torch.no_grad():
        err = (plan.sum(2) - a).abs().sum(1) + (plan.sum(1) - b).abs().sum(1)
    if not bool(converged.all()):
        bad = ~converged
        warnings.warn(
            f"sinkhorn: {int(bad.sum())} of {len(bad)} problems stopped unconverged (max_iter={max_iter}) with "
            f"marginal error up to {float(err[bad].max()):.3g} > tol={tol:g} (eps={eps:g}); raise "
            "max_iter or eps",
            SinkhornConvergenceWarning,
            stacklevel=2,
        )
    return SinkhornResult(plan, value, f, g, err, n_iter, converged)


def sinkhorn_dist(cost: Tensor, a: Tensor, b: Tensor, eps: float = 0.05, **kwargs) -> Tensor:
    """(B,) transport cost `<cost, plan>` of `sinkhorn(cost, a, b, eps, **kwargs)`."""
    return sinkhorn(cost, a, b, eps, **kwargs).value


# ---- checks -------------------------------------------------------------------------------------
def _check_inputs(cost, a, b, eps, tol, max_iter, check_every, grad) -> None:
    if grad not in GRAD_MODES:
        raise ValueError(f"unknown grad mode {grad!r}; valid: {', '.join(GRAD_MODES)}")
    if cost.dim() != 3 or a.shape != cost.shape[:2] or b.shape != (cost.shape[0], cost.shape[2]):
        raise ValueError(
            f"expected cost (B, N, M), a (B, N), b (B, M); got {tuple(cost.shape)}, {tuple(a.shape)}, "
            f"{tuple(b.shape)}"
        )
    if not cost.is_floating_point() or a.dtype != cost.dtype or b.dtype != cost.dtype:
        raise ValueError(f"cost, a, b must share one float dtype; got {cost.dtype}, {a.dtype}, {b.dtype}")
    if not eps > 0 or not tol > 0 or max_iter < 1 or check_every < 1:
        raise ValueError(f"need eps > 0, tol > 0, max_iter >= 1, check_every >= 1; got {eps}, {tol}, "
                         f"{max_iter}, {check_every}")
    with torch.no_grad():
        mass_a, mass_b = a.sum(1), b.sum(1)
        rtol = max(1e-5, math.sqrt(torch.finfo(cost.dtype).eps))
        bad = (mass_a <= 0) | ((mass_a - mass_b).abs() > rtol * torch.maximum(mass_a, mass_b))
        bad |= (a < 0).any(1) | (b < 0).any(1)
        if bool(bad.any()):
            rows = bad.nonzero().flatten()[:5].tolist()
            raise ValueError(
                f"weights must be non-negative with equal positive mass per problem (relative tolerance "
                f"{rtol:.1e}); problems {rows} violate it: mass a {mass_a[rows].tolist()}, "
                f"mass b {mass_b[rows].tolist()}"
            )


# ---- the solver -------------------------------------------------------------------------------
def _log_rows(Ce: Tensor, logb: Tensor, G: Tensor) -> Tensor:
    """Row update in the log domain: F_i = -LSE_j(log b_j + G_j - Ce_ij). (B, N)."""
    return -torch.logsumexp((logb + G)[:, None, :] - Ce, dim=2)


def _log_cols(Ce: Tensor, loga: Tensor, F: Tensor) -> Tensor:
    """Column update in the log domain: G_j = -LSE_i(log a_i + F_i - Ce_ij). (B, M)."""
    return -torch.logsumexp((loga + F)[:, :, None] - Ce, dim=1)


def _log_chunk(Ce, loga, logb, F, G, k):
    """k log-domain iterations on scaled potentials F = f/eps, G = g/eps; returns F, G, row error.

    The error is that of the plan after the last column update (columns exact):
    sum_i a_i |exp(F_i - F_i^new) - 1| with F^new the next row update.
    """
    for _ in range(k):
        F = _log_rows(Ce, logb, G)
        G = _log_cols(Ce, loga, F)
    err = (loga.exp() * torch.expm1(F - _log_rows(Ce, logb, G))).abs().sum(1)
    return F, G, err


def _exp_chunk(Ce, a, b, F, G, k, log_limit):
    """k exp-domain iterations on the kernel absorbed at (F, G); returns new F, G, error, ok flag.

    `ok` (B,) is False where a scaling overflowed, vanished or moved more than `log_limit` in log
    scale (the chunk is then not trusted and the caller redoes it in the log domain).
    """
    # K = plan / (a b^T) (B, N, M). On padding the potentials may be anything: K is set to 1 there
    # so a padded row's K v (and column's K^T u) is positive and its scaling 0 / positive = 0.
    pad = (a <= 0)[:, :, None] | (b <= 0)[:, None, :]
    K = torch.exp((F[:, :, None] + G[:, None, :] - Ce).masked_fill(pad, 0.0))  # masked before exp: no inf * 0 in grads
    Kt = K.transpose(1, 2).contiguous()  # (B, M, N)
    v = b  # (B, M) scaled column factors, b * exp(dG)
    u = a  # (B, N) scaled row factors, a * exp(dF)
    for _ in range(k):  # mat-vecs as row vector x matrix: the faster batched product at these sizes
        u = a / torch.bmm(v[:, None, :], Kt)[:, 0, :]  # row update: u = a / (K v)
        v = b / torch.bmm(u[:, None, :], K)[:, 0, :]  # column update: v = b / (K^T u)
    err = (u * torch.bmm(v[:, None, :], Kt)[:, 0, :] - a).abs().sum(1)  # rows of diag(u) K diag(v)
    dF = _log_ratio(u, a)  # absorb: F += log(u / a) on real rows
    dG = _log_ratio(v, b)
    ok = torch.isfinite(err)
    ok &= (dF.abs() < log_limit).all(1) & (dG.abs() < log_limit).all(1)  # also False for NaN/inf
    return F + dF, G + dG, err, ok


def _pinv_solve(S: Tensor, rhs: Tensor, scale: Tensor) -> Tensor:
    """Minimum-norm solution of S w = rhs for symmetric PSD S (B, M, M), rhs (B, M).

    Eigenvalues below `_PINV_RTOL[dtype] * scale` (scale (B, 1)) are treated as zero.
    """
    lam, vec = torch.linalg.eigh(S)  # (B, M), (B, M, M)
    keep = lam > _PINV_RTOL[S.dtype] * scale
    inv_lam = torch.where(keep, 1.0 / torch.where(keep, lam, 1.0), 0.0)
    proj = torch.bmm(vec.transpose(1, 2), rhs[:, :, None])[:, :, 0]  # (B, M)
    return torch.bmm(vec, (inv_lam * proj)[:, :, None])[:, :, 0]


# Step lengths tried at once when a Newton step's full length fails the line search (2^-1 ... 2^-10).
_BACKTRACK = tuple(0.5 ** k for k in range(1, 11))
# Newton steps a problem may take before it is handed back to Sinkhorn iterations (the benchmark's
# hardest problems need 10-15; more means Newton is not getting anywhere, or tol is below the
# precision floor).
_NEWTON_STEPS = 40


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


def _newton_tail(cost, a, b, F, G, eps, tol, max_steps):
    """Levenberg-Marquardt Newton steps on the scaled potentials of the hard problems.

    Returns F, G (in the input dtype), the L1 marginal error, the steps taken and `ok` (B,) bool
    (False: the method gave up on that problem, which then goes back to Sinkhorn iterations).
    On a CPU the steps run per problem in compiled code (`aspire.scoring._newton_cpu`, numba);
    on other devices as batched tensor operations (`_newton_tail_torch`, which documents the
    method). Both solve in float64 on the inputs `_tail_inputs` prepares.
    """
    if cost.device.type != "cpu":
        return _newton_tail_torch(cost, a, b, F, G, eps, tol, max_steps)
    import numba

    from aspire.scoring._newton_cpu import newton_tail

    Ce, a64, b64, F64, G64 = (x.detach().contiguous() for x in _tail_inputs(cost, a, b, F, G, eps, torch.float64))
    threads = torch.get_num_threads()
    try:
        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
        err, steps = newton_tail(Ce.numpy(), a64.numpy(), b64.numpy(), F64.numpy(), G64.numpy(),  # F64, G64 in place
                                 float(tol), int(min(max_steps, _NEWTON_STEPS)))
    finally:
        # numba's OpenMP pool, launched on first use, sets the calling thread's OpenMP count to
        # NUMBA_NUM_THREADS, which is torch's count too: give torch back the count it had
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
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
    `_NEWTON_STEPS` steps is handed back to Sinkhorn. The work is done in float64 (few problems
    get here), whatever the input's float dtype. At these sizes a step costs its number of
    tensor operations, not their arithmetic: finished problems are frozen in place (their step
    is zeroed) and the arrays compacted only once half of them are done.
    """
    out_dtype = F.dtype
    work = torch.float64 if cost.device.type != "mps" else torch.float32
    n, device = a.shape[0], a.device
    max_steps = min(max_steps, _NEWTON_STEPS)
    Ce, a, b, F, G = _tail_inputs(cost, a, b, F, G, eps, work)
    la, lb = _safe_log(a), _safe_log(b)
    F_out, G_out = F, G
    err_out = torch.zeros(n, dtype=work, device=device)
    steps_out = torch.zeros(n, dtype=torch.long, device=device)
    lengths = torch.tensor(_BACKTRACK, dtype=work, device=device)  # (K,)
    zero = torch.zeros((), dtype=work, device=device)

    # the state of the rows still held; `live`: still stepping (a finished row is frozen in place
    # and written out when the arrays are compacted, once half of them are frozen, or at the end)
    idx = torch.arange(n, device=device)
    live = torch.ones(n, dtype=torch.bool, device=device)
    steps = torch.zeros(n, dtype=torch.long, device=device)
    P, r, c, e, d = _dual_terms(Ce, la, lb, a, b, F, G)
    mu_floor = 1e-12 * b.amax(1)
    c_mu = torch.full((n,), 0.1, dtype=work, device=device)

    def write_out(rows):
        nonlocal F_out, G_out, err_out, steps_out
        done = idx[rows]
        F_out, G_out = F_out.index_copy(0, done, F[rows]), G_out.index_copy(0, done, G[rows])
        err_out, steps_out = err_out.index_copy(0, done, e[rows]), steps_out.index_copy(0, done, steps[rows])

    for _ in range(max_steps):
        live = live & (e > tol)  # a row stops at tol, or on a non-finite error (NaN > tol is False)
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
            c_mu = c_mu / 10
        else:
            F, G = F + t[:, None] * dF, G + t[:, None] * dG
            c_mu = torch.where(t == 1, c_mu / 10, c_mu * 4)
        c_mu = c_mu.clamp(1e-8, 1e4)
    write_out(torch.ones_like(live))
    return F_out.to(out_dtype), G_out.to(out_dtype), err_out.to(out_dtype), steps_out, err_out <= tol


def _safe_log(w: Tensor) -> Tensor:
    """log(w) with -inf (and a zero, not NaN, gradient) where w == 0."""
    pos = w > 0
    return torch.where(pos, torch.log(torch.where(pos, w, 1.0)), -math.inf)


def _log_ratio(x: Tensor, w: Tensor) -> Tensor:
    """log(x / w) where w > 0, else 0 (padding), with NaN-free gradients."""
    pos = w > 0
    return torch.where(pos, torch.log(torch.where(pos, x, 1.0) / torch.where(pos, w, 1.0)), 0.0)


def _solve(cost, a, b, eps, tol, max_iter, check_every, newton_after):
    """Potentials (f, g) (B, N), (B, M), iterations (B,) long and converged (B,) bool."""
    B = cost.shape[0]
    device = cost.device
    Ce = cost / eps  # (B, N, M)
    loga, logb = _safe_log(a), _safe_log(b)  # -inf on padding
    # A scaling may move by at most exp(+-log_limit) within a chunk: far from over/underflow.
    log_limit = 0.25 * math.log(torch.finfo(cost.dtype).max)
    # The stop test reads the iterates' error; the plan rebuilt from the potentials adds rounding
    # (a few 1e-6 in float32), so stop 10 % below tol for the returned plan to meet it.
    stop_tol = 0.9 * tol
    F = _log_rows(Ce, logb, torch.zeros_like(b))
    G = _log_cols(Ce, loga, F)
    n_iter = torch.ones(B, dtype=torch.long, device=device)  # per problem
    converged = torch.zeros(B, dtype=torch.bool, device=device)
    log_mode = torch.zeros(B, dtype=torch.bool, device=device)  # exp-domain chunks were unsafe
    newton_ok = torch.full((B,), newton_after is not None and not torch.is_grad_enabled(), device=device)
    active = torch.arange(B, device=device)
    done_iter = 1  # iterations of the Sinkhorn rows (all active problems iterate in lockstep)
    while active.numel() > 0:
        err = torch.zeros(B, dtype=cost.dtype, device=device)
        newton_rows = active[newton_ok[active]] if done_iter >= (newton_after or max_iter) else active[:0]
        if newton_rows.numel() > 0:  # the slow tail: Newton steps on the potentials, to the end
            Fn, Gn, err_n, steps_n, ok_n = _newton_tail(cost[newton_rows], a[newton_rows], b[newton_rows],
                                                        F[newton_rows], G[newton_rows], eps, stop_tol,
                                                        max_iter - done_iter)
            F, G = F.index_copy(0, newton_rows, Fn), G.index_copy(0, newton_rows, Gn)
            err = err.index_copy(0, newton_rows, err_n)
            n_iter = n_iter.index_add(0, newton_rows, steps_n)
            # a problem Newton gave up on goes back to Sinkhorn iterations, in this round
            newton_ok = newton_ok.index_fill(0, newton_rows, False)
            newton_rows = newton_rows[ok_n]
            newton_done = torch.zeros(B, dtype=torch.bool, device=device).index_fill(0, newton_rows, True)
            sink_rows = active[~newton_done[active]]
        else:
            sink_rows = active
        k = min(check_every, max_iter - done_iter)
        if newton_after is not None and done_iter < newton_after:
            k = min(k, newton_after - done_iter)
        if sink_rows.numel() > 0 and k > 0:
            exp_rows = sink_rows[~log_mode[sink_rows]]
            log_rows = sink_rows[log_mode[sink_rows]]
            if exp_rows.numel() > 0:
                Fe, Ge, err_e, ok = _exp_chunk(Ce[exp_rows], a[exp_rows], b[exp_rows], F[exp_rows],
                                               G[exp_rows], k, log_limit)
                if not bool(ok.all()):  # unsafe exp-domain chunk: redo those problems in the log domain
                    log_mode = log_mode.index_fill(0, exp_rows[~ok], True)
                    log_rows = torch.cat([log_rows, exp_rows[~ok]])
                    exp_rows, Fe, Ge, err_e = exp_rows[ok], Fe[ok], Ge[ok], err_e[ok]
                F, G = F.index_copy(0, exp_rows, Fe), G.index_copy(0, exp_rows, Ge)
                err = err.index_copy(0, exp_rows, err_e.detach())
            if log_rows.numel() > 0:
                Fl, Gl, err_l = _log_chunk(Ce[log_rows], loga[log_rows], logb[log_rows], F[log_rows],
                                           G[log_rows], k)
                F, G = F.index_copy(0, log_rows, Fl), G.index_copy(0, log_rows, Gl)
                err = err.index_copy(0, log_rows, err_l.detach())
            done_iter += k
            n_iter = n_iter.index_add(0, sink_rows, torch.full_like(sink_rows, k))
        stepped = torch.cat([newton_rows, sink_rows]) if k > 0 else newton_rows
        finished = err[stepped] <= stop_tol
        converged = converged.index_fill(0, stepped[finished], True)
        out_of_budget = n_iter[active] >= max_iter
        active = active[~converged[active] & ~out_of_budget]
    F, G = _centre(F, G, a, b)
    return F * eps, G * eps, n_iter, converged


def _centre(F: Tensor, G: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """(F - s, G + s) with s balancing the real rows' and columns' mean potentials; 0 on padding.

    The plan is unchanged (it depends on F_i + G_j only); potentials near 0 keep the most
    precision when the plan is rebuilt from them.
    """
    ra, rb = (a > 0).to(F.dtype), (b > 0).to(G.dtype)
    F, G = torch.where(a > 0, F, 0.0), torch.where(b > 0, G, 0.0)
    s = 0.5 * (F.sum(1, keepdim=True) / ra.sum(1, keepdim=True) - G.sum(1, keepdim=True) / rb.sum(1, keepdim=True))
    return torch.where(a > 0, F - s, 0.0), torch.where(b > 0, G + s, 0.0)


def _plan(cost: Tensor, a: Tensor, b: Tensor, f: Tensor, g: Tensor, eps: float) -> Tensor:
    """P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps), (B, N, M); zero on padding.

    Computed as exp(log a_i + f_i / eps + log b_j + g_j / eps - C_ij / eps) so that large
    potentials on padded points (weight 0) cannot overflow into 0 * inf.
    """
    return torch.exp((_safe_log(a) + f / eps)[:, :, None] + (_safe_log(b) + g / eps)[:, None, :] - cost / eps)


# Eigenvalues of the implicit-gradient system below this fraction of max(b) are treated as 0.
_PINV_RTOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


class _ImplicitPlan(torch.autograd.Function):
    """Plan and value at the Sinkhorn fixed point, differentiated implicitly.

    With P = P(C, a, b) defined by P_ij = exp((f~_i + g~_j - C_ij)/eps), P 1 = a, P^T 1 = b, and
    an upstream gradient Gbar = dL/dP (value's gradient adds gv * C), let GP = Gbar * P and solve
        [[diag(a), P], [P^T, diag(b)]] [w_f; w_g] = [GP 1; GP^T 1] / eps
    (singular along (1, -1); solved by a pseudo-inverse, see `backward`). Then
        dL/dC = P * (w_f_i + w_g_j) - GP / eps + gv P,   dL/da = eps w_f,   dL/db = eps w_g.
    The gradients in a and b are defined up to adding c to one and -c to the other (masses stay
    equal), which any weights normalised to a fixed mass (e.g. a softmax) do not see.
    """

    @staticmethod
    def forward(ctx, cost, a, b, f, g, eps):
        plan = _plan(cost, a, b, f, g, eps)
        value = (plan * cost).sum(dim=(1, 2))
        ctx.save_for_backward(cost, a, b, plan)
        ctx.eps = eps
        return plan, value

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_plan, grad_value):
        cost, a, b, P = ctx.saved_tensors
        eps = ctx.eps
        gbar = torch.zeros_like(P) if grad_plan is None else grad_plan
        gv = torch.zeros_like(a[:, 0]) if grad_value is None else grad_value  # (B,)
        gbar = gbar + gv[:, None, None] * cost
        GP = gbar * P  # (B, N, M)
        rg = GP.sum(1) / eps  # (B, M)
        # P / a row by row, never 1 / a: a weight that underflowed to a denormal would make 1 / a
        # infinite (softmax weights at a small temperature). At the fixed point the rows of P / a
        # sum to 1; clamping at 1 keeps a barely-converged row of near-zero mass from blowing up.
        Pa = torch.where(a[:, :, None] > 0, P / torch.where(a > 0, a, 1.0)[:, :, None], 0.0).clamp(max=1.0)
        rf_a = (gbar * Pa).sum(2) / eps  # (B, N): (GP 1 / eps) / a
        # Schur complement on the columns: (diag(b) - P^T diag(1/a) P) w_g = rg - P^T (rf / a).
        # S is symmetric PSD, singular along the gauge direction (1 on real columns) and on padded
        # columns, and nearly singular when the plan is nearly a permutation (small eps): solve it
        # by its pseudo-inverse (the minimum-norm solution; the rhs is orthogonal to the gauge).
        S = torch.diag_embed(b) - torch.bmm(P.transpose(1, 2), Pa)  # (B, M, M)
        rhs = rg - torch.bmm(P.transpose(1, 2), rf_a[:, :, None])[:, :, 0]  # (B, M)
        wg = _pinv_solve(S, rhs, b.amax(1, keepdim=True))  # (B, M); S's scale is diag(b)
        wf = rf_a - torch.bmm(Pa, wg[:, :, None])[:, :, 0]  # (B, N)
        grad_cost = P * (wf[:, :, None] + wg[:, None, :]) - GP / eps + gv[:, None, None] * P
        return grad_cost, eps * wf, eps * wg, None, None, None
