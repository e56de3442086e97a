"""Round 58: `fuse` / `fuse-runs` took one run file given twice. Fused with itself it changed nothing; beside a third
run it weighed double, unsaid. Now the same file however spelt (relative or absolute, `..`, a link, a results folder
and its own run.trec) is refused naming both positions and the file, pointing to --weights; a copy (two files of
the same content) is the user's choice and fused as given."""

from __future__ import annotations

import os

import pytest
from test_reliability_round33_fuse import RUN_1, RUN_2, _trec_folder

from aspire.benchmarks.runs import read_run
from aspire.cli.evaluate import main
from aspire.evaluate.fuse import fuse_run_files, fuse_runs

QRELS = "q1 0 d1 1\nq1 0 d2 0\nq2 0 d2 1\n"


@pytest.fixture()
def runs(tmp_path, monkeypatch):
    """tmp_path as the working directory, holding the results folder `a` (RUN_1), the run file `b.trec` (RUN_2), a
    folder `sub` and a link `link.trec` to a's run.trec."""
    monkeypatch.chdir(tmp_path)
    _trec_folder(tmp_path, "a", RUN_1, QRELS)
    (tmp_path / "b.trec").write_text(RUN_2)
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "a" / "run.trec", tmp_path / "link.trec")
    return tmp_path


@pytest.mark.parametrize("spelt", ["a", "a/run.trec", "{tmp}/a/run.trec", "sub/../a/run.trec", "link.trec",
                                   "{tmp}/sub/../a"])
def test_fuse_runs_refuses_one_run_file_given_twice_however_spelt(runs, spelt, capsys):
    spelt = spelt.format(tmp=runs)
    assert main(["fuse-runs", "a", "b.trec", spelt, "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert f"runs 1 and 3 (a and {spelt}) are one file, {runs / 'a' / 'run.trec'}" in err
    assert "--weights" in err
    assert not (runs / "out").exists()  # refused before anything is written
    assert main(["fuse-runs", spelt, "a", "--out", "out"]) == 2  # two copies alone: fusing changed nothing
    assert f"runs 1 and 2 ({spelt} and a) are one file" in capsys.readouterr().err
    assert not (runs / "out").exists()


def test_fuse_runs_fuses_a_copy_as_given(runs):
    """Two files with the same content are the user's choice: fused as three runs, the copy's share its own."""
    (runs / "copy.trec").write_text(RUN_1)
    results = fuse_run_files(["a", "copy.trec", "b.trec"], "out", fusion="rrf")
    assert results["fused_from"] == ["a/run.trec", "copy.trec", "b.trec"]
    want = fuse_runs([read_run(p) for p in ("a/run.trec", "copy.trec", "b.trec")], fusion="rrf")
    assert read_run(runs / "out" / "run.trec") == {q: [(d, pytest.approx(s)) for d, s in r] for q, r in want.items()}
    assert [d for d, _ in want["q1"]] == ["d1", "d2"]  # RUN_1 twice outweighs RUN_2 once


def test_fuse_refuses_one_ranked_run_given_twice_however_spelt(shared_data, tmp_path, capsys):
    """`fuse --run DIR:EXP` twice: the same folder through a link, or a folder of links to its ranked files."""
    root = shared_data / "csfcube"
    sample = root / "sample_ranked_pools"
    os.symlink(sample, tmp_path / "linked")
    (tmp_path / "links").mkdir()
    for facet in ("background", "method", "result"):
        name = f"test-pid2pool-csfcube-specter-{facet}-ranked.json"
        os.symlink(sample / name, tmp_path / "links" / name)
    for spelt in (tmp_path / "linked", tmp_path / "links"):
        out = tmp_path / f"out-{spelt.name}"
        assert main(["fuse", "--data", str(root), "--run", f"{sample}:specter", "--run", f"{spelt}:specter",
                     "--exp", "e", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert (f"runs 1 and 2 ({sample}:specter and {spelt}:specter) are one file, "
                f"{sample.resolve() / 'test-pid2pool-csfcube-specter-background-ranked.json'}") in err
        assert "--weights" in err
        assert not out.exists() or not any(out.iterdir())  # nothing written

