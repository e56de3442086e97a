"""Round 46: the implicit Sinkhorn backward (aspire.scoring._implicit) against taped Sinkhorn and central finite
differences in float64 (padding, ragged sizes, eps down to 0.01, weights from a temperature), and the triplet margin
loss against a brute-force loop and torch.nn.functional.triplet_margin_with_distance_loss."""

import math
import warnings

import pytest
import torch

from aspire.losses.triplet import triplet_margin_dist_loss, triplet_margin_dist_per_anchor
from aspire.scoring.sinkhorn import sinkhorn

D = torch.float64


def _problem(seed):
    g = torch.Generator().manual_seed(seed)
    C = torch.rand(3, 4, 5, generator=g, dtype=D)
    a = torch.softmax(torch.randn(3, 4, generator=g, dtype=D) / 0.5, 1)
    b = torch.softmax(torch.randn(3, 5, generator=g, dtype=D) / 0.5, 1)
    a[1, 3] = 0  # a padded row
    a[1] /= a[1].sum()
    b[2, 3:] = 0  # two padded columns
    b[2] /= b[2].sum()
    return C, a, b


def _value(C, a, b, eps, grad):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sinkhorn(C, a, b, eps, tol=1e-13, max_iter=20000, grad=grad).value


@pytest.mark.parametrize("eps", [0.5, 0.05, 0.01])
def test_implicit_value_gradient_matches_taped_and_finite_differences(eps):
    C, a, b = _problem(0)
    w = torch.tensor([0.7, -1.3, 0.4], dtype=D)
    grads = {}
    for grad in ("implicit", "autograd"):
        Cr, ar, br = (t.clone().requires_grad_() for t in (C, a, b))
        (_value(Cr, ar, br, eps, grad) * w).sum().backward()
        grads[grad] = (Cr.grad, ar.grad, br.grad)
    gc_i, ga_i, gb_i = grads["implicit"]
    gc_t, ga_t, gb_t = grads["autograd"]
    assert torch.allclose(gc_i, gc_t, atol=1e-9, rtol=1e-7)
    assert (gc_i[1, 3] == 0).all() and (gc_i[2, :, 3:] == 0).all()  # padding gets no gradient
    # a and b: equal up to +c on a's real entries and -c on b's (docstring of _ImplicitPlan)
    da, db = ga_i - ga_t, gb_i - gb_t
    for k in range(3):
        ra, rb = a[k] > 0, b[k] > 0
        c = da[k][ra][0]
        assert torch.allclose(da[k][ra], c.expand(int(ra.sum())), atol=1e-8)
        assert torch.allclose(db[k][rb], (-c).expand(int(rb.sum())), atol=1e-8)
        assert (ga_i[k][~ra] == 0).all() and (gb_i[k][~rb] == 0).all()
    h = 1e-6
    for idx in [(0, 1, 2), (1, 0, 0), (2, 2, 1), (0, 3, 4)]:
        Cp, Cm = C.clone(), C.clone()
        Cp[idx] += h
        Cm[idx] -= h
        fd = ((_value(Cp, a, b, eps, "implicit") - _value(Cm, a, b, eps, "implicit")) * w).sum() / (2 * h)
        assert abs(float(fd) - float(gc_i[idx])) < 1e-6, (idx, float(fd), float(gc_i[idx]))


def test_implicit_plan_gradient_matches_taped():
    C, a, b = _problem(3)
    up = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(4), dtype=D)
    out = {}
    for grad in ("implicit", "autograd"):
        Cr = C.clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = sinkhorn(Cr, a, b, 0.05, tol=1e-13, max_iter=20000, grad=grad)
        ((r.plan * up).sum() + r.value.sum()).backward()
        out[grad] = Cr.grad
    assert torch.allclose(out["implicit"], out["autograd"], atol=1e-9, rtol=1e-7)


def test_implicit_temperature_gradient_and_nan_problem_isolated():
    g = torch.Generator().manual_seed(2)
    C = torch.rand(3, 5, 6, generator=g, dtype=D)
    la, lb = torch.randn(3, 5, generator=g, dtype=D), torch.randn(3, 6, generator=g, dtype=D)
    res = {}
    for grad in ("implicit", "autograd"):
        tau = torch.tensor(0.7, dtype=D, requires_grad=True)
        Cr = C.clone().requires_grad_()
        v = _value(Cr, torch.softmax(la / tau, 1), torch.softmax(lb / tau, 1), 0.01, grad)
        (v[0] - 2 * v[2] + 0.5 * v[1]).backward()
        res[grad] = (tau.grad, Cr.grad)
    assert torch.allclose(res["implicit"][0], res["autograd"][0], atol=1e-9)
    assert torch.allclose(res["implicit"][1], res["autograd"][1], atol=1e-9)
    # a non-finite cost between real sentences: that problem's value and gradient NaN, the others their own
    C[1, 0, 0] = math.nan
    a, b = torch.softmax(la, 1), torch.softmax(lb, 1)
    Cr = C.clone().requires_grad_()
    v = _value(Cr, a, b, 0.01, "implicit")
    assert v[1].isnan() and v[[0, 2]].isfinite().all()
    (v[0] - 2 * v[2]).backward()
    assert Cr.grad[1].isnan().all()
    assert Cr.grad[[0, 2]].isfinite().all()
    Ct = C.clone().requires_grad_()
    vt = _value(Ct, a, b, 0.01, "autograd")
    (vt[0] - 2 * vt[2]).backward()
    assert torch.allclose(Cr.grad[[0, 2]], Ct.grad[[0, 2]], atol=1e-9)


def _brute(pos, neg, mask, margin):
    per, valid = [], []
    for i in range(len(pos)):
        terms = [max(0.0, float(pos[i]) - float(neg[i, k]) + margin) for k in range(neg.shape[1]) if mask[i, k]]
        per.append(sum(terms) / len(terms) if terms else 0.0)
        valid.append(bool(terms))
    return per, valid


@pytest.mark.parametrize("margin", [0.0, 0.3, 1.0, 2])
def test_triplet_matches_brute_force_and_torch(margin):
    g = torch.Generator().manual_seed(5)
    pos = torch.rand(6, generator=g, dtype=D) * 2
    neg = torch.rand(6, 4, generator=g, dtype=D) * 2
    mask = torch.rand(6, 4, generator=g) > 0.4
    mask[2] = False  # an anchor with no negative: left out
    mask[0] = True
    per, valid = triplet_margin_dist_per_anchor(pos, neg, mask, margin)
    want_per, want_valid = _brute(pos, neg, mask, margin)
    assert valid.tolist() == want_valid
    assert torch.allclose(per, torch.tensor(want_per, dtype=D))
    loss = triplet_margin_dist_loss(pos, neg, mask, margin)
    kept = [p for p, v in zip(want_per, want_valid) if v]
    assert math.isclose(float(loss), sum(kept) / len(kept), rel_tol=1e-12)
    if margin == 0:  # torch refuses a zero margin; ours is documented as >= 0
        return
    # all-allowed: torch's triplet_margin_with_distance_loss over (anchor, negative) pairs, reduction mean
    full = torch.ones_like(mask)
    ref = torch.nn.functional.triplet_margin_with_distance_loss(
        torch.zeros(6, 4, 1, dtype=D), pos[:, None, None].expand(6, 4, 1), neg[:, :, None],
        distance_function=lambda x, y: (y - x)[..., 0], margin=margin)
    assert math.isclose(float(triplet_margin_dist_loss(pos, neg, full, margin)), float(ref), rel_tol=1e-12)


@pytest.mark.parametrize("margin", [-0.1, math.nan, math.inf, -math.inf, True, "1"])
def test_triplet_bad_margin_refused_naming_it(margin):
    pos, neg, mask = torch.rand(2), torch.rand(2, 3), torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="margin"):
        triplet_margin_dist_per_anchor(pos, neg, mask, margin)
    with pytest.raises(ValueError, match="margin"):
        triplet_margin_dist_loss(pos, neg, mask, margin)
