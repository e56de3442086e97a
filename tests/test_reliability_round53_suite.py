"""Round 53: `aspire evaluate suite` (`aspire.evaluate.suite.run_suite`) into an --out that holds an earlier suite."""

from __future__ import annotations

import json

import pytest

from aspire import benchmarks
from aspire.benchmarks import Benchmark, register
from aspire.benchmarks.stats import table_row
from aspire.evaluate import suite
from aspire.evaluate.options import EvalOptions


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(benchmarks, "BENCHMARKS", dict(benchmarks.BENCHMARKS))
    monkeypatch.setattr(suite, "BENCHMARKS", benchmarks.BENCHMARKS)
    register(Benchmark("toy", "toy-data", "toy (2 queries)", ("accuracy",)))
    calls = []

    def rows(benchmark, data, model, scorer, out, settings, options):  # its figure depends on max_length
        calls.append((out, dict(options.encode_options)))
        value = 0.25 if options.encode_options.get("max_length") else 0.75
        return [table_row(benchmark.title, benchmark.metrics[0], value, (0.0, 1.0), 2)], "fp"

    monkeypatch.setitem(suite.RUNNERS, "toy", suite.Runner(rows, lambda *a: []))
    return calls


def test_a_rerun_into_the_same_out_runs_again_under_its_own_options(toy, tmp_path):
    """The lead (an existing benchmark folder re-used on model and scorer alone) is not so here: run_suite runs every
    benchmark's runner on every call, with the call's options, and suite.json records that call's rows and options."""
    out = tmp_path / "suite"
    for encode, value in (({}, 0.75), ({"max_length": 8}, 0.25)):
        got = suite.run_suite("m", "abstract", out, tmp_path, options=EvalOptions(encode_options=encode),
                              benchmarks=["toy"])
        written = json.loads((out / "suite.json").read_text())
        assert toy[-1] == (out / "toy", encode)
        assert [r["value"] for r in got["rows"]] == [r["value"] for r in written["rows"]] == [value]
        assert written["encode_options"] == encode
    assert len(toy) == 2
