"""experiments/select_two_fold.py: each fold's test half is scored with the run chosen on its own dev half."""

import importlib.util
from pathlib import Path

import pytest

from aspire.evaluate.csfcube import GROUPS

spec = importlib.util.spec_from_file_location(
    "select_two_fold", Path(__file__).resolve().parents[1] / "experiments" / "select_two_fold.py")
select_two_fold = importlib.util.module_from_spec(spec)
spec.loader.exec_module(select_two_fold)


def run(fold1: float, fold2: float) -> dict:
    """A results.json whose halves score `fold1` and `fold2` (fold1_dev is fold2_test, as in CSFCube)."""
    halves = {"fold1_test": fold1, "fold2_test": fold2, "fold1_dev": fold2, "fold2_dev": fold1}
    return {"folds": {g: {h: {"MAP": v, "NDCG%20": v + 10} for h, v in halves.items()} for g in GROUPS}}


def test_each_fold_is_scored_with_the_run_chosen_on_its_own_dev_half():
    # `a` is best on the first half of the queries, `b` on the second; the mean favours `c`.
    candidates = {"a": run(60, 20), "b": run(20, 60), "c": run(45, 45)}
    result = select_two_fold.select_two_fold(candidates)
    # fold1_dev is the second half: `b` wins there and is scored on fold1_test (the first half).
    assert result["chosen"] == {"fold1": "b", "fold2": "a"}
    assert result["test"]["all"] == {"MAP": 20.0, "NDCG%20": 30.0}


def test_no_candidates_is_an_error():
    with pytest.raises(ValueError, match="no candidate"):
        select_two_fold.select_two_fold({})
