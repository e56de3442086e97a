"""A probe's paired interval (venue, year: `paired_papers_test`) is drawn as the other benchmarks' are
(`aspire.benchmarks.stats.paired_test`): its bootstrap resamples are fixed by the seed alone, not by how many
permutations the test drew before them, so `venue --compare` (2,000 permutations) and `evaluate compare` (10,000)
give one pair of results one interval."""

from __future__ import annotations

import numpy as np
import pytest

from aspire.benchmarks.acl_formats import bootstrap_papers, paired_papers_test
from aspire.benchmarks.venue import macro_f1
from aspire.benchmarks.year import rmse


def _pair(seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, 60)
    a = np.where(rng.random(60) < 0.7, y, (y + 1) % 4)
    b = np.where(rng.random(60) < 0.5, y, (y + 2) % 4)
    return y, a, b


@pytest.mark.parametrize("metric", [macro_f1, rmse])
def test_the_interval_does_not_hang_on_the_number_of_permutations(metric):
    y, a, b = _pair()
    tests = [paired_papers_test(metric, y, a, b, n_perm=n, n_boot=300, seed=5) for n in (10, 200, 2000)]
    assert tests[0]["ci95"] == tests[1]["ci95"] == tests[2]["ci95"]


def test_the_interval_takes_the_draws_of_bootstrap_papers_with_its_seed():
    """The resamples are those `bootstrap_papers(seed)` draws for each run alone, paired: a loop over them."""
    y, a, b = _pair(1)
    out = paired_papers_test(macro_f1, y, a, b, n_perm=50, n_boot=200, seed=3)
    rng = np.random.default_rng(3)
    draws = [rng.integers(0, 60, 60) for _ in range(200)]
    deltas = [macro_f1(y[i], a[i]) - macro_f1(y[i], b[i]) for i in draws]
    assert out["ci95"] == pytest.approx([np.quantile(deltas, 0.025), np.quantile(deltas, 0.975)], abs=1e-12)
    lo, hi = bootstrap_papers(macro_f1, y, a, n_boot=200, seed=3)
    stats = [macro_f1(y[i], a[i]) for i in draws]
    assert (lo, hi) == pytest.approx((np.quantile(stats, 0.025), np.quantile(stats, 0.975)), abs=1e-12)
