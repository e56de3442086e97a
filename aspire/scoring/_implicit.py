"""The transport plan rebuilt from Sinkhorn potentials, and its implicit gradient.

`_plan` rebuilds P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps) in the log domain; `_ImplicitPlan`
differentiates the plan and value at the fixed point (P 1 = a, P^T 1 = b) with one batched
pseudo-inverse solve (`grad="implicit"` of `aspire.scoring.sinkhorn.sinkhorn`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _safe_log(w: Tensor) -> Tensor:
    """log(w) with -inf (and a zero, not NaN, gradient) where w == 0."""
    pos = w > 0
    return torch.where(pos, torch.log(torch.where(pos, w, 1.0)), -math.inf)



def _plan(cost: Tensor, a: Tensor, b: Tensor, f: Tensor, g: Tensor, eps: float) -> Tensor:
    """P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps), (B, N, M); zero on padding.

    Computed as exp(log a_i + f_i / eps + log b_j + g_j / eps - C_ij / eps) so that large
    potentials on padded points (weight 0) cannot overflow into 0 * inf.
    """
    return torch.exp((_safe_log(a) + f / eps)[:, :, None] + (_safe_log(b) + g / eps)[:, None, :] - cost / eps)


def plan_and_value(cost: Tensor, a: Tensor, b: Tensor, f: Tensor, g: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """The plan (B, N, M) and its value <C, P> (B,), computed in the potentials' dtype (float64 from an untaped
    solve) and returned in the cost's."""
    work = f.dtype
    plan_w = _plan(cost.to(work), a.to(work), b.to(work), f, g, eps)
    return plan_w.to(cost.dtype), (plan_w * cost.to(work)).sum(dim=(1, 2)).to(cost.dtype)


# Eigenvalues of the implicit-gradient system below this fraction of max(b) are treated as 0.
_PINV_RTOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def _pinv_solve(S: Tensor, rhs: Tensor, scale: Tensor) -> Tensor:
    """Minimum-norm solution of S w = rhs for symmetric PSD S (B, M, M), rhs (B, M).

    Eigenvalues below `_PINV_RTOL[dtype] * scale` (scale (B, 1)) are treated as zero. Entries below
    eps^2 * scale are flushed to zero first: float32 `eigh` (LAPACK) returns NaN eigenpairs for some matrices
    whose entries lie near the underflow range (a plan's blocks joined by exp(-100), subnormal or ~1e-37
    couplings), and entries that small move no eigenvalue by more than M eps^2 scale, far below both the
    threshold and the rounding of S's own diagonal (~eps * scale: a difference of terms of size max(b)).
    A problem whose S is not finite (a non-finite cost between real sentences makes its plan NaN) gets a NaN
    solution, and the others their own: `eigh` raises on a NaN or inf matrix, which failed the whole batch's
    backward where the taped iterations give that problem NaN gradients.
    """
    eps = torch.finfo(S.dtype).eps
    finite = torch.isfinite(S).flatten(1).all(1)  # (B,)
    S = torch.where(finite[:, None, None], S, 0.0)
    S = torch.where(S.abs() < (eps * eps) * scale[:, :, None], 0.0, S)
    lam, vec = torch.linalg.eigh(S)  # (B, M), (B, M, M)
    keep = lam > _PINV_RTOL[S.dtype] * scale
    inv_lam = torch.where(keep, 1.0 / torch.where(keep, lam, 1.0), 0.0)
    proj = torch.bmm(vec.transpose(1, 2), rhs[:, :, None])[:, :, 0]  # (B, M)
    return torch.where(finite[:, None], torch.bmm(vec, (inv_lam * proj)[:, :, None])[:, :, 0], math.nan)


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
        plan, value = plan_and_value(cost, a, b, f, g, eps)
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
        # by its pseudo-inverse (the rhs is orthogonal to the gauge). Solved scaled by diag(b)^-1/2 on both
        # sides, S~ = I - K^T K with K_ij = P_ij / sqrt(a_i b_j) (entries within [-1, 1]): unscaled, a column
        # of mass below the eigenvalue threshold (1e-5 max(b) in float32) lost its eigenvalue, and its
        # gradient in b came out 0.16 where it is 1.04. The solution is the one with sum_j b_j w_g_j = 0.
        real = b >= torch.finfo(b.dtype).tiny  # (B, M): the solvers read a weight below the smallest normal as padding
        inv_d = torch.where(real, torch.where(real, b, 1.0).rsqrt(), 0.0)  # (B, M), 0 on padding
        Pa_d = Pa * inv_d[:, None, :]  # (B, N, M): P_ij / (a_i sqrt(b_j))
        S = torch.diag_embed(real.to(P.dtype)) - torch.bmm((P * inv_d[:, None, :]).transpose(1, 2), Pa_d)
        rhs = inv_d * (rg - torch.bmm(P.transpose(1, 2), rf_a[:, :, None])[:, :, 0])  # (B, M)
        wg = inv_d * _pinv_solve(S, rhs, torch.ones_like(b[:, :1]))  # (B, M); S~'s scale is 1
        wf = rf_a - torch.bmm(Pa, wg[:, :, None])[:, :, 0]  # (B, N)
        grad_cost = P * (wf[:, :, None] + wg[:, None, :]) - GP / eps + gv[:, None, None] * P
        return grad_cost, eps * wf, eps * wg, None, None, None
