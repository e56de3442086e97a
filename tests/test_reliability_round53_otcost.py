"""Round 53: the OT scorer on non-finite costs between selected sentences (`scorers._ot_from_cost`)."""

import warnings

import pytest
import torch

from aspire.batch import DocBatch
from aspire.scoring.scorers import OTScorer, _ot_from_cost, ot_match, pairwise_ot_match
from aspire.scoring.sinkhorn import sinkhorn


def _batch(q_bad=None):
    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(2, 3, 8, generator=g), torch.randn(2, 4, 8, generator=g)
    qm, cm = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool)
    cm[1, 3] = False
    if q_bad is not None:
        q[1, 1] = q_bad
    return q, qm, c, cm


def test_all_inf_row_is_refused_not_dropped():
    # hand example: sentence 1 of query 1 has squared norm past float32 (every cost +inf); its weight was
    # softmax(-inf) = 0 and the distance a finite number (3.396), the sentence silently dropped
    q, qm, c, cm = _batch(1e30)
    for fn in (pairwise_ot_match, ot_match):
        with pytest.raises(ValueError, match=r"finite costs.*query sentence 1"):
            fn(q, qm, c, cm, tau=1.0, eps=0.05)
    with pytest.raises(ValueError, match=r"\(query, candidate\) pairs \[\(1, 0\), \(1, 1\)\]"):
        ot_match(q, qm, c, cm)
    with pytest.raises(ValueError, match=r"aligned rows \[1\]"):
        OTScorer().pairwise_dist_details(DocBatch(emb=q, mask=qm), DocBatch(emb=c, mask=cm))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_vector_names_cost_not_weights(bad):
    q, qm, c, cm = _batch()
    q[1, 1, 0] = bad
    for fn in (pairwise_ot_match, ot_match):
        with pytest.raises(ValueError, match=r"finite costs between selected sentences") as info:
            fn(q, qm, c, cm, tau=1.0, eps=0.05)
        assert "weights must be finite" not in str(info.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("grad", [False, True])
def test_single_nonfinite_cost_in_from_cost(bad, grad):
    cost = torch.rand(3, 2, 3, dtype=torch.float64) + 0.5
    qm, cm = torch.ones(3, 2, dtype=torch.bool), torch.ones(3, 3, dtype=torch.bool)
    cost[2, 0, 1] = bad
    # reference: sinkhorn's documented behaviour on such a cost between real points is a NaN value (no error
    # for +inf: the pair is forbidden, value inf * 0); the scorer must not return it silently
    with torch.no_grad():
        x = torch.full((1, 2), 0.5, dtype=torch.float64)
        y = torch.full((1, 3), 1 / 3, dtype=torch.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert torch.isnan(sinkhorn(cost[2:], x, y, 0.05).value).all()
    cost.requires_grad_(grad)
    with pytest.raises(ValueError, match=r"aligned rows \[2\]; row 2 has cost .* query sentence 0 and candidate "
                                         r"sentence 1"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _ot_from_cost(cost, qm, cm, 1.0, 0.05)


def test_nonfinite_cost_on_padding_still_ignored_and_finite_unchanged():
    cost = torch.rand(2, 3, 3, dtype=torch.float64) + 0.5
    qm, cm = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 3, dtype=torch.bool)
    qm[1, 2] = False
    ref = _ot_from_cost(cost, qm, cm, 1.0, 0.05).dist
    cost[1, 2] = float("nan")  # padding: read as 0
    assert torch.allclose(_ot_from_cost(cost, qm, cm, 1.0, 0.05).dist, ref)
    # a real sentence whose weight underflows at a small tau (padding to Sinkhorn) is no error on finite costs
    far = torch.tensor([[[0.1, 0.2], [9.0, 8.0]]], dtype=torch.float64)
    m = torch.ones(1, 2, dtype=torch.bool)
    out = _ot_from_cost(far, m, m, 0.01, 0.05)
    assert float(out.query_weights[0, 1]) < torch.finfo(torch.float64).tiny
    assert torch.isfinite(out.dist).all()
