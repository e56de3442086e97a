"""The scorers around the Sinkhorn kernel checked against their definitions (correctness sweep, round 11): brute-force
min-L2, attention and max-passage, the hybrid's terms, the OT weights, one paper scored alone or in a batch, and
the compiled CPU distance pass against the torch one where a sentence's vector is NaN."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from aspire.batch import DocBatch
from aspire.scoring import get_scorer
from aspire.scoring.distance import as_store, gathered_l2_minima, gathered_l2_weights
from aspire.scoring.passage import maxpassage_match, pairwise_maxpassage_match
from aspire.scoring.scorers import HybridScorer, OTScorer, attention_match, ot_match, pairwise_ot_match

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")

D = 6


def _holes(B: int, W: int, g: torch.Generator) -> torch.Tensor:
    """(B, W) masks with holes (an aspect-conditional selection), at least one sentence a row."""
    mask = torch.rand(B, W, generator=g) < 0.6
    mask[torch.arange(B), torch.randint(0, W, (B,), generator=g)] = True
    return mask


def _batch(B: int, W: int, seed: int, dtype=torch.float64) -> DocBatch:
    g = torch.Generator().manual_seed(seed)
    return DocBatch(torch.randn(B, W, D, generator=g, dtype=dtype), _holes(B, W, g), [f"p{seed}-{i}" for i in range(B)],
                    None, torch.randn(B, D, generator=g, dtype=dtype))


def _selected(batch: DocBatch, i: int) -> torch.Tensor:
    return batch.emb[i][batch.mask[i]]


# ---- the compiled distance pass read a NaN sentence as padding: pairwise OT dropped it and scored the rest ----------
def _nan_sentence() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(2, 3, D, generator=g, dtype=torch.float64), torch.randn(2, 5, D, generator=g, dtype=torch.float64)
    q[0, 1, 2] = float("nan")  # a real (selected) sentence of query 0
    return q, torch.ones(2, 3, dtype=torch.bool), c, torch.ones(2, 5, dtype=torch.bool)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_minima_keep_a_nan_distance_as_the_torch_path_does(dtype):
    q, qm, c, cm = (t.to(dtype) if t.is_floating_point() else t for t in _nan_sentence())
    stores = (*as_store(q, qm), *as_store(c, cm))
    cost, row_min, col_min = gathered_l2_minima(*stores)  # compiled (CPU, no tape)
    torch_rows = [t.clone().requires_grad_() if t.is_floating_point() else t for t in stores]
    ref = [t.detach() for t in gathered_l2_minima(*torch_rows)]  # the torch path (taped)
    for got, want in zip((cost, row_min, col_min), ref):
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.allclose(got.nan_to_num(0.0), want.nan_to_num(0.0), atol=1e-5)
    # once: row 1's minimum +inf (read as padding) and the columns' minima those of the other two sentences
    assert bool(row_min[0, 1].isnan()) and bool(col_min[0].isnan().all())
    _, x, y = gathered_l2_weights(*stores, 1.0)
    assert bool(x[0].isnan().all()) and bool(y[0].isnan().all()) and bool(x[1].isfinite().all())


def test_pairwise_ot_refuses_a_nan_sentence_instead_of_scoring_without_it():
    q, qm, c, cm = _nan_sentence()
    # the taped (torch) path and all-pairs scoring refused it; the compiled pairwise path gave the score of query 0
    # without its sentence 1, a finite number as if it were padding
    for fn, args in ((pairwise_ot_match, (q, qm, c, cm)), (ot_match, (q, qm, c, cm)),
                     (pairwise_ot_match, (q.clone().requires_grad_(), qm, c, cm))):
        with pytest.raises(ValueError, match="OT needs finite costs between selected sentences"):  # round 53: names the
            fn(*args)  # cost (and sentence pair), where Sinkhorn's "weights must be finite" named the weights


# ---- max-passage: a mask of another shape was broadcast into other sentences' scores -------------------------------
def test_maxpassage_refuses_masks_of_another_shape_and_unaligned_batch_sizes():
    g = torch.Generator().manual_seed(1)
    q, c = torch.randn(2, 4, D, generator=g), torch.randn(3, 5, D, generator=g)
    full_q, full_c = torch.ones(2, 4, dtype=torch.bool), torch.ones(3, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match="query mask shape"):  # once: every query sentence, padding included
        maxpassage_match(q, torch.ones(2, 1, dtype=torch.bool), c, full_c)
    with pytest.raises(ValueError, match="candidate mask shape"):  # once: every candidate read as its sentence 0
        maxpassage_match(q, full_q, c, torch.ones(3, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="equal batch sizes"):  # once: one query broadcast into 3 "aligned" scores
        pairwise_maxpassage_match(q[:1], full_q[:1], c, full_c)


# ---- definitions, by brute force -------------------------------------------------------------------------------------
@pytest.mark.parametrize("window", [1, 2, 5, 9, 30])
def test_maxpassage_is_the_best_window_of_selected_sentences(window):
    q, c = _batch(3, 7, 1), _batch(4, 9, 2)
    got = maxpassage_match(q.emb, q.mask, c.emb, c.mask, window).dist
    for i in range(3):
        qv = _selected(q, i).mean(0)
        for j in range(4):
            sel = _selected(c, j)
            starts = range(max(len(sel) - window + 1, 1))
            best = max(float(F.cosine_similarity(qv, sel[s:s + window].mean(0), 0)) for s in starts)
            assert got[i, j].item() == pytest.approx(1 - best, abs=1e-12)


def test_minl2_attention_and_ot_weights_match_their_definitions():
    q, c = _batch(3, 6, 3), _batch(4, 8, 4)
    minl2 = -get_scorer("minl2").score(q, c)
    att = attention_match(q.emb, q.mask, c.emb, c.mask, tau=0.4).dist
    ot = {tau: ot_match(q.emb, q.mask, c.emb, c.mask, tau=tau) for tau in (0.3, float("inf"))}
    for i in range(3):
        for j in range(4):
            C = torch.cdist(_selected(q, i), _selected(c, j))
            assert minl2[i, j].item() == pytest.approx(C.min().item(), abs=1e-12)
            A = torch.softmax((-C / 0.4).flatten(), 0).reshape(C.shape)
            assert att[i, j].item() == pytest.approx((A * C).sum().item(), abs=1e-12)
            for tau, m in ot.items():  # closest sentences weigh most; tau = inf: uniform
                x, y = torch.softmax(-C.amin(1) / tau, 0), torch.softmax(-C.amin(0) / tau, 0)
                assert torch.allclose(m.query_weights[i, j][q.mask[i]], x, atol=1e-12)
                assert torch.allclose(m.cand_weights[i, j][c.mask[j]], y, atol=1e-12)
                assert float(m.query_weights[i, j][~q.mask[i]].abs().sum()) == 0.0


def test_hybrid_terms_and_score_match_their_definitions():
    q, c = _batch(2, 4, 5), _batch(3, 5, 6)
    weights = {"whole": 0.7, "facet": 1.3, "minl2": 0.2, "ot": 0.4}
    cal = {"whole": (0.1, 2.0), "facet": (-0.2, 0.5), "minl2": (-3.0, 1.5), "ot": (-4.0, 0.7)}
    hybrid = HybridScorer(weights=weights, calibration=cal, tau=0.5, eps=0.1)
    match, score = hybrid.dist_details(q, c), hybrid.score(q, c)
    ot = OTScorer(tau=0.5, eps=0.1)
    for i in range(2):
        a = _selected(q, i)
        for j in range(3):
            b = _selected(c, j)
            one = lambda v: DocBatch(v[None], torch.ones(1, len(v), dtype=torch.bool))  # noqa: E731
            terms = {"whole": F.cosine_similarity(q.whole[i], c.whole[j], 0),
                     "facet": F.cosine_similarity(a.mean(0), c.whole[j], 0),
                     "minl2": -torch.cdist(a, b).min(), "ot": ot.score(one(a), one(b))[0, 0]}
            for t, v in terms.items():
                assert match.terms[t][i, j].item() == pytest.approx(v.item(), abs=1e-9)
            want = sum(w * (terms[t] - cal[t][0]) / cal[t][1] for t, w in weights.items())
            assert score[i, j].item() == pytest.approx(want.item(), abs=1e-9)
    assert torch.allclose(-match.dist, sum(match.shares.values()))


@pytest.mark.parametrize("name", ["minl2", "ot", "attention", "maxpassage", "hybrid"])
def test_a_paper_scores_the_same_alone_aligned_and_in_a_wider_batch(name):
    kw = {"hybrid": {"weights": {"whole": 1.0, "facet": 1.0, "minl2": 0.5, "ot": 0.5}}, "maxpassage": {"window": 2}}
    scorer = get_scorer(name, **kw.get(name, {}))
    q, c = _batch(3, 5, 7), _batch(4, 8, 8)
    full = scorer.score(q, c)  # (3, 4)
    rows, cols = torch.arange(3).repeat_interleave(4), torch.arange(4).repeat(3)
    aligned = scorer.pairwise_score(q.index(rows), c.index(cols)).reshape(3, 4)
    alone = torch.tensor([[float(scorer.score(q.index([i]), c.index([j]))[0, 0]) for j in range(4)] for i in range(3)],
                         dtype=torch.float64)
    extra = torch.randn(3, 4, D, dtype=torch.float64)
    wide = DocBatch(torch.cat([q.emb, extra], 1), torch.cat([q.mask, torch.zeros(3, 4, dtype=torch.bool)], 1),
                    q.paper_ids, None, q.whole)
    for other in (aligned, alone, scorer.score(wide, c)):
        assert torch.allclose(other, full, atol=1e-9, rtol=0)
