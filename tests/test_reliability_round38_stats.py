"""Round 38: aspire.benchmarks.stats (figures, bootstrap intervals, paired tests) checked against hand computations,
an exact sign-flip enumeration and plain numpy loops; aspire.cli.evaluate_out.check_out's refusals of --out."""

import itertools
import json
from argparse import Namespace

import numpy as np
import pytest

from aspire.benchmarks.stats import UnitScores, paired_test
from aspire.cli.evaluate_out import check_out

# ---------------------------------------------------------------- figures by hand


def test_value_is_the_mean_over_groups_of_a_ratio_of_sums():
    num = np.array([[1.0, 2.0, 0.0], [0.0, 3.0, 4.0]])
    den = np.array([[2.0, 2.0, 0.0], [0.0, 5.0, 5.0]])
    u = UnitScores(["a", "b", "c"], num, den)
    assert u.value() == pytest.approx(((1 + 2) / 4 + (3 + 4) / 10) / 2)
    assert u.per_group() == pytest.approx([0.75, 0.7])
    w = np.array([2.0, 0.0, 1.0])  # a resample: a twice, b never, c once
    assert u.value(w) == pytest.approx((2 / 4 + 4 / 5) / 2)
    folds = UnitScores.means({"q1": 0.2, "q2": 0.4, "q3": 0.9}, {"f1": ["q1", "q2"], "f2": ["q3"]})
    assert folds.value() == pytest.approx((0.3 + 0.9) / 2)  # the mean of the fold means, not of the queries


def test_a_numerator_with_no_denominator_is_refused():
    # unit c: numerator 5, denominator 0 in every group. It counted in the figure (7/2 = 3.5) but was never drawn in a
    # resample (every resample 1.0), so the "95% interval" (1.0, 1.0) did not hold the figure it was reported with
    with pytest.raises(ValueError, match=r"unit 'c' has numerator 5.0 but denominator 0 in group 0"):
        UnitScores(["a", "b", "c"], [[1.0, 1.0, 5.0]], [[1.0, 1.0, 0.0]])
    # group 1's numerator 3 with no denominator: the group was dropped from the figure without a word
    with pytest.raises(ValueError, match=r"unit 'a' has numerator 3.0 but denominator 0 in group 1"):
        UnitScores(["a", "b"], [[1.0, 1.0], [3.0, 0.0]], [[1.0, 1.0], [0.0, 0.0]])
    # zeros where the denominator is zero stay valid (a reviewer a draw leaves out)
    u = UnitScores(["a", "b", "c"], [[1.0, 1.0, 0.0]], [[1.0, 2.0, 0.0]])
    lo, hi = u.bootstrap(200, seed=1)
    assert lo <= u.value() <= hi


# ---------------------------------------------------------------- bootstrap


def test_bootstrap_is_reproducible_under_a_seed_and_holds_the_figure():
    vals = {f"q{i}": float(v) for i, v in enumerate(np.random.default_rng(2).random(12))}
    u = UnitScores.means(vals)
    a, b = u.bootstrap(500, seed=3), u.bootstrap(500, seed=3)
    assert a == b
    assert a != u.bootstrap(500, seed=4)
    assert a[0] <= u.value() <= a[1]
    # a plain loop with the same draws
    x = np.array([vals[k] for k in sorted(vals)])
    idx = np.random.default_rng(3).integers(0, 12, size=(500, 12))
    stats = x[idx].mean(axis=1)
    assert a == pytest.approx((np.quantile(stats, 0.025), np.quantile(stats, 0.975)), abs=1e-12)


def test_degenerate_inputs():
    one = UnitScores.means({"q": 0.4})
    assert one.bootstrap(50) == (pytest.approx(0.4), pytest.approx(0.4))
    same = UnitScores.means({f"q{i}": 0.25 for i in range(5)})
    assert same.bootstrap(50) == (pytest.approx(0.25), pytest.approx(0.25))
    r = paired_test(one, UnitScores.means({"q": 0.1}), n_perm=200, n_boot=50)
    assert r["p_value"] == 1.0 and r["n_units"] == 1 and r["delta"] == pytest.approx(0.3)
    assert paired_test(same, same, n_perm=100, n_boot=20)["p_value"] == 1.0
    nobody = UnitScores(["a"], [[0.0]], [[0.0]])
    with pytest.raises(ValueError, match="at least one unit"):
        nobody.bootstrap(10)
    with pytest.raises(ValueError, match="at least one unit"):
        paired_test(nobody, nobody)
    with pytest.raises(ValueError, match="no finite value"):
        UnitScores.means({"q1": float("nan"), "q2": 0.5})
    with pytest.raises(ValueError, match="names no unit"):
        UnitScores.means({"q1": 0.5}, {"f1": ["q1"], "f2": []})
    with pytest.raises(ValueError, match="level"):
        one.bootstrap(10, level=95)


# ---------------------------------------------------------------- paired test


def test_paired_p_value_matches_the_exact_sign_flip_test():
    x = [0.37, 0.53, 0.71, 0.29, 0.6]
    d = [0.1, 0.2, 0.3, -0.4, 0.25]
    a = {f"q{i}": v for i, v in enumerate(x)}
    b = {f"q{i}": v - di for i, (v, di) in enumerate(zip(x, d))}
    r = paired_test(UnitScores.means(a), UnitScores.means(b), n_perm=20000, n_boot=200, seed=5)
    dd = np.array([a[k] - b[k] for k in sorted(a)])
    obs = abs(dd.mean())
    exact = np.mean([abs((dd * s).mean()) >= obs - 1e-12 for s in itertools.product([1, -1], repeat=len(dd))])
    assert r["delta"] == pytest.approx(dd.mean())
    assert r["p_value"] == pytest.approx(exact, abs=0.015)  # Monte Carlo error ~0.0035 at 20,000 swaps
    assert r["ci95"][0] <= r["delta"] <= r["ci95"][1]
    assert r == paired_test(UnitScores.means(a), UnitScores.means(b), n_perm=20000, n_boot=200, seed=5)


# ---------------------------------------------------------------- --out


def _args(command, out, **kw):
    return Namespace(command=command, out=str(out), **kw)


def test_check_out_refuses_inputs_files_foreign_and_other_results(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.jsonl").write_text("{}\n")
    check_out(_args("csfcube", tmp_path / "new", data=str(data)), "e1")  # new: fine
    (tmp_path / "empty").mkdir()
    check_out(_args("csfcube", tmp_path / "empty", data=str(data)), "e1")  # empty: fine
    with pytest.raises(FileExistsError, match="input"):
        check_out(_args("csfcube", data, data=str(data)), "e1")
    with pytest.raises(FileExistsError, match="input"):
        check_out(_args("csfcube", tmp_path, data=str(data)), "e1")  # a folder holding an input
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        check_out(_args("csfcube", tmp_path / "file.txt"), "e1")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="no readable results.json"):
        check_out(_args("csfcube", foreign), "e1")
    own = tmp_path / "own"
    own.mkdir()
    (own / "results.json").write_text(json.dumps({"benchmark": "csfcube", "experiment": "e1"}))
    check_out(_args("csfcube", own), "e1")  # its own folder: replaced
    with pytest.raises(FileExistsError, match="another run's results"):
        check_out(_args("csfcube", own), "e2")
    with pytest.raises(FileExistsError, match="another run's results"):
        check_out(_args("reviewers", own), "e1")


def test_compare_out_refuses_a_folder_a_run_and_a_file_beside_a_run(tmp_path):
    run_a, run_b = tmp_path / "A", tmp_path / "B"
    for d in (run_a, run_b):
        d.mkdir()
        (d / "run.trec").write_text("q Q0 d 1 1.0 x\n")
        (d / "results.json").write_text(json.dumps({"benchmark": "csfcube"}))
    kw = {"run_a": str(run_a / "run.trec"), "run_b": str(run_b / "run.trec")}
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(IsADirectoryError):
        check_out(_args("compare", tmp_path / "elsewhere", **kw))
    with pytest.raises(FileExistsError, match="input"):
        check_out(_args("compare", run_a / "run.trec", **kw))
    with pytest.raises(FileExistsError, match="would replace it"):
        check_out(_args("compare", run_a / "results.json", **kw))
    earlier = run_a / "cmp.json"
    earlier.write_text(json.dumps({"MAP": {"delta": 0.1, "per_unit_delta": {}}}))
    check_out(_args("compare", earlier, **kw))  # an earlier comparison: replaced
    check_out(_args("compare", tmp_path / "cmp.json", **kw))  # new
