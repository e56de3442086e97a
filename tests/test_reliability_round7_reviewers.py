"""Reviewer matching (round 7): submissions without text, non-finite predictions, the loss against a plain
re-implementation of the reference definition, and `topk:K` over an archive shorter than K."""

from __future__ import annotations

import json
import math
import random
from itertools import combinations

import pytest
from test_benchmarks import make_reviewer_set

from aspire.benchmarks.reviewers import (
    load_reviewer_set,
    prediction_files,
    read_predictions,
    reviewer_loss,
    reviewer_units,
)


def _blank(root, paper="s2"):
    """`paper` keeps its id but loses its title and abstract in every draw of `root`."""
    for path in root.glob("d_20_*/submissions.json"):
        subs = json.loads(path.read_text())
        subs[paper]["content"] = {"title": "", "abstract": ""}
        path.write_text(json.dumps(subs))
    return root


def test_a_submission_without_text_has_its_pairs_skipped_and_counted(tmp_path):
    """reviewer_run's docstring: such a submission gets no prediction and its pairs are skipped, counted; the
    run used to stop at scoring with 'no prediction for rated submission s2'."""
    from aspire.evaluate.options import Stages
    from aspire.evaluate.reviewer_run import run_reviewers

    rset = load_reviewer_set(_blank(make_reviewer_set(tmp_path / "rm", draws=2)))
    out = tmp_path / "out"
    res = run_reviewers(rset, None, [], out, "bm25", "max", stages=Stages(bm25=True))
    assert res["texts"]["no_text_ids"] == ["s2"]
    # r3's two pairs with s9 (not a submission), r1's two with s2, r3's (s2, s3): five a draw
    assert res["skipped_pairs"] == 10 and res["n_reviewers"] == 2
    written = [read_predictions(p) for p in prediction_files(out / "predictions", "bm25", rset)]
    assert all("s2" not in scores for pred in written for scores in pred.values())
    units, counts = reviewer_units(rset, written)  # the written files re-score to the reported figure
    assert units.value() == pytest.approx(res["loss"]) and counts["skipped_pairs"] == 10


def test_the_loss_without_a_blank_submission_by_hand(tmp_path):
    rset = load_reviewer_set(_blank(make_reviewer_set(tmp_path / "rm")))
    # r1: (s1, s3) right (0 of 4); r2: a tie, 1.25 of 2.5; r3: nothing left
    preds = [{"r1": {"s1": 0.9, "s3": 0.1}, "r2": {"s1": 0.3, "s4": 0.3}, "r3": {"s3": 0.5}}]
    units, counts = reviewer_units(rset, preds)
    assert units.value() == pytest.approx(1.25 / 6.5) and counts["skipped_pairs"] == 5
    # a prediction that does score the blank submission is counted as given
    preds[0]["r1"]["s2"] = 0.95  # (s1, s2) wrong: costs 2 of 2; (s2, s3) right: 0 of 2
    assert reviewer_units(rset, preds)[0].value() == pytest.approx((2 + 1.25) / (8 + 2.5))
    # a submission with text and no prediction is still refused
    with pytest.raises(ValueError, match="reviewer r2: no prediction for rated submission s4"):
        reviewer_units(rset, [{"r2": {"s1": 0.3}}])


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_prediction_is_refused_naming_reviewer_and_paper(tmp_path, bad):
    """NaN compares neither way, so every pair it is in used to count as ordered right (loss 0)."""
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm"))
    subs = rset.draws[0].submissions
    with pytest.raises(ValueError, match=f"reviewer r1: the prediction for rated submission s1 is {bad}"):
        reviewer_loss(rset.ratings["r1"], {"s1": bad, "s2": 0.6, "s3": 0.1}, subs, "r1")


def _reference_loss(ratings, pred, subs):
    """The published definition, written out: pairs of rated submissions, |e1 - e2| when ordered against the
    ratings, half on a predicted tie; the sum over reviewers over the sum of |e1 - e2|."""
    loss = top = 0.0
    for reviewer, scores in pred.items():
        for (p1, e1), (p2, e2) in combinations(ratings[reviewer], 2):
            if p1 in subs and p2 in subs:
                d, t = scores[p1] - scores[p2], e1 - e2
                top += abs(t)
                loss += abs(t) if d * t < 0 else abs(t) / 2 if d * t == 0 else 0.0
    return loss / top


def test_the_loss_equals_the_reference_definition_with_ties_on_both_sides(tmp_path):
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm", draws=3))  # r3 rates s2, s3 equally
    rng = random.Random(7)
    preds = [{r: {p: float(rng.choice([0.1, 0.2, 0.3])) for p, _ in rated if p in draw.submissions}  # ties
              for r, rated in rset.ratings.items()} for draw in rset.draws]
    units, _ = reviewer_units(rset, preds)
    expected = [_reference_loss(rset.ratings, pred, draw.submissions) for pred, draw in zip(preds, rset.draws)]
    assert units.per_group() == pytest.approx(expected)
    assert units.value() == pytest.approx(sum(expected) / len(expected))


def test_topk_over_an_archive_shorter_than_k_is_the_mean_of_all():
    import torch

    from aspire.evaluate.reviewer_run import aggregate

    sims = torch.tensor([[0.1, 0.9, 0.5], [0.3, 0.2, 0.1]])
    assert aggregate(sims, "topk:5").tolist() == pytest.approx([0.5, 0.2])
