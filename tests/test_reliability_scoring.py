"""Scorer memory (issue 29, item 11): all-pairs scoring runs in length-bucketed chunks under a memory
budget, with the scores of the unchunked call."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aspire.batch import DocBatch
from aspire.scoring import get_scorer
from aspire.scoring.chunked import score_chunked, used_lengths
from aspire.scoring.vector import VectorCosine

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


def _batch(lengths: list[int], seed: int, narrow: bool) -> DocBatch:
    g = torch.Generator().manual_seed(seed)
    batch = DocBatch.from_list([torch.randn(n, 8, generator=g) for n in lengths], [f"p{i}" for i in range(len(lengths))])
    if narrow:  # an aspect selection: every other sentence, the first always kept
        keep = batch.mask.clone()
        keep[:, 1::2] = False
        batch = batch.with_mask(keep)
    return batch


class _Recorder:
    """Wraps a scorer and records the sentence-pair cells of every call."""

    def __init__(self, scorer) -> None:
        self.scorer, self.calls = scorer, []

    def score(self, q: DocBatch, c: DocBatch):
        self.calls.append((len(q), q.emb.shape[1], len(c), c.emb.shape[1]))
        return self.scorer.score(q, c)


_LENGTHS = st.lists(st.integers(1, 12), min_size=1, max_size=8)


@settings(max_examples=40, deadline=None)
@given(lq=_LENGTHS, lc=st.lists(st.integers(1, 25), min_size=1, max_size=30), budget=st.integers(1, 200_000),
       narrow=st.booleans(), name=st.sampled_from(["minl2", "attention", "ot", "abstract"]), seed=st.integers(0, 99))
def test_property_chunked_scores_equal_unchunked_and_every_call_fits_the_budget(lq, lc, budget, narrow, name, seed):
    if name == "abstract":  # one vector a paper: VectorCosine refuses more, or an unselected one
        lq, lc, narrow = [1] * len(lq), [1] * len(lc), False
    q, c = _batch(lq, seed, narrow), _batch(lc, seed + 1, narrow)
    scorer = VectorCosine() if name == "abstract" else get_scorer(name)
    recorder = _Recorder(scorer)
    with torch.no_grad():
        full = scorer.score(q, c)
        chunked = score_chunked(recorder, q, c, budget_bytes=budget, cell_bytes=4)
    tol = 2e-4 if name == "ot" else 1e-5  # OT: within the Sinkhorn tolerance (each problem stops on its own check)
    assert chunked.shape == full.shape and torch.allclose(chunked, full, atol=tol, rtol=0)
    cells = max(1, budget // 4)
    for nq, sq, nc, sc in recorder.calls:  # each call holds at most the budget, or is one query against one run
        assert nq * sq * nc * sc <= cells or nc == 1
    assert sum(nq * nc for nq, _, nc, _ in recorder.calls) == len(q) * len(c)  # every pair scored once


def test_padding_is_cut_to_each_chunk_longest_paper():
    q = _batch([2, 3], 0, False)
    c = _batch([1, 1, 1, 40], 1, False)  # one long candidate must not pad the short ones
    recorder = _Recorder(get_scorer("minl2"))
    score_chunked(recorder, q, c, budget_bytes=3 * 3 * 4, cell_bytes=4)
    assert sorted(recorder.calls) == [(1, 2, 1, 40), (1, 2, 3, 1), (1, 3, 1, 40), (1, 3, 3, 1)]
    assert used_lengths(_batch([3, 1], 0, True)).tolist() == [3, 1]  # after the last selected sentence


def test_empty_sides_and_bad_budget():
    q, c = _batch([2], 0, False), _batch([3], 1, False)
    assert score_chunked(get_scorer("minl2"), q, c.index([])).shape == (1, 0)
    with pytest.raises(ValueError, match="budget_bytes"):
        score_chunked(get_scorer("minl2"), q, c, budget_bytes=0)
