"""Round 42, the distance routine (`aspire.scoring.distance`, its compiled pass `_distance_cpu`) against a float64
loop over the same vectors.

Pinned defects: `as_store` took a mask of the wrong shape and broadcast it (a (B, 1) mask kept every sentence slot,
padding included, as real rows); `gathered_l2_minima`'s torch path (a gradient to the vectors) raised IndexError for
a side with no sentence slots (M = 0), where the compiled pass gives +inf minima.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from aspire.scoring._distance_cpu import pair_order
from aspire.scoring.distance import as_store, gathered_l2_cost, gathered_l2_minima, l2_cost


def _ref(qv, qr, cv, cr):
    """Cost (B, N, M) and minima (B, N), (B, M) by an explicit float64 loop; 0 / +inf on padding."""
    B, N = qr.shape
    M = cr.shape[1]
    out = torch.zeros(B, N, M, dtype=torch.float64)
    rm = torch.full((B, N), math.inf, dtype=torch.float64)
    cm = torch.full((B, M), math.inf, dtype=torch.float64)
    for b in range(B):
        for i in range(N):
            for j in range(M):
                if qr[b, i] >= 0 and cr[b, j] >= 0:
                    d = float((qv[qr[b, i]].double() - cv[cr[b, j]].double()).norm())
                    out[b, i, j] = d
                    rm[b, i] = min(rm[b, i], d)
                    cm[b, j] = min(cm[b, j], d)
    return out, rm, cm


def _case(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    qv, cv = torch.randn(20, 9, generator=g, dtype=dtype), torch.randn(15, 9, generator=g, dtype=dtype)
    qr, cr = torch.randint(-1, 20, (6, 4), generator=g), torch.randint(-1, 15, (6, 5), generator=g)
    qr[0], cr[1] = -1, -1  # all-padding sides
    return qv, qr, cv, cr


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-6), (torch.float64, 1e-12)])
@pytest.mark.parametrize("taped", [False, True])
def test_gathered_minima_match_loop(dtype, tol, taped):
    qv, qr, cv, cr = _case(dtype)
    ref = _ref(qv, qr, cv, cr)
    got = gathered_l2_minima(qv.clone().requires_grad_(taped), qr, cv, cr)
    for r, t in zip(ref, got):
        assert t.dtype == dtype
        assert torch.equal(torch.isinf(r), torch.isinf(t))
        fin = torch.isfinite(r)
        assert torch.allclose(t.double()[fin], r[fin], atol=tol, rtol=0)
    assert bool((got[0][0] == 0).all()) and bool((got[0][:, :, :][1] == 0).all())


def test_empty_side_torch_path_gives_inf_minima_as_compiled():
    qv = torch.randn(4, 5)
    qr, cr = torch.tensor([[0, 1]]), torch.empty(1, 0, dtype=torch.long)
    compiled = gathered_l2_minima(qv, qr, qv, cr)
    taped = gathered_l2_minima(qv.clone().requires_grad_(), qr, qv, cr)
    for a, b in zip(compiled, taped):
        assert a.shape == b.shape
        assert torch.equal(a, b.detach())
    assert torch.equal(taped[1], torch.full((1, 2), math.inf))
    # and an empty query side
    taped = gathered_l2_minima(qv.clone().requires_grad_(), cr, qv, qr)
    assert taped[0].shape == (1, 0, 2) and torch.equal(taped[2], torch.full((1, 2), math.inf))


@pytest.mark.parametrize("mask", [torch.ones(3, 1, dtype=torch.bool), torch.ones(4, dtype=torch.bool),
                                  torch.ones(3, 4, dtype=torch.long)])
def test_as_store_refuses_a_mask_not_bool_b_n(mask):
    with pytest.raises(ValueError, match="mask"):
        as_store(torch.randn(3, 4, 5), mask)


def test_as_store_rows_and_view():
    x = torch.randn(3, 4, 5)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    store, rows = as_store(x, mask)
    assert store.data_ptr() == x.data_ptr()
    assert torch.equal(rows, torch.tensor([[0, 1, -1, -1], [4, -1, -1, -1], [8, 9, 10, 11]]))


def test_shared_store_noncontiguous_equal_vectors_exactly_zero():
    g = torch.Generator().manual_seed(3)
    base = torch.randn(12, 2 * 384, generator=g) * 0.2
    store = base[:, ::2]  # non-contiguous (12, 384), norms ~4
    assert not store.is_contiguous()
    qr = torch.tensor([[0, 1, 2, -1], [5, 6, 7, 8]])
    cr = torch.tensor([[2, 1, 0], [8, -1, 6]])
    for s in (store, store.double()):
        cost, rm, cm = gathered_l2_minima(s, qr, s, cr)
        ref = _ref(s, qr, s, cr)
        assert torch.allclose(cost.double(), ref[0], atol=1e-5 if s.dtype == torch.float32 else 1e-12, rtol=0)
        assert cost[0, 0, 2] == 0 and cost[0, 2, 0] == 0 and cost[1, 3, 0] == 0 and cost[1, 1, 2] == 0
        assert rm[0, :3].eq(0).all() and math.isinf(rm[0, 3])
        taped = gathered_l2_minima(s.clone().requires_grad_(), qr, s, cr)[0]
        assert taped[0, 0, 2] == 0 and taped[1, 1, 2] == 0


def test_compiled_and_torch_paths_agree_and_gradient_matches_reference():
    qv, qr, cv, cr = _case(torch.float64, seed=5)
    compiled = gathered_l2_cost(qv, qr, cv, cr)
    qg, cg = qv.clone().requires_grad_(), cv.clone().requires_grad_()
    taped = gathered_l2_cost(qg, qr, cg, cr)
    assert torch.allclose(compiled, taped.detach(), atol=1e-12, rtol=0)
    w = torch.randn(taped.shape, dtype=torch.float64)
    (taped * w).sum().backward()
    qr2, cr2 = qv.clone().requires_grad_(), cv.clone().requires_grad_()
    pad = (qr < 0)[:, :, None] | (cr < 0)[:, None, :]
    ref = torch.cdist(qr2[qr.clamp_min(0)], cr2[cr.clamp_min(0)]).masked_fill(pad, 0.0)
    (ref * w).sum().backward()
    assert torch.allclose(qg.grad, qr2.grad, atol=1e-10) and torch.allclose(cg.grad, cr2.grad, atol=1e-10)


def test_l2_cost_gradient_zero_at_equal_vectors():
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    d = l2_cost(x, x)
    assert torch.equal(torch.diagonal(d, dim1=1, dim2=2).detach(), torch.zeros(2, 3, dtype=torch.float64))
    d.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_pair_order_is_a_permutation_and_leaves_outputs_bitwise():
    g = torch.Generator().manual_seed(7)
    store = torch.randn(40, 16, generator=g)
    qr, cr = torch.randint(-1, 40, (30, 5), generator=g), torch.randint(-1, 40, (30, 6), generator=g)
    qr[3], cr[4] = -1, -1
    order = pair_order(qr.numpy(), cr.numpy(), 40, 40)
    assert sorted(order.tolist()) == list(range(30))
    whole = gathered_l2_minima(store, qr, store, cr)
    for p in range(30):  # each pair alone (its order is then the identity)
        alone = gathered_l2_minima(store, qr[p:p + 1], store, cr[p:p + 1])
        for a, b in zip(whole, alone):
            assert np.array_equal(a[p].numpy(), b[0].numpy())
