"""The command layer other than search, round 13: options parsed and then ignored or overridden (`--encoding
independent` beside the abstract scorer alone, `pools --ranked --abstracts`, `compare --data` of runs that are not
reviewer runs), user errors found only after torch loaded or after benchmarks ran (`data hard-negatives` method
options, encode options of the encoding, `suite --aggregate/--bm25-alpha`), and results files lost when the reader
of stdout went away before they were written (`compare --out`, `reviewers --predictions --out`, a format's
`--compare`)."""

from __future__ import annotations

import json

import pytest

from aspire import cliutil
from aspire.cli import evaluate as evaluate_cli
from aspire.cli import evaluate_options
from aspire.paths import DATA
from tests.test_light_commands import probe

REV = DATA / "reviewer-matching"
needs_reviewers = pytest.mark.skipif(not (REV / "predictions").is_dir(), reason="no shared reviewer-matching data")


class Reached(Exception):
    """Raised by a stand-in for a runner: the command got past its checks and would have run."""


def _stand_in(monkeypatch, target: str) -> None:
    def reached(*args, **kwargs):
        raise Reached(target)

    monkeypatch.setattr(target, reached)


def _refused(argv, capsys, message: str) -> None:
    """`aspire evaluate argv` stops with status 2 and `message` on stderr, before any runner (a stand-in raises)."""
    try:
        status = evaluate_cli.main(argv)
    except SystemExit as exc:  # a parser error
        status = exc.code
    assert status == 2
    assert message in capsys.readouterr().err


# ---- user errors before torch ---------------------------------------------------------------------------------

def test_method_options_and_encode_options_are_refused_before_torch(tmp_path, tiny_model_dir):
    """`data hard-negatives method=nearest seed=1` loaded the encoder (torch, transformers) before its config check
    refused `seed`; `evaluate csfcube --encoding pass --max-length 5` and `--encoding independent --joiner x` were
    refused by the runner after torch loaded."""
    (tmp_path / "examples").mkdir()
    csf = ["evaluate", "csfcube", "--data", str(tmp_path), "--model", str(tiny_model_dir)]
    rows = probe([
        ["data", "hard-negatives", "--examples", str(tmp_path / "examples"), "--out", str(tmp_path / "hn"),
         "method=nearest", "seed=1", f"model={tiny_model_dir}"],
        [*csf, "--scorer", "abstract", "--encoding", "pass", "--max-length", "5", "--out", str(tmp_path / "a")],
        [*csf, "--scorer", "minl2", "--encoding", "independent", "--joiner", " ", "--out", str(tmp_path / "b")],
    ])
    said = ["does not use the option(s) ['seed']", "encoding 'pass' takes no encode options",
            "unknown encode option 'joiner' for the independent encoding"]
    for (argv, status, heavy, err), message in zip(rows, said):
        assert (status, heavy) == (2, []), (argv, err)
        assert message in err, err


def test_a_data_override_without_equals_is_a_one_line_error(tmp_path, capsys):
    """`aspire data filter ... foo`: the override was read outside the command's error handling, so a word
    without `=` ended in a ValueError traceback (status 1) instead of `error: ...` and status 2."""
    from aspire.cli import data as data_cli

    (tmp_path / "in").mkdir()
    assert data_cli.main(["filter", "--in", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "foo"]) == 2
    assert "error: config override 'foo' must look like section.key=value" in capsys.readouterr().err


def test_pools_checks_its_metric_names_before_the_model_runs(tmp_path, monkeypatch, capsys, tiny_model_dir):
    """`pools --metrics MAP,BOGUS` encoded every pooled paper and wrote the ranked files before the evaluator
    refused the metric name."""
    _stand_in(monkeypatch, "aspire.evaluate.pool_run.run_pools")
    _refused(["pools", "--data", str(tmp_path), "--name", "x", "--model", str(tiny_model_dir), "--scorer", "minl2",
              "--metrics", "MAP,BOGUS", "--out", str(tmp_path / "out")], capsys, "unknown metric 'BOGUS'")


# ---- options parsed and then not read -------------------------------------------------------------------------

def test_encoding_independent_beside_the_abstract_scorer_alone_is_refused(tmp_path, monkeypatch, capsys,
                                                                          tiny_model_dir):
    """The abstract scorer runs on its own whole-abstract encoding (`EvalOptions.checked`): `--scorer abstract
    --encoding independent` ran exactly as without it, the option recorded in the command and nowhere read."""
    _stand_in(monkeypatch, "aspire.evaluate.csfcube.run_csfcube")
    _refused(["csfcube", "--data", str(tmp_path), "--model", str(tiny_model_dir), "--scorer", "abstract",
              "--encoding", "independent", "--out", str(tmp_path / "out")], capsys, "--encoding independent")
    # beside a sentence scorer it is read (the reviewers' fused scorers): kept
    args = evaluate_cli.build_parser().parse_args(["reviewers", "--model", "m", "--scorer", "abstract,minl2",
                                                   "--encoding", "independent", "--out", str(tmp_path / "r")])
    assert evaluate_options.eval_options(args, ["abstract", "minl2"]).encoding == "independent"


def test_pools_ranked_refuses_abstracts(tmp_path, capsys):
    """`pools --ranked` scores ranked files: `--abstracts` (the papers a model would encode) was accepted, not even
    checked to exist, and never read."""
    _refused(["pools", "--data", str(tmp_path), "--name", "x", "--ranked", str(tmp_path), "--exp", "e",
              "--abstracts", str(tmp_path / "no-such.jsonl"), "--out", str(tmp_path / "out")], capsys, "--abstracts")


def _trec_runs(tmp_path):
    (tmp_path / "a.run").write_text("q1 Q0 d1 1 2.0 a\nq1 Q0 d2 2 1.0 a\nq2 Q0 d3 1 2.0 a\nq2 Q0 d4 2 1.0 a\n")
    (tmp_path / "b.run").write_text("q1 Q0 d2 1 2.0 b\nq1 Q0 d1 2 1.0 b\nq2 Q0 d3 1 2.0 b\nq2 Q0 d4 2 1.0 b\n")
    (tmp_path / "qrels").write_text("q1 0 d1 1\nq1 0 d2 0\nq2 0 d3 1\nq2 0 d4 0\n")
    return [str(tmp_path / "a.run"), str(tmp_path / "b.run"), "--qrels", str(tmp_path / "qrels")]


def test_compare_refuses_data_beside_runs_that_are_not_reviewer_runs(tmp_path, capsys):
    """`compare --data` is the reviewer-matching folder of reviewer predictions; beside two TREC runs (or CSFCube
    folders) it was accepted and never read."""
    _refused(["compare", *_trec_runs(tmp_path), "--data", str(tmp_path)], capsys, "--data")
    assert evaluate_cli.main(["compare", *_trec_runs(tmp_path), "--permutations", "10"]) == 0  # without it: runs


# ---- checks the suite made only after benchmarks had run ------------------------------------------------------

@pytest.mark.parametrize("extra, message", [(["--aggregate", "topk:0"], "unknown aggregate 'topk:0'"),
                                            (["--bm25-alpha", "2"], "alpha in [0, 1], got 2.0")])
def test_suite_checks_its_benchmark_settings_before_any_benchmark_runs(tmp_path, monkeypatch, capsys, tiny_model_dir,
                                                                       extra, message):
    """`suite --aggregate topk:0` (reviewers) and `--bm25-alpha 2` (context2doc) were refused by the benchmark that
    reads them, after CSFCube (and every benchmark before it) had run and written its folder."""
    _stand_in(monkeypatch, "aspire.evaluate.suite.run_suite")
    _refused(["suite", "--model", str(tiny_model_dir), "--scorer", "minl2", *extra, "--out", str(tmp_path / "s")],
             capsys, message)


def test_ensemble_suite_checks_its_aggregate_first(tmp_path, monkeypatch, capsys):
    ensemble = tmp_path / "ensemble.yaml"
    ensemble.write_text("members: []\n")
    _stand_in(monkeypatch, "aspire.evaluate.ensemble.run_ensemble_suite")
    _refused(["suite", "--ensemble", str(ensemble), "--aggregate", "median", "--out", str(tmp_path / "s")], capsys,
             "unknown aggregate 'median'")


# ---- results files written before the reader of stdout can go away -------------------------------------------

class _GoneStdout:
    """A stdout whose reader went away: every write and flush raises BrokenPipeError."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def _stdout_gone(monkeypatch) -> None:
    monkeypatch.setattr("sys.stdout", _GoneStdout())
    monkeypatch.setattr(cliutil, "stdout_reader_gone", lambda: True)
    monkeypatch.setattr(cliutil, "silence_stdout", lambda: None)


def test_compare_writes_its_out_file_though_stdout_is_gone(tmp_path, monkeypatch):
    """`compare ... --out FILE | head -1`: the table was printed first, so a reader that went away stopped the
    command (status 141) before FILE was written."""
    runs = _trec_runs(tmp_path)
    _stdout_gone(monkeypatch)
    assert evaluate_cli.main(["compare", *runs, "--permutations", "10", "--out", str(tmp_path / "c.json")]) == 141
    assert set(json.loads((tmp_path / "c.json").read_text())) == {"MRR", "nDCG@10", "MAP"}


@needs_reviewers
def test_reviewer_predictions_write_their_results_though_stdout_is_gone(tmp_path, monkeypatch):
    _stdout_gone(monkeypatch)
    out = tmp_path / "rev"
    assert evaluate_cli.main(["reviewers", "--predictions", f"{REV / 'predictions'}:specter", "--out", str(out)]) == 141
    assert json.loads((out / "results.json").read_text())["experiment"] == "specter"


def test_a_formats_comparison_is_written_though_stdout_is_gone(tmp_path, monkeypatch, tiny_model_dir):
    """`venue --compare DIR`: the figures were printed before compare.json was written."""
    def run_format(command, data, model, out, *args):
        (tmp_path / "out").mkdir()
        return {"representations": {"whole": {"metrics": {"F1": 0.5}, "ci95": {"F1": [0.4, 0.6]}}}}

    monkeypatch.setattr("aspire.evaluate.probes.run_format", run_format)
    monkeypatch.setattr("aspire.evaluate.probes.check_probe_results", lambda *args: None)
    monkeypatch.setattr("aspire.evaluate.probes.compare_probe_results", lambda a, b: {"F1": {"p_value": 1.0}})
    (tmp_path / "other").mkdir()
    _stdout_gone(monkeypatch)
    assert evaluate_cli.main(["venue", "--model", str(tiny_model_dir), "--compare", str(tmp_path / "other"),
                              "--out", str(tmp_path / "out")]) == 141
    assert json.loads((tmp_path / "out" / "compare.json").read_text())["tests"] == {"F1": {"p_value": 1.0}}
