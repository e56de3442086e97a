"""The benchmark registry: the recipe of docs/architecture.md ("add a benchmark": one module with its
metadata and a `register` line, one runner for the suite) works for a toy benchmark registered here only."""

from __future__ import annotations

import json

import pytest

from aspire import benchmarks
from aspire.benchmarks import BENCHMARKS, Benchmark, get_benchmark, register
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
    monkeypatch.setattr(suite, "RUNNERS", dict(suite.RUNNERS))
    bench = register(Benchmark("toy", "toy-data", "toy (2 queries)", ("accuracy",)))
    (tmp_path / "data" / "toy-data").mkdir(parents=True)
    seen = {}

    def rows(benchmark, data, model, scorer, out, settings, **options):
        seen.update(benchmark=benchmark, data=data, model=model, scorer=scorer, out=out)
        return [suite._row(benchmark.title, benchmark.metrics[0], 0.5, (0.0, 1.0), 2)], "toy-fingerprint"

    suite.RUNNERS["toy"] = suite.Runner(rows)
    return bench, seen, tmp_path


def test_a_registered_benchmark_with_a_runner_is_picked_up_by_the_suite(toy):
    bench, seen, tmp_path = toy
    result = suite.run_suite("toy-model", "minl2", tmp_path / "out", tmp_path / "data", benchmarks=["toy"])
    assert seen == {"benchmark": bench, "data": tmp_path / "data" / "toy-data", "model": "toy-model",
                    "scorer": "minl2", "out": tmp_path / "out" / "toy"}
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


def test_the_ensemble_suite_runs_every_registered_benchmark_its_members_apply_to(monkeypatch, tmp_path):
    import yaml

    from aspire.evaluate import ensemble

    config = tmp_path / "ens.yaml"
    config.write_text(yaml.safe_dump({"fusion": "z", "members": [
        {"name": "lex", "model": "bm25", "weight": 1.0}, {"name": "dense", "model": "m", "scorer": "minl2"}]}))
    seen = []

    def rows(bench, cfg, members, data, out, settings, **common):
        seen.append((bench.name, [m.name for m in members], data))
        return [suite._row(bench.title, bench.metrics[0], 0.5, (0.0, 1.0), 2)]

    toy = {"text": Benchmark("text", "text-data", "text queries", ("MRR",)),
           "pools": Benchmark("pools", "pool-data", "pools", ("MAP",))}
    monkeypatch.setattr(ensemble, "BENCHMARKS", toy)
    monkeypatch.setattr(ensemble, "ENSEMBLE_RUNNERS", {"text": ensemble.EnsembleRunner(rows, lexical=True),
                                                       "pools": ensemble.EnsembleRunner(rows)})
    result = ensemble.run_ensemble_suite(config, tmp_path / "out", tmp_path / "data")
    assert seen == [("text", ["lex", "dense"], tmp_path / "data" / "text-data")]
    assert result["skipped"] == ["pools: 1 model member(s), bm25 does not apply there"]
    assert [r["benchmark"] for r in result["rows"]] == ["text queries"]
    del ensemble.ENSEMBLE_RUNNERS["pools"]
    with pytest.raises(ValueError, match=r"\['pools'\] have no ensemble runner"):
        ensemble.run_ensemble_suite(config, tmp_path / "out", tmp_path / "data")
