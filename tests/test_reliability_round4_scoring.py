"""Scoring and `DocBatch` under hostile input (reliability round 4): a wrong input is a ValueError naming the
option, paper or row, never scores of other papers, a silently ignored option or a traceback from inside torch."""

from __future__ import annotations

import math

import pytest
import torch

from aspire.batch import DocBatch
from aspire.scoring import get_scorer
from aspire.scoring.chunked import score_chunked
from aspire.scoring.scorers import attention_match, minl2_match, pairwise_minl2_match
from aspire.scoring.vector import VectorCosine

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


def _batch(lengths: list[int], ids: list[str], seed: int = 0, whole: bool = False) -> DocBatch:
    g = torch.Generator().manual_seed(seed)
    return DocBatch.from_list([torch.randn(n, 8, generator=g) for n in lengths], ids,
                              whole=torch.randn(len(lengths), 8, generator=g) if whole else None)


# ---- DocBatch.index: a boolean mask or fractional positions once picked other papers -------------------------------
@pytest.mark.parametrize("rows", [torch.tensor([True, False, True]), [True, False, True], [0.7], torch.tensor([1.0])])
def test_index_refuses_a_bool_mask_or_fractional_positions_instead_of_returning_other_papers(rows):
    batch = _batch([2, 3, 1], ["a", "b", "c"])
    # once: the mask [True, False, True] returned papers b, a, b (True / False read as positions 1 / 0), 0.7 paper a
    with pytest.raises(ValueError, match="integer positions"):
        batch.index(rows)


def test_index_keeps_integer_positions_of_every_kind():
    batch = _batch([2, 3, 1], ["a", "b", "c"])
    assert batch.index([2, 0]).paper_ids == ["c", "a"]
    assert batch.index(torch.tensor([1], dtype=torch.int32)).paper_ids == ["b"]
    assert batch.index([-1]).paper_ids == ["c"]
    assert batch.index(range(2)).paper_ids == ["a", "b"]
    assert len(batch.index([])) == 0
    assert torch.equal(batch.index(torch.tensor([1])).emb, batch.emb[1:2])


# ---- select_sentences: positions of the wrong type are named with the paper --------------------------------------
@pytest.mark.parametrize("chosen, said", [
    ([True], "positions must be integers, got True"),  # once an IndexError (a bool read as a mask)
    ([0.5], "positions must be integers, got 0.5"),  # once a TypeError naming no paper
    ("01", "must be a sequence of positions"),  # once a TypeError comparing int and str
    (None, "must be a sequence of positions"),
    (1, "must be a sequence of positions"),
])
def test_select_sentences_positions_of_the_wrong_type_name_the_paper(chosen, said):
    batch = _batch([2, 3], ["a", "b"])
    with pytest.raises(ValueError, match=f"paper b: .*{said}"):
        batch.select_sentences([[0], chosen])
    assert batch.select_sentences([[1], torch.tensor([2, 0])]).mask.tolist() == [[False, True, False],
                                                                                 [True, False, True]]


def test_from_list_names_the_paper_whose_vectors_have_another_width():
    with pytest.raises(ValueError, match=r"paper b has vectors of shape \(1, 5\)"):  # once pad_sequence's RuntimeError
        DocBatch.from_list([torch.randn(2, 4), torch.randn(1, 5)], ["a", "b"])


# ---- aligned pairs of two batch sizes were broadcast into scores of other pairs ---------------------------------
@pytest.mark.parametrize("name", ["minl2", "ot", "attention", "hybrid"])
def test_pairwise_dist_of_two_batch_sizes_is_refused_not_broadcast(name):
    q, c = _batch([2], ["q"], 0, whole=True), _batch([1, 2, 3], ["a", "b", "c"], 1, whole=True)
    # once: hybrid returned 3 "aligned" scores of one query; minl2 / attention a RuntimeError from expand
    with pytest.raises(ValueError, match="equal batch sizes"):
        get_scorer(name).pairwise_dist(q, c)
    with pytest.raises(ValueError, match="equal batch sizes"):
        get_scorer(name).pairwise_dist_details(q, c)


def test_vector_cosine_refuses_two_batch_sizes_widths_or_dtypes():
    q, c = _batch([1], ["q"]), _batch([1, 1, 1], ["a", "b", "c"], 1)
    with pytest.raises(ValueError, match="equal batch sizes"):  # once three cosines of one query, shape (3,)
        VectorCosine().pairwise_score(q, c)
    with pytest.raises(ValueError, match="8-d torch.float32 and candidate vectors 4-d"):  # once a matmul error
        VectorCosine().score(c, DocBatch.from_list([torch.randn(1, 4)]))
    with pytest.raises(ValueError, match="float64"):
        VectorCosine().score(c, c.to(dtype=torch.float64))
    assert torch.allclose(VectorCosine().score(q, c)[0], VectorCosine().pairwise_score(q.index([0, 0, 0]), c))


def test_a_mask_not_shaped_like_its_vectors_is_refused_not_broadcast():
    q, c = _batch([2], ["q"]), _batch([1, 3], ["a", "b"], 1)
    for fn in (minl2_match, attention_match):  # once: a (1, 1) mask was read as both sentences' mask
        with pytest.raises(ValueError, match=r"query mask shape \(1, 1\) does not match .* \(1, 2\)"):
            fn(q.emb, q.mask[:, :1], c.emb, c.mask)
    with pytest.raises(ValueError, match="candidate mask shape"):
        pairwise_minl2_match(c.emb, c.mask, c.emb, c.mask[:1])


# ---- score_chunked ----------------------------------------------------------------------------------------------
def test_score_chunked_names_the_candidate_with_no_sentence_not_another_paper():
    c = _batch([5, 1, 3, 2], ["long", "one", "three", "two"], 1)
    mask = c.mask.clone()
    mask[2] = False  # paper "three" (row 2) has no selected sentence
    q = _batch([2], ["q"])
    for budget in (1, 1 << 20):  # once: "candidate rows [1]" / "[0]": its row in a sorted chunk, other papers
        with pytest.raises(ValueError, match=r"candidate papers \['three'\] have no sentence selected"):
            score_chunked(get_scorer("minl2"), q, c.with_mask(mask), budget_bytes=budget)
    unnamed = DocBatch(c.emb, mask)  # no paper ids: the row in the caller's batch
    with pytest.raises(ValueError, match=r"candidate papers \['row 2'\]"):
        score_chunked(get_scorer("minl2"), q, unnamed, budget_bytes=1)


@pytest.mark.parametrize("options, said", [
    ({"budget_bytes": None}, "budget_bytes must be a number > 0, got None"),  # once a TypeError comparing None
    ({"budget_bytes": "1000"}, "budget_bytes must be a number > 0, got '1000'"),
    ({"budget_bytes": math.nan}, "budget_bytes must be a number > 0, got nan"),
    ({"cell_bytes": 0}, "cell_bytes must be a number > 0, got 0"),  # once silently the default 64
    ({"cell_bytes": -4}, "cell_bytes must be a number > 0, got -4"),  # once silently one cell a chunk
])
def test_score_chunked_refuses_budgets_and_cell_sizes_that_are_not_positive_numbers(options, said):
    q, c = _batch([2], ["q"]), _batch([1, 3], ["a", "b"], 1)
    with pytest.raises(ValueError, match=said):
        score_chunked(get_scorer("minl2"), q, c, **options)


# ---- scorer options ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options, said", [
    ({"tol": "1e-4"}, "tol must be a number > 0, got '1e-4'"),  # once a TypeError at the first score
    ({"tol": 0}, "tol must be > 0, got 0"),
    ({"max_iter": "10"}, "max_iter must be an integer >= 1, got '10'"),
    ({"max_iter": 10.5}, "max_iter must be an integer >= 1, got 10.5"),  # once accepted
    ({"max_iter": 0}, "max_iter must be an integer >= 1, got 0"),
    ({"check_every": None}, "check_every must be an integer >= 1, got None"),
    ({"grad": None}, "unknown grad mode None"),
])
def test_ot_scorer_refuses_bad_solver_options_when_made_naming_them(options, said):
    with pytest.raises(ValueError, match=said):
        get_scorer("ot", **options)


@pytest.mark.parametrize("options, said", [
    ({"weights": {"whole": math.nan}}, "weight of 'whole' must be a finite number, got nan"),  # once NaN scores
    ({"weights": {"whole": "a"}}, "weight of 'whole' must be a finite number"),
    ({"weights": "whole"}, "hybrid weights must be a mapping"),  # once 'dictionary update sequence element'
    ({"calibration": {"whole": (0.0,)}}, r"calibration of 'whole' must be a pair"),  # once 'not enough values'
    ({"calibration": {"whole": (math.nan, 1.0)}}, r"calibration of 'whole' must be a pair of finite"),  # NaN scores
    ({"calibration": {"whole": (0.0, math.inf)}}, r"calibration of 'whole' must be a pair of finite"),  # term zeroed
])
def test_hybrid_refuses_weights_and_calibrations_that_are_not_finite_numbers(options, said):
    with pytest.raises(ValueError, match=said):
        get_scorer("hybrid", **options)


def test_valid_options_still_score_and_agree():
    q, c = _batch([2, 3], ["q1", "q2"], 0, whole=True), _batch([1, 4], ["a", "b"], 1, whole=True)
    ot = get_scorer("ot", tol=1e-4, max_iter=200, check_every=5, grad="autograd")
    assert torch.allclose(ot.score(q, c).diagonal(), ot.pairwise_score(q, c), atol=2e-4)
    hybrid = get_scorer("hybrid", weights={"whole": 1, "facet": 0.5}, calibration={"whole": [0.1, 2.0]})
    assert torch.allclose(hybrid.score(q, c).diagonal(), hybrid.pairwise_score(q, c))
    assert torch.allclose(score_chunked(ot, q, c, budget_bytes=1e9, cell_bytes=4.5), ot.score(q, c), atol=2e-4)


def test_maxpassage_pairwise_of_two_batch_sizes_is_refused_not_broadcast():
    """`maxpassage` scores through its own pairwise path: one query against three candidates came back as three
    'aligned' scores."""
    q, c = _batch([3], ["q"], seed=1), _batch([2, 4, 3], ["a", "b", "c"], seed=2)
    with pytest.raises(ValueError, match="pairwise scoring needs equal batch sizes, got 1 and 3"):
        get_scorer("maxpassage").pairwise_dist(q, c)
    assert get_scorer("maxpassage").pairwise_dist(c, c).shape == (3,)
