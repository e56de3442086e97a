"""Round 61: three value checks around the probe formats.

1. `check_probe_results` (`aspire evaluate venue|year|same-author --compare OLD`, before the run) checks OLD's values as
   `compare_probe_results` does (`_check_values`): a null in OLD was refused only after the whole run.
2. A year or prediction is a real number: `finite_number` (and so the year metrics and `_check_values`) read `true`
   as the year 1 and the string "2000" as 2000.0, as float() does.
3. `aspire.benchmarks.stats` had its own `_finite`, which raised OverflowError on 10**400 and took [1] as finite; the
   year metrics, the probes' check and `UnitScores.means` now share one `finite_number`.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from aspire.benchmarks import stats, year
from aspire.benchmarks.stats import UnitScores
from aspire.cli import evaluate as evaluate_cli
from aspire.evaluate.probes import check_probe_results, compare_probe_results
from tests.test_reliability_round24_compare import PRED_A, Y, _same_author_folder, _venue_folder
from tests.test_reliability_round60_probecmp import YEARS, _year_folder

GOOD = [2000.0, 2004.0, 2004.0, 2008.0, 2010.0, 2010.0]


# ---- 1. --compare OLD: its values checked before the run ----------------------------------------------------------

def test_check_probe_results_refuses_a_null_year_prediction_before_the_run(tmp_path):
    old = _year_folder(tmp_path / "old", {"abstract": GOOD, "sentences": GOOD[:3] + [float("nan")] + GOOD[4:]})
    with pytest.raises(ValueError, match=re.escape(f"--compare {old} (sentences): the 'pred' of test paper p3 is None, "
                                                   "not a finite number (a nan the run wrote as null, under "
                                                   "non_finite)")):
        check_probe_results(old, "year")
    check_probe_results(_year_folder(tmp_path / "good", {"abstract": GOOD}), "year")  # a sound one still passes


def test_check_probe_results_refuses_a_null_venue_class_or_same_author_score(tmp_path):
    old = _venue_folder(tmp_path / "venue", Y, {"abstract": PRED_A[:2] + [None] + PRED_A[3:]})
    with pytest.raises(ValueError, match=re.escape(f"--compare {old} (abstract): the 'pred' of test paper p2 is None, "
                                                   "not a class")):
        check_probe_results(old, "venue")
    old = _same_author_folder(tmp_path / "sa", {"q1": {"MAP": 0.5, "nDCG@10": 0.6}, "q2": {"MAP": 1.0}})
    with pytest.raises(ValueError, match=re.escape(f"--compare {old} (abstract): the nDCG@10 of same-author query q2 "
                                                   "is missing, not a finite number")):
        check_probe_results(old, "same-author")


def test_the_cli_refuses_a_null_in_compare_before_the_model_loads(tmp_path, capsys):
    old = _year_folder(tmp_path / "old", {"abstract": [None] + GOOD[1:]})
    assert evaluate_cli.main(["year", "--model", "no-such-model-but-checked-later", "--compare", str(old), "--out",
                              str(tmp_path / "out")]) == 2
    assert f"--compare {old} (abstract): the 'pred' of test paper p0 is None" in capsys.readouterr().err


@pytest.mark.parametrize("reps", [{}, {"cls": {"test": {"macro-F1": 0.5}}}, {"abstract": None}])
def test_check_probe_results_checks_values_only_where_a_representation_holds_them(tmp_path, reps):
    (tmp_path / "results.json").write_text(json.dumps({"format": "venue", "representations": reps}))
    assert check_probe_results(tmp_path, "venue") is None


# ---- 2. a year or prediction is a real number ---------------------------------------------------------------------

@pytest.mark.parametrize("value", [True, False, np.True_, "2000", "nan", [1], None, float("nan"), float("inf"),
                                   pytest.param(10**400, id="10**400"), np.array(2000.0), 1 + 0j])
def test_finite_number_refuses_what_is_not_a_finite_real_number(value):
    assert year.finite_number(value) is False


@pytest.mark.parametrize("value", [2000, 2000.5, -3, np.float32(2000), np.int64(2000), np.float64(1e300), 10**300])
def test_finite_number_takes_ints_and_floats_numpys_included(value):
    assert year.finite_number(value) is True


@pytest.mark.parametrize("metric", [year.rmse, year.kendall_tau])
@pytest.mark.parametrize("bad", [True, "2001"])
def test_the_year_metrics_refuse_a_bool_or_string_naming_the_paper(metric, bad):
    # rmse([2000, "2001", 2002], ...) was 0.0 and `true` the year 1: np.asarray(..., float) read both
    with pytest.raises(ValueError, match=re.escape(f"the year of paper 1 (of 3) is {bad!r}")):
        metric([2000.0, bad, 2002.0], np.array([2000.0, 2001.0, 2002.0]))
    with pytest.raises(ValueError, match=re.escape("the prediction of paper 1 (of 3) is")):
        metric(np.array([2000.0, 2001.0, 2002.0]), np.array([2000.0, bad, 2002.0], dtype=object))
    with pytest.raises(ValueError, match=re.escape("the prediction of paper 0 (of 2) is")):
        metric(np.array([2000.0, 2001.0]), np.array([bad, bad]))  # a bool or string array
    assert np.isfinite(metric(np.array([2000, 2001, 2003]), np.array([2000.5, 2001.0, 2004.0], dtype=np.float32)))


def test_compare_probe_results_refuses_a_string_or_bool_year(tmp_path):
    a = _year_folder(tmp_path / "a", {"abstract": GOOD})
    b = _year_folder(tmp_path / "b", {"abstract": GOOD[:4] + ["2010"] + GOOD[5:]})
    with pytest.raises(ValueError, match=re.escape(f"{b} (abstract): the 'pred' of test paper p4 is '2010', not a "
                                                   "finite number")):
        compare_probe_results(a, b, n_perm=5)
    doc = json.loads((a / "results.json").read_text())
    doc["representations"]["abstract"]["y"] = [True] + YEARS[1:]
    (a / "results.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=re.escape(f"--compare {a} (abstract): the 'y' of test paper p0 is True")):
        check_probe_results(a, "year")


# ---- 3. stats: one finite_number ----------------------------------------------------------------------------------

def test_stats_and_year_share_one_finite_number():
    assert year.finite_number is stats.finite_number
    assert not hasattr(stats, "_finite")


@pytest.mark.parametrize("bad", [pytest.param(10**400, id="10**400"), [1], True, "0.5"])
def test_unit_scores_name_a_unit_whose_value_is_not_a_finite_real_number(bad):
    # 10**400 was an OverflowError and [1] numpy's "setting an array element with a sequence", naming no unit;
    # True and "0.5" were taken as 1.0 and 0.5
    with pytest.raises(ValueError, match=r"units \['q2'\] have no finite value"):
        UnitScores.means({"q1": 1.0, "q2": bad, "q3": 0.5})
    assert UnitScores.means({"q1": np.float32(0.25), "q2": 1, "q3": np.float64(0.5)}).value() == pytest.approx(7 / 12)
