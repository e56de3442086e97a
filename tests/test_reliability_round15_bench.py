"""Round 15: benchmark readers, held-out matching, statistics and run files, checked against references
(sklearn's macro-F1, the refusals of the other bootstrap functions)."""

from __future__ import annotations

import numpy as np
import pytest

from aspire.benchmarks.acl_formats import bootstrap_papers, paired_papers_test
from aspire.benchmarks.stats import UnitScores
from aspire.benchmarks.venue import macro_f1


@pytest.mark.parametrize("kind", ["list", "mixed"])
def test_macro_f1_of_lists_is_sklearns(kind):
    """A list compared with a class is one False, so every class scored F1 0: macro_f1(["a", "b"], ["a", "b"]) was
    0.0 where sklearn gives 1.0."""
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 12))
        y, pred = list(rng.choice(list("abcd"), n)), list(rng.choice(list("abce"), n))
        got = macro_f1(y, pred) if kind == "list" else macro_f1(np.array(y), pred)
        assert got == pytest.approx(f1_score(y, pred, average="macro", zero_division=0), abs=1e-12)
    assert macro_f1(["a", "b", "a"], ["a", "b", "a"]) == 1.0


@pytest.mark.parametrize("n_boot", [0, -3])
def test_bootstrap_papers_refuses_no_sample_as_the_other_intervals_do(n_boot):
    """n_boot 0 gave (nan, nan) unsaid, where UnitScores.bootstrap and paired_papers_test refuse it."""
    y = np.array(["a", "b", "a", "b"])
    with pytest.raises(ValueError, match="n_boot"):
        UnitScores.means({"q1": 1.0, "q2": 0.0}).bootstrap(n_boot)
    with pytest.raises(ValueError, match="n_boot"):
        paired_papers_test(macro_f1, y, y, y, n_boot=n_boot)
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_papers(macro_f1, y, y, n_boot=n_boot)
    assert bootstrap_papers(macro_f1, y, y, n_boot=5) == (1.0, 1.0)


def test_paper_bootstrap_and_paired_test_take_lists_as_arrays():
    """Lists crashed in the resampling (`y[i]` with an index array: TypeError); the interval is the brute-force
    percentile bootstrap of the same draws, and the paired test of lists is that of arrays."""
    from aspire.benchmarks.year import rmse

    y, pa, pb = [2000, 2003, 2001, 2010, 2007], [2001, 2002, 2001, 2008, 2007], [2004, 2001, 2000, 2011, 2002]
    rng = np.random.default_rng(3)
    ref = []
    for _ in range(50):  # the draws bootstrap_papers makes with seed 3, scored by hand
        i = rng.integers(0, 5, 5)
        ref.append(np.sqrt(np.mean([(y[j] - pa[j]) ** 2 for j in i])))
    got = bootstrap_papers(rmse, y, pa, n_boot=50, seed=3)
    assert got == pytest.approx((np.quantile(ref, 0.025), np.quantile(ref, 0.975)), abs=1e-12)
    arrays = paired_papers_test(rmse, np.array(y), np.array(pa), np.array(pb), n_perm=50, n_boot=50)
    assert paired_papers_test(rmse, y, pa, pb, n_perm=50, n_boot=50) == arrays
