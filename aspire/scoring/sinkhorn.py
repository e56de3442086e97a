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
   needs thousands (`aspire.scoring._newton`); a problem Newton stalls on goes back to Sinkhorn
   iterations. Newton is used only when the iterations are not taped for autograd. At these
   sizes a batched step costs its ~150 tensor operations' dispatch, not their arithmetic, so on
   a CPU each problem runs its steps in compiled code instead (`aspire.scoring._newton_cpu`,
   numba; tested to agree with the batched version, which other devices use). Both versions
   take every setting of the method from `aspire.scoring._newton.NEWTON`.
4. Problems whose error is <= `tol` stop (they leave the active set, so the rest of the batch runs
   on fewer rows). A problem whose exp-domain scalings overflow, vanish or leave a safe range
   during a chunk is rolled back and continues with log-domain iterations (step 1's updates),
   which are stable for any eps.
5. The plan is rebuilt from the potentials in the log domain, `value = <C, P>`, and `err` is the
   L1 marginal error of that plan: `|P 1 - a|_1 + |P^T 1 - b|_1`.

On a CPU without autograd's tape (no gradient, or grad="implicit"), steps 1-4 run per problem in compiled
code (`aspire.scoring._sinkhorn_cpu`, numba; problems in parallel), where an iteration costs its arithmetic
rather than the dispatch of batched operations over the still-active rows: the first iteration takes one exp
pass (step 1's updates, shifted by each row's least cost, unless that under- or overflows), the error is
checked after every iteration, the scalings absorbed only when they drift, and Newton starts later
(`NEWTON_AFTER`). The rest of the call is compiled there too (`_sinkhorn_cpu`): the weights' check, and step 5,
where a problem that ends in the exp domain writes its plan diag(u) K diag(v) from the kernel and scalings at
hand (no exp), and the others (log domain, Newton) rebuild theirs from the float64 potentials; plans are written
in the input's dtype, with the value and error of the plan as written. Other devices, and the taped iterations,
run the batched tensor version; tests/test_sinkhorn_compiled.py checks the two give the same plans. Untaped, that
version iterates in float64 too and writes the plan in the input's dtype, as the compiled one does (`_solve`).

Gradients: `grad="autograd"` differentiates through the iterations (memory grows with them);
`grad="implicit"` runs the no-tape forward and differentiates the fixed point (P 1 = a,
P^T 1 = b) with one batched pseudo-inverse solve (symmetric eigendecomposition of an M x M
Schur complement), storing no iterations (exact at convergence; `aspire.scoring._implicit`). Its plan and value
are rebuilt from the untaped forward's float64 potentials (compiled on a CPU, batched elsewhere), as the
no-gradient path's are (`_implicit.plan_and_value`).
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from aspire.scoring._implicit import _ImplicitPlan, _plan, _safe_log, plan_and_value
from aspire.scoring._newton import _newton_tail, _newton_tail_torch, torch_thread_count  # noqa: F401  (tests swap the tails)
from aspire.scoring.distance import _HALF

GRAD_MODES = ("autograd", "implicit")
# Sinkhorn iterations before the slow problems switch to Newton (`newton_after="auto"`), per path: batched tensor
# operations (other devices, or a CPU under autograd's tape, where Newton is off) and compiled CPU iterations
# (experiments/bench_sinkhorn.py: 100 was the fastest of 20, 100 and 300 on its three shapes)
NEWTON_AFTER = {"batched": 20, "compiled": 100}


class SinkhornConvergenceWarning(RuntimeWarning):
    """Some problems stopped at `max_iter` with a marginal error above `tol`."""


@dataclass
class SinkhornResult:
    """Output of `sinkhorn` for a batch of B problems of size N x M.

    Attributes:
        plan: (B, N, M) transport plan; padded rows/columns are zero.
        value: (B,) transport cost `<cost, plan>` (a distance when the cost is one).
        f: (B, N) dual potential of the rows (geomloss convention, see module docstring); 0 on padding.
        g: (B, M) dual potential of the columns; 0 on padding. Both carry gradients with `grad="autograd"` only;
            with `grad="implicit"` they are detached (the implicit backward differentiates `plan` and `value`).
        err: (B,) L1 marginal error of `plan`: `|plan 1 - a|_1 + |plan^T 1 - b|_1` (for a float16 / bfloat16
            problem, that of its float32 plan before the cast; see `sinkhorn`).
        n_iter: (B,) long, iterations used per problem: Sinkhorn iterations (one row and one
            column update each) plus Newton steps, if any.
        converged: (B,) bool, whether the problem met `tol` within `max_iter`: its `err` (that of the plan as
            returned) is <= tol. A problem whose iterates met tol but whose plan, rounded to the dtype, does not (tol
            below the dtype's precision at that cost / eps) is not converged either, and is warned about.
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
    newton_after: int | None | str = "auto",
) -> SinkhornResult:
    """Entropy-regularised OT for a batch of problems (see the module docstring for the method).

    Args:
        cost: (B, N, M) float cost matrices (any scale; device and dtype are taken from it;
            float16 and bfloat16 problems are solved in float32 and the results cast back: their err and converged
            are those of the float32 plan, before the cast, whose rounding moves a bfloat16 plan's marginals by
            ~1e-3, a float16 one's by ~1e-4, more than the default tol). Entries on
            padding carry no mass and may be anything, NaN and +-inf included (they are read as 0). Between two
            real points, NaN or -inf makes its problem's plan, value and err NaN (converged False, a
            SinkhornConvergenceWarning); +inf forbids that pair: the plan is solved without it (0 there, marginals
            met, converged as usual) but its value `<cost, plan>` is NaN (inf * 0), on every path (POT's
            `sinkhorn2` gives NaN too).
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
            the iterations are not taped for autograd (no-grad, or grad="implicit"). "auto": the
            `NEWTON_AFTER` of the path that runs the iterations (a Newton step costs about what a
            batched iteration's dispatch costs, but as much as tens of compiled CPU iterations).

    Returns:
        A `SinkhornResult` with plan (B, N, M), value (B,), potentials f (B, N) and g (B, M),
        the marginal error err (B,), n_iter (B,) and converged (B,).
    """
    _check_args(cost, a, b, eps, tol, max_iter, check_every, grad)
    if newton_after == "auto":
        newton_after = NEWTON_AFTER["compiled" if _compiled(cost) else "batched"]
    if newton_after is not None and not _is_count(newton_after):
        raise ValueError(f"newton_after must be an integer >= 1, None or 'auto', got {newton_after!r}")
    # numpy's scalars as Python's, as the compiled path was compiled for: numba compiles anew for each other type (a
    # np.int32 check_every cost a second compile of the iterations, 20-odd seconds, for the same result)
    max_iter, check_every = int(max_iter), int(check_every)
    newton_after = None if newton_after is None else int(newton_after)
    eps, tol = (float(x) if isinstance(x, numbers.Real) else x for x in (eps, tol))
    if cost.dtype in _HALF:  # 8-11 bit mantissas cannot carry the iterations: solve in float32
        _check_weights(cost, a, b)  # the masses as given (b is scaled to a's below)
        a32, b32 = a.float(), b.float()
        b32 = b32 * (a32.sum(1, keepdim=True) / b32.sum(1, keepdim=True))  # equal up to half rounding (checked)
        res = sinkhorn(cost.float(), a32, b32, eps, tol=tol, max_iter=max_iter,
                       check_every=check_every, grad=grad, newton_after=newton_after)
        half = cost.dtype
        return SinkhornResult(res.plan.to(half), res.value.to(half), res.f.to(half), res.g.to(half),
                              res.err.to(half), res.n_iter, res.converged)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (cost, a, b))
    if _compiled(cost) and not needs_grad:
        res = _sinkhorn_cpu(cost, a, b, eps, tol, max_iter, check_every, newton_after)
        res = _redo_padded_nonfinite(res, cost, a, b, eps, tol, max_iter, check_every, newton_after)
        res.converged = res.err <= tol  # the plan as written in the input's dtype meets tol, not only the iterates
        _warn_unconverged(res, eps, tol, max_iter)
        return res
    _check_weights(cost, a, b)
    # Denormal weights (a softmax at a small temperature underflows there) carry no mass that
    # float arithmetic can see, but their logs' gradients (1 / w) overflow: make them padding.
    tiny = torch.finfo(cost.dtype).tiny
    a, b = torch.where(a >= tiny, a, 0.0), torch.where(b >= tiny, b, 0.0)
    cost = _padding_zeroed(cost, a, b)
    if needs_grad and grad == "implicit":
        with torch.no_grad():  # the untaped potentials come in float64, and the plan is rebuilt from them in it
            f, g, n_iter, converged = _solve(cost, a, b, eps, tol, max_iter, check_every, newton_after)
        plan, value = _ImplicitPlan.apply(cost, a, b, f, g, eps)
        f, g = f.detach().to(cost.dtype), g.detach().to(cost.dtype)
    elif not needs_grad:  # another device, no tape: float64 potentials (`_solve`), the plan written in the dtype
        with torch.no_grad():
            f, g, n_iter, converged = _solve(cost, a, b, eps, tol, max_iter, check_every, newton_after)
        plan, value = plan_and_value(cost, a, b, f, g, eps)
        f, g = f.to(cost.dtype), g.to(cost.dtype)
    else:
        f, g, n_iter, converged = _solve(cost, a, b, eps, tol, max_iter, check_every, newton_after)
        plan = _plan(cost, a, b, f, g, eps)
        value = (plan * cost).sum(dim=(1, 2))
    with torch.no_grad():
        err = (plan.sum(2) - a).abs().sum(1) + (plan.sum(1) - b).abs().sum(1)
    # the plan rebuilt from the potentials meets tol, not only the iterates: float32 potentials round exp's argument
    # (~C / eps) to 1e-7 of itself, which from C / eps ~ 500 moves the plan's marginals by about tol = 1e-4
    converged = err <= tol
    res = SinkhornResult(plan, value, f, g, err, n_iter, converged)
    _warn_unconverged(res, eps, tol, max_iter)
    return res


def _compiled(cost: Tensor) -> bool:
    """Whether `cost`'s problems run the compiled CPU iterations when there is no tape (a CPU tensor); else the
    batched tensor version (other devices; tests force it on the CPU through this function)."""
    return cost.device.type == "cpu"


def _padding_zeroed(cost: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """cost with 0 on padding (rows and columns of weight below the dtype's smallest normal, which the solvers
    treat as padding): entries there carry no mass, but a NaN or inf there would make the iterations NaN."""
    tiny = torch.finfo(cost.dtype).tiny
    return cost.masked_fill((a < tiny)[:, :, None] | (b < tiny)[:, None, :], 0.0)


def _redo_padded_nonfinite(res: SinkhornResult, cost, a, b, eps, tol, max_iter, check_every, newton_after):
    """`_sinkhorn_cpu`'s result with the problems whose value came out non-finite solved again on costs zeroed on
    padding (`_padding_zeroed`). A pass over every cost would cost a tenth of the compiled solve at 10 x 10, so
    only problems that came out non-finite pay for it; a non-finite cost between real sentences stays NaN."""
    redo = (~torch.isfinite(res.value)).nonzero().flatten()
    if len(redo) == 0:
        return res
    a, b = a[redo], b[redo]
    part = _sinkhorn_cpu(_padding_zeroed(cost[redo], a, b), a, b, eps, tol, max_iter, check_every, newton_after)
    for field in fields(SinkhornResult):
        getattr(res, field.name)[redo] = getattr(part, field.name)
    return res


def _warn_unconverged(res: SinkhornResult, eps: float, tol: float, max_iter: int) -> None:
    if not bool(res.converged.all()):
        bad = ~res.converged
        # stopped before max_iter yet unconverged: the iterates met tol, the plan rounded to its dtype does not
        floor = int((bad & (res.n_iter < max_iter) & torch.isfinite(res.err)).sum())
        why = (f"; {floor} of them met tol in the iterations but not in the plan as rounded to {res.plan.dtype} (tol "
               "below its precision at this cost / eps: raise tol or solve in float64)") if floor else ""
        warnings.warn(
            f"sinkhorn: {int(bad.sum())} of {len(bad)} problems stopped unconverged (max_iter={max_iter}) with "
            f"marginal error up to {float(res.err[bad].max()):.3g} > tol={tol:g} (eps={eps:g}); raise "
            f"max_iter or eps{why}",
            SinkhornConvergenceWarning,
            stacklevel=3,
        )


def sinkhorn_dist(cost: Tensor, a: Tensor, b: Tensor, eps: float = 0.05, **kwargs) -> Tensor:
    """(B,) transport cost `<cost, plan>` of `sinkhorn(cost, a, b, eps, **kwargs)`."""
    return sinkhorn(cost, a, b, eps, **kwargs).value


# ---- checks -------------------------------------------------------------------------------------
def _check_args(cost, a, b, eps, tol, max_iter, check_every, grad) -> None:
    if grad not in GRAD_MODES:
        raise ValueError(f"unknown grad mode {grad!r}; valid: {', '.join(GRAD_MODES)}")
    if cost.dim() != 3 or a.shape != cost.shape[:2] or b.shape != (cost.shape[0], cost.shape[2]):
        raise ValueError(
            f"expected cost (B, N, M), a (B, N), b (B, M); got {tuple(cost.shape)}, {tuple(a.shape)}, "
            f"{tuple(b.shape)}"
        )
    if not cost.is_floating_point() or a.dtype != cost.dtype or b.dtype != cost.dtype:
        raise ValueError(f"cost, a, b must share one float dtype; got {cost.dtype}, {a.dtype}, {b.dtype}")
    if a.device != cost.device or b.device != cost.device:  # a CPU cost with CUDA weights: numpy's TypeError
        raise ValueError(f"cost, a, b must be on one device; got {cost.device}, {a.device}, {b.device}")
    if not eps > 0 or not tol > 0 or not _is_count(max_iter) or not _is_count(check_every):
        raise ValueError(f"need eps > 0, tol > 0, integers max_iter >= 1, check_every >= 1; got {eps}, {tol}, "
                         f"{max_iter!r}, {check_every!r}")


def _is_count(value) -> bool:
    """Whether `value` is an integer >= 1 (not a bool): a fractional max_iter or check_every ran a truncated budget on
    the compiled path (max_iter=10.5 stopped at 10, warned as a precision floor) and failed with a TypeError naming no
    option under a tape."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral) and value >= 1


def _mass_rtol(dtype: torch.dtype) -> float:
    """Relative tolerance of the equal-mass check: the dtype's rounding of a sum, at least 1e-5."""
    return max(1e-5, math.sqrt(torch.finfo(dtype).eps))


def _check_weights(cost: Tensor, a: Tensor, b: Tensor) -> None:
    """Raise, naming the problems, where weights are negative or not finite, or masses not positive and equal, or
    a side holds no weight of at least the dtype's smallest normal (every denormal becomes padding next: a problem
    with no real point left, solved to an all-zero plan and a value of 0, as the compiled path refuses too)."""
    with torch.no_grad():
        mass_a, mass_b = a.sum(1), b.sum(1)
        rtol = _mass_rtol(cost.dtype)
        tiny = torch.finfo(cost.dtype).tiny
        bad = (mass_a <= 0) | ((mass_a - mass_b).abs() > rtol * torch.maximum(mass_a, mass_b))
        bad |= (a < 0).any(1) | (b < 0).any(1) | ~torch.isfinite(mass_a) | ~torch.isfinite(mass_b)
        bad |= ~(a >= tiny).any(1) | ~(b >= tiny).any(1)
        _raise_bad_weights(a, b, bad, rtol)


def _raise_bad_weights(a: Tensor, b: Tensor, bad: Tensor, rtol: float) -> None:
    if bool(bad.any()):
        rows = bad.nonzero().flatten()[:5].tolist()
        raise ValueError(
            f"weights must be finite and non-negative with equal positive mass per problem (relative tolerance "
            f"{rtol:.1e}); {int(bad.sum())} problem(s) violate it, among them {rows}: mass a "
            f"{a[rows].sum(1).tolist()}, mass b {b[rows].sum(1).tolist()}"
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


def _log_ratio(x: Tensor, w: Tensor) -> Tensor:
    """log(x / w) where w > 0, else 0 (padding), with NaN-free gradients."""
    pos = w > 0
    return torch.where(pos, torch.log(torch.where(pos, x, 1.0) / torch.where(pos, w, 1.0)), 0.0)


def _solve(cost, a, b, eps, tol, max_iter, check_every, newton_after):
    """Potentials (f, g) (B, N), (B, M), iterations (B,) long and converged (B,) bool. Without a tape they are
    float64 on every device: compiled on a CPU (`_solve_cpu`), batched in float64 elsewhere (a float32 plan rebuilt
    from float32 potentials rounds exp's argument, ~C / eps, to 1e-7 of itself: on an H200, OT scorers at tol 1e-5
    warned of unconverged problems that the CPU solved, and two training steps' gradients differed by 3.5e-4,
    experiments/gpu_check.py). Under a tape: in the input's dtype (the iterations are differentiated)."""
    if torch.is_grad_enabled():
        return _solve_batched(cost, a, b, eps, tol, max_iter, check_every, newton_after)
    if _compiled(cost):
        return _solve_cpu(cost, a, b, eps, tol, max_iter, check_every, newton_after)
    return _solve_batched(cost.double(), a.double(), b.double(), eps, tol, max_iter, check_every, newton_after)


def _solve_batched(cost, a, b, eps, tol, max_iter, check_every, newton_after):
    """`_solve` as batched tensor operations (other devices, or a tape): the problems iterate in lockstep, in chunks
    of `check_every` iterations; a problem the Newton tail gave up on comes back with fewer iterations left, and the
    chunks are then shortened to its budget (no problem takes more than `max_iter`)."""
    B = cost.shape[0]
    device = cost.device
    Ce = cost / eps  # (B, N, M)
    loga, logb = _safe_log(a), _safe_log(b)  # -inf on padding
    # A scaling may move by at most exp(+-log_limit) within a chunk: far from over/underflow.
    log_limit = _log_limit(cost.dtype)
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
            sink_rows = sink_rows[n_iter[sink_rows] < max_iter]  # Newton may have spent a row's whole budget
        else:
            sink_rows = active
        # rows in lockstep have done done_iter iterations; one back from Newton has done more
        k = min(check_every, max_iter - (int(n_iter[sink_rows].max()) if sink_rows.numel() else done_iter))
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


def _sinkhorn_cpu(cost, a, b, eps, tol, max_iter, check_every, newton_after) -> SinkhornResult:
    """`sinkhorn` for CPU tensors without a tape: the weights' check, the iterations (`_iterate_cpu`), the
    potentials' centring and the plan with its value and error all run in compiled code
    (`aspire.scoring._sinkhorn_cpu`), where the tensor version takes dozens of (B, N, M) operations. A problem
    whose iterations end in the exp domain writes its plan diag(u) K diag(v) there; the others' plans are rebuilt
    from the float64 potentials. Plans are written in the input's dtype, and the error is that of the plan as
    written."""
    from aspire.scoring._sinkhorn_cpu import centred_potentials, finish_problems, prepare_weights

    cost, a, b = (t.detach().contiguous() for t in (cost, a, b))
    (B, N, M), dtype = cost.shape, cost.dtype
    a64, b64 = torch.empty(B, N, dtype=torch.float64), torch.empty(B, M, dtype=torch.float64)
    rtol = _mass_rtol(dtype)
    bad = prepare_weights(a.numpy(), b.numpy(), torch.finfo(dtype).tiny, rtol, a64.numpy(), b64.numpy())
    _raise_bad_weights(a, b, torch.from_numpy(bad), rtol)
    plan, value, err = torch.empty(B, N, M, dtype=dtype), torch.empty(B, dtype=dtype), torch.empty(B, dtype=dtype)
    planned = torch.zeros(B, dtype=torch.bool)
    F, G, n_iter, converged = _iterate_cpu(cost, eps, a64, b64, _log_limit(dtype), tol, max_iter, check_every,
                                           newton_after, (plan, value, err, planned))
    f, g = torch.empty(B, N, dtype=dtype), torch.empty(B, M, dtype=dtype)
    with torch_thread_count():
        centred_potentials(F.numpy(), G.numpy(), a64.numpy(), b64.numpy(), eps, f.numpy(), g.numpy())
        finish_problems(cost.numpy(), eps, a64.numpy(), b64.numpy(), F.numpy(), G.numpy(), plan.numpy(),
                        value.numpy(), err.numpy(), planned.numpy())
    return SinkhornResult(plan, value, f, g, err, n_iter, converged)


def _no_plans(dtype: torch.dtype) -> tuple[Tensor, ...]:
    """Empty outputs for `sinkhorn_iterations` (plan, value, err, planned): it writes no plans."""
    empty = torch.empty(0, dtype=dtype)
    return empty.reshape(0, 0, 0), empty, empty, torch.empty(0, dtype=torch.bool)


def _log_limit(dtype: torch.dtype) -> float:
    """How far (in log scale) a scaling may move within an exp-domain chunk: far from the dtype's over/underflow."""
    return 0.25 * math.log(torch.finfo(dtype).max)


def _solve_cpu(cost, a, b, eps, tol, max_iter, check_every, newton_after):
    """`_solve` for CPU tensors without a tape (`grad="implicit"`'s forward): `_iterate_cpu`'s potentials, centred,
    times eps, in float64 (a float32 plan rebuilt from float32 potentials rounds exp's argument, ~C / eps, to 1e-7
    of itself: from C / eps ~ 1000 its marginal error passed tol while the problem read as converged)."""
    from aspire.scoring._sinkhorn_cpu import centred_potentials

    a64, b64 = a.detach().double().contiguous(), b.detach().double().contiguous()
    F, G, n_iter, converged = _iterate_cpu(cost.detach().contiguous(), eps, a64, b64, _log_limit(cost.dtype), tol,
                                           max_iter, check_every, newton_after)
    f, g = torch.empty_like(a64), torch.empty_like(b64)
    centred_potentials(F.numpy(), G.numpy(), a64.numpy(), b64.numpy(), eps, f.numpy(), g.numpy())
    return f, g, n_iter, converged


def _iterate_cpu(cost, eps, a64, b64, log_limit, tol, max_iter, check_every, newton_after, plans=None):
    """`_solve`'s steps on the problems cost (B, N, M) (float32 or float64, contiguous), eps and float64 weights
    a64 (B, N), b64 (B, M): each problem's Sinkhorn iterations in compiled code (`aspire.scoring._sinkhorn_cpu`),
    then the Newton tail of the slow problems (on their cost / eps in float64, so at eps 1), then Sinkhorn again
    for any problem Newton gave up on. `plans`: (plan, value, err, planned) for the iterations to write the plans
    of the problems that end in the exp domain into (`sinkhorn_iterations`); a problem the Newton tail moves is
    not planned there. Returns the scaled potentials F (B, N), G (B, M) in float64 (not centred), n_iter (B,),
    converged (B,)."""
    from aspire.scoring._sinkhorn_cpu import sinkhorn_iterations

    B = cost.shape[0]
    plans = _no_plans(cost.dtype) if plans is None else plans
    planned = plans[-1]
    stop_tol = 0.9 * tol
    F, G = torch.zeros_like(a64), torch.zeros_like(b64)
    n_iter = torch.zeros(B, dtype=torch.long)
    log_mode = torch.zeros(B, dtype=torch.bool)
    newton = newton_after is not None
    until = torch.full((B,), min(newton_after, max_iter) if newton else max_iter, dtype=torch.long)
    with torch_thread_count():
        err = torch.from_numpy(sinkhorn_iterations(cost.numpy(), eps, a64.numpy(), b64.numpy(), F.numpy(),
                                                   G.numpy(), n_iter.numpy(), log_mode.numpy(), until.numpy(), True,
                                                   check_every, stop_tol, log_limit, *(t.numpy() for t in plans)))
    slow = ((err > stop_tol) & (n_iter < max_iter)).nonzero().flatten() if newton else n_iter[:0]
    if slow.numel() > 0:  # the slow tail: Newton steps on the potentials
        if planned.numel():
            planned[slow] = False  # their plans come from the potentials Newton leaves
        budget = int(max_iter - n_iter[slow].max())  # the slow problems are in lockstep: one budget
        Fn, Gn, err_n, steps_n, ok_n = _newton_tail(cost[slow].double() / eps, a64[slow], b64[slow], F[slow],
                                                    G[slow], 1.0, stop_tol, budget)
        F[slow], G[slow], err[slow] = Fn, Gn, err_n
        n_iter[slow] += steps_n
        back = slow[~ok_n & (n_iter[slow] < max_iter)]  # Newton gave up: Sinkhorn iterations to the end
        if back.numel() > 0:
            Fb, Gb, n_b, mode_b = F[back].contiguous(), G[back].contiguous(), n_iter[back], log_mode[back]
            with torch_thread_count():
                err_b = sinkhorn_iterations(cost[back].numpy(), eps, a64[back].numpy(), b64[back].numpy(),
                                            Fb.numpy(), Gb.numpy(), n_b.numpy(), mode_b.numpy(),
                                            torch.full_like(n_b, max_iter).numpy(), False, check_every, stop_tol,
                                            log_limit, *(t.numpy() for t in _no_plans(cost.dtype)))
            F[back], G[back], n_iter[back], err[back] = Fb, Gb, n_b, torch.from_numpy(err_b)
    return F, G, n_iter, err <= stop_tol


def _centre(F: Tensor, G: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """(F - s, G + s) with s balancing the real rows' and columns' mean potentials; 0 on padding.

    The plan is unchanged (it depends on F_i + G_j only); potentials near 0 keep the most
    precision when the plan is rebuilt from them.
    """
    ra, rb = (a > 0).to(F.dtype), (b > 0).to(G.dtype)
    F, G = torch.where(a > 0, F, 0.0), torch.where(b > 0, G, 0.0)
    s = 0.5 * (F.sum(1, keepdim=True) / ra.sum(1, keepdim=True) - G.sum(1, keepdim=True) / rb.sum(1, keepdim=True))
    return torch.where(a > 0, F - s, 0.0), torch.where(b > 0, G + s, 0.0)


def compile_cpu_kernels() -> float:
    """Compile the CPU path's numba code once (the weights' check, its exp- and log-domain iterations and plans,
    the Newton tail, and the OT scorer's cost and weights of stored vectors, `scorers.gathered_ot_match`) and cache
    it on disk (`cache=True`), so that no user's first OT score pays the compile (75-77 s on 2 cores) -> seconds
    spent.
    `make install` calls it; a later call reads the cache."""
    import time

    from aspire.scoring.distance import gathered_l2_weights

    start = time.perf_counter()
    rows = torch.tensor([[0, 1, -1]])
    for dtype in (torch.float32, torch.float64):
        # the pass `gathered_l2_minima` also runs (the same compiled signature), and the weights' normalisation
        gathered_l2_weights(torch.ones(2, 4, dtype=dtype), rows, torch.ones(3, 4, dtype=dtype), rows, tau=1.0)
    gen = torch.Generator().manual_seed(0)
    cost = torch.rand(3, 6, 5, generator=gen, dtype=torch.float64) * 4.0
    a, b = torch.full((3, 6), 1 / 6, dtype=torch.float64), torch.full((3, 5), 1 / 5, dtype=torch.float64)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", SinkhornConvergenceWarning)
        for eps in (0.5, 0.005):  # a quick problem, then a slow one that reaches Newton and the log domain
            sinkhorn(cost, a, b, eps, newton_after=1, max_iter=50)
            sinkhorn(cost.float(), a.float(), b.float(), eps, newton_after=1, max_iter=50)
    return time.perf_counter() - start
