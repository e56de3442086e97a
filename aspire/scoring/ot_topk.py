"""The k nearest of many candidates under OT, running Sinkhorn only on those that can be among them.

For one query against P candidates, any potentials with f_i + g_j <= C_ij on the valid pairs bound
the cost of every plan P >= 0 with row sums x and column sums y from below (weak duality):
<C, P> >= sum_ij P_ij (f_i + g_j) = <x, f> + <y, g>. Two such pairs cost a few reductions:
f_i = min_j C_ij (each unit of row i's mass travels at least that far) with g_j = min_i (C_ij - f_i)
(what column j's cheapest row still leaves), and the mirror, g_j = min_i C_ij with f_i = min_j (C_ij - g_j):

    lower = max(<x, f> + <y, g>, <x, f'> + <y, g'>)                      (valid pairs only).

The weights x, y are themselves softmaxes of the row and column minima (`ot_weights`). Sinkhorn's
plan meets its marginals only to `tol` (L1 error of rows and columns together); as 0 <= f, g <=
max C_ij for costs >= 0 (distances), its value can sit below `lower` by at most tol x max C_ij: the value
`OTScorer` returns is at least `bound = lower - (tol + rounding) x W`, W = max C_ij (for costs of either sign,
max(max C_ij, 0) - min(min C_ij, 0), which bounds |f| and |g| there).

`ot_top_k_dist` solves the candidates in increasing order of `bound`: first a few (`first`, 3k), which
give a k-th smallest distance, then, in chunks under a memory budget, only those whose bound does
not exceed the k-th smallest distance found so far. A candidate left out has a bound above that
distance, so its own distance is too: the k nearest, and their distances, are those of solving
every candidate (`_ot_from_cost` over the whole batch), the distances to within float rounding
(each problem runs the same iterations; only the batch it is solved in differs). The bound holds for
problems that converge; one that stops at `max_iter` above `tol` (Sinkhorn warns) may have a smaller
value than its bound.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
from torch import Tensor

from aspire.config import is_whole
from aspire.scoring.chunked import DEFAULT_BUDGET_BYTES, DEFAULT_CELL_BYTES
from aspire.scoring.distance import _HALF
from aspire.scoring.scorers import _positive, ot_weights
from aspire.scoring.sinkhorn import sinkhorn


def ot_dist_lower_bound(far: Tensor, x: Tensor, y: Tensor, minima: tuple[Tensor, Tensor],
                        q_mask: Tensor, c_mask: Tensor) -> Tensor:
    """(...) a lower bound of <cost, P> for every plan P >= 0 with row sums x (..., S) and column sums
    y (..., T): the better of two dual-feasible potential pairs (see the module docstring).

    far (..., S, T): the cost with +inf on invalid pairs; `minima` = its row and column minima
    (`valid_minima`); masks (..., S), (..., T).
    """
    f = minima[0].masked_fill(~q_mask, 0.0)  # (..., S) row minima
    g = (far - f[..., :, None]).amin(-2).masked_fill(~c_mask, 0.0)  # (..., T) their c-transform
    by_rows = (x * f).sum(-1) + (y * g).sum(-1)
    g = minima[1].masked_fill(~c_mask, 0.0)  # (..., T) column minima
    f = (far - g[..., None, :]).amin(-1).masked_fill(~q_mask, 0.0)  # (..., S)
    by_cols = (x * f).sum(-1) + (y * g).sum(-1)
    return torch.maximum(by_rows, by_cols)


@dataclass
class OTTopK:
    """`ot_top_k_dist`'s result for P candidates, m of them solved by Sinkhorn.

    Attributes:
        dist: (P,) the OT distance `<C, P>` of each solved candidate; for the others a lower bound of it
            that is above the k-th smallest distance.
        solved: (m,) long, the candidates Sinkhorn ran on (the k nearest among them).
        plan: (m, S, T) their transport plans (zero on padding), in the order of `solved`.
    """

    dist: Tensor
    solved: Tensor
    plan: Tensor

    @property
    def exact(self) -> Tensor:
        """(P,) bool: whether `dist` is the candidate's OT distance (not a bound)."""
        return torch.zeros(len(self.dist), dtype=torch.bool, device=self.dist.device).index_fill(0, self.solved, True)

    def plans(self, rows: Tensor) -> Tensor:
        """(len(rows), S, T) the transport plans of candidates `rows`, all of them solved."""
        where = torch.full((len(self.dist),), -1, dtype=torch.long, device=self.dist.device)
        where[self.solved] = torch.arange(len(self.solved), device=self.dist.device)
        picked = where[rows]
        if bool((picked < 0).any()):
            raise ValueError(f"candidates {rows[picked < 0].tolist()[:5]} were not solved (they cannot be among the k nearest)")
        return self.plan[picked]


@torch.no_grad()
def ot_top_k_dist(cost: Tensor, q_mask: Tensor, c_mask: Tensor, k: int, *, tau: float, eps: float,
                  tol: float = 1e-4, first: int | None = None, budget_bytes: int = DEFAULT_BUDGET_BYTES,
                  **sinkhorn_kw) -> OTTopK:
    """OT distances of one query to P candidates, solved only where a candidate can be among the k nearest.

    Args:
        cost: (P, S, T) sentence distances of the query (rows) to each candidate (columns).
        q_mask: (P, S), c_mask: (P, T) valid sentences (each row with at least one: ValueError naming the rows
            without); the cost of a pair with a masked sentence is not read (it may be anything, even NaN), that of
            two selected sentences must be finite (ValueError naming the candidate rows).
        k: how many nearest candidates must come out exact (k >= P: every candidate is solved).
        tau, eps: the OT scorer's weight temperature and entropic regularisation (`OTScorer`; each > 0, inf allowed,
            as there: ValueError naming it).
        tol: Sinkhorn's marginal tolerance (also the bound's slack, see the module docstring; > 0).
        first: candidates solved before any is left out (default 3k; an integer >= 1, one below k read as k).
        budget_bytes: working memory of one later Sinkhorn call (`DEFAULT_CELL_BYTES` a cell; a number > 0).
        sinkhorn_kw: the rest of `aspire.scoring.sinkhorn`'s settings (max_iter, check_every, ...).

    Returns:
        An `OTTopK`: distances (P,) (exact for the solved candidates, which include the k nearest), the
        solved candidates and their plans. float16 / bfloat16 costs are solved in float32 (as `OTScorer`
        does) and the results come back in float32. No gradient is recorded (a ranking).
    """
    # k = 0 solved nothing and returned every distance a bound; a NaN, infinite or None k failed in int() with a
    # message naming no option (an OverflowError or TypeError)
    if isinstance(k, bool) or not isinstance(k, numbers.Real) or not math.isfinite(k) or int(k) != k or k < 1:
        raise ValueError(f"OT top-k needs an integer k >= 1, got {k!r}")
    k = int(k)  # 5.0 passes the check above, and a float k cannot slice the candidates
    # as `OTScorer` checks them: a tau of 0 or NaN gave every candidate a NaN bound and solved none (no error), a
    # negative one weighed the farthest sentences most, and a NaN tol solved none either
    tau, eps, tol = _positive("tau", tau), _positive("eps", eps), _positive("tol", tol)
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, numbers.Real) or not budget_bytes > 0:
        raise ValueError(f"budget_bytes must be a number > 0, got {budget_bytes!r}")  # as `score_chunked` says
    if first is not None and not is_whole(first, 1):
        raise ValueError(f"OT top-k's first must be an integer >= 1 or None, got {first!r}")  # 2.5 failed slicing
    if cost.dim() != 3 or q_mask.shape != cost.shape[:2] or c_mask.shape != (cost.shape[0], cost.shape[2]):
        raise ValueError(f"OT top-k needs cost (P, S, T), q_mask (P, S) and c_mask (P, T), got shapes "
                         f"{tuple(cost.shape)}, {tuple(q_mask.shape)} and {tuple(c_mask.shape)}")
    # a 0/1 integer mask or an integer cost failed deep in a masked_fill or a cast, with a RuntimeError naming neither
    if q_mask.dtype != torch.bool or c_mask.dtype != torch.bool:
        raise ValueError(f"OT top-k needs bool masks (True: a sentence), got q_mask {q_mask.dtype} and c_mask "
                         f"{c_mask.dtype}")
    if not cost.is_floating_point():
        raise ValueError(f"OT top-k needs a floating-point cost, got {cost.dtype}")
    for name, mask in (("query", q_mask), ("candidate", c_mask)):  # else NaN distances, ranked as if real
        empty = ~mask.any(-1)
        if bool(empty.any()):
            raise ValueError(f"OT top-k: {name} rows {empty.nonzero().flatten()[:5].tolist()} have no sentence selected")
    if cost.dtype in _HALF:
        cost = cost.float()
    P, S, T = cost.shape
    if P == 0:  # no candidate (a shortlist of none has T = 0 too, where the minima below failed with an IndexError)
        return OTTopK(cost.new_zeros(0), torch.zeros(0, dtype=torch.long, device=cost.device), cost.new_zeros(0, S, T))
    invalid = ~(q_mask[:, :, None] & c_mask[:, None, :])  # (P, S, T)
    # a NaN cost between real sentences made the candidate's bound NaN: it sorted last and failed `bound <= kth`, so
    # it was never solved and silently left out of the k nearest (`OTScorer` refuses it in Sinkhorn's weight check);
    # an infinite one made its bound NaN too (never solved either), though `OTScorer` gives it a distance
    bad = (~torch.isfinite(cost) & ~invalid).flatten(1).any(1)  # (P,)
    if bool(bad.any()):
        raise ValueError(f"OT top-k needs finite costs between selected sentences: candidate rows "
                         f"{bad.nonzero().flatten()[:5].tolist()} have a NaN or infinite cost")
    far = cost.masked_fill(invalid, torch.inf)
    minima = far.amin(-1), far.amin(-2)  # = valid_minima(cost, q_mask, c_mask)
    x, y = ot_weights(cost, q_mask, c_mask, tau, minima)  # (P, S), (P, T)
    # 0 on invalid pairs: Sinkhorn reads every entry (0 x NaN is NaN), and a masked sentence's cost is no cost
    cost = cost.masked_fill(invalid, 0.0)
    # (P,) the potentials' range W (module docstring): max C for distances; a negative cost widens it (with max C
    # alone, all-negative costs raised the bound above the OT value and pruned a nearer candidate)
    c_max = cost.flatten(1).amax(1).clamp_min(0) - minima[0].amin(-1).clamp_max(0)
    rounding = 32 * torch.finfo(cost.dtype).eps
    bound = ot_dist_lower_bound(far, x, y, minima, q_mask, c_mask) - (tol + rounding) * c_max  # (P,)
    order = torch.argsort(bound, stable=True)
    dist, solved, plans = bound.clone(), [], []
    # candidates a Sinkhorn call: an int (a float budget, e.g. 1e8, gave a float step that failed slicing the
    # candidates after the first call), at most P (an infinite budget, whose floor division is NaN: all in one call)
    fit = P if budget_bytes == math.inf else budget_bytes // (DEFAULT_CELL_BYTES * max(S * T, 1))
    per_call = max(1, int(min(fit, P)))
    kth, start, step = float("inf"), 0, min(max(3 * k if first is None else int(first), k), per_call)
    while start < P:
        rows = order[start : start + step]
        start += len(rows)
        rows = rows[bound[rows] <= kth]
        if len(rows) == 0:  # bounds ascend: no later candidate can enter the k nearest either
            break
        res = sinkhorn(cost[rows], x[rows], y[rows], eps, tol=tol, **sinkhorn_kw)
        dist[rows] = res.value
        solved.append(rows)
        plans.append(res.plan)
        done = torch.cat(solved)
        if len(done) >= k:
            kth = float(torch.kthvalue(dist[done], k).values)
        step = per_call
    if not solved:  # no candidate
        return OTTopK(dist, order[:0], cost.new_zeros(0, S, T))
    return OTTopK(dist, torch.cat(solved), torch.cat(plans))
