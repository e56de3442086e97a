"""The k nearest of many candidates under OT, running Sinkhorn only on those that can be among them.

For one query against P candidates, any plan with marginals x (rows) and y (columns) of mass 1
moves each unit of row i's mass at a cost of at least min_j C_ij, and each unit reaching column j
at a cost of at least min_i C_ij, so

    <C, P>  >=  lower = max(sum_i x_i min_j C_ij, sum_j y_j min_i C_ij)     (valid pairs only).

The weights x, y are themselves softmaxes of those minima (`ot_weights`), so the bound costs a few
reductions. Sinkhorn's plan meets its marginals only to `tol` (L1 error of rows and columns
together), which can lower its value below `lower` by at most tol x max C_ij: the value
`OTScorer` returns is at least `bound = lower - (tol + rounding) x max C_ij`.

`ot_top_k_dist` solves the candidates in increasing order of `bound`: first a few (`first`), which
give a k-th smallest distance, then, in chunks under a memory budget, only those whose bound does
not exceed the k-th smallest distance found so far. A candidate left out has a bound above that
distance, so its own distance is too: the k nearest, and their distances, are those of solving
every candidate (`_ot_from_cost` over the whole batch), the distances to within float rounding
(each problem runs the same iterations; only the batch it is solved in differs). The bound holds for
problems that converge; one that stops at `max_iter` above `tol` (Sinkhorn warns) may have a smaller
value than its bound.
"""

from __future__ import annotations

import torch
from torch import Tensor

from aspire.scoring.chunked import DEFAULT_BUDGET_BYTES, DEFAULT_CELL_BYTES
from aspire.scoring.distance import _HALF
from aspire.scoring.scorers import ot_weights, valid_minima
from aspire.scoring.sinkhorn import sinkhorn


def ot_dist_lower_bound(cost: Tensor, x: Tensor, y: Tensor, minima: tuple[Tensor, Tensor],
                        q_mask: Tensor, c_mask: Tensor) -> Tensor:
    """(...) max(sum_i x_i min_j C_ij, sum_j y_j min_i C_ij): a lower bound of <cost, P> for every
    plan P >= 0 with row sums x (..., S) and column sums y (..., T).

    cost (..., S, T); `minima` = `valid_minima(cost, q_mask, c_mask)`; masks (..., S), (..., T).
    """
    row_min, col_min = minima
    by_rows = (x * row_min.masked_fill(~q_mask, 0.0)).sum(-1)
    by_cols = (y * col_min.masked_fill(~c_mask, 0.0)).sum(-1)
    return torch.maximum(by_rows, by_cols)


@torch.no_grad()
def ot_top_k_dist(cost: Tensor, q_mask: Tensor, c_mask: Tensor, k: int, *, tau: float, eps: float,
                  tol: float = 1e-4, first: int = 32, budget_bytes: int = DEFAULT_BUDGET_BYTES,
                  **sinkhorn_kw) -> tuple[Tensor, Tensor]:
    """OT distances of one query to P candidates, solved only where a candidate can be among the k nearest.

    Args:
        cost: (P, S, T) sentence distances of the query (rows) to each candidate (columns).
        q_mask: (P, S), c_mask: (P, T) valid sentences (each row with at least one).
        k: how many nearest candidates must come out exact.
        tau, eps: the OT scorer's weight temperature and entropic regularisation (`OTScorer`).
        tol: Sinkhorn's marginal tolerance (also the bound's slack, see the module docstring).
        first: candidates solved before any is left out (at least k).
        budget_bytes: working memory of one later Sinkhorn call (`DEFAULT_CELL_BYTES` a cell).
        sinkhorn_kw: the rest of `aspire.scoring.sinkhorn`'s settings (max_iter, check_every, ...).

    Returns:
        dist (P,): the OT distance `<C, P>` where `exact`, else a lower bound of it that is above the
        k-th smallest distance; exact (P,) bool. float16 / bfloat16 costs are solved in float32 (as
        `OTScorer` does) and the distances come back in float32. No gradient is recorded (a ranking).
    """
    if cost.dtype in _HALF:
        cost = cost.float()
    P, S, T = cost.shape
    minima = valid_minima(cost, q_mask, c_mask)
    x, y = ot_weights(cost, q_mask, c_mask, tau, minima)  # (P, S), (P, T)
    valid = q_mask[:, :, None] & c_mask[:, None, :]
    c_max = cost.masked_fill(~valid, 0.0).flatten(1).amax(1)  # (P,) costs are >= 0
    rounding = 32 * torch.finfo(cost.dtype).eps
    bound = ot_dist_lower_bound(cost, x, y, minima, q_mask, c_mask) - (tol + rounding) * c_max  # (P,)
    order = torch.argsort(bound, stable=True)
    dist, exact = bound.clone(), torch.zeros(P, dtype=torch.bool, device=cost.device)
    per_call = max(1, budget_bytes // (DEFAULT_CELL_BYTES * max(S * T, 1)))
    kth, start, step = float("inf"), 0, min(max(first, k), per_call)
    while start < P:
        rows = order[start : start + step]
        start += len(rows)
        rows = rows[bound[rows] <= kth]
        if len(rows) == 0:  # bounds ascend: no later candidate can enter the k nearest either
            break
        dist[rows] = sinkhorn(cost[rows], x[rows], y[rows], eps, tol=tol, **sinkhorn_kw).value
        exact[rows] = True
        if int(exact.sum()) >= k:
            kth = float(torch.kthvalue(dist[exact], k).values)
        step = per_call
    return dist, exact
