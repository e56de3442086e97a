"""Inputs of `aspire evaluate` refused up front: non-finite or unmatched reviewer predictions, a reviewer
left out of a draw, `--out` over another run or an input, `two_fold --out` a folder, `--compare` of
another kind."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from aspire.benchmarks.reviewers import Draw, ReviewerSet, left_out, read_predictions, reviewer_units
from aspire.cli.evaluate import main
from aspire.evaluate import two_fold
from aspire.paths import DATA

REV = DATA / "reviewer-matching"
CSF = DATA / "csfcube"
needs_data = pytest.mark.skipif(not (REV / "predictions").is_dir() or not CSF.is_dir(), reason="no shared data")


def _rset() -> ReviewerSet:
    subs = {"p1": ("t", "a"), "p2": ("t", "a"), "p3": ("t", "a")}
    ratings = {"r1": [("p1", 5.0), ("p2", 3.0), ("p3", 1.0)], "r2": [("p1", 1.0), ("p2", 4.0)]}
    return ReviewerSet(Path("."), ratings, [Draw("d_20_1", subs, {}), Draw("d_20_2", subs, {})])


def test_infinite_similarity_refused(tmp_path):
    path = tmp_path / "x_d_20_1_ta.json"
    path.write_text(json.dumps({"~r1": {"p1": math.inf}}))
    with pytest.raises(ValueError, match=r"x_d_20_1_ta.json: reviewer ~r1 paper p1: similarity inf is not a finite"):
        read_predictions(path)


def test_no_predicted_reviewer_in_gold_set():
    pred = {"Xr1": {"p1": 1.0, "p2": 0.5, "p3": 0.0}}
    with pytest.raises(ValueError, match=r"no predicted reviewer matches the gold set: predicted Xr1; rated r1, r2"):
        reviewer_units(_rset(), [pred, pred])


def test_reviewer_left_out_of_one_draw_is_reported():
    full = {"r1": {"p1": 3.0, "p2": 2.0, "p3": 1.0}, "r2": {"p1": 0.0, "p2": 1.0}}
    _, counts = reviewer_units(_rset(), [full, {"r1": full["r1"]}])
    assert left_out(counts) == "1 reviewer left out of draw d_20_2 (r2)"
    _, counts = reviewer_units(_rset(), [full, full])
    assert left_out(counts) == ""


def _write_set(folder: Path, exp: str, change) -> None:
    folder.mkdir()
    for i in range(1, 11):
        pred = json.loads((REV / "predictions" / f"specter_d_20_{i}_ta.json").read_text())
        (folder / f"{exp}_d_20_{i}_ta.json").write_text(json.dumps(change(i, pred)))


@needs_data
def test_reviewer_cli_refusals_and_compare(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _write_set(tmp_path / "inf", "inf", lambda i, p: {r: {k: math.inf for k in s} for r, s in p.items()})
    assert main(["reviewers", "--predictions", "inf:inf"]) == 2
    assert "not a finite number" in capsys.readouterr().err
    _write_set(tmp_path / "x", "x", lambda i, p: {"X" + r: s for r, s in p.items()})
    assert main(["reviewers", "--predictions", "x:x"]) == 2
    assert "no predicted reviewer matches the gold set" in capsys.readouterr().err

    def drop(i, p):
        if i == 3:
            p.pop(sorted(p)[0])
        return p
    _write_set(tmp_path / "miss", "miss", drop)
    assert main(["reviewers", "--predictions", "miss:miss", "--out", "rev_miss"]) == 0
    assert "1 reviewer left out of draw d_20_3 (118242121)" in capsys.readouterr().out
    published = f"{REV / 'predictions'}:specter"
    assert main(["compare", "rev_miss", published]) == 2
    assert "118242121 in d_20_3 (not predicted by rev_miss)" in capsys.readouterr().err
    # a folder written from --predictions compares by the predictions it records
    assert main(["reviewers", "--predictions", published, "--out", "rev_spec"]) == 0
    assert main(["compare", "rev_spec", published]) == 0
    assert "loss" in capsys.readouterr().out


@needs_data
def test_out_must_be_new_or_own_results(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ranked = ["csfcube", "--ranked", str(CSF / "sample_ranked_pools"), "--exp", "specter"]
    assert main([*ranked, "--out", "spec"]) == 0
    assert main([*ranked, "--out", "spec"]) == 0  # re-run into its own folder
    assert main(["csfcube", "--bm25", "--out", "spec"]) == 2
    assert "experiment 'specter'" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "spec").iterdir()) == [  # the refused run wrote nothing
        "qrels.trec", "results.json", "run.trec", "test-pid2pool-csfcube-specter-perq.csv"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    assert main([*ranked, "--out", "other"]) == 2
    assert "no readable results.json" in capsys.readouterr().err
    assert main(["context2doc", "--bm25", "--out", "c2d"]) == 0
    shutil.copytree("c2d", "c2d_b")
    before = (tmp_path / "c2d_b" / "run.trec").read_text()
    assert main(["fuse-runs", "c2d", "c2d_b", "--fusion", "rrf", "--out", "c2d_b"]) == 2
    assert "input c2d_b" in capsys.readouterr().err
    assert (tmp_path / "c2d_b" / "run.trec").read_text() == before
    assert main(["fuse-runs", "c2d", "c2d_b", "--out", "fz"]) == 0
    assert main(["fuse-runs", "c2d", "c2d_b", "--out", "fz"]) == 0


@needs_data
def test_probe_compare_checked_first(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["context2doc", "--bm25", "--out", "c2d"]) == 0
    assert main(["same-author", "--model", "no-such-model-but-checked-later", "--compare", "c2d", "--out", "sa"]) == 2
    assert "--compare c2d holds benchmark 'context2doc-test'" in capsys.readouterr().err


def test_probe_compare_kind(tmp_path):
    from aspire.evaluate.probes import check_probe_results

    (tmp_path / "results.json").write_text(json.dumps({"benchmark": "context2doc-test", "experiment": "bm25"}))
    with pytest.raises(ValueError, match="holds benchmark 'context2doc-test', not the results of `aspire evaluate "
                                         "same-author`"):
        check_probe_results(tmp_path, "same-author")


@needs_data
def test_two_fold_out_and_duplicates(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["csfcube", "--ranked", str(CSF / "sample_ranked_pools"), "--exp", "specter", "--out", "spec"]) == 0
    with pytest.raises(SystemExit) as exc:
        two_fold.main(["--candidate", "spec", "--out", "spec"])
    assert exc.value.code == 2
    assert "--out spec is a folder" in capsys.readouterr().err
    assert two_fold.main(["--candidate", "spec", "--candidate", "./spec", "--candidate", str(tmp_path / "spec")]) == 0
    assert capsys.readouterr().out.startswith("1 candidates")


def test_search_pipeline_out_is_checked_against_its_experiment(tmp_path, monkeypatch, capsys, tiny_model_dir):
    """`csfcube --search-pipeline` into another experiment's CSFCube folder: refused before any encoding (once
    only the benchmark was compared, so the run replaced the other experiment's results)."""
    monkeypatch.chdir(tmp_path)
    assert main(["csfcube", "--ranked", str(CSF / "sample_ranked_pools"), "--exp", "specter", "--out", "spec"]) == 0
    before = (tmp_path / "spec" / "results.json").read_text()
    assert main(["csfcube", "--model", str(tiny_model_dir), "--search-pipeline", "rerank=minl2", "--no-cache",
                 "--out", "spec"]) == 2
    assert f"experiment 'specter'), not this one's (experiment '{tiny_model_dir.name}-search-rerank-minl2')" in (
        capsys.readouterr().err)
    assert (tmp_path / "spec" / "results.json").read_text() == before


@pytest.mark.parametrize("command, extra", [
    (["csfcube"], ["--tau", "2"]),
    (["csfcube"], ["--query-text", "facet"]),
    (["context2doc"], ["--normalize", "--joiner", " "]),
    (["reviewers"], ["--k1", "2.0"]),
])
def test_search_pipeline_refuses_model_options_it_does_not_read(tmp_path, capsys, command, extra):
    """`--search-pipeline` runs the index's search config: `--tau`, `--query-text`, `--normalize`, `--k1` ... given
    beside it were accepted and silently ignored."""
    with pytest.raises(SystemExit) as exc:
        main([*command, "--model", "minilm", "--search-pipeline", "rerank=minl2", *extra, "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    assert f"--search-pipeline does not read {extra[0]}" in capsys.readouterr().err
