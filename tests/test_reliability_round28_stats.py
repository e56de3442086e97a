"""Round 28: the statistics behind reported intervals and selections (aspire.benchmarks.stats, aspire.evaluate.two_fold)
checked against independent references: scipy.stats, brute-force sign-flip enumeration, plain numpy loops, a hand loop
over CSFCube's real two-fold splits."""

import itertools
import json
import warnings

import numpy as np
import pytest
import scipy.stats

from aspire.benchmarks.csfcube import FACETS, GROUPS
from aspire.benchmarks.stats import UnitScores, paired_test
from aspire.evaluate import two_fold

REPORTED = ("MAP", "NDCG%20")


# ---------------------------------------------------------------- bootstrap intervals


def test_plain_bootstrap_is_scipys_percentile_interval_with_the_same_draws():
    vals = np.random.default_rng(5).random(9)
    ours = UnitScores.means({f"q{i}": float(v) for i, v in enumerate(vals)}).bootstrap(999, seed=7)
    ref = scipy.stats.bootstrap((vals,), np.mean, n_resamples=999, method="percentile", vectorized=True,
                                rng=np.random.default_rng(7)).confidence_interval
    assert ours == pytest.approx((ref.low, ref.high), abs=1e-12)
    idx = np.random.default_rng(7).integers(0, 9, size=(999, 9))  # a plain loop, same seed rule
    stats = vals[idx].mean(axis=1)
    assert ours == pytest.approx((np.quantile(stats, 0.025), np.quantile(stats, 0.975)), abs=1e-12)
    assert ours[0] <= vals.mean() <= ours[1]


def test_grouped_bootstrap_keeps_each_units_numbers_in_every_group_and_draws_only_counted_units():
    # reviewer-like: 3 groups (draws) x 6 units (reviewers); unit 'u5' counts in no group and is not drawn
    rng = np.random.default_rng(3)
    den = np.array([[1.0, 0.0, 2.0, 1.0, 0.0, 0.0],
                    [0.0, 3.0, 1.0, 0.0, 0.0, 0.0],
                    [2.0, 1.0, 0.0, 0.0, 1.0, 0.0]])
    num = den * rng.random((3, 6))
    units = [f"u{i}" for i in range(6)]
    scores = UnitScores(units, num, den)
    lo, hi = scores.bootstrap(400, seed=11, level=0.9)
    active = np.array([0, 1, 2, 3, 4])
    assert (den[:, active].sum(axis=0) > 0).all()  # the fixture: u0..u4 all count somewhere
    g = np.random.default_rng(11)
    stats = []
    for draw in g.integers(0, len(active), size=(400, len(active))):
        picked = active[draw]  # whole columns: a unit keeps its numbers in every group
        n, d = num[:, picked].sum(axis=1), den[:, picked].sum(axis=1)
        stats.append(np.mean([n[k] / d[k] for k in range(3) if d[k] > 0]))
    assert (lo, hi) == pytest.approx((np.quantile(stats, 0.05), np.quantile(stats, 0.95)), abs=1e-12)
    assert scores.bootstrap(400, seed=11, level=0.9) == (lo, hi)  # seeded
    assert lo <= scores.value() <= hi


def test_bootstrap_refuses_a_level_outside_0_1():
    """level=-0.5 gave an interval with its ends swapped (0.43, 0.28) and level=0 a point, unsaid; level=95 numpy's
    'Quantiles must be in the range [0, 1]'."""
    units = UnitScores.means({f"q{i}": v for i, v in enumerate([0.1, 0.9, 0.4, 0.3, 0.7])})
    other = UnitScores.means({f"q{i}": v for i, v in enumerate([0.2, 0.5, 0.4, 0.1, 0.6])})
    for level in (-0.5, 0.0, 1.0, 95, float("nan")):
        with pytest.raises(ValueError, match=f"level must be a share between 0 and 1.*got level={level}"):
            units.bootstrap(50, level=level)
        with pytest.raises(ValueError, match=f"level must be a share between 0 and 1.*got level={level}"):
            paired_test(units, other, n_perm=10, n_boot=10, level=level)
    lo, hi = units.bootstrap(200, level=0.5)
    assert lo <= hi


def test_bootstrap_refuses_a_figure_with_no_unit_as_paired_test_does():
    """It returned (nan, nan) with numpy's 'All-NaN slice encountered' warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for scores in (UnitScores.means({}), UnitScores([], np.zeros((2, 0)), np.zeros((2, 0))),
                       UnitScores(["r1", "r2"], np.zeros((1, 2)), np.zeros((1, 2)))):
            with pytest.raises(ValueError, match="at least one unit .* with a score; the figure has none"):
                scores.bootstrap(20)
            with pytest.raises(ValueError, match="at least one unit .* with a score; the runs have none"):
                paired_test(scores, scores, n_perm=5, n_boot=5)


def test_means_refuses_a_group_naming_no_unit():
    """The empty group was dropped: the 'mean of the two fold means' was fold1's mean, 0.5, with no word."""
    with pytest.raises(ValueError, match="group 'fold2_test' names no unit"):
        UnitScores.means({"a": 1.0, "b": 0.0}, {"fold1_test": ["a", "b"], "fold2_test": []})
    with pytest.raises(ValueError, match="group 'all' names no unit"):
        UnitScores.means({}, {"all": []})
    assert np.isnan(UnitScores.means({}).value())  # no groups given: a plain mean over no unit (bootstrap refuses it)
    assert UnitScores.means({"a": 1.0, "b": 0.0, "c": 0.5}, {"f1": ["a", "b"], "f2": ["c"]}).value() == 0.5


def test_degenerate_samples_give_point_intervals_containing_the_figure():
    assert UnitScores.means({"only": 0.3}).bootstrap(50) == (0.3, 0.3)
    assert UnitScores.means({f"q{i}": 0.25 for i in range(6)}).bootstrap(50) == (0.25, 0.25)
    one = paired_test(UnitScores.means({"q": 0.8}), UnitScores.means({"q": 0.3}), n_perm=200, n_boot=50)
    assert one["p_value"] == 1.0 and one["ci95"] == pytest.approx([0.5, 0.5]) and one["n_units"] == 1


# ---------------------------------------------------------------- paired randomisation test


def _exact_sign_flip_p(da: np.ndarray, figure) -> float:
    """Brute force: every assignment of the two runs' numbers, unit by unit (2^n), observed one included."""
    observed = figure(da)
    hits = [abs(figure(np.array(s) * da)) >= abs(observed) - 1e-12 for s in itertools.product([1, -1], repeat=len(da))]
    return float(np.mean(hits))


@pytest.mark.parametrize("deltas", [[0.5, 0.5, 0.0, -0.5, 0.25, 0.5],  # ties and a zero difference
                                    [1.0, 1.0, 1.0, 1.0],  # every difference equal: exact p = 2/16
                                    [0.3, -0.1, 0.2, 0.05, 0.4, -0.2, 0.15]])
def test_paired_p_value_is_the_exact_sign_flip_one_and_scipys(deltas):
    d = np.array(deltas)
    base = np.random.default_rng(len(d)).random(len(d))
    a = UnitScores.means({f"q{i}": float(base[i] + d[i]) for i in range(len(d))})
    b = UnitScores.means({f"q{i}": float(base[i]) for i in range(len(d))})
    exact = _exact_sign_flip_p(np.array([a.num[0, i] - b.num[0, i] for i in range(len(d))]), np.mean)
    ref = scipy.stats.permutation_test((a.num[0], b.num[0]), lambda x, y, axis: np.mean(x - y, axis=axis),
                                       permutation_type="samples", n_resamples=np.inf, vectorized=True)
    assert ref.pvalue == pytest.approx(exact, abs=1e-9)
    got = paired_test(a, b, n_perm=20000, n_boot=200, seed=2)
    assert got["p_value"] == pytest.approx(exact, abs=0.012) and got["p_value"] > 0
    assert got["delta"] == pytest.approx(d.mean())
    assert paired_test(a, b, n_perm=300, n_boot=200, seed=2) == paired_test(a, b, n_perm=300, n_boot=200, seed=2)


def test_paired_p_value_of_a_mean_of_fold_means_is_the_exact_one():
    rng = np.random.default_rng(4)
    va, vb = rng.random(6), rng.random(6)
    folds = {"f1": ["q0", "q1"], "f2": ["q2", "q3", "q4", "q5"]}
    a = UnitScores.means({f"q{i}": float(v) for i, v in enumerate(va)}, folds)
    b = UnitScores.means({f"q{i}": float(v) for i, v in enumerate(vb)}, folds)

    def figure(x):
        return (x[:2].mean() + x[2:].mean()) / 2

    exact = _exact_sign_flip_p(va - vb, figure)
    got = paired_test(a, b, n_perm=20000, n_boot=500, seed=0)
    assert got["delta"] == pytest.approx(figure(va - vb))
    assert got["p_value"] == pytest.approx(exact, abs=0.012)
    # the paired bootstrap: the same unit drawn in both runs, over the units of both folds
    g = np.random.default_rng(0)
    stats = [_weighted_fold_figure(va - vb, np.bincount(dr, minlength=6)) for dr in g.integers(0, 6, size=(500, 6))]
    assert got["ci95"] == pytest.approx([np.quantile(stats, 0.025), np.quantile(stats, 0.975)], abs=1e-12)


def _weighted_fold_figure(x: np.ndarray, w: np.ndarray) -> float:
    means = [(x[s] * w[s]).sum() / w[s].sum() for s in (slice(0, 2), slice(2, 6)) if w[s].sum() > 0]
    return float(np.mean(means))


# ---------------------------------------------------------------- the two-fold protocol


def _real_splits(shared_data) -> dict:
    return json.loads((shared_data / "csfcube" / "evaluation_splits.json").read_text(encoding="utf-8"))


def _candidates(splits: dict, n: int, seed: int):
    """n runs' per-query figures over CSFCube's real queries, and results.json documents averaged from them."""
    rng = np.random.default_rng(seed)
    test_fold = {q: f"{fold}_test" for fold in two_fold.FOLDS for q in splits["all"][f"{fold}_test"]}
    per_query, docs = {}, {}
    for r in range(n):
        rows = {q: {"facet": q.rsplit("_", 1)[1], "test_fold": test_fold[q],
                    **{m: float(np.round(100 * rng.random(), 4)) for m in REPORTED}} for q in test_fold}
        folds = {g: {half: {m: float(np.mean([rows[q][m] for q in qs])) for m in REPORTED}
                     for half, qs in splits[g].items()} for g in GROUPS}
        per_query[f"run{r}"], docs[f"run{r}"] = rows, {"folds": folds}
    return per_query, docs


def test_two_fold_choice_is_a_hand_loop_over_the_real_splits(shared_data):
    splits = _real_splits(shared_data)
    for g in GROUPS:  # the module docstring's premise: each fold's dev half is the other's test half
        assert set(splits[g]["fold1_dev"]) == set(splits[g]["fold2_test"])
        assert set(splits[g]["fold2_dev"]) == set(splits[g]["fold1_test"])
        assert not set(splits[g]["fold1_dev"]) & set(splits[g]["fold1_test"])
    per_query, docs = _candidates(splits, 6, seed=1)
    for group, metric in (("all", "MAP"), ("method", "NDCG%20")):
        got = two_fold.select_two_fold(docs, group, metric)
        want_test = {g: {m: 0.0 for m in REPORTED} for g in GROUPS}
        for fold in two_fold.FOLDS:
            dev = {name: np.mean([per_query[name][q][metric] for q in splits[group][f"{fold}_dev"]]) for name in docs}
            best = max(dev, key=dev.get)
            assert got["chosen"][fold] == best
            for g in GROUPS:
                for m in REPORTED:
                    want_test[g][m] += np.mean([per_query[best][q][m] for q in splits[g][f"{fold}_test"]]) / 2
        for g in GROUPS:
            assert got["test"][g] == pytest.approx(want_test[g], abs=1e-9)


def test_per_facet_choice_is_a_hand_loop_over_the_real_splits(shared_data):
    splits = _real_splits(shared_data)
    per_query, docs = _candidates(splits, 5, seed=2)
    got = two_fold.select_per_facet(docs, per_query, "MAP")
    for fold in two_fold.FOLDS:
        chosen_rows = []
        for facet in FACETS:
            dev = {n: np.mean([per_query[n][q]["MAP"] for q in splits[facet][f"{fold}_dev"]]) for n in docs}
            best = max(dev, key=dev.get)
            assert got["chosen"][fold][facet] == best
            chosen_rows += [per_query[best][q] for q in splits[facet][f"{fold}_test"]]
        assert len(chosen_rows) == len(splits["all"][f"{fold}_test"])
    # 'all' = mean over the test queries of each fold (each ranked by its facet's choice), then over the folds
    want = 0.0
    for fold in two_fold.FOLDS:
        rows = [per_query[got["chosen"][fold][q.rsplit("_", 1)[1]]][q] for q in splits["all"][f"{fold}_test"]]
        want += np.mean([r["NDCG%20"] for r in rows]) / 2
    assert got["test"]["all"]["NDCG%20"] == pytest.approx(want, abs=1e-9)


def test_two_fold_refuses_an_infinite_figure():
    """JSON's Infinity read as a dev figure won the choice (and an infinite test figure was reported)."""
    def doc(v, dev=None):
        return {"folds": {g: {h: {"MAP": v if dev is None or not h.endswith("dev") else dev, "NDCG%20": v}
                              for h in ("fold1_dev", "fold2_dev", "fold1_test", "fold2_test")} for g in GROUPS}}

    bad = json.loads(json.dumps(doc(10.0, dev=float("inf"))))
    with pytest.raises(ValueError, match=r"bad: results.json has no figure folds.all.fold1_dev.MAP \(got inf\)"):
        two_fold.select_two_fold({"good": doc(20.0), "bad": bad})
    with pytest.raises(ValueError, match=r"bad: results.json has no figure folds.background.fold1_test.MAP \(got -inf\)"):
        two_fold.select_two_fold({"good": doc(20.0), "bad": doc(float("-inf"), dev=5.0)})


def test_two_fold_ties_go_to_the_first_candidate_with_a_warning(caplog):
    def doc(dev1, dev2):
        halves = {"fold1_dev": dev1, "fold2_dev": dev2, "fold1_test": dev2, "fold2_test": dev1}
        return {"folds": {g: {h: {"MAP": v, "NDCG%20": v} for h, v in halves.items()} for g in GROUPS}}

    with caplog.at_level("WARNING", logger="aspire.evaluate.two_fold"):
        got = two_fold.select_two_fold({"b": doc(30.0, 10.0), "a": doc(30.0, 40.0)})
    assert got["chosen"] == {"fold1": "b", "fold2": "a"}
    assert got["test"]["all"]["MAP"] == (10.0 + 30.0) / 2
    assert "2 candidates tie on fold1_dev all MAP (b, a): b, given first, is chosen" in caplog.text
