"""`aspire evaluate`'s command line, round 43: `fuse` with one `--run` loaded CSFCube and then failed naming no
option; in `fuse` and `fuse-runs` a `--weights` count other than the runs' was reported as "1 weights for 2 runs", naming no option; `pools --abstracts`
of a missing file failed only after torch had loaded, naming no option."""

from __future__ import annotations

import json
import shutil

import pytest

from aspire.cli import evaluate as evaluate_cli
from aspire.paths import DATA
from tests.test_evaluate_pools import write_toy
from tests.test_reliability_round34_clieval import _evaluate

CSF = DATA / "csfcube"
SAMPLE = CSF / "sample_ranked_pools"


def _status(argv) -> int:
    try:
        return evaluate_cli.main([str(a) for a in argv])
    except SystemExit as exc:  # a parser error
        return exc.code


def _no_fusing(monkeypatch):
    """Fail the test if `fuse` or `fuse-runs` gets as far as reading the data or the runs."""
    import aspire.evaluate.csfcube as csfcube_run
    import aspire.evaluate.fuse as fuse_mod

    def refuse(*args, **kwargs):
        raise AssertionError("the runs were read: the user error was not refused first")

    monkeypatch.setattr(csfcube_run, "fuse_csfcube", refuse)
    monkeypatch.setattr(fuse_mod, "fuse_run_files", refuse)


def test_fuse_refuses_one_run_and_a_wrong_weight_count_naming_the_option(tmp_path, capsys,
                                                                                        monkeypatch):
    _no_fusing(monkeypatch)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    out = tmp_path / "o"
    cases = [
        (["--run", f"{a}:E"], "--run: give two or more runs to fuse (got 1)"),
        (["--run", f"{a}:E", "--run", f"{b}:F", "--weights", "1"], "--weights gives 1 weights for 2 runs"),
        (["--run", f"{a}:E", "--run", f"{b}:F", "--weights", "1,1,1"], "--weights gives 3 weights for 2 runs"),
    ]
    for extra, said in cases:
        assert _status(["fuse", *extra, "--exp", "x", "--out", out]) == 2, extra
        assert said in capsys.readouterr().err, extra
    assert not out.exists()


def test_fuse_runs_refuses_one_run_and_a_wrong_weight_count_naming_the_option(tmp_path, capsys, monkeypatch):
    _no_fusing(monkeypatch)
    for name, first in (("a.run", "d1"), ("b.run", "d2")):
        (tmp_path / name).write_text(f"q1 Q0 {first} 1 3.0 x\nq1 Q0 {'d2' if first == 'd1' else 'd1'} 2 2.0 x\n")
    run_a, run_b, out = tmp_path / "a.run", tmp_path / "b.run", tmp_path / "o"
    cases = [
        ([run_a], "runs: give two or more runs to fuse (got 1)"),
        ([run_a, run_b, "--weights", "0.5"], "--weights gives 1 weights for 2 runs"),  # once naming no option
    ]
    for argv, said in cases:
        assert _status(["fuse-runs", *argv, "--out", out]) == 2, argv
        assert said in capsys.readouterr().err, argv
    assert not out.exists()


def test_fuse_runs_of_two_distinct_runs_still_fuse(tmp_path, capsys):
    (tmp_path / "a.run").write_text("q1 Q0 d1 1 3.0 x\nq1 Q0 d2 2 2.0 x\n")
    (tmp_path / "b.run").write_text("q1 Q0 d2 1 3.0 x\nq1 Q0 d1 2 1.0 x\n")
    out = tmp_path / "o"
    assert _status(["fuse-runs", tmp_path / "a.run", tmp_path / "b.run", "--weights", "1,3", "--out", out]) == 0
    # z-scores per query: a gives d1 +1, d2 -1; b gives d2 +1, d1 -1; weighted 1:3, d2 ranks first
    assert (out / "run.trec").read_text().split("\n")[0].split()[2] == "d2"


@pytest.mark.skipif(not (SAMPLE / "test-pid2pool-csfcube-specter-background-ranked.json").exists(),
                    reason="CSFCube sample ranked pools not present")
def test_fuse_of_two_distinct_csfcube_runs_still_scores(tmp_path, capsys):
    # the same files as two experiments in two folders: distinct runs, fused, score as the single run
    other = tmp_path / "copy"
    other.mkdir()
    for path in SAMPLE.glob("test-pid2pool-csfcube-specter-*-ranked.json"):
        shutil.copy(path, other / path.name.replace("-specter-", "-again-"))
    out = tmp_path / "o"
    assert _status(["fuse", "--data", CSF, "--run", f"{SAMPLE}:specter", "--run", f"{other}:again", "--exp", "x",
                    "--out", out]) == 0
    fused = json.loads((out / "results.json").read_text())
    assert fused["fused_from"] == [f"{SAMPLE}:specter", f"{other}:again"]
    assert "CSFCube test MAP" in capsys.readouterr().out


def test_pools_missing_abstracts_or_splits_are_named_before_torch(tmp_path, tiny_model_dir):
    toy = write_toy(tmp_path / "toy")
    out = tmp_path / "o"
    base = ["pools", "--data", toy, "--name", "toy", "--model", tiny_model_dir, "--scorer", "minl2", "--out", out]
    for option in ("--abstracts", "--splits"):
        rc, err, torch_loaded = _evaluate([*base, option, tmp_path / "missing.json"], tmp_path)
        assert rc == 2 and f"({option})" in err, (option, err)  # --abstracts: once after torch, naming no option
        assert not torch_loaded, option
    assert not out.exists()
