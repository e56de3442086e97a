"""Round 30: the scorer registry and the simple scorers (min-L2, OT, attention, hybrid, abstract cosine) against
brute-force references written here (a loop over sentence pairs, numpy, POT's log-domain Sinkhorn)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.scoring.scorers import (
    AttentionScorer,
    HybridScorer,
    MinL2Scorer,
    OTScorer,
    attention_dist,
    get_scorer,
    pairwise_attention_dist,
)
from aspire.scoring.vector import VectorCosine

D = 5


def _batch(lens, S, seed, dtype=torch.float64, holes=False):
    """Papers with `lens` selected sentences each, padded to S; `holes`: the selection is every other slot (not a
    prefix); padding holds NaN (it must change nothing)."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(len(lens), S, D, generator=g, dtype=torch.float64)
    mask = torch.zeros(len(lens), S, dtype=torch.bool)
    for i, n in enumerate(lens):
        slots = list(range(0, S, 2))[:n] if holes else list(range(n))
        assert len(slots) == n
        mask[i, slots] = True
    emb[~mask] = float("nan")
    whole = torch.randn(len(lens), D, generator=g, dtype=torch.float64)
    return DocBatch(emb.to(dtype), mask, [f"p{i}" for i in range(len(lens))], whole=whole.to(dtype))


def _sel(batch, i):
    return batch.emb[i][batch.mask[i]].double().numpy()  # (n_i, D) the selected sentences


def _cost(a, b):
    return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))


def _cos(u, v):
    return float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))


@pytest.fixture(scope="module")
def pair():
    q = _batch([1, 3, 2], 6, 0, holes=True)  # a paper with one sentence, selections with holes
    c = _batch([3, 1, 2, 2], 4, 1)
    return q, c


def test_minl2_equals_loop_over_sentence_pairs(pair):
    q, c = pair
    scorer = MinL2Scorer()
    s, details = scorer.score(q, c), scorer.dist_details(q, c)
    for a in range(len(q)):
        for b in range(len(c)):
            best = (math.inf, None)
            for qi in q.mask[a].nonzero().flatten().tolist():
                for cj in c.mask[b].nonzero().flatten().tolist():
                    d = float(np.linalg.norm(q.emb[a, qi].numpy() - c.emb[b, cj].numpy()))
                    if d < best[0]:
                        best = (d, (qi, cj))
            assert s[a, b].item() == pytest.approx(-best[0], abs=1e-10)  # similarity = minus the distance
            assert (details.query_sent[a, b].item(), details.cand_sent[a, b].item()) == best[1]


def test_ot_equals_pot_log_sinkhorn(pair):
    ot = pytest.importorskip("ot")
    q, c = pair
    for tau in (1.0, math.inf):
        scorer = OTScorer(tau=tau, eps=0.2, tol=1e-9, max_iter=5000)
        s = scorer.score(q, c)
        for a in range(len(q)):
            for b in range(len(c)):
                M = _cost(_sel(q, a), _sel(c, b))
                x, y = np.exp(-M.min(1) / tau), np.exp(-M.min(0) / tau)
                x, y = x / x.sum(), y / y.sum()
                P = ot.bregman.sinkhorn_log(x, y, M, 0.2, numItermax=20000, stopThr=1e-10)
                assert s[a, b].item() == pytest.approx(-(P * M).sum(), abs=1e-6)
        aligned = DocBatch(c.emb[:3], c.mask[:3])
        assert torch.allclose(scorer.pairwise_score(q, aligned), s[:, :3].diagonal(), atol=1e-8)


def test_attention_equals_its_definition(pair):
    q, c = pair
    for tau in (1.0, 0.2):
        s = AttentionScorer(tau=tau).score(q, c)
        for a in range(len(q)):
            for b in range(len(c)):
                M = _cost(_sel(q, a), _sel(c, b))
                A = np.exp(-M / tau)
                A /= A.sum()
                assert s[a, b].item() == pytest.approx(-(A * M).sum(), abs=1e-10)


def test_hybrid_equals_weighted_standardised_terms(pair):
    ot = pytest.importorskip("ot")
    q, c = pair
    w = {"whole": 0.5, "facet": 1.0, "minl2": 0.3, "ot": 0.2}
    cal = {"whole": (0.1, 2.0), "minl2": (-3.0, 0.5)}
    scorer = HybridScorer(weights=w, calibration=cal)
    s = scorer.score(q, c)
    for a in range(len(q)):
        for b in range(len(c)):
            M = _cost(_sel(q, a), _sel(c, b))
            x, y = np.exp(-M.min(1)), np.exp(-M.min(0))
            plan = ot.bregman.sinkhorn_log(x / x.sum(), y / y.sum(), M, 0.05, numItermax=50000, stopThr=1e-9)
            raw = {"whole": _cos(q.whole[a].numpy(), c.whole[b].numpy()),
                   "facet": _cos(_sel(q, a).mean(0), c.whole[b].numpy()),
                   "minl2": -M.min(), "ot": -(plan * M).sum()}
            ref = sum(w[t] * (raw[t] - cal.get(t, (0.0, 1.0))[0]) / cal.get(t, (0.0, 1.0))[1] for t in w)
            assert s[a, b].item() == pytest.approx(ref, abs=1e-3)  # OT's tol=1e-4 on the plan


def test_vector_cosine_equals_numpy():
    g = torch.Generator().manual_seed(3)
    q = DocBatch(torch.randn(3, 1, D, generator=g, dtype=torch.float64), torch.ones(3, 1, dtype=torch.bool))
    c = DocBatch(torch.randn(4, 1, D, generator=g, dtype=torch.float64), torch.ones(4, 1, dtype=torch.bool))
    s = VectorCosine().score(q, c)
    ref = np.array([[_cos(q.emb[i, 0].numpy(), c.emb[j, 0].numpy()) for j in range(4)] for i in range(3)])
    assert s.dtype == torch.float64
    np.testing.assert_allclose(s.numpy(), ref, atol=1e-12)
    np.testing.assert_allclose(VectorCosine().pairwise_score(q, DocBatch(c.emb[:3], c.mask[:3])).numpy(),
                               ref.diagonal(), atol=1e-12)


@pytest.mark.parametrize("scorer", [MinL2Scorer(), OTScorer(), AttentionScorer(),
                                    HybridScorer(weights=dict(whole=1, facet=1, minl2=1, ot=1))])
def test_empty_batches_give_empty_scores(scorer):
    q, c = _batch([2, 1], 3, 4, torch.float32), _batch([1, 2, 3], 3, 5, torch.float32)
    none = DocBatch(q.emb[:0], q.mask[:0], whole=q.whole[:0])
    assert scorer.score(none, c).shape == (0, 3)
    assert scorer.score(q, DocBatch(c.emb[:0], c.mask[:0], whole=c.whole[:0])).shape == (2, 0)
    assert scorer.pairwise_score(none, none).shape == (0,)


def test_registry_and_options_are_named():
    with pytest.raises(ValueError, match="valid: minl2, ot, attention, maxpassage, hybrid"):
        get_scorer("min-l2")
    for kw, name in ((dict(tau=0), "tau"), (dict(eps=-1.0), "eps"), (dict(tol=0.0), "tol"),
                     (dict(max_iter=2.5), "max_iter"), (dict(grad="x"), "grad")):
        with pytest.raises(ValueError, match=name):
            get_scorer("ot", **kw)
    with pytest.raises(ValueError, match="tau"):
        get_scorer("attention", tau=float("nan"))
    with pytest.raises(ValueError, match=r"\['ots'\]"):
        get_scorer("hybrid", weights={"ots": 1.0})


# ---- fixes ------------------------------------------------------------------------------------------------------
def test_attention_float16_with_one_distance_past_its_range_is_finite():
    """float16 vectors 2 * 30000 * sqrt(3) ~ 1e5 apart (past float16's 65504) beside a near pair: the cost was rounded
    to float16 (inf) before the weighing, and 0 attention * inf made the distance NaN; the true one is ~1.73."""
    q = torch.zeros(1, 2, 3, dtype=torch.float16)
    q[0, 1] = 30000.0
    c = torch.zeros(1, 2, 3, dtype=torch.float16)
    c[0, 0] = -30000.0
    c[0, 1] = 1.0
    m = torch.ones(1, 2, dtype=torch.bool)
    ref = attention_dist(q.float(), m, c.float(), m)
    for got in (attention_dist(q, m, c, m)[0, 0], pairwise_attention_dist(q, m, c, m)[0]):
        assert got.dtype == torch.float16
        assert torch.isfinite(got)
        assert got.float().item() == pytest.approx(ref.item(), rel=1e-3)


def test_hybrid_term_scores_refuses_unknown_terms(pair):
    q, c = pair
    scorer = HybridScorer()
    with pytest.raises(ValueError, match=r"unknown hybrid terms \['min_l2'\]; valid"):
        scorer.term_scores(q, c, ("min_l2",))  # was {}: the term left out without a word
    assert set(scorer.term_scores(q, c, "ot")) == {"ot"}  # one name as a string
    with pytest.raises(ValueError, match="unknown hybrid terms"):
        scorer.term_scores(q, c, "whole,facet")  # was read by substring: both terms


def test_vector_cosine_refuses_integer_vectors():
    a = DocBatch(torch.ones(2, 1, 3, dtype=torch.long), torch.ones(2, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="floating-point"):
        VectorCosine().score(a, a)  # was torch's RuntimeError from the norm
    with pytest.raises(ValueError, match="floating-point"):
        VectorCosine().pairwise_score(a, a)
