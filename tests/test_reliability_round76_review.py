"""Round 76 review: a successful `aspire evaluate` re-run into its own `--out` removes the earlier run's files it did
not write again (`aspire.cli.evaluate_out.remove_unwritten`). It looked for them by name at any depth, so a user's
copy of an earlier run's files in a subfolder (`runs/a/prev/`) and a comparison written by `evaluate compare --out
runs/a/cmp/compare.json`, or `--out runs/a/compare.json` (a new file inside a compared folder, which `check_out`
accepts), were removed as the earlier run's. A run writes its files in `--out` and reviewer matching's predictions
in `predictions/` only: nothing else is looked into, and an `evaluate compare` output is the user's."""

from __future__ import annotations

import shutil
from argparse import Namespace

from test_benchmarks import make_reviewer_set

from aspire.cli.evaluate import main
from aspire.cli.evaluate_out import remove_unwritten, run_files
from aspire.io import write_json


def test_a_rerun_leaves_a_users_copies_in_subfolders_of_out(tmp_path, capsys):
    root = make_reviewer_set(tmp_path / "rm", draws=1)
    out = tmp_path / "out"
    common = ["reviewers", "--data", str(root), "--bm25", "--exp", "mine", "--out", str(out)]
    assert main(common) == 0
    (out / "prev").mkdir()  # the user keeps the first run's predictions before re-running
    for path in (out / "predictions").iterdir():
        shutil.copy2(path, out / "prev" / path.name)
    write_json(out / "cmp" / "compare.json", {"loss": {"per_unit_delta": {}}})
    capsys.readouterr()
    assert main(common) == 0
    assert "removed" not in capsys.readouterr().out
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "cmp/compare.json", "predictions/mine_d_20_1_ta.json", "prev/mine_d_20_1_ta.json", "results.json"]


def test_an_evaluate_compare_output_in_out_is_the_users(tmp_path, capsys):
    """`evaluate compare runs/a runs/b --out runs/a/compare.json` writes `{figure: {..., per_unit_delta}}`; a probe's
    own `--compare` writes `{"against", "tests"}`, which a re-run without `--compare` still removes."""
    out = tmp_path / "a"
    write_json(out / "results.json", {"benchmark": "context2doc-test", "experiment": "bm25"})
    write_json(out / "compare.json", {"MRR": {"a": 0.5, "b": 0.4, "per_unit_delta": {"q1": 0.1}}})
    write_json(out / "run.trec.bak", {})  # not a name a run writes
    args = Namespace(command="context2doc", out=str(out))
    earlier = run_files(args)
    assert sorted(p.name for p in earlier) == ["results.json"]
    write_json(out / "results.json", {"benchmark": "context2doc-test", "experiment": "bm25"})
    assert remove_unwritten(args, earlier) == []
    assert (out / "compare.json").is_file()
    write_json(out / "compare.json", {"against": "other", "tests": {}})  # a probe's comparison is a run's file
    assert sorted(p.name for p in run_files(Namespace(command="venue", out=str(out)))) == ["compare.json",
                                                                                          "results.json"]


def test_a_linked_predictions_folder_is_not_looked_into(tmp_path):
    """predictions/ linked to a folder elsewhere: its files lie outside `--out`, never removed by a re-run into it."""
    elsewhere, out = tmp_path / "elsewhere", tmp_path / "out"
    write_json(elsewhere / "mine_d_20_1_ta.json", {})
    write_json(out / "results.json", {"benchmark": "reviewer-matching", "experiment": "mine"})
    (out / "predictions").symlink_to(elsewhere, target_is_directory=True)
    args = Namespace(command="reviewers", out=str(out))
    earlier = run_files(args)
    write_json(out / "results.json", {"benchmark": "reviewer-matching", "experiment": "mine"})
    assert remove_unwritten(args, earlier) == []
    assert (elsewhere / "mine_d_20_1_ta.json").is_file()


def test_a_rerun_that_writes_no_predictions_removes_the_earlier_ones_and_their_emptied_folder(tmp_path):
    out = tmp_path / "out"
    (out / "predictions").mkdir(parents=True)
    write_json(out / "results.json", {"run": 1})
    write_json(out / "predictions" / "a_ta.json", {})
    write_json(out / "predictions" / "b_ta.json", {})
    args = Namespace(out=str(out), command="reviewers")
    earlier = run_files(args)
    write_json(out / "results.json", {"run": 2})  # the re-run writes its results, no predictions
    assert remove_unwritten(args, earlier) == ["predictions/a_ta.json", "predictions/b_ta.json"]
    assert not (out / "predictions").exists() and (out / "results.json").is_file()
