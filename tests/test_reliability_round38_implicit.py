"""Round 38: the implicit Sinkhorn gradient (aspire.scoring._implicit) against gradcheck and unrolled Sinkhorn,
and the triplet margin loss / in-batch negatives / loss registry against hand computations."""

import math
import warnings
from types import SimpleNamespace

import pytest
import torch

from aspire.losses.registry import matrix_loss
from aspire.losses.triplet import (
    in_batch_negative_mask,
    masked_anchor_mean,
    pick_one_negative,
    triplet_margin_dist_loss,
    triplet_margin_dist_per_anchor,
)
from aspire.scoring.sinkhorn import sinkhorn


def _log(w):
    return torch.where(w > 0, torch.log(torch.where(w > 0, w, 1.0)), -math.inf)


def _unrolled(C, a, b, eps, n):
    """Plain log-domain Sinkhorn, taped: the reference gradient at convergence."""
    la, lb = _log(a), _log(b)
    f, g = torch.zeros_like(a), torch.zeros_like(b)
    for _ in range(n):
        f = -eps * torch.logsumexp(lb[:, None, :] + (g[:, None, :] - C) / eps, 2)
        g = -eps * torch.logsumexp(la[:, :, None] + (f[:, :, None] - C) / eps, 1)
    P = torch.exp(la[:, :, None] + lb[:, None, :] + (f[:, :, None] + g[:, None, :] - C) / eps)
    return P, (P * C).sum((1, 2))


def _implicit(C, a, b, eps, tol):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = sinkhorn(C, a, b, eps, tol=tol, max_iter=20000, grad="implicit")
    return r.plan, r.value


@pytest.mark.parametrize("B,N,M,eps", [(2, 3, 5, 0.3), (2, 5, 2, 0.1), (1, 4, 4, 0.05)])
def test_implicit_grad_matches_unrolled_and_gradcheck(B, N, M, eps):
    g = torch.Generator().manual_seed(B * 100 + N * 10 + M)
    C = torch.rand(B, N, M, dtype=torch.float64, generator=g)
    pad_a = torch.zeros(B, N, dtype=torch.bool)
    pad_a[0, -1] = True
    pad_b = torch.zeros(B, M, dtype=torch.bool)
    pad_b[-1, 0] = True
    la = torch.randn(B, N, dtype=torch.float64, generator=g).requires_grad_()
    lb = torch.randn(B, M, dtype=torch.float64, generator=g).requires_grad_()
    W = torch.randn(B, N, M, dtype=torch.float64, generator=g)

    def weights(la, lb):  # uneven weights of mass 1, padding 0
        return torch.softmax(la.masked_fill(pad_a, -math.inf), 1), torch.softmax(lb.masked_fill(pad_b, -math.inf), 1)

    def f_impl(C, la, lb):
        return _implicit(C, *weights(la, lb), eps, 1e-13)

    Cr = C.clone().requires_grad_()
    assert torch.autograd.gradcheck(f_impl, (Cr, la, lb), eps=1e-6, atol=1e-5, rtol=1e-4)
    P, v = f_impl(Cr, la, lb)
    gi = torch.autograd.grad((P * W).sum() + v.sum(), (Cr, la, lb))
    P, v = _unrolled(Cr, *weights(la, lb), eps, 3000)
    gu = torch.autograd.grad((P * W).sum() + v.sum(), (Cr, la, lb))
    for x, y in zip(gi, gu):
        torch.testing.assert_close(x, y, atol=1e-9, rtol=1e-7)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_implicit_grad_of_a_light_column(dtype, tol):
    # a real column of mass 1e-7 (below 1e-5 max(b)): its eigenvalue of the unscaled Schur complement fell under
    # the float32 threshold and dL/db_j came out 0.16 where it is 1.04
    g = torch.Generator().manual_seed(0)
    C = torch.rand(1, 4, 4, dtype=torch.float64, generator=g)
    a = torch.full((1, 4), 0.25, dtype=torch.float64)
    b = torch.tensor([[0.4, 0.3, 0.3 - 1e-7, 1e-7]], dtype=torch.float64)
    W = torch.randn(1, 4, 4, dtype=torch.float64, generator=g)
    ref = [t.clone().requires_grad_() for t in (C, a, b)]
    P, v = _unrolled(*ref, 0.1, 4000)
    gu = torch.autograd.grad((P * W).sum() + v.sum(), ref)
    ins = [t.to(dtype).requires_grad_() for t in (C, a, b)]
    P, v = _implicit(*ins, 0.1, tol)
    gi = [x.double() for x in torch.autograd.grad((P * W.to(dtype)).sum() + v.sum(), ins)]
    c = (gi[1] - gu[1]).mean()  # the gauge: a's and b's gradients are defined up to (+c, -c)
    atol = 1e-5 if dtype == torch.float32 else 1e-9
    torch.testing.assert_close(gi[0], gu[0], atol=atol, rtol=0)
    torch.testing.assert_close(gi[1] - c, gu[1], atol=atol, rtol=0)
    torch.testing.assert_close(gi[2] + c, gu[2], atol=atol, rtol=0)


def test_implicit_nan_cost_stays_in_its_problem():
    g = torch.Generator().manual_seed(1)
    C = torch.rand(2, 3, 4, dtype=torch.float64, generator=g)
    a = torch.full((2, 3), 1 / 3, dtype=torch.float64)
    b = torch.full((2, 4), 0.25, dtype=torch.float64)
    b[1] = torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0], dtype=torch.float64)
    bad = C.clone()
    bad[0, 1, 1] = math.nan  # between real sentences: problem 0 is NaN
    bad[1, 2, 3] = math.nan  # on padding: read as 0
    Cr = bad.clone().requires_grad_()
    _, v = _implicit(Cr, a, b, 0.1, 1e-12)
    (gc,) = torch.autograd.grad(v.sum(), Cr)
    assert torch.isnan(v[0]) and torch.isnan(gc[0]).all()
    clean = C[1:].clone()
    clean[0, 2, 3] = 0.0
    Cc = clean.requires_grad_()
    _, v1 = _implicit(Cc, a[1:], b[1:], 0.1, 1e-12)
    (g1,) = torch.autograd.grad(v1.sum(), Cc)
    torch.testing.assert_close(v[1:].detach(), v1.detach())
    torch.testing.assert_close(gc[1:], g1)
    assert gc[1, :, 3].eq(0).all()


def test_triplet_loss_by_hand():
    g = torch.Generator().manual_seed(2)
    pos = torch.rand(4, dtype=torch.float64, generator=g).requires_grad_()
    neg = torch.rand(4, 5, dtype=torch.float64, generator=g) * 2
    mask = torch.rand(4, 5, generator=g) > 0.4
    mask[0, 0] = True
    mask[2] = False
    neg[~mask] = math.nan  # left out: changes nothing
    per, valid = triplet_margin_dist_per_anchor(pos, neg, mask, 0.5)
    ref = []
    for i in range(4):
        h = [max(0.0, pos[i].item() - neg[i, k].item() + 0.5) for k in range(5) if mask[i, k]]
        ref.append(sum(h) / len(h) if h else 0.0)
    torch.testing.assert_close(per.detach(), torch.tensor(ref, dtype=torch.float64))
    assert valid.tolist() == [bool(mask[i].any()) for i in range(4)]
    loss = triplet_margin_dist_loss(pos, neg, mask, 0.5)
    kept = [r for r, ok in zip(ref, valid.tolist()) if ok]
    assert loss.item() == pytest.approx(sum(kept) / len(kept))
    (gp,) = torch.autograd.grad(loss, pos)
    assert torch.isfinite(gp).all() and gp[2] == 0
    with pytest.raises(ValueError, match="margin"):
        triplet_margin_dist_per_anchor(pos, neg, mask, -1.0)
    with pytest.raises(ValueError, match="shape"):
        masked_anchor_mean(per[:, None], valid)


def test_in_batch_negatives_never_member_and_pick_one():
    group = torch.tensor([[0, 1, -1], [1, 0, 2], [2, 3, -1], [3, 2, -1]])  # members: the anchor, its positive, ...
    cand = torch.tensor([1, 0, 3, 2])  # candidate b = example b's positive
    allowed = in_batch_negative_mask(group, cand)
    ref = torch.tensor([[c not in g.tolist() for c in cand.tolist()] for g in group])
    assert torch.equal(allowed, ref)
    idx, valid = pick_one_negative(allowed)
    for b in range(4):  # the first allowed candidate after row b, cyclically
        order = [(b + k) % 4 for k in range(1, 5)]
        first = next(k for k in order if allowed[b, k])
        assert idx[b].item() == first and valid[b]
    none = torch.zeros(2, 2, dtype=torch.bool)
    assert not pick_one_negative(none)[1].any()


def test_unknown_loss_kind_lists_valid():
    with pytest.raises(ValueError, match="triplet, mnrl, multi_similarity, bce"):
        matrix_loss(SimpleNamespace(kind="tripplet"))
    assert matrix_loss(SimpleNamespace(kind="triplet")) is None
