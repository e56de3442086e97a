"""The command layer loads no torch, transformers or faiss until a command runs: every `aspire ... --help`
and the user errors a command checks first (a missing file or index, a bad option) come from a process
that never imported them (issue 44: help in well under a second). Each check runs in a fresh interpreter,
since this test process has imported torch long before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from aspire.config import save_config
from aspire.index.config import IndexBuildConfig
from tests.test_cli import HELP_ARGVS

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "faiss", "sentence_transformers")

# runs each argv through the `aspire` dispatcher in one fresh interpreter; prints, per argv, its exit
# status and the heavy modules that were imported by the time it returned
PROBE = """
import contextlib, io, json, sys
from aspire.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            status = main(argv)
        except SystemExit as exc:
            status = exc.code
    out.append([argv, status, [m for m in HEAVY if m in sys.modules], err.getvalue()[-600:]])
print(json.dumps(out))
"""


def probe(argvs: list[list[str]]) -> list[tuple[list[str], int, list[str], str]]:
    code = f"HEAVY = {HEAVY!r}\n" + PROBE
    done = subprocess.run([sys.executable, "-c", code, json.dumps(argvs)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return [tuple(row) for row in json.loads(done.stdout)]


def test_every_help_exits_0_without_importing_torch():
    rows = probe([[*argv, "--help"] for argv in [[]] + HELP_ARGVS])
    assert len(rows) == len(HELP_ARGVS) + 1
    assert [(argv, status) for argv, status, _, _ in rows if status != 0] == []
    # one process for all: the first command line that imported a heavy module is the one named
    assert [(argv, heavy) for argv, _, heavy, _ in rows if heavy][:1] == []


def test_user_errors_come_before_torch(tmp_path):
    missing = str(tmp_path / "missing.jsonl")
    built = tmp_path / "built"  # what a build leaves: the pointer and its generation's manifest
    (built / "gen-000001").mkdir(parents=True)
    (built / "gen-000001" / "manifest.json").write_text("{}")
    (built / "CURRENT").write_text("gen-000001")
    save_config(IndexBuildConfig(), built / "gen-000001" / "config.yaml")  # its search section: overrides' base
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("")
    examples = tmp_path / "examples"  # a split folder of `aspire data` (its groups file is all evaluate reads first)
    examples.mkdir()
    (examples / "groups.dev.jsonl").write_text("")
    bad_key = tmp_path / "index.yaml"
    bad_key.write_text("index:\n  knd: flat\n")
    cases = [  # (what the one error line says, the command line)
        ("No such file or directory (--corpus)",
         ["index", "build", "--model", "minilm", "--corpus", missing, "--out", str(tmp_path / "i")]),
        ("holds no index", ["index", "info", "--index", str(tmp_path)]),
        ("invalid choice: 'bad'", ["index", "build", "--model", "minilm", "--corpus", missing, "--out", "x",
                                   "--backend", "bad"]),
        ("no CURRENT file", ["search", "--index", str(tmp_path), "--query-id", "p1"]),
        ("No such file or directory (--queries)", ["search", "--index", str(tmp_path), "--queries", missing]),
        ("argument --rerank", ["search", "--index", str(tmp_path), "--query-id", "p1", "--rerank", "bad"]),
        ("No such file or directory (--corpus)",
         ["encode", "--model", "minilm", "--corpus", missing, "--out", str(tmp_path / "v")]),
        ("config file not found", ["train", "--config", missing]),
        ("no CURRENT file", ["serve", "--index", str(tmp_path)]),
        ("already holds an index", ["index", "build", "--corpus", str(corpus), "--out", str(built)]),
        ("no groups.dev.jsonl in --examples", ["cosentbert", "evaluate", "--examples", str(tmp_path)]),
        ("No such file or directory (--model)", ["cosentbert", "evaluate", "--examples", str(examples), "--model",
                                                 missing]),
        ("papers file not found: " + missing, ["papers", "check", missing]),
        ("papers file not found: " + missing, ["papers", "split", missing, "--out", str(tmp_path / "s.jsonl")]),
        # a mistyped model, before the corpus, the benchmark or the first row of the demo is read or encoded
        ("unknown model 'minlm'", ["index", "build", "--model", "minlm", "--corpus", str(corpus), "--out", str(tmp_path / "x")]),
        ("unknown model 'minlm'", ["encode", "--model", "minlm", "--corpus", str(corpus), "--out", str(tmp_path / "x")]),
        ("unknown model 'minlm'", ["evaluate", "csfcube", "--model", "minlm", "--scorer", "ot", "--out", str(tmp_path / "x")]),
        ("unknown model 'minlm'", ["evaluate", "suite", "--model", "minlm", "--scorer", "ot", "--out", str(tmp_path / "x")]),
        ("unknown model '" + str(tmp_path), ["evaluate", "venue", "--model", str(tmp_path), "--out", str(tmp_path / "x")]),
        ("unknown model 'aspire-minlm'", ["demo", "--aspect-model", "aspire-minlm", "--out", str(tmp_path / "d")]),
        ("unknown model 'none'", ["demo", "--model", "none", "--out", str(tmp_path / "d")]),  # 'none' is --aspect-model's
        ("unknown model 'mpnett'", ["teacher", "--teacher", "mpnett", "--out", str(tmp_path / "t")]),
        ("unknown model 'minlm'", ["train", "--config", str(REPO / "configs" / "ts_aspire.yaml"), "model.encoder=minlm",
                                   f"train.out_dir={tmp_path / 'run'}"]),
        # interpolate --model bogus once said "bogus has no document_model.json naming its base encoder: give --base"
        ("unknown model 'bogus'", ["interpolate", "--model", "bogus", "--alpha", "0.5", "--out", str(tmp_path / "s")]),
        ("unknown model 'minlm'", ["export", "--model", "minilm", "--adapter-only", "minlm", "--out", str(tmp_path / "e")]),
        # a cross-encoder by name or folder (train-crossencoder once ranked for 27 s first, self-train ran on)
        ("unknown model 'minlm'", ["train-crossencoder", "--out", str(tmp_path / "ce"), "base_model=minlm"]),
        ("unknown model 'minlm'", ["self-train", "--out", str(tmp_path / "st"), "start_model=minlm"]),
        ("unknown model '" + missing, ["evaluate", "context2doc", "--bm25", "--rerank", missing, "--out", "x"]),
        # a data stage's inputs and model (align's --teacher once failed after 4.9 s, hard-negatives' model.* after 1.8 s)
        ("No such file or directory (--teacher)",
         ["data", "align", "--examples", str(tmp_path), "--teacher", missing, "--out", str(tmp_path / "a")]),
        ("unknown model 'mpnett'", ["data", "hard-negatives", "--examples", str(tmp_path), "--out", str(tmp_path / "h"),
                                    "method=nearest", "model=mpnett"]),
        ("No such file or directory (--in)", ["data", "filter", "--in", missing, "--out", str(tmp_path / "f")]),
        # fusion weights once failed as "could not convert string to float: 'a'"
        ("argument --weights: expected comma-separated numbers, got 'a,b'",
         ["evaluate", "fuse", "--run", "x:e", "--run", "y:e", "--weights", "a,b", "--exp", "f", "--out", "x"]),
        ("argument --weights: expected finite numbers, got '1,nan'",
         ["evaluate", "fuse-runs", "x", "y", "--weights", "1,nan", "--out", "x"]),
        # a count or length out of range, by argparse (--max-length -5 was an OverflowError traceback in the
        # tokenizer; teacher --max-papers -3 'Sample larger than population or is negative')
        ("argument --max-length: expected a positive integer, got -5",
         ["evaluate", "csfcube", "--model", "minilm", "--scorer", "abstract", "--max-length", "-5", "--out", "x"]),
        ("argument --max-papers: expected an integer >= 0, got -3",
         ["teacher", "--teacher", "minilm", "--max-papers", "-3", "--out", str(tmp_path / "t")]),
        ("argument --max-length: expected a positive integer, got 0",
         ["teacher", "--teacher", "minilm", "--max-length", "0", "--out", str(tmp_path / "t")]),
        ("argument --depth: expected a positive integer, got 0", ["evaluate", "context2doc", "--bm25", "--depth", "0",
                                                                   "--out", "x"]),
        ("argument --rank: expected a positive integer, got 0",
         ["export", "--model", str(tmp_path), "--adapter-only", "minilm", "--rank", "0", "--out", "x"]),
        # a config key or value, in a file or an override (index build, search, serve)
        ("unknown config key(s) ['index.knd']",
         ["index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "i"), "--config", str(bad_key)]),
        ("index.kind: 'hnsq' is not one of", ["index", "build", "--corpus", str(corpus), "--out", "x", "index.kind=hnsq"]),
        ("unknown model 'minlm'", ["search", "--index", str(built), "--query-id", "p1", "--model", "minlm"]),
        ("Is a directory, not a file (--run-out)",  # once found at the write, after every query had run
         ["search", "--index", str(built), "--query-id", "p1", "--run-out", str(tmp_path)]),
        ("search.k: must be >= 1, got 0", ["search", "--index", str(built), "--query-id", "p1", "search.k=0"]),
        ("search.rerank: 'bogus' is not one of", ["search", "--index", str(built), "--query-id", "p1", "rerank=bogus"]),
        ("search.ot_tau: must be > 0, got -1.0", ["serve", "--index", str(built), "search.ot_tau=-1"]),
        # an evaluation's own files, before the benchmark is read or run (--compare was once read after the run)
        ("No such file or directory (--labels)",
         ["evaluate", "venue", "--model", "minilm", "--labels", missing, "--out", str(tmp_path / "x")]),
        ("No such file or directory (--compare)",
         ["evaluate", "year", "--model", "minilm", "--compare", missing, "--out", str(tmp_path / "x")]),
        ("No such file or directory (--ensemble)", ["evaluate", "suite", "--ensemble", missing, "--out", "x"]),
        # a training command's --out that holds an earlier run (`cliutil.check_fresh_out`)
        ("already holds an earlier run's files", ["train-crossencoder", "--out", str(built)]),
        ("already holds an earlier run's files", ["self-train", "--out", str(built)]),
        # a folder that a command replaces whole must be one it wrote (`storage.check_replaceable`)
        ("is not an earlier encoding's folder (no shard.json in it)",
         ["encode", "--model", "minilm", "--corpus", str(corpus), "--out", str(built)]),
        ("is not an earlier teacher's folder (no teacher.json in it)",
         ["teacher", "--teacher", "minilm", "--out", str(built)]),
        ("is not an exported model's folder (no aspire_encoder.json in it)",
         ["export", "--model", str(tmp_path), "--adapter-only", "minilm", "--out", str(built)]),
    ]
    rows = probe([argv for _, argv in cases])
    assert len(rows) == len(cases)
    for (expected, argv), (_, status, heavy, err) in zip(cases, rows):
        assert status == 2 and expected in err and heavy == [], (argv, status, heavy, err)


def test_name_tuples_the_options_read_are_their_registries():
    """The plain names the command options offer (so that parsing loads no torch) are the registries' keys
    (the loss kinds and re-rankers: tests/test_recipes.py)."""
    from aspire.evaluate.options import SENTENCE_SCORERS
    from aspire.scoring import SCORER_NAMES, SCORERS

    assert SCORER_NAMES == tuple(SCORERS) == SENTENCE_SCORERS


def test_a_cpu_device_is_named_one_way():
    """`--device cpu:3` is the CPU: it comes back as `cpu`, so that the automatic backend and the vector caches,
    which key on the device's name, treat it as the CPU (it once fell back to the exact torch model, saying the
    fast backends run "on the CPU")."""
    import argparse

    import pytest
    import torch

    from aspire.cliutil import device_name

    assert device_name("cpu") == device_name("cpu:3") == "cpu"
    with pytest.raises(argparse.ArgumentTypeError, match="unknown device 'gpu'"):
        device_name("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(argparse.ArgumentTypeError, match="no CUDA device"):
            device_name("cuda:0")
