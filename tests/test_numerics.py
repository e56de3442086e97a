"""Numerical edge cases of the scorers and the Sinkhorn kernel: finite values and gradients across
temperatures, regularisation, cost scales, padding, identical sentences and half precision; a paper
scored against itself is the best match."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch

from aspire import DocBatch
from aspire.scoring import SinkhornConvergenceWarning, get_scorer, sinkhorn

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
GRID = list(itertools.product([1e-6, 1.0, 1e4], [1e-3, 0.05], [1.0, 300.0]))  # tau, eps, vector scale


def papers(dtype, scale, seed=0):
    """Six papers: ragged lengths, one with a single real sentence (all else padding), one whose
    sentences are all the same vector, one an exact copy of another."""
    g = torch.Generator().manual_seed(seed)
    vecs = [scale * torch.randn(n, 8, generator=g) / 8 ** 0.5 for n in (4, 1, 5, 3)]
    vecs.append(vecs[0][:1].repeat(3, 1))  # identical sentences
    vecs.append(vecs[2].clone())  # duplicate paper
    batch = DocBatch.from_list([v.to(dtype) for v in vecs], paper_ids=[f"p{i}" for i in range(len(vecs))])
    batch.emb.requires_grad_()
    return batch


def scorer_for(name, tau, eps):
    if name == "minl2":
        return get_scorer("minl2")
    if name == "attention":
        return get_scorer("attention", tau=tau)
    return get_scorer("ot", tau=tau, eps=eps, max_iter=5000)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["minl2", "ot", "attention"])
def test_scores_and_gradients_are_finite_and_self_is_best(name, dtype):
    for tau, eps, scale in GRID:
        if name == "minl2" and (tau, eps) != (1.0, 0.05):
            continue  # no parameters
        b = papers(dtype, scale)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SinkhornConvergenceWarning)  # eps 1e-3 with costs of 300
            score = scorer_for(name, tau, eps).score(b, b)  # (6, 6), higher is better
            (grad,) = torch.autograd.grad(score.sum(), b.emb)
        where = f"{name} {dtype} tau={tau} eps={eps} scale={scale}"
        assert score.dtype == dtype, where
        assert torch.isfinite(score).all(), where
        assert torch.isfinite(grad).all(), where
        s = score.detach().double()
        if name == "attention":
            continue  # soft attention is not maximal on the diagonal by construction (see below)
        # a paper with itself scores at least as well as with any other (ties: the duplicate pair)
        # (slack: rounding, and the entropic blur of the self plan, ~1e-6 here; at tau -> 0 the paper
        # sharing one identical sentence, p4 with p0, is a true tie at distance 0)
        slack = {torch.float16: 2e-3, torch.bfloat16: 2e-2}.get(dtype, 1e-5) * max(1.0, scale)
        assert (s.diagonal()[:, None] >= s - slack).all(), where
        if name == "minl2":
            assert (s.diagonal() == 0).all(), where  # distance 0: the best possible


def test_attention_self_score_best_at_small_tau():
    """attention tends to min-L2 as tau -> 0, so a paper with itself is then the best match."""
    b = papers(torch.float64, 1.0)
    s = get_scorer("attention", tau=1e-4).score(b, b).detach()
    assert (s.diagonal()[:, None] >= s - 1e-6).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sinkhorn_extremes_finite(dtype):
    """Costs up to 1e3, eps down to 1e-3, all-but-one padding, an all-zero cost (identical points)."""
    g = torch.Generator().manual_seed(3)
    cost = (1e3 * torch.rand(4, 5, 6, generator=g)).to(dtype)
    cost[3] = 0.0  # identical sentence vectors on both sides
    a = torch.zeros(4, 5, dtype=dtype)
    b = torch.zeros(4, 6, dtype=dtype)
    a[:, 0], b[:, 0] = 1.0, 1.0  # problem 0: one real point per side
    a[1:], b[1:] = 1 / 5, 1 / 6
    cost.requires_grad_()
    for eps in (1e-3, 0.05, 10.0):
        for grad in ("implicit", "autograd"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SinkhornConvergenceWarning)
                res = sinkhorn(cost, a, b, eps, max_iter=3000, grad=grad)
                (gc,) = torch.autograd.grad(res.value.sum(), cost)
            assert res.value.dtype == dtype and res.plan.dtype == dtype
            assert torch.isfinite(res.value).all() and torch.isfinite(res.plan).all(), (dtype, eps, grad)
            assert torch.isfinite(gc).all(), (dtype, eps, grad)
            assert res.value[3].item() == 0.0  # zero cost: zero transport cost
            assert res.plan[0, 0, 0].item() == pytest.approx(1.0, abs=1e-2)  # one point each: all mass there
