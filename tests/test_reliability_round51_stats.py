"""Round 51: OT top-k refuses a non-finite cost between selected sentences (a NaN candidate was silently left
out of the k nearest); the paired test's p-value and the bootstrap interval checked against brute force and numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from aspire.benchmarks.stats import UnitScores, paired_test
from aspire.scoring.ot_topk import ot_top_k_dist
from tests.test_ot_topk import OT, problems, reference


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_ot_top_k_refuses_non_finite_cost_naming_the_candidate(bad):
    cost, q_mask, c_mask = problems(n_cands=30, seed=5)
    nearest = int(torch.argsort(reference(cost, q_mask, c_mask))[0])
    cost[nearest, 0, 0] = bad  # the nearest candidate: its bound was NaN, it was never solved nor among the k nearest
    with pytest.raises(ValueError, match=rf"candidate rows \[{nearest}\]"):
        ot_top_k_dist(cost, q_mask, c_mask, 3, first=3, **OT)


def test_ot_top_k_still_ignores_non_finite_cost_on_masked_pairs():
    cost, q_mask, c_mask = problems(n_cands=30, seed=5)
    ref = reference(cost, q_mask, c_mask)
    row = int(torch.nonzero(~c_mask[:, -1])[0, 0])  # a candidate with padding
    cost[row, :, -1] = float("nan")
    res = ot_top_k_dist(cost, q_mask, c_mask, 3, first=3, **OT)
    assert torch.equal(torch.argsort(res.dist, stable=True)[:3], torch.argsort(ref, stable=True)[:3])


def test_paired_p_value_matches_full_enumeration():
    a = {"q0": 0.9, "q1": 0.7, "q2": 0.4, "q3": 0.8, "q4": 0.6}
    b = {"q0": 0.5, "q1": 0.65, "q2": 0.45, "q3": 0.3, "q4": 0.55}
    units = sorted(a)
    obs = abs(np.mean([a[u] - b[u] for u in units]))
    exact = np.mean([abs(np.mean([(b[u] - a[u]) if s else (a[u] - b[u]) for u, s in zip(units, signs)])) >= obs - 1e-12
                     for signs in itertools.product([0, 1], repeat=len(units))])
    res = paired_test(UnitScores.means(a), UnitScores.means(b), n_perm=20000, n_boot=10)
    assert res["delta"] == pytest.approx(obs)
    assert res["p_value"] == pytest.approx(exact, abs=0.015)  # exact 8/32; Monte Carlo SE ~0.003


def test_bootstrap_interval_is_numpys_percentiles_of_resampled_means():
    vals = {f"q{i}": float(v) for i, v in enumerate(np.random.default_rng(3).random(12))}
    units = UnitScores.means(vals)
    lo, hi = units.bootstrap(n_boot=500, seed=7, level=0.9)
    x = np.array([vals[u] for u in sorted(vals)])
    draws = np.random.default_rng(7).integers(0, len(x), size=(500, len(x)))
    means = x[draws].mean(axis=1)
    assert (lo, hi) == pytest.approx((np.quantile(means, 0.05), np.quantile(means, 0.95)))
    assert lo < x.mean() < hi
