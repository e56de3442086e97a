"""Every command-line option reaches the code that reads it, or is refused naming it: options that were parsed
and then silently dropped on some path of `aspire evaluate`, `aspire data`, `aspire index build` and `aspire search`,
and `aspire demo`'s options and table against its results files."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from aspire.cli import data as data_cli
from aspire.cli import evaluate as evaluate_cli
from aspire.cli import search as search_cli
from aspire.paths import DATA

REV = DATA / "reviewer-matching"
CSF = DATA / "csfcube"
COCITE = DATA / "cocite-acl" / "cocitations.jsonl"
needs_reviewers = pytest.mark.skipif(not (REV / "predictions").is_dir(), reason="no shared reviewer-matching data")
needs_csfcube = pytest.mark.skipif(not (CSF / "sample_ranked_pools").is_dir(), reason="no shared CSFCube data")
needs_cocite = pytest.mark.skipif(not COCITE.is_file(), reason="no shared cocite-acl data")


class Reached(Exception):
    """Raised by a stand-in for a runner: the command got past its checks and would have run."""


def _stand_in(monkeypatch, module: str, name: str, seen: dict) -> None:
    def record(*args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
        raise Reached(name)

    monkeypatch.setattr(f"{module}.{name}", record)


def _refused(argv, capsys, message: str) -> None:
    """`aspire evaluate argv` stops with a usage error (status 2) whose text holds `message`, before any runner."""
    with pytest.raises(SystemExit) as exc:
        evaluate_cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


# ---- scorer options given for a scorer that does not read them ---------------------------------------------

def test_scorer_option_table_matches_the_scorers():
    """`SCORER_OPTION_READERS` names exactly the registered scorers whose constructors take each option."""
    from aspire.cli.evaluate_options import SCORER_OPTION_READERS
    from aspire.scoring.scorers import SCORERS

    values = {"--tau": 2.0, "--eps": 0.1, "--window": 2}
    for flag, readers in SCORER_OPTION_READERS.items():
        takes = set()
        for name, cls in SCORERS.items():
            try:
                cls(**{flag[2:]: values[flag]})
            except TypeError:
                continue
            takes.add(name)
        assert takes == set(readers), flag


@pytest.mark.parametrize("command, scorer, extra", [
    pytest.param("context2doc", "abstract", ["--tau", "5"], marks=needs_cocite),  # was dropped: abstract takes none
    ("csfcube", "minl2", ["--tau", "5"]),  # was a TypeError traceback from the scorer's constructor
    pytest.param("context2doc", "attention", ["--eps", "0.1"], marks=needs_cocite),
])
def test_scorer_option_refused_for_a_scorer_that_does_not_read_it(tmp_path, monkeypatch, capsys, tiny_model_dir,
                                                                  command, scorer, extra):
    seen: dict = {}
    module = {"csfcube": "aspire.evaluate.csfcube", "context2doc": "aspire.evaluate.context2doc_run"}[command]
    _stand_in(monkeypatch, module, f"run_{command}", seen)
    argv = [command, "--model", str(tiny_model_dir), "--scorer", scorer, *extra, "--out", str(tmp_path / "o")]
    if command == "csfcube":
        with pytest.raises(SystemExit) as exc:
            evaluate_cli.main(argv)
        assert exc.value.code == 2
    else:
        assert evaluate_cli.main(argv) == 2
    assert f"{extra[0]} goes with --scorer" in capsys.readouterr().err
    assert not seen


def test_scorer_option_kept_when_one_of_several_scorers_reads_it(tmp_path, monkeypatch, tiny_model_dir):
    """reviewers `--scorer abstract,ot --tau 5`: OT reads it (the check is not over-strict)."""
    from aspire.cli.evaluate_options import eval_options

    args = argparse.Namespace(scorer="abstract,ot", tau=5.0, eps=None, window=None, max_length=None, normalize=False,
                              joiner=None, encoding="contextual", no_cache=True, cache_dir=None, batch_size=32,
                              device=None, backend="torch", quantize=None, code=None)
    assert eval_options(args, ["abstract", "ot"]).scorer_options == {"tau": 5.0}


# ---- the search-pipeline paths ---------------------------------------------------------------------------------

@pytest.mark.parametrize("command, runner, extra", [
    ("csfcube", ("aspire.evaluate.csfcube", "run_csfcube_search"), ["--bm25-alpha", "0.5"]),
    ("csfcube", ("aspire.evaluate.csfcube", "run_csfcube_search"), ["--rerank-top", "20"]),
    ("context2doc", ("aspire.evaluate.search_run", "run_search_pipeline"), ["--batch-size", "8"]),
    ("context2doc", ("aspire.evaluate.search_run", "run_search_pipeline"), ["--no-cache"]),
    ("context2doc", ("aspire.evaluate.search_run", "run_search_pipeline"), ["--bm25-alpha", "0.5"]),
])
def test_search_pipeline_refuses_options_its_runner_drops(tmp_path, monkeypatch, capsys, tiny_model_dir, command,
                                                          runner, extra):
    seen: dict = {}
    _stand_in(monkeypatch, *runner, seen)
    _refused([command, "--model", str(tiny_model_dir), "--search-pipeline", "rerank=minl2", *extra,
              "--out", str(tmp_path / "o")], capsys, f"--search-pipeline does not read {extra[0]}")
    assert not seen


@needs_reviewers
def test_reviewers_search_pipeline_refuses_weights(tmp_path, monkeypatch, capsys, tiny_model_dir):
    seen: dict = {}
    _stand_in(monkeypatch, "aspire.evaluate.search_run", "run_reviewers_search", seen)
    _refused(["reviewers", "--model", str(tiny_model_dir), "--search-pipeline", "rerank=minl2", "--weights", "1",
              "--out", str(tmp_path / "o")], capsys, "--search-pipeline does not read --weights")
    assert not seen


# ---- model options where no model runs; BM25 options without BM25 ----------------------------------------------

@pytest.mark.parametrize("command, runner, extra", [
    ("csfcube", ("aspire.evaluate.csfcube", "run_csfcube"), ["--tau", "5"]),
    ("csfcube", ("aspire.evaluate.csfcube", "run_csfcube"), ["--doc-code", "none"]),
    ("context2doc", ("aspire.evaluate.context2doc_run", "run_context2doc"), ["--normalize"]),
    ("context2doc", ("aspire.evaluate.context2doc_run", "run_context2doc"), ["--backend", "onnx"]),
])
def test_bm25_alone_refuses_model_options(tmp_path, monkeypatch, capsys, command, runner, extra):
    seen: dict = {}
    _stand_in(monkeypatch, *runner, seen)
    _refused([command, "--bm25", *extra, "--out", str(tmp_path / "o")], capsys,
             f"--bm25 without --model ranks by BM25 alone, running no model: {extra[0]} would not be read")
    assert not seen


@needs_reviewers
def test_reviewers_bm25_alone_refuses_model_options(tmp_path, monkeypatch, capsys):
    seen: dict = {}
    _stand_in(monkeypatch, "aspire.evaluate.reviewer_run", "run_reviewers", seen)
    _refused(["reviewers", "--bm25", "--max-length", "64", "--out", str(tmp_path / "o")], capsys,
             "--max-length would not be read")
    assert not seen


@pytest.mark.parametrize("extra", [["--k1", "2"], ["--b", "0.5"]])
def test_bm25_parameters_without_bm25_refused(tmp_path, monkeypatch, capsys, tiny_model_dir, extra):
    """`--k1/--b` beside a model run with no BM25 stage were dropped."""
    seen: dict = {}
    _stand_in(monkeypatch, "aspire.evaluate.context2doc_run", "run_context2doc", seen)
    _refused(["context2doc", "--model", str(tiny_model_dir), "--scorer", "abstract", *extra,
              "--out", str(tmp_path / "o")], capsys, "--k1/--b set BM25: give --bm25")
    assert not seen


@needs_csfcube
@pytest.mark.parametrize("extra", [["--tau", "5"], ["--bm25-alpha", "0.5"], ["--encoding", "independent"]])
def test_ranked_refuses_model_and_stage_options(tmp_path, capsys, extra):
    _refused(["csfcube", "--ranked", str(CSF / "sample_ranked_pools"), "--exp", "specter", *extra,
              "--out", str(tmp_path / "o")], capsys, f"--ranked scores existing files, running no model: {extra[0]}")
    assert not (tmp_path / "o").exists()


@needs_reviewers
@pytest.mark.parametrize("extra", [["--aggregate", "topk:3"], ["--exp", "mine"], ["--tau", "5"]])
def test_reviewer_predictions_refuse_options_they_do_not_read(tmp_path, capsys, extra):
    """`--predictions DIR:EXP` scores the files as given: an `--aggregate` was dropped (the figure printed was
    the files' own), and `--exp` too (the experiment is DIR:EXP's)."""
    _refused(["reviewers", "--predictions", f"{REV / 'predictions'}:specter", *extra], capsys,
             f"{extra[0]} would not be read")


# ---- suite ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [["--scorer", "minl2"], ["--aggregate", "topk:3"], ["--bm25-alpha", "0.5"],
                                   ["--device", "cpu"]])
def test_suite_bm25_refuses_what_it_does_not_read(tmp_path, monkeypatch, capsys, extra):
    """`suite --model bm25` runs BM25 alone on context2doc: a `--scorer` was dropped and still recorded in
    suite.json, and every model option was dropped."""
    seen: dict = {}
    _stand_in(monkeypatch, "aspire.evaluate.suite", "run_suite", seen)
    _refused(["suite", "--model", "bm25", *extra, "--out", str(tmp_path / "o")], capsys,
             f"--model bm25 ranks by BM25 alone on context2doc: {extra[0]} would not be read")
    assert not seen


def test_suite_refuses_an_option_of_a_benchmark_it_leaves_out(tmp_path, monkeypatch, capsys, tiny_model_dir):
    seen: dict = {}
    _stand_in(monkeypatch, "aspire.evaluate.suite", "run_suite", seen)
    _refused(["suite", "--model", str(tiny_model_dir), "--scorer", "minl2", "--benchmarks", "csfcube",
              "--aggregate", "topk:3", "--out", str(tmp_path / "o")], capsys,
             "--aggregate applies to the reviewers benchmark, which --benchmarks leaves out")
    assert not seen
    with pytest.raises(Reached):  # the benchmark that reads it is run: accepted
        evaluate_cli.main(["suite", "--model", str(tiny_model_dir), "--scorer", "minl2", "--benchmarks", "reviewers",
                           "--aggregate", "topk:3", "--out", str(tmp_path / "o")])
    assert seen["args"][4] == "topk:3"


def test_suite_of_formats_alone_refuses_scorer_options(tmp_path, monkeypatch, capsys, tiny_model_dir):
    """The SciRepEval formats read the model's cache, batch size, device and backend, never the scorer's options or
    encoding: with only them in --benchmarks, `--tau` was dropped."""
    seen: dict = {}
    _stand_in(monkeypatch, "aspire.evaluate.suite", "run_suite", seen)
    _refused(["suite", "--model", str(tiny_model_dir), "--scorer", "ot", "--tau", "5", "--benchmarks", "venue", "year",
              "--out", str(tmp_path / "o")], capsys, "the SciRepEval formats score their own two representations")
    assert not seen


def test_suite_of_formats_alone_takes_no_scorer(tmp_path, monkeypatch, capsys, tiny_model_dir):
    """The SciRepEval formats read no scorer: with only them in --benchmarks, `--scorer` was required ("give --model
    and --scorer"), then dropped and recorded in suite.json beside rows it never made. Now it is left out, and refused
    naming it when given."""
    seen: dict = {}
    _stand_in(monkeypatch, "aspire.evaluate.suite", "run_suite", seen)
    with pytest.raises(Reached):
        evaluate_cli.main(["suite", "--model", str(tiny_model_dir), "--benchmarks", "venue", "same-author",
                           "--out", str(tmp_path / "o")])
    assert seen["args"][1] is None  # the scorer
    _refused(["suite", "--model", str(tiny_model_dir), "--scorer", "abstract", "--benchmarks", "year",
              "--out", str(tmp_path / "o")], capsys, "--scorer would not be read")
    # a benchmark that ranks with a scorer among them: still required
    _refused(["suite", "--model", str(tiny_model_dir), "--benchmarks", "year", "csfcube", "--out", str(tmp_path / "o")],
             capsys, "give --model and --scorer")


def test_run_suite_of_formats_alone_needs_no_scorer(tmp_path, monkeypatch):
    """`run_suite` with only scorer-free benchmarks runs with `scorer=None` and records it so; a scorer given to them
    is a ValueError naming it, and a missing one where a benchmark reads it still names that benchmark."""
    from aspire.evaluate import suite as suite_mod

    calls = []

    def rows(bench, data, model, scorer, out, settings, options):
        calls.append((bench.name, scorer))
        return [{"benchmark": bench.name, "metric": "m", "value": 0.5, "ci95": [0.4, 0.6], "n": 3, "note": ""}], "fp"

    monkeypatch.setitem(suite_mod.RUNNERS, "venue", suite_mod.Runner(rows, rows, scored=False))
    done = suite_mod.run_suite("minilm", None, tmp_path / "o", tmp_path, benchmarks=["venue"])
    assert calls == [("venue", None)]
    assert json.loads((tmp_path / "o" / "suite.json").read_text())["scorer"] is None and done["rows"]
    with pytest.raises(ValueError, match="scorer 'abstract' would not be read"):
        suite_mod.run_suite("minilm", "abstract", tmp_path / "o", tmp_path, benchmarks=["venue"])
    with pytest.raises(ValueError, match=r"a model needs a scorer \(csfcube"):
        suite_mod.run_suite("minilm", None, tmp_path / "o", tmp_path, benchmarks=["venue", "csfcube"])


def test_ensemble_suite_refuses_backend(tmp_path, monkeypatch, capsys):
    """`suite --ensemble` takes each member's model from its YAML and runs the exact model: `--backend onnx` was
    dropped."""
    seen: dict = {}
    _stand_in(monkeypatch, "aspire.evaluate.ensemble", "run_ensemble_suite", seen)
    config = tmp_path / "ensemble.yaml"
    config.write_text("members: []\n")
    _refused(["suite", "--ensemble", str(config), "--backend", "onnx", "--out", str(tmp_path / "o")], capsys,
             "--backend would not be read")
    assert not seen


# ---- fuse-runs' older spellings ---------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, message", [
    (["--method", "rrf", "--norm", "min-max"], "--norm normalises a weighted sum"),
    (["--method", "wsum", "--fusion", "rrf"], "give --fusion alone"),
])
def test_fuse_runs_refuses_contradicting_spellings(tmp_path, monkeypatch, capsys, extra, message):
    seen: dict = {}
    _stand_in(monkeypatch, "aspire.evaluate.fuse", "fuse_run_files", seen)
    runs = []
    for name in ("a.run", "b.run"):
        (tmp_path / name).write_text("q1 Q0 d1 1 1.0 x\n")
        runs.append(str(tmp_path / name))
    _refused(["fuse-runs", *runs, *extra, "--out", str(tmp_path / "o")], capsys, message)
    assert not seen


# ---- aspire data: overrides of a section the stage does not read -----------------------------------------------

@needs_cocite
def test_data_stage_refuses_overrides_it_does_not_read(tmp_path, capsys):
    records = tmp_path / "records.jsonl"
    with open(COCITE, encoding="utf-8") as fh:
        records.write_text("".join(next(fh) for _ in range(30)), encoding="utf-8")
    ingest = ["cocite-from-records", "--in", str(records), "ingest.exclude_benchmark_test=false", "-q"]
    assert data_cli.main([*ingest, "--out", str(tmp_path / "i0"), "ingest.splitter=regex"]) == 2
    assert "the cocite-from-records stage does not read ingest.splitter" in capsys.readouterr().err
    assert not (tmp_path / "i0" / "report.json").exists()
    assert data_cli.main([*ingest, "--out", str(tmp_path / "i1")]) == 0
    capsys.readouterr()
    assert data_cli.main(["filter", "--in", str(tmp_path / "i1"), "--out", str(tmp_path / "f"), "split.seed=1"]) == 2
    assert "the filter stage does not read split (it reads filter)" in capsys.readouterr().err
    assert not (tmp_path / "f" / "report.json").exists()


# ---- aspire index build: the config's encode.backend -----------------------------------------------------------

def test_index_build_reads_the_configs_backend(tmp_path, monkeypatch, capsys, tiny_model_dir):
    """`encode.backend=onnx encode.quantize=int8` (an override, or a saved config.yaml as --config) was accepted,
    then replaced by --backend's default without a word: the index recorded and encoded with another backend."""
    from aspire.index import __main__ as index_cli

    monkeypatch.setenv("ASPIRE_BACKEND", "torch")
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text(json.dumps({"paper_id": "p1", "title": "t", "abstract": ["a b c."]}) + "\n")
    seen: dict = {}
    _stand_in(monkeypatch, "aspire.index.build", "build_index", seen)
    build = ["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "idx")]
    with pytest.raises(Reached):
        index_cli.main([*build, "encode.backend=onnx", "encode.quantize=int8"])
    encode = seen["args"][3].encode
    assert (encode.backend, encode.quantize) == ("onnx", "int8")
    seen.clear()
    assert index_cli.main([*build, "--backend", "torch", "encode.backend=onnx"]) == 2
    assert "--backend torch and the config's encode.backend onnx (no encode.quantize) disagree" in capsys.readouterr().err
    assert index_cli.main([*build, "encode.backend=tensorrt"]) == 2
    assert "encode.backend: unknown backend 'tensorrt'" in capsys.readouterr().err
    assert not seen


# ---- aspire search --run-tag ------------------------------------------------------------------------------------

def test_search_run_tag_needs_run_out(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        search_cli.main(["--index", str(tmp_path / "idx"), "--query-id", "p1", "--run-tag", "mine"])
    assert exc.value.code == 2
    assert "--run-tag is the tag column of the --run-out file" in capsys.readouterr().err


# ---- aspire demo ------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_demo_options_reach_the_runs_and_its_table_is_the_results_files(small_csfcube, tmp_path, monkeypatch, capsys,
                                                                        tiny_model_dir):
    """A real demo on a small CSFCube with a tiny model: `--cache-dir`, `--batch-size`, `--backend` reach every
    run, every row of the printed table is the figures of that run's results.json, and the vectors are cached
    where `--cache-dir` says."""
    from aspire import demo
    from aspire.evaluate import csfcube

    monkeypatch.delenv("ASPIRE_BACKEND", raising=False)
    received = []
    real = csfcube.run_csfcube

    def spy(root, model, scorer, out, exp=None, options=None, stages=None):
        received.append((scorer, options))
        return real(root, model, scorer, out, exp, options, stages)

    monkeypatch.setattr(csfcube, "run_csfcube", spy)
    out, cache = tmp_path / "demo", tmp_path / "vectors"
    assert demo.main(["--model", str(tiny_model_dir), "--data", str(small_csfcube), "--out", str(out),
                      "--cache-dir", str(cache), "--batch-size", "7", "--backend", "torch", "--aspect-model", "none",
                      "-q"]) == 0
    printed = capsys.readouterr().out
    assert [s for s, _ in received] == [scorer for _, scorer, _, _ in demo.RUNS]
    assert all(o.cache_dir == str(cache) and o.batch_size == 7 and o.encoder_options == {} for _, o in received)
    assert any(cache.rglob("*")), "nothing cached under --cache-dir"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in printed.splitlines() if line.startswith("| ")}
    for label, scorer, _, _ in demo.RUNS:
        results = json.loads((out / scorer / "results.json").read_text())
        row = rows[f"{tiny_model_dir} {label}"]
        figures = re.findall(r"(-?\d+\.\d\d) / (-?\d+\.\d\d)", row)
        assert figures == [(f"{results['test'][g]['MAP']:.2f}", f"{results['test'][g]['NDCG%20']:.2f}")
                           for g in demo.SPECTER], label
    assert f"{tiny_model_dir} on torch fp32" in printed
