"""`aspire search` used as a user would (round 4): a run file never overwrites the command's own input, lands under a
file or loses a column; an empty query file is an error, not a search of nothing; `python -m aspire.search` runs the
command its config file documents."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_search_cli import build_labelled_index

from aspire.cli.search import main as search_main


@pytest.fixture(scope="module")
def index(tmp_path_factory, tiny_model_dir):
    return build_labelled_index(tmp_path_factory.mktemp("round4-cli"), tiny_model_dir)


def test_run_out_naming_the_queries_file_is_refused_before_it_is_replaced(index, tmp_path, capsys):
    """`--run-out` the same file as `--queries` replaced the user's queries with the run (exit 0)."""
    queries = tmp_path / "queries.txt"
    queries.write_text("p1\np2 method\n")
    alias = tmp_path / "alias.txt"
    alias.symlink_to(queries)
    for run_out in (queries, tmp_path / "." / "queries.txt", alias):
        capsys.readouterr()
        assert search_main(["--index", str(index), "--queries", str(queries), "--run-out", str(run_out),
                            "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --run-out ") and "is the --queries input" in err, err
        assert queries.read_text() == "p1\np2 method\n"
    paper = tmp_path / "query.json"
    paper.write_text(json.dumps({"paper_id": "new", "title": "t", "abstract": ["the data is new."]}))
    assert search_main(["--index", str(index), "--query-file", str(paper), "--run-out", str(paper), "--quiet"]) == 2
    assert "is the --query-file input" in capsys.readouterr().err
    assert json.loads(paper.read_text())["paper_id"] == "new"


def test_run_out_under_a_file_is_refused_before_any_query_runs(index, tmp_path, capsys):
    """A --run-out below a file was found only at the write after every query: 'File exists: q.txt', results
    printed and the run lost."""
    queries = tmp_path / "queries.txt"
    queries.write_text("p1\n")
    capsys.readouterr()
    assert search_main(["--index", str(index), "--queries", str(queries), "--run-out", str(queries / "a" / "out.run"),
                        "--json", "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"error: --run-out {queries / 'a' / 'out.run'}: {queries} is a file, not a folder\n"
    run = tmp_path / "new" / "out.run"  # a missing folder is still made
    assert search_main(["--index", str(index), "--queries", str(queries), "--run-out", str(run), "--quiet"]) == 0
    assert run.read_text().split()[:2] == ["p1", "Q0"]


@pytest.mark.parametrize("option, value", [("--run-out", ""), ("--run-tag", "my tag"), ("--run-tag", "")])
def test_run_out_options_that_would_drop_the_run_or_shift_its_columns_are_refused(index, tmp_path, capsys, option,
                                                                                   value):
    """`--run-out ""` (an unset variable) wrote no run and exited 0; a tag with a space wrote 7 columns a line."""
    argv = ["--index", str(index), "--query-id", "p1", "--quiet", "--run-out", str(tmp_path / "out.run"), option, value]
    with pytest.raises(SystemExit) as exc:
        search_main(argv)
    assert exc.value.code == 2
    assert f"argument {option}:" in capsys.readouterr().err
    assert not (tmp_path / "out.run").exists()


def test_an_empty_query_file_is_an_error_not_a_search_of_nothing(index, tmp_path, capsys):
    """An empty --query-file searched nothing, printed nothing and exited 0 (an empty run file with --run-out)."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    run = tmp_path / "out.run"
    capsys.readouterr()
    assert search_main(["--index", str(index), "--query-file", str(empty), "--run-out", str(run), "--quiet"]) == 2
    assert capsys.readouterr().err == f"error: {empty}: no papers in the query file\n"
    assert not run.exists()


def test_a_folder_given_as_the_queries_file_is_called_a_folder(index, tmp_path, capsys):
    """A folder was reported as 'queries file not found'."""
    for option in ("--queries", "--query-file"):
        capsys.readouterr()
        assert search_main(["--index", str(index), option, str(tmp_path), "--quiet"]) == 2
        assert capsys.readouterr().err == f"error: Is a directory, not a file ({option}): {tmp_path}\n"


@pytest.mark.parametrize("module", ["aspire.search", "aspire.cli.search"])
def test_python_dash_m_runs_the_search_command(module, index):
    """`python -m aspire.search --index ... --query-id ...` (configs/index.yaml) did nothing and exited 0."""
    done = subprocess.run([sys.executable, "-m", module, "--index", str(index), "--query-id", "p1", "--k", "2",
                           "--json", "--quiet"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert [h["paper_id"] != "p1" for h in json.loads(done.stdout)["hits"]] == [True, True]


def test_a_fuse_the_first_stage_does_not_use_is_said(index, caplog, capsys):
    """`--fuse` beside a first stage that fuses nothing was accepted and silently unused."""
    with caplog.at_level("WARNING", logger="aspire.cli.search"):
        assert search_main(["--index", str(index), "--query-id", "p1", "--k", "2", "--fuse", "rrf:20"]) == 0
    assert "--fuse rrf:20 is not used: it fuses the lists of --stages ann,bm25, and the first stage is ann" in caplog.text
    assert caplog.text.count("not used") == 1  # said once, not again by the search for the query
    caplog.clear()
    with caplog.at_level("WARNING", logger="aspire.cli.search"):
        assert search_main(["--index", str(index), "--query-id", "p1", "--k", "2", "--stages", "ann,bm25",
                            "--fuse", "rrf:20"]) == 0
    assert "is not used" not in caplog.text


def test_encode_names_a_folder_given_as_corpus_and_refuses_out_beside_long_report(tmp_path, capsys):
    """`aspire encode --corpus DIR` said only "Is a directory: DIR"; `--long-report --out X` checked X, then ignored it."""
    from aspire.cli.encode import main as encode_main

    assert encode_main(["--model", "minilm", "--corpus", str(tmp_path), "--out", str(tmp_path / "v")]) == 2
    assert f"error: Is a directory, not a file (--corpus): {tmp_path}" in capsys.readouterr().err
    (tmp_path / "c.jsonl").write_text('{"paper_id": "p1", "title": "t", "abstract": ["s."]}\n')
    with pytest.raises(SystemExit) as exc:
        encode_main(["--model", "minilm", "--corpus", str(tmp_path / "c.jsonl"), "--long-report", "--out", "x"])
    assert exc.value.code == 2 and "--long-report encodes and writes nothing: leave out --out" in capsys.readouterr().err
