"""Round 59: a defect sweep of the reviewer, year and pool benchmarks (`aspire.benchmarks.reviewers`, `year`,
`pools`)."""

from pathlib import Path

import numpy as np
import pytest

from aspire.benchmarks.pools import load_pool_set
from aspire.benchmarks.year import kendall_tau, rmse
from tests.test_reliability_round50_pools import _write

CSFCUBE = Path("/work/shared/data/csfcube")


@pytest.mark.parametrize("metric", [kendall_tau, rmse])
def test_year_metrics_refuse_a_nan_prediction_naming_the_paper(metric):
    years = np.array([2016.0, 2017.0, 2018.0, 2019.0])
    with pytest.raises(ValueError, match=r"prediction of paper 2 \(of 4\) is nan"):  # was NaN: τ as if undefined
        metric(years, np.array([2016.0, 2017.5, np.nan, 2019.0]))
    with pytest.raises(ValueError, match=r"prediction of paper 1 \(of 4\) is None"):  # a null of a results file
        metric(years, [2016.0, None, 2018.0, 2019.0])
    with pytest.raises(ValueError, match=r"year of paper 0 \(of 4\) is inf"):
        metric(np.array([np.inf, 2017.0, 2018.0, 2019.0]), years)


def test_year_metrics_keep_finite_answers_and_the_nan_of_a_constant_side():
    from scipy.stats import kendalltau

    y, p = np.array([2016, 2018, 2017, 2020]), np.array([2015.5, 2019.0, 2016.0, 2021.0])
    assert kendall_tau(y, p) == pytest.approx(kendalltau(y, p).statistic)
    assert rmse(y, p) == pytest.approx(np.sqrt(np.mean((y - p) ** 2)))
    assert np.isnan(kendall_tau(y, np.full(4, 2018.0)))  # undefined, as documented: not refused


def test_a_facet_named_twice_is_refused(tmp_path):
    _write(tmp_path / "test-pid2anns-toy-method.json",
           {"q1": {"cands": ["q1", "a", "b"], "relevance_adju": [3, 1, 0]}})
    assert load_pool_set(tmp_path, "toy", ["method"]).self_in_pool == ["q1_method"]
    with pytest.raises(ValueError, match=r"facets named more than once: \['method'\]"):  # self_in_pool listed q1 twice
        load_pool_set(tmp_path, "toy", ["method", "method"])


@pytest.mark.skipif(not CSFCUBE.is_dir(), reason="real CSFCube data not present at /work/shared/data/csfcube")
def test_real_csfcube_background_named_twice_is_refused():
    assert load_pool_set(CSFCUBE, "csfcube", ["background"]).self_in_pool == ["8781666_background"]
    with pytest.raises(ValueError, match="background"):  # was ['8781666_background', '8781666_background']
        load_pool_set(CSFCUBE, "csfcube", ("background", "background"))
