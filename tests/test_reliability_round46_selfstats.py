"""Round 46: paired tests, bootstrap intervals and self-training pseudo labels against independent references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as sps

from aspire.benchmarks.stats import UnitScores, paired_test
from aspire.train.self_training import pseudo_labels

A = {"q1": 0.9, "q2": 0.4, "q3": 0.7, "q4": 0.2, "q5": 0.6}
B = {"q1": 0.5, "q2": 0.5, "q3": 0.1, "q4": 0.1, "q5": 0.6}
FOLDS = {"f1": ["q1", "q2"], "f2": ["q3", "q4", "q5"]}


def test_paired_p_value_matches_the_exact_sign_flip_test_and_scipy():
    d = np.array([A[k] - B[k] for k in sorted(A)])
    exact = np.mean([abs((d * np.array(s)).mean()) >= abs(d.mean()) - 1e-12
                     for s in itertools.product([1, -1], repeat=len(d))])
    ref = sps.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf).pvalue
    assert exact == pytest.approx(ref)
    got = paired_test(UnitScores.means(A), UnitScores.means(B), n_perm=20000, seed=3)
    assert got["p_value"] == pytest.approx(exact, abs=0.015)
    assert got["delta"] == pytest.approx(d.mean())
    same = paired_test(UnitScores.means(A), UnitScores.means(A), n_perm=50)
    assert same["p_value"] == 1.0 and same["delta"] == 0.0


def test_folded_bootstrap_matches_a_numpy_loop_with_the_same_seed():
    u = UnitScores.means(A, FOLDS)
    assert u.value() == pytest.approx(np.mean([np.mean([0.9, 0.4]), np.mean([0.7, 0.2, 0.6])]))
    lo, hi = u.bootstrap(n_boot=300, seed=5)
    rng, units, stats = np.random.default_rng(5), sorted(A), []
    for _ in range(300):
        counts = np.bincount(rng.integers(0, len(units), size=len(units)), minlength=len(units))
        means = []
        for us in FOLDS.values():  # each unit keeps its fold; an empty fold is left out
            w = sum(counts[units.index(x)] for x in us)
            if w:
                means.append(sum(counts[units.index(x)] * A[x] for x in us) / w)
        stats.append(np.mean(means))
    assert (lo, hi) == pytest.approx((np.quantile(stats, 0.025), np.quantile(stats, 0.975)))
    assert u.bootstrap(n_boot=300, seed=5) == (lo, hi)


def test_nan_and_missing_units_are_refused_by_name():
    with pytest.raises(ValueError, match="q2"):
        UnitScores.means({**A, "q2": float("nan")})
    with pytest.raises(ValueError, match="q9"):
        UnitScores.means(A, {"f1": ["q1", "q9"]})


def test_paired_test_names_the_units_only_one_run_holds():
    b = {k: v for k, v in B.items() if k != "q4"}
    with pytest.raises(ValueError, match=r"only in the first \['q4'\]"):
        paired_test(UnitScores.means(A), UnitScores.means(b), n_perm=10)
    with pytest.raises(ValueError, match=r"only in the second \['q0'\]"):
        paired_test(UnitScores.means(A), UnitScores.means({**B, "q0": 0.3}), n_perm=10)
    with pytest.raises(ValueError, match=r"\['q3'\] differ"):  # q3 moved to the other fold in the second run
        paired_test(UnitScores.means(A, FOLDS), UnitScores.means(B, {"f1": ["q1", "q2", "q3"], "f2": ["q4", "q5"]}),
                    n_perm=10)


def test_pseudo_labels_match_a_hand_computation_with_inclusive_band():
    ranked = {"a": [f"d{i}" for i in range(1, 11)], "b": ["e1", "e2", "e3"], "c": ["c1", "c2", "c3", "c4", "c5"]}
    pos, neg = pseudo_labels(ranked, 2, (4, 6), 0, seed=1)
    assert pos == {"a": ["d1", "d2"], "b": ["e1", "e2"], "c": ["c1", "c2"]}
    assert neg == {"a": ["d4", "d5", "d6"], "b": [], "c": ["c4", "c5"]}  # ranks 4..6, both ends in
    pos2, neg2 = pseudo_labels(ranked, 2, (4, 6), 2, seed=1)
    assert pos2 == pos and len(neg2["a"]) == 2 and set(neg2["a"]) <= {"d4", "d5", "d6"} and neg2["b"] == []
    assert sorted(neg2["c"]) == ["c4", "c5"]
    assert (pos2, neg2) == pseudo_labels(ranked, 2, (4, 6), 2, seed=1)
    for p, n in zip(pos2.values(), neg2.values()):
        assert not set(p) & set(n)
    with pytest.raises(ValueError, match="query b"):
        pseudo_labels({"b": ["e1"]}, 2, (4, 6), 0, seed=1)
    with pytest.raises(ValueError):
        pseudo_labels(ranked, 3, (3, 6), 0, seed=1)
