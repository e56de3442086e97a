"""Round 76: `aspire search --interactive` names the stdin line of each bad query line (`stdin line N: ...`, as
`--queries FILE` names FILE:LINE), and reads stdin's lines undecoded (`aspire.io.stream_lines`), so that a byte that
is not UTF-8 is named by its line and 1-based byte column, as in a `--queries` file: a strict stdin ended the session
at it (no line, a byte offset of the read buffer, the run file of the queries before it lost) and a surrogateescape
one read it as text (`paper 'p2' has no '\\udcff1' sentence`). `--queries -` reads stdin the same way."""

from __future__ import annotations

import io

import pytest

from aspire.cli.search import main as search_main
from aspire.io import decoded_lines, stream_lines
from tests.test_search_cli import build_labelled_index


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model_dir):
    return build_labelled_index(tmp_path_factory.mktemp("r76-interactive"), tiny_model_dir)


def stdin_of(data: bytes, errors: str) -> io.TextIOWrapper:
    """A stdin holding `data`, decoded as UTF-8 with `errors` (strict: a UTF-8 locale; surrogateescape: the C or
    C.UTF-8 locale, where Python reads stdin so)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors=errors)


LINES = (b"p1 0\n"
         b"{bad\n"
         b'{"title": "x", "abstract": ["a b."]}\n'
         b"\n"
         b"# a comment\n"
         b"p1 7\n"
         b"nope\n"
         b"p2 0,\xff1\n"
         b"p3 0\n")
ERRORS = [
    "error: stdin line 2: invalid JSON: Expecting property name enclosed in double quotes (column 2)",
    "error: stdin line 3: missing field 'paper_id'",
    "error: stdin line 6: sentences: positions [7] out of range 0..2 for paper p1 (3 sentence(s))",
    "error: stdin line 7: paper 'nope' is not in the index (8 papers)",
    "error: stdin line 8: not UTF-8 text (byte 0xff at column 6)",
]


@pytest.mark.parametrize("errors", ["strict", "surrogateescape"])
def test_each_bad_interactive_line_is_named_and_the_session_goes_on(index_dir, tmp_path, monkeypatch, capsys, errors):
    run = tmp_path / "i.run"
    monkeypatch.setattr("sys.stdin", stdin_of(LINES, errors))
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--interactive", "--k", "2", "--quiet", "--run-out", str(run)]) == 1
    assert capsys.readouterr().err.splitlines() == ERRORS
    # the lines around the bad ones are answered, the one after the bad byte too, and the run file is written
    assert [row.split()[0] for row in run.read_text().splitlines()] == ["p1", "p1", "p3", "p3"]


def test_a_text_stdin_without_a_buffer_counts_lines_the_same(index_dir, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(LINES.decode("utf-8", "surrogateescape")))
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--interactive", "--k", "2", "--quiet", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ERRORS and len(captured.out.splitlines()) == 2


@pytest.mark.parametrize("errors", ["strict", "surrogateescape"])
@pytest.mark.parametrize("data, line, column", [(b"p1 0\np2 0,\xff1\np3\n", 2, 6), (b"\xfe\n", 1, 1),
                                                (b"p1\r\n# c\n\rp2\xe9 0\n", 4, 3)])
def test_a_byte_that_is_not_utf8_is_named_alike_by_a_file_stdin_and_the_session(index_dir, tmp_path, monkeypatch,
                                                                                   capsys, errors, data, line, column):
    byte = data.splitlines()[line - 1][column - 1]  # the column counts bytes from 1
    said = f"not UTF-8 text (byte 0x{byte:02x} at column {column})"
    queries = tmp_path / "queries.txt"
    queries.write_bytes(data)
    common = ["--index", str(index_dir), "--k", "2", "--quiet"]
    capsys.readouterr()
    assert search_main([*common, "--queries", str(queries)]) == 2
    assert capsys.readouterr().err == f"error: {queries}:{line}: {said}\n"
    monkeypatch.setattr("sys.stdin", stdin_of(data, errors))
    assert search_main([*common, "--queries", "-"]) == 2
    assert capsys.readouterr().err == f"error: -:{line}: {said}\n"
    monkeypatch.setattr("sys.stdin", stdin_of(data, errors))
    assert search_main([*common, "--interactive"]) == 1
    assert capsys.readouterr().err == f"error: stdin line {line}: {said}\n"


def test_stream_lines_cuts_stdin_where_a_file_is_cut():
    data = b"a\r\nb\rc\n\n\xff d\r\n\xe2\x80\xa8e"  # U+2028 is no line break of a file, nor of stdin
    assert [raw.decode("utf-8", "replace") for raw in stream_lines(stdin_of(data, "strict"))] == [
        "a", "b", "c", "", "\ufffd d", "\u2028e"]
    with pytest.raises(ValueError, match=r"^-:5: not UTF-8 text \(byte 0xff at column 1\)$"):
        decoded_lines(data, "-")
