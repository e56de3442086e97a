"""Round 77: `aspire search` query lines read alike from a `--queries` file, `--queries -` and `--interactive`.
A JSON query line with a key twice is refused naming the key, as the papers file refuses it (`aspire.io.loads_unique`;
plain `json.loads` kept the last value unsaid). A UTF-8 byte-order mark is no part of stdin's first line, as it is no
part of a file's (`aspire.io.stream_lines`; it once asked for paper '\\ufeffp1'). With `--run-out`, an id repeated in
`--interactive` names the stdin line of its first query, as `--queries` names the line (it said "query N")."""

from __future__ import annotations

import io

import pytest

from aspire.cli.search import main as search_main
from aspire.io import stream_lines
from tests.test_reliability_round76_interactive import stdin_of
from tests.test_search_cli import build_labelled_index


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model_dir):
    return build_labelled_index(tmp_path_factory.mktemp("r77-querylines"), tiny_model_dir)


TWICE = b'{"paper_id": "n", "title": "t", "abstract": ["a b."], "paper_id": "m"}\n'
SAID = "the key 'paper_id' twice in one object; a key names one value"


def test_a_json_query_line_with_a_key_twice_is_refused_naming_the_key(index_dir, tmp_path, monkeypatch, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_bytes(b"p1\n" + TWICE)
    common = ["--index", str(index_dir), "--k", "2", "--quiet", "--json"]
    capsys.readouterr()
    assert search_main([*common, "--queries", str(queries)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {queries}:2: {SAID}\n" and captured.out == ""
    monkeypatch.setattr("sys.stdin", stdin_of(b"p1\n" + TWICE + b"p2\n", "strict"))
    assert search_main([*common, "--interactive"]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"error: stdin line 2: {SAID}\n"
    assert [line.split('"query_id": ')[1][:4] for line in captured.out.splitlines()] == ['"p1"', '"p2"']


@pytest.mark.parametrize("errors", ["strict", "surrogateescape"])
def test_a_byte_order_mark_is_no_part_of_stdins_first_line(index_dir, tmp_path, monkeypatch, capsys, errors):
    data = "\ufeffp1 method\r\np2\t0,1\r\n".encode("utf-8")
    common = ["--index", str(index_dir), "--k", "2", "--quiet", "--json"]
    answered = ['"query_id": "p1", "query_sentences": [2]', '"query_id": "p2", "query_sentences": [0, 1]']
    queries = tmp_path / "queries.txt"
    queries.write_bytes(data)
    capsys.readouterr()
    assert search_main([*common, "--queries", str(queries)]) == 0
    from_file = capsys.readouterr().out
    assert [line[1:len(answered[i]) + 1] for i, line in enumerate(from_file.splitlines())] == answered
    for option in (["--queries", "-"], ["--interactive"]):
        monkeypatch.setattr("sys.stdin", stdin_of(data, errors))
        assert search_main([*common, *option]) == 0, capsys.readouterr().err
        assert capsys.readouterr().out == from_file, option
    monkeypatch.setattr("sys.stdin", io.StringIO(data.decode("utf-8")))  # a text stdin without a buffer
    assert search_main([*common, "--interactive"]) == 0
    assert capsys.readouterr().out == from_file


def test_stream_lines_drops_a_byte_order_mark_only_at_the_very_start():
    data = b"\xef\xbb\xbfa\n\xef\xbb\xbfb\n"  # one later in the stream is a character of its line, as in a file
    assert list(stream_lines(stdin_of(data, "strict"))) == [b"a", b"\xef\xbb\xbfb"]
    assert list(stream_lines(io.StringIO(data.decode("utf-8")))) == [b"a", b"\xef\xbb\xbfb"]
    assert list(stream_lines(io.BytesIO(b"\xef\xbb\xbf\r\nx\ry"))) == [b"", b"x", b"y"]  # a binary stream: its bytes


def test_an_interactive_repeated_query_id_names_the_stdin_line_of_the_first(index_dir, tmp_path, monkeypatch, capsys):
    run = tmp_path / "i.run"
    monkeypatch.setattr("sys.stdin", io.StringIO("# ids\n\np1 0\np3 9\np3 1\np1 1\n"))
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--interactive", "--k", "2", "--quiet", "--run-out", str(run)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: stdin line 4: sentences: positions [9] out of range"), err
    assert err[1:] == ["error: stdin line 6: query id 'p1' again (first at stdin line 3): the run file (--run-out) "
                       "holds one ranking a query id; write each selection of a paper's sentences to a run of its own"]
    assert [row.split()[0] for row in run.read_text().splitlines()] == ["p1", "p1", "p3", "p3"]


def test_a_query_line_nested_too_deeply_is_that_lines_error_and_the_session_goes_on(index_dir, monkeypatch, capsys):
    """json.loads raises RecursionError (not a ValueError) on a line nested 100,000 deep: it ended the session."""
    deep = b'{"paper_id": ' * 100_000 + b"\n"
    monkeypatch.setattr("sys.stdin", stdin_of(b"p1\n" + deep + b"p2\n", "strict"))
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--interactive", "--k", "2", "--quiet", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "error: stdin line 2: invalid JSON: nested too deeply\n"
    assert [line.split('"query_id": ')[1][:4] for line in captured.out.splitlines()] == ['"p1"', '"p2"']
