"""Round 31: the shared command-line helpers (`aspire.cliutil`) and `aspire evaluate suite`/the SciRepEval formats
(`aspire.cli.evaluate_suite`): option parsers, path checks before heavy imports, exit statuses, --help."""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys

import pytest

from aspire import cliutil
from aspire.benchmarks import BENCHMARKS
from aspire.cli import evaluate
from aspire.cli.evaluate_suite import _check_data
from tests.conftest import REPO, SHARED_DATA


def _aspire(args, tmp_path, timeout=120):
    """Run `aspire ARGS` in a fresh interpreter; (status, stderr, whether torch was imported)."""
    code = ("import sys\nfrom aspire.cli import console\nsys.argv = ['aspire'] + sys.argv[1:]\n"
            "try:\n    rc = console()\nexcept SystemExit as e:\n    rc = e.code\n"
            "print('TORCH', 'torch' in sys.modules, file=sys.stderr)\nsys.exit(rc)")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=timeout)
    return done.returncode, done.stderr, "TORCH True" in done.stderr


# ---- check_fresh_out / check_folders: an --out that can never become a folder ----------------------------------

def test_check_fresh_out_refuses_a_path_under_a_file(tmp_path):
    # once passed (no folder there, no file there), and a training run failed at its first save
    blocker = tmp_path / "notes.txt"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError, match="--out .*notes.txt is a file, not a folder"):
        cliutil.check_fresh_out(blocker / "run")
    with pytest.raises(NotADirectoryError, match="--out"):
        cliutil.check_fresh_out(blocker / "deeper" / "run")


def test_check_fresh_out_refuses_a_dangling_link(tmp_path):
    link = tmp_path / "run"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(FileExistsError, match="--out .*symbolic link"):
        cliutil.check_fresh_out(link)


def test_check_fresh_out_still_passes_new_and_empty_folders(tmp_path):
    cliutil.check_fresh_out(tmp_path / "new" / "run")  # made later, under folders
    (tmp_path / "empty").mkdir()
    cliutil.check_fresh_out(tmp_path / "empty")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "model.bin").write_text("x")
    with pytest.raises(FileExistsError, match="earlier run"):
        cliutil.check_fresh_out(tmp_path / "full")


def test_check_folders_refuses_a_dangling_link(tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(FileExistsError, match="--merge-into .*symbolic link"):
        cliutil.check_folders(merge_into=str(link))
    with pytest.raises(OSError):  # what a command's first write met there
        link.mkdir(parents=True, exist_ok=True)
    cliutil.check_folders(out=str(tmp_path / "a" / "b"))  # still fine: made later


# ---- aspire evaluate suite: its data before any benchmark, BM25 with nothing to run ------------------------------

def _data_root(tmp_path, names):
    root = tmp_path / "data"
    for name in names:
        (root / BENCHMARKS[name].folder).mkdir(parents=True, exist_ok=True)
    return root


def test_suite_wrong_data_is_refused_naming_data_before_torch(tmp_path, tiny_model_dir):
    # once: torch imported and CSFCube's runner reported "annotation file not found", naming no option
    status, err, torch_loaded = _aspire(["evaluate", "suite", "--model", tiny_model_dir, "--scorer", "minl2",
                                         "--data", tmp_path / "nowhere", "--out", tmp_path / "out"], tmp_path)
    assert status == 2, err
    assert "error: No such folder (--data" in err and "csfcube" in err
    assert "Traceback" not in err
    assert not torch_loaded


def test_suite_missing_benchmark_folder_is_found_before_the_first_benchmark(tmp_path, tiny_model_dir):
    # csfcube and reviewers present, context2doc's folder not: it once failed only after the two ran (encoding)
    root = _data_root(tmp_path, ["csfcube", "reviewers"])
    status, err, torch_loaded = _aspire(["evaluate", "suite", "--model", tiny_model_dir, "--scorer", "minl2",
                                         "--benchmarks", "csfcube", "reviewers", "context2doc", "--data", root,
                                         "--out", tmp_path / "out"], tmp_path)
    assert status == 2, err
    assert "context2doc" in err and str(root / "cocite-acl") in err and "--data" in err
    assert not torch_loaded
    assert not (tmp_path / "out" / "csfcube").exists()


def test_check_data_unit(tmp_path):
    root = _data_root(tmp_path, list(BENCHMARKS))
    _check_data(str(root), list(BENCHMARKS))  # all there
    os.rmdir(root / "acl-anthology")
    with pytest.raises(FileNotFoundError, match=r"--data .*the venue benchmark"):
        _check_data(str(root), ["csfcube", "venue", "year"])
    _check_data(str(root), ["csfcube", "csfcube", "reviewers"])  # a name twice is checked once, no error


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs ../shared/data")
def test_check_data_passes_on_the_real_data_root():
    _check_data(str(SHARED_DATA), list(BENCHMARKS))


def test_suite_bm25_with_no_lexical_benchmark_is_refused(tmp_path, capsys):
    # once: a warning, an empty table, an empty suite.json and exit status 0
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        evaluate.main(["suite", "--model", "bm25", "--benchmarks", "csfcube", "reviewers", "--data",
                       str(tmp_path / "nowhere"), "--out", str(out), "-q"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--model bm25 ranks only context2doc" in err and "csfcube reviewers" in err
    assert not (out / "suite.json").exists()


def test_suite_bm25_with_missing_context2doc_data_names_data(tmp_path):
    status = evaluate.main(["suite", "--model", "bm25", "--data", str(tmp_path / "nowhere"),
                            "--out", str(tmp_path / "out"), "-q"])
    assert status == 2
    assert not (tmp_path / "out" / "suite.json").exists()


# ---- option parsers: bad values refused, naming the option (checked correct this round) -----------------------

@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400", "", "0.3,", ",0.7", "a,b", "0.3;0.7"])
def test_number_list_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError):
        cliutil.number_list(text)


def test_number_list_reads_finite_numbers():
    assert cliutil.number_list("0.3, 0.7") == [0.3, 0.7]
    assert all(math.isfinite(v) for v in cliutil.number_list("1e-3,-2,5"))


@pytest.mark.parametrize("parse, text", [(cliutil.positive_int, "0"), (cliutil.positive_int, "-3"),
                                          (cliutil.positive_int, "1.5"), (cliutil.positive_int, "nan"),
                                          (cliutil.non_negative_int, "-1"), (cliutil.non_negative_int, "")])
def test_int_types_refuse(parse, text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected"):
        parse(text)


@pytest.mark.parametrize("text", ["meta", "CPU", "", "cuda:x", "0"])
def test_device_name_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError):
        cliutil.device_name(text)


def test_device_name_cpu_forms():
    assert cliutil.device_name("cpu") == "cpu"
    assert cliutil.device_name("cpu:0") == "cpu"
    assert cliutil.on_cpu("cpu:3") and cliutil.on_cpu(None) and not cliutil.on_cpu("cuda:0")


@pytest.mark.parametrize("argv, option", [
    (["suite", "--model", "bm25", "--out", "o", "--batch-size", "0"], "--batch-size"),
    (["suite", "--model", "m", "--scorer", "minl2", "--out", "o", "--window", "-1"], "--window"),
    (["suite", "--model", "m", "--scorer", "minl2", "--out", "o", "--log-level", "loud"], "--log-level"),
    (["suite", "--model", "m", "--scorer", "minl2", "--out", "o", "--benchmarks", "csfcub"], "--benchmarks"),
    (["venue", "--model", "m", "--out", "o", "--device", "meta"], "--device"),
    (["year", "--model", "m", "--out", "o", "--quantize", "fp8"], "--quantize"),
])
def test_parser_errors_name_the_option(argv, option, capsys):
    with pytest.raises(SystemExit) as stop:
        evaluate.build_parser().parse_args(argv)
    assert stop.value.code == 2
    assert f"argument {option}" in capsys.readouterr().err


def test_invalid_choice_names_the_nearest(capsys):
    with pytest.raises(SystemExit):
        evaluate.build_parser().parse_args(["suite", "--model", "m", "--out", "o", "--benchmarks", "csfcub"])
    assert "did you mean 'csfcube'?" in capsys.readouterr().err


def test_suite_option_conflicts_exit_2_before_torch(tmp_path):
    status, err, torch_loaded = _aspire(["evaluate", "suite", "--model", "bm25", "--aggregate", "mean",
                                         "--out", tmp_path / "o"], tmp_path)
    assert status == 2 and "--aggregate" in err and not torch_loaded
    status, err, torch_loaded = _aspire(["evaluate", "suite", "--model", "minilm", "--scorer", "minl2",
                                         "--benchmarks", "csfcube", "--bm25-alpha", "0.5", "--out", tmp_path / "o"],
                                        tmp_path)
    assert status == 2 and "--bm25-alpha" in err and not torch_loaded


def test_suite_help_is_complete_and_torch_free(tmp_path):
    status, err, torch_loaded = _aspire(["evaluate", "suite", "--help"], tmp_path)
    assert status == 0 and not torch_loaded
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    text = subprocess.run([sys.executable, "-m", "aspire.cli.evaluate", "suite", "--help"], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=60).stdout
    parser = evaluate.COMMANDS["suite"]
    assert parser.purpose.split(" (")[0] in text
    for flag in ("--data", "--benchmarks", "--aggregate", "--bm25-alpha", "--ensemble", "--model", "--scorer",
                 "--backend", "--quantize", "--code", "--quiet", "--log-level", "--out"):
        assert flag in text, flag
    assert "(default: max)" in text or "default max" in text


def test_normalize_overrides():
    assert cliutil.normalize_overrides(["train.lr=1e-5"]) == ["train.lr=1e-5"]
    assert cliutil.normalize_overrides(["search.k=5"], section="search") == ["k=5"]
    with pytest.raises(ValueError, match="section.key=value"):
        cliutil.normalize_overrides(["train.lr"])
