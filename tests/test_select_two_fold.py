"""aspire.evaluate.two_fold: each fold's test half is scored with the run chosen on its own dev half."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aspire.benchmarks.csfcube import GROUPS
from aspire.evaluate import two_fold as select_two_fold


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


def test_per_facet_choice_scores_each_facets_test_half_with_its_own_dev_choice(tmp_path):
    # Two queries a facet and fold half; run `m` is good on method only, run `r` on result only.
    keys = {(f, h): [f"q{f[0]}{h}{i}_{f}" for i in range(2)] for f in select_two_fold.FACETS for h in (1, 2)}

    def write(name: str, good: str) -> dict:
        rows, folds = [], {}
        for (facet, half), qs in keys.items():
            value = 80.0 if facet == good else 10.0
            rows += [f"{q},{q.split('_')[0]},{facet},fold{half}_test,5,t,{value},{value + 5},0,0,0,0" for q in qs]
            means = {"MAP": value, "NDCG%20": value + 5}
            folds[facet] = {f"fold{half}_test": means, f"fold{3 - half}_dev": means, **folds.get(facet, {})}
        all_halves = {}
        for half in (1, 2):  # `all`: each half's mean over its 6 queries
            mean = sum(80.0 if f == good else 10.0 for f in select_two_fold.FACETS) / 3
            all_halves[f"fold{half}_test"] = all_halves[f"fold{3 - half}_dev"] = {"MAP": mean, "NDCG%20": mean + 5}
        folds["all"] = all_halves
        folder = tmp_path / name
        folder.mkdir()
        header = "query,paper_id,facet,test_fold,pool_size,title,MAP,NDCG%20,P@20,R@20,R-precision,NDCG@20"
        (folder / f"test-pid2pool-csfcube-{name}-perq.csv").write_text("\n".join([header, *rows]) + "\n")
        return {"folds": folds}

    candidates = {"m": write("m", "method"), "r": write("r", "result")}
    per_query = {name: select_two_fold.load_per_query(tmp_path / name) for name in candidates}
    result = select_two_fold.select_per_facet(candidates, per_query)
    assert result["chosen"]["fold1"]["method"] == "m" and result["chosen"]["fold2"]["result"] == "r"
    assert result["test"]["method"]["MAP"] == result["test"]["result"]["MAP"] == 80.0
    assert result["test"]["background"]["MAP"] == 10.0  # a tie: both runs score 10 there
    assert result["test"]["all"] == {"MAP": (80 + 80 + 10) / 3, "NDCG%20": (85 + 85 + 15) / 3}
    # one choice for all facets can only take one of the two strengths
    assert select_two_fold.select_two_fold(candidates)["test"]["all"]["MAP"] == (80 + 10 + 10) / 3


def test_per_query_csv_must_be_unique(tmp_path):
    with pytest.raises(ValueError, match="expected one \\*-perq.csv, found 0"):
        select_two_fold.load_per_query(tmp_path)


def test_cli_and_script_choose_from_folders_and_write_the_choice(tmp_path, capsys):
    for name, halves in {"a": (60, 20), "b": (20, 60), "c": (45, 45)}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(run(*halves)))
    out = tmp_path / "choice.json"
    assert select_two_fold.main(["--candidate", str(tmp_path / "*"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"chosen on fold1_dev: {tmp_path / 'b'}; on fold2_dev: {tmp_path / 'a'}" in printed
    written = json.loads(out.read_text())
    assert written["test"]["all"] == {"MAP": 20.0, "NDCG%20": 30.0} and len(written["candidates"]) == 3
    with pytest.raises(SystemExit) as err:  # a user error is one line, exit status 2
        select_two_fold.main(["--candidate", str(tmp_path / "a"), "--select", "all:F1"])
    assert err.value.code == 2 and "--select must be GROUP:METRIC" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        select_two_fold.main(["--candidate", str(tmp_path / "nowhere")])
    assert "no results.json in" in capsys.readouterr().err
    (tmp_path / "rev").mkdir()  # another benchmark's results folder: one error line naming it, not a KeyError
    (tmp_path / "rev" / "results.json").write_text(json.dumps({"benchmark": "reviewer-matching", "loss": 0.3}))
    with pytest.raises(SystemExit) as err:
        select_two_fold.main(["--candidate", str(tmp_path / "a"), "--candidate", str(tmp_path / "rev")])
    assert err.value.code == 2 and (f"{tmp_path / 'rev'}: results.json is not a CSFCube run's (benchmark "
                                    "'reviewer-matching'): it has no per-fold figures") in capsys.readouterr().err
    script = Path(__file__).resolve().parents[1] / "experiments" / "select_two_fold.py"
    done = subprocess.run([sys.executable, str(script), "--candidate", str(tmp_path / "[abc]")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "chosen on fold1_dev" in done.stdout, done.stderr[-500:]
