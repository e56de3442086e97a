"""`aspire evaluate suite` into an --out that holds an earlier suite of the model and scorer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aspire.io import write_json


@pytest.fixture
def fake_suite(monkeypatch):
    """`run_suite` replaced by one writing each named benchmark's folder as its runner names it (CSFCube's ranked
    and per-query files named by the experiment, which names the encoding; reviewers' predictions by aggregate)."""
    import aspire.evaluate.suite as suite

    monkeypatch.setattr("aspire.cli.evaluate.check_model", lambda name: None)

    def run_suite(model, scorer, out, data, aggregate, bm25_alpha, options, benchmarks=None):
        out, exp = Path(out), f"m-{options.encoding}-{scorer}"
        for name in benchmarks:
            folder = out / name
            folder.mkdir(parents=True, exist_ok=True)
            write_json(folder / "results.json", {"benchmark": name, "experiment": exp})
            if name == "csfcube":
                (folder / f"test-pid2pool-csfcube-{exp}-perq.csv").write_text("query\n")
            else:
                (folder / "predictions").mkdir(exist_ok=True)
                (folder / "predictions" / f"{exp}-{aggregate}_ta.json").write_text("{}")
        doc = {"model": str(model), "scorer": scorer, "rows": [], "seconds": {}}
        write_json(out / "suite.json", doc)
        return doc

    monkeypatch.setattr(suite, "run_suite", run_suite)


def _suite(tmp_path, *argv):
    from aspire.cli.evaluate import main

    for name in ("csfcube", "reviewer-matching"):
        (tmp_path / "data" / name).mkdir(parents=True, exist_ok=True)
    return main(["suite", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"), "--model", "m",
                 "--scorer", "minl2", *argv])


def test_a_rerun_removes_the_earlier_runs_files_it_did_not_write_again(tmp_path, fake_suite, capsys):
    """A second suite of the model and scorer with another --encoding once left the first's CSFCube ranked and
    per-query files beside its own (the experiment names the encoding): out/csfcube held two runs' *-perq.csv, and
    `aspire two-fold --per-facet` refused it ("expected one *-perq.csv, found 2"). A benchmark left out of
    --benchmarks keeps its folder whole."""
    out = tmp_path / "out"
    assert _suite(tmp_path, "--benchmarks", "csfcube", "reviewers") == 0
    assert _suite(tmp_path, "--benchmarks", "csfcube", "--encoding", "independent") == 0
    assert sorted(p.name for p in (out / "csfcube").glob("*-perq.csv")) == ["test-pid2pool-csfcube-m-independent-"
                                                                             "minl2-perq.csv"]
    assert json.loads((out / "csfcube" / "results.json").read_text())["experiment"] == "m-independent-minl2"
    assert "csfcube/test-pid2pool-csfcube-m-contextual-minl2-perq.csv" in capsys.readouterr().out
    assert [p.name for p in (out / "reviewers" / "predictions").iterdir()] == ["m-contextual-minl2-max_ta.json"]
    assert _suite(tmp_path, "--benchmarks", "reviewers", "--aggregate", "mean") == 0
    assert [p.name for p in (out / "reviewers" / "predictions").iterdir()] == ["m-contextual-minl2-mean_ta.json"]
    assert (out / "csfcube" / "test-pid2pool-csfcube-m-independent-minl2-perq.csv").is_file()


def _csfcube_results(folder, value: float) -> None:
    from aspire.benchmarks.csfcube import GROUPS

    splits = {f"fold{k}_{part}": {"MAP": value, "NDCG%20": value} for k in (1, 2) for part in ("dev", "test")}
    folder.mkdir()
    write_json(folder / "results.json", {"benchmark": "csfcube", "folds": {g: splits for g in GROUPS}})
    (folder / "test-pid2pool-csfcube-x-perq.csv").write_text("query,facet,test_fold,MAP,NDCG%20\n")


def test_two_fold_refuses_an_out_that_is_a_candidates_file(tmp_path, capsys):
    """`aspire two-fold --candidate 'runs/*' --out runs/a/results.json` once replaced run a's results with the choice
    (the next run refused a: "it has no per-fold figures"); a file the command reads is refused as --out, before it
    runs, and the run is left whole. A new file in a candidate's folder is written."""
    from aspire.evaluate import two_fold

    _csfcube_results(tmp_path / "a", 50.0)
    _csfcube_results(tmp_path / "b", 40.0)
    before = (tmp_path / "a" / "results.json").read_text()
    for out in ("a/results.json", "a/../a/test-pid2pool-csfcube-x-perq.csv"):
        with pytest.raises(SystemExit):
            two_fold.main(["--candidate", str(tmp_path / "*"), "--out", str(tmp_path / out)])
        assert "which this command reads" in capsys.readouterr().err
    assert (tmp_path / "a" / "results.json").read_text() == before
    assert two_fold.main(["--candidate", str(tmp_path / "*"), "--out", str(tmp_path / "a" / "choice.json")]) == 0
    assert json.loads((tmp_path / "a" / "choice.json").read_text())["chosen"] == {"fold1": str(tmp_path / "a"),
                                                                                    "fold2": str(tmp_path / "a")}


@pytest.fixture
def stub_runners(monkeypatch):
    """CSFCube's and reviewer matching's runners replaced by ones writing their folder and one row each."""
    from aspire.evaluate import suite

    def rows(bench, data, model, scorer, out, settings, options):
        Path(out).mkdir(parents=True, exist_ok=True)
        value = {"max": 0.5, "mean": 0.25}[settings["aggregate"]] if bench.name == "reviewers" else 0.75
        return [{"benchmark": bench.name, "metric": "MAP", "value": value, "ci95": [0.0, 1.0], "n": 2, "note": ""}], "fp"

    for name in ("csfcube", "reviewers"):
        monkeypatch.setitem(suite.RUNNERS, name, suite.Runner(rows, rows))
    return suite


def test_a_rerun_of_one_benchmark_keeps_the_earlier_suites_other_rows(tmp_path, stub_runners, caplog):
    """`suite --benchmarks reviewers` into the folder of a full suite once left a suite.json of reviewer matching
    alone beside CSFCube's folder: the suite's table lost CSFCube. Under the same settings the earlier rows stay, in
    the registry's order, and `kept` names the command that made them; under other settings they go, with a warning
    naming them."""
    out = tmp_path / "out"
    stub_runners.run_suite("m", "minl2", out, tmp_path, benchmarks=["csfcube", "reviewers"])
    first = json.loads((out / "suite.json").read_text())
    again = stub_runners.run_suite("m", "minl2", out, tmp_path, benchmarks=["reviewers"])
    assert [(r["benchmark"], r["registry_name"]) for r in again["rows"]] == [("csfcube", "csfcube"),
                                                                             ("reviewers", "reviewers")]
    assert again["kept"] == {"csfcube": {"command": first["command"], "seconds": first["seconds"]["csfcube"]}}
    assert set(again["seconds"]) == {"reviewers"}
    assert json.loads((out / "suite.json").read_text())["rows"] == again["rows"]
    # a third run of reviewers keeps CSFCube's provenance from the first run, not the second
    assert stub_runners.run_suite("m", "minl2", out, tmp_path, benchmarks=["reviewers"])["kept"] == again["kept"]
    # another aggregate, which CSFCube's rows do not read (and --benchmarks reviewers must re-run): they stay
    mean = stub_runners.run_suite("m", "minl2", out, tmp_path, benchmarks=["reviewers"], aggregate="mean")
    assert [(r["benchmark"], r["value"]) for r in mean["rows"]] == [("csfcube", 0.75), ("reviewers", 0.25)]
    assert mean["aggregate"] == "mean" and set(mean["kept"]) == {"csfcube"}
    other = stub_runners.run_suite("m", "ot", out, tmp_path, benchmarks=["reviewers"], aggregate="mean")
    assert [(r["benchmark"], r["value"]) for r in other["rows"]] == [("reviewers", 0.25)] and "kept" not in other
    assert "does not describe the earlier results of csfcube" in caplog.text
    assert "the earlier suite ran other settings (scorer)" in caplog.text


def test_a_rerun_of_the_formats_alone_keeps_the_suites_scorer(tmp_path, stub_runners, monkeypatch):
    """SciRepEval's formats take no scorer, so their re-run records none: the full suite's rows of the benchmarks
    ranked by one were dropped as of "other settings". They stay, with the scorer they were ranked by recorded."""
    def rows(bench, data, model, scorer, out, settings, options):
        Path(out).mkdir(parents=True, exist_ok=True)
        return [{"benchmark": bench.name, "metric": "F1", "value": 0.5, "ci95": [0.0, 1.0], "n": 2, "note": ""}], "fp"

    monkeypatch.setitem(stub_runners.RUNNERS, "venue", stub_runners.Runner(rows, rows, scored=False))
    out = tmp_path / "out"
    stub_runners.run_suite("m", "minl2", out, tmp_path, benchmarks=["csfcube", "venue"])
    again = stub_runners.run_suite("m", None, out, tmp_path, benchmarks=["venue"])
    assert [r["registry_name"] for r in again["rows"]] == ["csfcube", "venue"] and set(again["kept"]) == {"csfcube"}
    assert again["scorer"] == "minl2"  # as the kept CSFCube rows were ranked


def test_a_rerun_names_earlier_folders_it_cannot_describe(tmp_path, stub_runners, caplog):
    """An earlier suite.json whose rows do not name their registered benchmark (written before rows carried
    `registry_name`), or none at all beside a benchmark's folder: nothing is kept, and the warning names the folder."""
    out = tmp_path / "out"
    stub_runners.run_suite("m", "minl2", out, tmp_path, benchmarks=["csfcube", "reviewers"])
    doc = json.loads((out / "suite.json").read_text())
    write_json(out / "suite.json", {**doc, "rows": [{k: v for k, v in r.items() if k != "registry_name"}
                                                    for r in doc["rows"]]})
    again = stub_runners.run_suite("m", "minl2", out, tmp_path, benchmarks=["reviewers"])
    assert "kept" not in again and "the earlier suite.json's rows do not name them" in caplog.text
    caplog.clear()
    (out / "suite.json").unlink()
    stub_runners.run_suite("m", "minl2", out, tmp_path, benchmarks=["reviewers"])
    assert "earlier results of csfcube" in caplog.text and "there is no earlier suite.json" in caplog.text
