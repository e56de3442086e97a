"""Round 57: the attention scorer at a tiny temperature and with +inf on padding (`scorers._attention_from_cost`).

-cost / tau overflowed to -inf at every pair once tau was small enough (float32: tau 1e-40 for costs near 1; float64
1e-310), and the softmax of all -inf is NaN: the distance came back NaN without an error. A +inf cost on padding
(which no entry point writes, but `_attention_from_cost` takes any cost) made 0 * inf = NaN in the sum."""

import pytest
import torch

from aspire.scoring.scorers import _attention_from_cost, attention_match, pairwise_attention_match


def _batch(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, c = torch.randn(3, 4, 8, generator=g, dtype=dtype), torch.randn(3, 5, 8, generator=g, dtype=dtype)
    qm, cm = torch.ones(3, 4, dtype=torch.bool), torch.ones(3, 5, dtype=torch.bool)
    qm[1, 3], cm[2, 4] = False, False
    return q, qm, c, cm


def _least_cost(q, qm, c, cm):
    cost = torch.cdist(q, c)
    return cost.masked_fill(~(qm[:, :, None] & cm[:, None, :]), torch.inf).amin((-2, -1))


@pytest.mark.parametrize("dtype,tau", [(torch.float32, 1e-40), (torch.float32, 1e-300), (torch.float64, 1e-310),
                                       (torch.float64, 5e-324)])
def test_tiny_tau_attends_to_the_least_cost(dtype, tau):
    q, qm, c, cm = _batch(dtype)
    match = pairwise_attention_match(q, qm, c, cm, tau=tau)
    assert torch.isfinite(match.dist).all()
    torch.testing.assert_close(match.dist, _least_cost(q, qm, c, cm), rtol=1e-5, atol=1e-5)
    assert torch.isfinite(match.attention).all()
    torch.testing.assert_close(match.attention.sum((-2, -1)), torch.ones(3, dtype=dtype))


def test_tiny_tau_all_pairs_and_gradient():
    q, qm, c, cm = _batch()
    q.requires_grad_(True)
    dist = attention_match(q, qm, c, cm, tau=1e-40).dist  # (3, 3)
    assert torch.isfinite(dist).all()
    dist.sum().backward()
    assert torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0


def test_moderate_tau_unchanged():
    """The shift moves nothing at ordinary temperatures: the old formula, written out, agrees to rounding."""
    q, qm, c, cm = _batch(torch.float64)
    for tau in (0.05, 1.0, 20.0):
        cost = torch.cdist(q, c)
        valid = qm[:, :, None] & cm[:, None, :]
        att = torch.softmax((-cost / tau).masked_fill(~valid, -torch.inf).flatten(-2), -1).reshape(cost.shape)
        torch.testing.assert_close(pairwise_attention_match(q, qm, c, cm, tau=tau).dist, (att * cost).sum((-2, -1)))


def test_padded_inf_cost_is_left_out():
    g = torch.Generator().manual_seed(1)
    cost = torch.rand(2, 3, 4, generator=g)
    qm, cm = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool)
    cm[:, 3] = False
    zero_pad, inf_pad = cost.clone(), cost.clone()
    zero_pad[:, :, 3], inf_pad[:, :, 3] = 0.0, torch.inf
    torch.testing.assert_close(_attention_from_cost(inf_pad, qm, cm, 1.0).dist,
                               _attention_from_cost(zero_pad, qm, cm, 1.0).dist)
    assert torch.isfinite(_attention_from_cost(inf_pad, qm, cm, 1.0).dist).all()


def test_selected_inf_cost_still_refused():
    cost = torch.rand(2, 3, 4)
    cost[1, 0, 2] = torch.inf
    m1, m2 = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="attention needs finite costs"):
        _attention_from_cost(cost, m1, m2, 1e-40)
