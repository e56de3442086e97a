"""The benchmark registry: the recipe of docs/architecture.md ("add a benchmark": one module with its
metadata and a `register` line, one runner line in `aspire.evaluate.suite.RUNNERS`) works for a toy benchmark
registered here only: the suite, the ensemble suite and `compare` all pick it up."""

from __future__ import annotations

import json

import pytest

from aspire import benchmarks
from aspire.benchmarks import BENCHMARKS, Benchmark, get_benchmark, register
from aspire.benchmarks.stats import table_row
from aspire.evaluate import ensemble as ensemble_module
from aspire.evaluate import suite


def test_the_registry_names_the_shipped_benchmarks_and_refuses_unknown_or_twice():
    assert list(BENCHMARKS) == ["csfcube", "reviewers", "context2doc", "venue", "year", "same-author"]
    assert set(suite.RUNNERS) == set(BENCHMARKS)
    with pytest.raises(ValueError, match="unknown benchmark 'nope'; valid: csfcube, reviewers, context2doc, venue, year, same-author"):
        get_benchmark("nope")
    with pytest.raises(ValueError, match="'csfcube' is registered already"):
        register(Benchmark("csfcube", "x", "x", ("MAP",)))


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """A toy benchmark: two queries whose 'model' ranks by string length; registered for this test only."""
    monkeypatch.setattr(benchmarks, "BENCHMARKS", dict(BENCHMARKS))
    monkeypatch.setattr(suite, "BENCHMARKS", benchmarks.BENCHMARKS)
    # ensemble binds the registry at import: imported here, before the toy is registered, and patched the same way,
    # so that the toy never outlives this test in a module imported while it was registered
    monkeypatch.setattr(ensemble_module, "BENCHMARKS", benchmarks.BENCHMARKS)
    bench = register(Benchmark("toy", "toy-data", "toy (2 queries)", ("accuracy",)))
    (tmp_path / "data" / "toy-data").mkdir(parents=True)
    seen = {}

    def rows(benchmark, data, model, scorer, out, settings, options):
        seen.update(benchmark=benchmark, data=data, model=model, scorer=scorer, out=out, batch=options.batch_size)
        return [table_row(benchmark.title, benchmark.metrics[0], 0.5, (0.0, 1.0), 2)], "toy-fingerprint"

    def ensemble(benchmark, data, members, out, settings, fuse):
        fused = fuse([{"q": [("long-paper", 1.0), ("p", 0.0)]}, {"q": [("p", 1.0), ("long-paper", 0.0)]}])
        seen.update(members=[m.name for m in members], fused=[c for c, _ in fused["q"]])
        return [table_row(benchmark.title, benchmark.metrics[0], 0.5, (0.0, 1.0), 2)]

    def compare(a, b, metrics, data, n_perm, seed, docs=None):
        seen.update(compared=(a, b))
        return {"accuracy": {"a": 1.0, "b": 0.5, "delta": 0.5, "ci95": [0.0, 1.0], "p_value": 0.5}}

    monkeypatch.setitem(suite.RUNNERS, "toy", suite.Runner(rows, ensemble, compare))  # the one table, shared
    return bench, seen, tmp_path


def test_a_registered_benchmark_with_a_runner_is_picked_up_by_the_suite(toy):
    bench, seen, tmp_path = toy
    result = suite.run_suite("toy-model", "minl2", tmp_path / "out", tmp_path / "data", benchmarks=["toy"])
    assert seen == {"benchmark": bench, "data": tmp_path / "data" / "toy-data", "model": "toy-model",
                    "scorer": "minl2", "out": tmp_path / "out" / "toy", "batch": 32}
    assert [r["benchmark"] for r in result["rows"]] == ["toy (2 queries)"]
    assert result["encoder_fingerprint"] == "toy-fingerprint" and list(result["seconds"]) == ["toy"]
    written = json.loads((tmp_path / "out" / "suite.json").read_text())
    assert written["rows"] == result["rows"]
    # a lexical-only run (model bm25) skips a benchmark whose runner needs a model
    assert suite.run_suite("bm25", None, tmp_path / "bm25", tmp_path / "data", benchmarks=["toy"])["rows"] == []


def test_a_registered_benchmark_without_a_runner_is_an_error_naming_it(toy):
    register(Benchmark("orphan", "orphan", "orphan", ("MAP",)))
    with pytest.raises(ValueError, match=r"\['orphan'\] have no suite runner"):
        suite.run_suite("m", "minl2", "unused", benchmarks=["orphan"])
    with pytest.raises(ValueError, match="unknown benchmark 'typo'"):
        suite.run_suite("m", "minl2", "unused", benchmarks=["typo"])


def test_the_suite_command_offers_the_registered_names(capsys):
    from aspire.cli import main

    with pytest.raises(SystemExit):
        main(["evaluate", "suite", "--help"])
    assert "csfcube, reviewers, context2doc" in " ".join(capsys.readouterr().out.split())


def test_the_ensemble_suite_and_compare_use_the_toy_benchmark_s_runner(toy, monkeypatch):
    import yaml

    from aspire.evaluate import compare, ensemble

    bench, seen, tmp_path = toy
    monkeypatch.setattr(ensemble, "BENCHMARKS", {"toy": bench})
    config = tmp_path / "ens.yaml"
    config.write_text(yaml.safe_dump({"fusion": "z", "members": [
        {"name": "a", "model": "m", "scorer": "minl2", "weight": 3.0}, {"name": "b", "model": "m", "scorer": "ot"}]}))
    result = ensemble.run_ensemble_suite(config, tmp_path / "out", tmp_path / "data")
    assert seen["members"] == ["a", "b"] and [r["benchmark"] for r in result["rows"]] == ["toy (2 queries)"]
    assert seen["fused"] == ["long-paper", "p"]  # the fuse handed over weighs member a 3:1
    for name in ("x", "y"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"benchmark": "toy-data"}))  # named by its folder
    monkeypatch.setattr(compare, "BENCHMARKS", benchmarks.BENCHMARKS)
    assert compare.compare(str(tmp_path / "x"), str(tmp_path / "y"))["accuracy"]["delta"] == 0.5
    assert seen["compared"] == (str(tmp_path / "x"), str(tmp_path / "y"))


def test_the_ensemble_suite_runs_every_registered_benchmark_its_members_apply_to(monkeypatch, tmp_path):
    import yaml

    from aspire.evaluate import ensemble

    config = tmp_path / "ens.yaml"
    config.write_text(yaml.safe_dump({"fusion": "z", "members": [
        {"name": "lex", "model": "bm25", "weight": 1.0}, {"name": "dense", "model": "m", "scorer": "minl2"}]}))
    seen = []

    def rows(bench, data, members, out, settings, fuse):
        seen.append((bench.name, [m.name for m in members], data))
        return [table_row(bench.title, bench.metrics[0], 0.5, (0.0, 1.0), 2)]

    toy = {"text": Benchmark("text", "text-data", "text queries", ("MRR",)),
           "pools": Benchmark("pools", "pool-data", "pools", ("MAP",))}
    monkeypatch.setattr(ensemble, "BENCHMARKS", toy)
    monkeypatch.setattr(ensemble, "RUNNERS", {"text": suite.Runner(None, rows, lexical=True),
                                              "pools": suite.Runner(None, rows)})
    result = ensemble.run_ensemble_suite(config, tmp_path / "out", tmp_path / "data")
    assert seen == [("text", ["lex", "dense"], tmp_path / "data" / "text-data")]
    assert result["skipped"] == ["pools: 1 member(s) apply (its ensemble fuses model members only, no bm25 member)"]
    assert [r["benchmark"] for r in result["rows"]] == ["text queries"]
    del ensemble.RUNNERS["pools"]
    with pytest.raises(ValueError, match=r"\['pools'\] have no runner"):
        ensemble.run_ensemble_suite(config, tmp_path / "out", tmp_path / "data")


def test_the_suite_table_keeps_its_columns_under_long_names():
    """A benchmark name longer than the old fixed width (34) pushed its metric and value out of line."""
    rows = [table_row("csfcube (two-fold test, all)", "MAP", 39.59, (33.4, 45.3), 50),
            table_row("ACL same-author proximity (sentences)", "nDCG@10", 0.356, (0.32, 0.39), 400)]
    lines = suite.format_rows(rows)
    assert len({line.index(" MAP ") if " MAP " in line else line.index(" nDCG@10 ") for line in lines[1:]}) == 1
    assert len({line.index("[") for line in lines[1:]}) == 1 and lines[0].index("value") < lines[1].index("[")
    assert suite.format_seconds({"csfcube": 331.36, "year": 1.8}) == "seconds: csfcube 331, year 2"
