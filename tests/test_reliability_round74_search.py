"""Round 74: `aspire search --queries FILE` (aspire/cli/search.py `_lines`) cuts and decodes its lines as stdin's are
read: a byte that is not UTF-8 is named by file and line (it was named by a byte offset in the whole file), and a JSON
paper holding a U+2028 in its text is one line (`str.splitlines` cut it in two, refused as invalid JSON, while
`--queries -`, `--interactive` and `--query-file` answered the same line)."""

from __future__ import annotations

import io
import json

import pytest

from aspire.cli.search import main as search_main
from tests.test_search_cli import build_labelled_index


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model_dir):
    return build_labelled_index(tmp_path_factory.mktemp("r74-search"), tiny_model_dir)


def test_a_query_line_that_is_not_utf8_is_named_by_file_and_line(index_dir, tmp_path, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_bytes(b"p1 0\np2 0,\xff1\np3\n")
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--queries", str(queries), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {queries}:2: not UTF-8 text (byte 0xff at column 6)\n"
    assert captured.out == ""  # nothing is searched before every query is read


def test_a_json_paper_with_a_line_separator_in_its_text_is_one_query_as_on_stdin(index_dir, tmp_path, monkeypatch,
                                                                                 capsys):
    paper = {"paper_id": "new", "title": "a model\u2028of text", "abstract": ["we propose a new method.\u2028twice.",
                                                                            "the data is scientific."]}
    line = json.dumps(paper, ensure_ascii=False) + "\n"  # JSON allows U+2028 unescaped; aspire's writers keep it so
    queries = tmp_path / "queries.txt"
    queries.write_text("p1 0\n" + line + "p2\n", encoding="utf-8")
    args = ["--index", str(index_dir), "--k", "3", "--json", "--quiet"]
    capsys.readouterr()
    assert search_main(args + ["--queries", str(queries)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    from_file = [json.loads(answer) for answer in captured.out.split("\n")[:-1]]  # the pairs keep its U+2028
    assert [(a["query_id"], a["query_sentences"], len(a["hits"])) for a in from_file] == [
        ("p1", [0], 3), ("new", [0, 1], 3), ("p2", [0, 1, 2], 3)]
    monkeypatch.setattr("sys.stdin", io.StringIO("p1 0\n" + line + "p2\n"))
    assert search_main(args + ["--queries", "-"]) == 0
    assert [json.loads(answer) for answer in capsys.readouterr().out.split("\n")[:-1]] == from_file
