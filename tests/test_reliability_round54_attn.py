"""Round 54: the attention scorer on non-finite costs between selected sentences (`scorers._attention_from_cost`),
and its values against a brute-force loop."""

import math
import warnings

import pytest
import torch

from aspire.batch import DocBatch
from aspire.scoring.scorers import (
    AttentionScorer,
    _attention_from_cost,
    attention_match,
    pairwise_attention_match,
    pairwise_ot_match,
)


def _batch(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(2, 3, 8, generator=g), torch.randn(2, 4, 8, generator=g)
    qm, cm = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool)
    cm[1, 3] = False
    return q.to(dtype), qm, c.to(dtype), cm


def _spoil(q, case):
    q = q.clone()
    if case == "nan":
        q[1, 1, 0] = float("nan")
    elif case == "inf":
        q[1, 1, 0] = float("inf")
    else:  # "1e30": finite vector whose squared norm overflows float32 (every cost of the sentence +inf)
        q[1, 1] = q[1, 1] * 1e30
    return q


@pytest.mark.parametrize("case", ["nan", "inf", "1e30"])
@pytest.mark.parametrize("grad", [False, True])
def test_nonfinite_vector_is_refused_not_nan_score(case, grad):
    # old code: the distance of every problem holding query 1 came back NaN, silently (e.g. pairwise [3.628, nan])
    q, qm, c, cm = _batch()
    q = _spoil(q, case).requires_grad_(grad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"attention needs finite costs.*aligned rows \[1\]; row 1 has cost "
                                             r".* between query sentence 1 and candidate sentence 0"):
            pairwise_attention_match(q, qm, c, cm, tau=1.0)
        with pytest.raises(ValueError, match=r"attention needs finite costs.*\(query, candidate\) pairs "
                                             r"\[\(1, 0\), \(1, 1\)\]; pair \(1, 0\) has cost .* query sentence 1"):
            attention_match(q, qm, c, cm, tau=1.0)
        scorer = AttentionScorer()
        with pytest.raises(ValueError, match=r"attention needs finite costs.*aligned rows \[1\]"):
            scorer.pairwise_score(DocBatch(emb=q, mask=qm), DocBatch(emb=c, mask=cm))
        with pytest.raises(ValueError, match=r"attention needs finite costs"):
            scorer.score(DocBatch(emb=q, mask=qm), DocBatch(emb=c, mask=cm))


def test_bfloat16_overflowing_vector_is_refused():
    # bfloat16 holds 1e30; widened to float32 its squared norm overflows
    q, qm, c, cm = _batch(torch.bfloat16)
    with pytest.raises(ValueError, match=r"attention needs finite costs.*query sentence 1"):
        pairwise_attention_match(_spoil(q, "1e30"), qm, c, cm)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_single_nonfinite_cost_in_from_cost(bad):
    cost = torch.rand(3, 2, 3, dtype=torch.float64) + 0.5
    qm, cm = torch.ones(3, 2, dtype=torch.bool), torch.ones(3, 3, dtype=torch.bool)
    cost[2, 0, 1] = bad
    with pytest.raises(ValueError, match=r"aligned rows \[2\]; row 2 has cost .* query sentence 0 and candidate "
                                         r"sentence 1"):
        _attention_from_cost(cost, qm, cm, 1.0)


def test_nonfinite_on_padding_ignored_and_ot_message_still_names_ot():
    q, qm, c, cm = _batch()
    ref = pairwise_attention_match(q, qm, c, cm).dist
    q2 = q.clone()
    q2[1, 2] = float("nan")
    qm2 = qm.clone()
    qm2[1, 2] = False
    ref2 = pairwise_attention_match(q.masked_fill(~qm2[..., None], 0.0), qm2, c, cm).dist
    out = pairwise_attention_match(q2, qm2, c, cm).dist
    assert torch.isfinite(out).all() and torch.allclose(out, ref2) and torch.allclose(out[0], ref[0])
    with pytest.raises(ValueError, match=r"^OT needs finite costs"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pairwise_ot_match(_spoil(q, "nan"), qm, c, cm)


def _brute(q, qm, c, cm, tau):
    """Attention distance of one problem by loops: sum_ij a_ij D_ij, a = exp(-D/tau) / sum over valid pairs."""
    pairs = [(i, j) for i in range(q.shape[0]) for j in range(c.shape[0]) if qm[i] and cm[j]]
    d = {(i, j): math.sqrt(sum((float(a) - float(b)) ** 2 for a, b in zip(q[i], c[j]))) for i, j in pairs}
    if math.isinf(tau):
        w = {p: 1.0 for p in pairs}
    else:
        lo = min(d.values())
        w = {p: math.exp(-(d[p] - lo) / tau) for p in pairs}
    z = sum(w.values())
    return sum(w[p] * d[p] for p in pairs) / z, {p: w[p] / z for p in pairs}


@pytest.mark.parametrize("tau", [0.05, 1.0, 7.0, math.inf])
def test_matches_brute_force(tau):
    g = torch.Generator().manual_seed(3)
    q, c = torch.randn(3, 4, 5, generator=g, dtype=torch.float64), torch.randn(2, 3, 5, generator=g,
                                                                                  dtype=torch.float64)
    qm = torch.tensor([[1, 1, 0, 1], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    cm = torch.tensor([[1, 1, 1], [0, 1, 1]], dtype=torch.bool)
    q[~qm] = float("nan")  # padding: read as zeros, no effect
    allp = attention_match(q, qm, c, cm, tau=tau)
    assert allp.dist.shape == (3, 2) and allp.attention.shape == (3, 2, 4, 3)
    for a in range(3):
        for b in range(2):
            ref, att = _brute(q[a], qm[a], c[b], cm[b], tau)
            assert abs(float(allp.dist[a, b]) - ref) < 1e-9
            for (i, j), v in att.items():
                assert abs(float(allp.attention[a, b, i, j]) - v) < 1e-9
            assert float(allp.attention[a, b].sum()) == pytest.approx(1.0)
            assert float(allp.attention[a, b][~(qm[a][:, None] & cm[b][None, :])].abs().sum()) == 0.0
    pw = pairwise_attention_match(q[:2], qm[:2], c, cm, tau=tau)
    for r in range(2):
        assert abs(float(pw.dist[r]) - _brute(q[r], qm[r], c[r], cm[r], tau)[0]) < 1e-9
    s = AttentionScorer(tau)
    sc = s.score(DocBatch(emb=q, mask=qm), DocBatch(emb=c, mask=cm))
    assert torch.allclose(sc, -allp.dist)
