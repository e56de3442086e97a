"""CSFCube protocol, round 6: the per-facet two-fold choice reads only per-query files that agree with their runs,
and the choice reads dev halves only, breaking ties by folder name."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from aspire.benchmarks import csfcube
from aspire.evaluate import two_fold


@pytest.fixture
def run_folders(small_csfcube, tmp_path):
    """Two scored runs of the cut CSFCube pools: `a` ranks each pool in its judged order, `b` reversed."""
    pool_set = csfcube.load_csfcube(small_csfcube)
    folders = {}
    for name, step in (("a", 1), ("b", -1)):
        rankings = {f: {q: list(pool)[::step] for q, pool in pools.items()} for f, pools in pool_set.pools.items()}
        results, per_query = csfcube.evaluate_csfcube_rankings(small_csfcube, rankings)
        folders[name] = tmp_path / name
        csfcube.write_results(folders[name], small_csfcube, name, results, per_query)
    return folders


def test_per_facet_choice_refuses_a_per_query_file_that_misses_queries(run_folders):
    a = run_folders["a"]
    whole = two_fold.choose([a], per_facet=True)
    reported = two_fold.load(a)["test"]
    for group in csfcube.GROUPS:
        for metric in two_fold.REPORTED:
            assert whole["test"][group][metric] == pytest.approx(reported[group][metric], abs=1e-3)
    perq = next(a.glob("*-perq.csv"))
    lines = perq.read_text().splitlines()
    dropped = next(line for line in lines[1:] if ",result,fold1_test," in line)
    perq.write_text("\n".join(line for line in lines if line != dropped) + "\n")
    # once: the result facet's fold1_test mean taken silently over the queries left, a wrong test figure
    with pytest.raises(ValueError, match=rf"{a}: its per-query file gives result fold1_test MAP .* over 8 queries, "
                                         r"its results\.json .*: the file misses queries"):
        two_fold.choose([run_folders["b"], a], per_facet=True)


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_per_query_file_refuses_a_figure_that_is_not_a_finite_number(run_folders, bad):
    perq = next(run_folders["a"].glob("*-perq.csv"))
    lines = perq.read_text().splitlines()
    cells = lines[2].split(",")
    cells[6] = bad  # MAP
    perq.write_text("\n".join([*lines[:2], ",".join(cells), *lines[3:]]) + "\n")
    # once: accepted, and the per-facet choice's test figures (and compare's deltas) came out NaN
    with pytest.raises(ValueError, match=rf"perq\.csv:3: query '{cells[0]}': MAP, NDCG%20 must be numbers, "
                                         rf"got \['{bad}'"):
        two_fold.load_per_query(run_folders["a"])


def test_choice_reads_dev_halves_only_and_breaks_ties_by_folder_name(run_folders, tmp_path):
    candidates = {name: two_fold.load(folder) for name, folder in run_folders.items()}
    chosen = two_fold.select_two_fold(candidates)["chosen"]
    peeking = copy.deepcopy(candidates)
    for fold in two_fold.FOLDS:  # the run not chosen made best on every test half: the choice must not move
        other = "b" if chosen[fold] == "a" else "a"
        for group in csfcube.GROUPS:
            peeking[other]["folds"][group][f"{fold}_test"]["MAP"] = 1000.0
    assert two_fold.select_two_fold(peeking)["chosen"] == chosen
    twin = tmp_path / "0-twin"
    shutil.copytree(run_folders["b"], twin)
    for spelled in ([run_folders["b"], twin], [twin, run_folders["b"]]):
        folders = two_fold.unique_folders(str(f) for f in spelled)
        assert two_fold.choose(folders)["chosen"] == {"fold1": str(twin), "fold2": str(twin)}
        per_facet = two_fold.choose(folders, per_facet=True)["chosen"]
        assert per_facet == {fold: {f: str(twin) for f in csfcube.FACETS} for fold in two_fold.FOLDS}


def test_compare_refuses_runs_that_put_a_query_in_another_test_fold(run_folders):
    # the folds were run A's for both runs: a run scored on another splits file was paired on the wrong halves
    from aspire.evaluate.csfcube import compare_runs

    perq = next(run_folders["b"].glob("*-perq.csv"))
    lines = perq.read_text().splitlines()
    cells = lines[1].split(",")
    cells[3] = "fold2_test" if cells[3] == "fold1_test" else "fold1_test"
    perq.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    with pytest.raises(ValueError, match=rf"put 1 queries in other facets or test folds, e.g. {cells[0]}"):
        compare_runs(str(run_folders["a"]), str(run_folders["b"]), n_perm=10)


def test_per_facet_choice_takes_the_metric_alone_and_refuses_a_group(run_folders, tmp_path, capsys):
    """`two-fold --per-facet --select method:NDCG%20` chose every facet by NDCG%20 on its own queries and wrote
    `select: method:NDCG%20` into the choice, a group it never read. Per facet the metric alone is given (or
    `all:METRIC`), recorded alone, and another group is refused naming it."""
    folders = [run_folders["a"], run_folders["b"]]
    assert two_fold.choose(folders, "NDCG%20", per_facet=True) == two_fold.choose(folders, "all:NDCG%20",
                                                                                   per_facet=True)
    with pytest.raises(ValueError, match="--select's group 'method' would not be read; give the metric alone"):
        two_fold.choose(folders, "method:NDCG%20", per_facet=True)
    out = tmp_path / "choice.json"
    assert two_fold.main(["--candidate", str(tmp_path / "[ab]"), "--per-facet", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["select"] == "MAP"
    with pytest.raises(SystemExit):
        two_fold.main(["--candidate", str(tmp_path / "[ab]"), "--per-facet", "--select", "background:MAP"])
    assert "would not be read" in capsys.readouterr().err
    assert two_fold.main(["--candidate", str(tmp_path / "[ab]"), "--out", str(out)]) == 0  # not per facet: as before
    assert json.loads(out.read_text())["select"] == "all:MAP"
