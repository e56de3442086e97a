"""`aspire evaluate`'s command line, round 34: `compare A/run.trec B/run.trec --out A/results.json` replaced run A's
results with the comparison (only folders given as runs were guarded, not the folder of a run file); `reviewers
--predictions :EXP` read the current folder and `DIR:` an experiment named ''; `context2doc --scorer` without
`--model` was refused by the runner without naming either option; `fuse-runs` of run files with no `--qrels` printed a
line of no figures beside a relevance threshold nothing was scored at."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from aspire.cli import evaluate as evaluate_cli
from aspire.paths import DATA
from tests.conftest import REPO
from tests.test_reliability_round16_cli import stand_in_compare

REV = DATA / "reviewer-matching"


def _status(argv) -> int:
    try:
        return evaluate_cli.main(argv)
    except SystemExit as exc:  # a parser error
        return exc.code


def _results_folder(path, scores):
    """A results folder as `csfcube`/`context2doc` write one: run.trec, qrels.trec, results.json."""
    path.mkdir()
    (path / "run.trec").write_text("".join(f"q{q} Q0 d{i} {r + 1} {s} x\n" for q in (1, 2)
                                           for r, (i, s) in enumerate(scores)))
    (path / "qrels.trec").write_text("q1 0 d0 1\nq1 0 d1 0\nq1 0 d2 1\nq2 0 d1 1\nq2 0 d2 0\n")
    (path / "results.json").write_text(json.dumps({"benchmark": "x", "experiment": path.name, "metrics": {"MAP": 1}}))
    return path


# ---- compare --out beside a compared run file -----------------------------------------------------------------

def test_compare_out_may_not_replace_the_results_beside_a_compared_run_file(tmp_path, capsys, monkeypatch):
    stand_in_compare(monkeypatch, "MAP")
    a = _results_folder(tmp_path / "a", [(0, 3.0), (1, 2.0), (2, 1.0)])
    b = _results_folder(tmp_path / "b", [(1, 3.0), (0, 2.0), (2, 1.0)])
    before = (a / "results.json").read_text()
    argv = ["compare", str(a / "run.trec"), str(b / "run.trec"), "--qrels", str(a / "qrels.trec")]
    assert _status([*argv, "--out", str(a / "results.json")]) == 2  # once 0, run a's results replaced
    err = capsys.readouterr().err
    assert "is a file of" in err and str(a) in err
    assert (a / "results.json").read_text() == before
    assert _status([*argv, "--out", str(b / "results.json")]) == 2  # the other run's folder too
    assert json.loads((b / "results.json").read_text())["experiment"] == "b"
    # a new file beside a run file, and a re-run replacing that earlier comparison, still write
    for _ in range(2):
        assert _status([*argv, "--out", str(a / "a-vs-b.json")]) == 0
        assert json.loads((a / "a-vs-b.json").read_text())["MAP"]["per_unit_delta"] == {"q1": 0.5}
    # an existing file elsewhere is the user's to replace, as documented
    other = tmp_path / "elsewhere.json"
    other.write_text("{}")
    assert _status([*argv, "--out", str(other)]) == 0
    assert "MAP" in json.loads(other.read_text())


# ---- reviewers --predictions DIR:EXP ----------------------------------------------------------------------------

def test_reviewers_predictions_refuse_an_empty_folder_or_experiment(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `:specter` once read the files of the current folder
    for spec in (":specter", f"{REV / 'predictions'}:", ":"):
        assert _status(["reviewers", "--predictions", spec]) == 2, spec
        err = capsys.readouterr().err
        assert "--predictions takes DIR:EXP" in err and repr(spec) in err, (spec, err)


def test_reviewers_predictions_still_score_published_files(tmp_path, capsys):
    out = tmp_path / "rv"
    assert _status(["reviewers", "--predictions", f"{REV / 'predictions'}:specter", "--out", str(out)]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["benchmark"] == "reviewer-matching" and doc["experiment"] == "specter"
    assert round(doc["loss"], 4) == 0.2689  # the published SPECTER figure
    assert f"specter: loss {doc['loss']:.4f}" in capsys.readouterr().out


# ---- context2doc / reviewers: bad options refused before torch loads -------------------------------------------

def _evaluate(args, tmp_path):
    """`aspire evaluate ARGS` in a fresh interpreter: (status, stderr, whether torch was imported)."""
    code = ("import sys\nfrom aspire.cli import console\nsys.argv = ['aspire', 'evaluate'] + sys.argv[1:]\n"
            "try:\n    rc = console()\nexcept SystemExit as exc:\n    rc = exc.code\n"
            "print('TORCH', 'torch' in sys.modules, file=sys.stderr)\nsys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    return done.returncode, done.stderr, "TORCH True" in done.stderr


def test_context2doc_scorer_without_model_is_named(tmp_path):
    rc, err, _ = _evaluate(["context2doc", "--scorer", "minl2", "--bm25", "--out", tmp_path / "o"], tmp_path)
    assert rc == 2 and "--scorer needs --model" in err, err  # once "a model needs a scorer and a scorer a model"
    assert not (tmp_path / "o").exists()


def test_bad_options_of_context2doc_and_reviewers_are_refused_before_torch(tmp_path, tiny_model_dir):
    # eval_options promises its refusals before torch is imported; both commands imported their runner (and torch)
    # before reading a single option
    m, out = str(tiny_model_dir), str(tmp_path / "o")
    cases = [
        (["context2doc", "--bm25", "--k1", "nan", "--out", out], "k1=nan"),
        (["context2doc", "--model", m, "--scorer", "minl2", "--max-length", "5", "--out", out], "--max-length"),
        (["reviewers", "--bm25", "--b", "2", "--out", out], "b=2.0"),
        (["reviewers", "--model", m, "--scorer", "minl2", "--tau", "3", "--out", out], "--tau"),
        (["reviewers", "--model", m, "--scorer", "abstract", "--aggregate", "topk:0", "--out", out],
         "--aggregate: unknown aggregate 'topk:0'"),
        (["reviewers", "--predictions", ":specter"], "--predictions takes DIR:EXP"),
    ]
    for args, said in cases:
        rc, err, torch_loaded = _evaluate(args, tmp_path)
        assert rc == 2 and said in err, (args, err)
        assert not torch_loaded, args
    assert not (tmp_path / "o").exists()


# ---- fuse-runs of run files, unscored ---------------------------------------------------------------------------

def test_fuse_runs_of_run_files_without_qrels_say_they_are_unscored(tmp_path, capsys):
    a = _results_folder(tmp_path / "a", [(0, 3.0), (1, 2.0), (2, 1.0)])
    b = _results_folder(tmp_path / "b", [(1, 3.0), (0, 2.0), (2, 1.0)])
    out = tmp_path / "fused"
    assert _status(["fuse-runs", str(a / "run.trec"), str(b / "run.trec"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "not scored: the inputs are run files and no --qrels was given"  # once "  (relevant: ...)"
    doc = json.loads((out / "results.json").read_text())
    assert "metrics" not in doc and doc["experiment"] == "fused"
    assert (out / "run.trec").is_file() and not (out / "qrels.trec").exists()
    # with --qrels the figures print as before, and agree with results.json
    out2 = tmp_path / "fused2"
    assert _status(["fuse-runs", str(a / "run.trec"), str(b / "run.trec"), "--qrels", str(a / "qrels.trec"),
                    "--metric", "MAP", "--out", str(out2)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    doc2 = json.loads((out2 / "results.json").read_text())
    assert line.startswith(f"MAP {doc2['metrics']['MAP']:.4f}") and "relevant: grade >= 1" in line
