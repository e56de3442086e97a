"""Round 15: paper records, JSONL reading and writing, checked against Python's json module and brute-force reads.

Defects:
- A line whose JSON Python cannot turn into objects though it scans (an integer of over 4300 digits: int()'s
  ValueError; 100,000 nested brackets: RecursionError) escaped every reader as a raw exception: `read_papers(...,
  skip_bad=True)` stopped there instead of listing the record, `iter_jsonl(on_error="skip")` stopped, and
  `jsonl_objects`, `iter_jsonl` and `read_json` named neither the file nor the line.
- A lone surrogate in an extra field or a label (a `"\\ud800"` escape, which `read_papers` accepts there) made
  `write_papers` / `split_file`, `write_jsonl` / `AtomicJsonl` (the index's papers.jsonl keeps labels) and
  `write_json` fail with UnicodeEncodeError: a file the reader took could not be split or indexed.
- `write_papers` wrote a NaN of an extra field as a bare `NaN` (not JSON), where every other writer writes null.
- `read_papers(max_line_bytes=-1)` read every file as empty: 0 lines, 0 papers, no error (readline(0) reads nothing).
- `iter_jsonl` refused a UTF-8 byte-order mark at the start of a file, which the papers reader ignores.
- `jsonl_objects` ("read as papers files are") took surrogates encoded in bytes (CESU-8), which the papers
  reader rejects as invalid UTF-8.
- A line too long to read named the paper id found in its first bytes, and an integer id was cut there: a
  `"paper_id": 12.5` line was reported as paper '12', a 34-digit id as its first 30 digits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aspire.data.papers import jsonl_objects, read_papers, split_file
from aspire.io import DataError, iter_jsonl, read_json, write_json, write_jsonl
from aspire.jsonsafe import strict_loads

HUGE_INT = "1" + "0" * 5000  # over Python's 4300-digit limit for int()
DEEP = "[" * 100_000 + "]" * 100_000  # deeper than Python's recursion limit, well under 1 MiB


def _line(**fields) -> str:
    record = {"paper_id": "p", "title": "A title", "abstract": ["One sentence."]}
    record.update(fields)
    return json.dumps(record)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- JSON Python cannot build


@pytest.mark.parametrize("value, reason", [(HUGE_INT, "4300 digits"), (DEEP, "nested too deeply")])
def test_read_papers_lists_unbuildable_json_as_a_rejected_record(tmp_path, value, reason):
    bad = _line(paper_id="bad")[:-1] + f', "x": {value}}}'
    path = _write(tmp_path / "p.jsonl", [_line(paper_id="a"), bad, _line(paper_id="b")])
    result = read_papers(path, skip_bad=True)
    assert [p.paper_id for p in result.papers] == ["a", "b"]
    assert [(r.line, r.paper_id) for r in result.rejected] == [(2, None)]
    assert reason in result.rejected[0].reason and result.rejected[0].reason.startswith("invalid JSON")
    assert result.n_lines == 3
    with pytest.raises(DataError, match=r"p\.jsonl:2: invalid JSON"):
        read_papers(path)


def _both_refuse(path, iter_match: str, objects_match: str) -> None:
    """`iter_jsonl` and `jsonl_objects` each refuse `path`, their errors matching `iter_match` and `objects_match`."""
    for reader, match in ((iter_jsonl, iter_match), (jsonl_objects, objects_match)):
        with pytest.raises(DataError, match=match):
            list(reader(path))


@pytest.mark.parametrize("value", [HUGE_INT, DEEP])
def test_iter_jsonl_and_jsonl_objects_name_the_line_of_unbuildable_json(tmp_path, value):
    path = _write(tmp_path / "r.jsonl", ['{"a": 1}', f'{{"a": {value}}}', '{"a": 3}'])
    bad: list[str] = []
    assert [obj["a"] for _, obj in iter_jsonl(path, "skip", bad)] == [1, 3]
    assert len(bad) == 1 and bad[0].startswith(f"{path}:2: invalid JSON")
    _both_refuse(path, r"r\.jsonl:2: invalid JSON", r"r\.jsonl:2: not a JSON line")


def test_read_json_names_the_file_of_unbuildable_json(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(f'{{"n": {HUGE_INT}}}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"c\.json: not JSON: the settings cannot be read"):
        read_json(path, "settings")


# --------------------------------------------------------------------------- lone surrogates written back


def test_split_file_writes_back_a_lone_surrogate_the_reader_took(tmp_path):
    # the raw JSON escapes, as a file holds them; the reader accepts them outside the id, title and sentences
    src = _write(tmp_path / "p.jsonl", [
        _line(paper_id="a", abstract="First one. Second one.", venue="\\ud800 bad"),
        _line(paper_id="b", abstract=["x y.", "z w."], pred_labels=["method_label", "\\udfff"]),
    ])
    src.write_text(src.read_text(encoding="utf-8").replace("\\\\u", "\\u"), encoding="utf-8")
    papers = read_papers(src).papers
    assert papers[0].extra["venue"] == "\ud800 bad" and papers[1].labels == ["method_label", "\udfff"]
    out = tmp_path / "out.jsonl"
    assert split_file(src, out) == (2, [])
    again = read_papers(out, splitter=None).papers
    assert again == papers and [p.extra for p in again] == [p.extra for p in papers]
    assert [p.sentences for p in again] == [["First one.", "Second one."], ["x y.", "z w."]]
    for raw in out.read_bytes().splitlines():  # UTF-8, strict JSON
        strict_loads(raw.decode("utf-8"))


def test_write_jsonl_and_write_json_write_a_lone_surrogate_as_its_escape(tmp_path):
    papers = read_papers(_write(tmp_path / "p.jsonl", [
        _line(paper_id="a", abstract=["s."], pred_labels=["\\ud83d"]).replace("\\\\u", "\\u")])).papers
    records = [{"paper_id": p.paper_id, "sentences": p.sentences, "labels": p.labels} for p in papers]
    assert records[0]["labels"] == ["\ud83d"]
    assert write_jsonl(tmp_path / "index.jsonl", records + [{"plain": "ü"}]) == 2  # as the index writes papers.jsonl
    lines = (tmp_path / "index.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(x) for x in lines] == records + [{"plain": "ü"}]
    assert "ü" in lines[1]  # non-ASCII text is still written as itself
    write_json(tmp_path / "one.json", {"label": "\udc80", "ok": "é"})
    assert json.loads((tmp_path / "one.json").read_text(encoding="utf-8")) == {"label": "\udc80", "ok": "é"}


# --------------------------------------------------------------------------- strict JSON from write_papers


def test_write_papers_writes_strict_json_for_a_non_finite_extra_field(tmp_path):
    src = _write(tmp_path / "p.jsonl", [_line(paper_id="a", score=1.5), _line(paper_id="b")[:-1] + ', "score": NaN}'])
    out = tmp_path / "out.jsonl"
    assert split_file(src, out) == (2, [])
    lines = [strict_loads(x) for x in out.read_text(encoding="utf-8").splitlines()]  # old: ValueError, bare NaN
    assert lines[0]["score"] == 1.5 and "non_finite" not in lines[0]
    assert lines[1]["score"] is None and lines[1]["non_finite"] == {"score": "nan"}


# --------------------------------------------------------------------------- reading limits and encodings


def test_a_negative_max_line_bytes_is_refused_not_read_as_an_empty_file(tmp_path):
    path = _write(tmp_path / "p.jsonl", [_line(paper_id="a")])
    with pytest.raises(ValueError, match="max_line_bytes"):
        read_papers(path, max_line_bytes=-1)
    assert [p.paper_id for p in read_papers(path, max_line_bytes=None).papers] == ["a"]
    zero = read_papers(path, max_line_bytes=0, skip_bad=True)  # every record over the limit, each one named
    assert zero.papers == [] and [r.line for r in zero.rejected] == [1]


def test_iter_jsonl_ignores_a_bom_at_the_start_as_the_papers_reader_does(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + _line(paper_id="a").encode() + b"\n" + _line(paper_id="b").encode() + b"\n")
    assert [p.paper_id for p in read_papers(path).papers] == ["a", "b"]
    assert [obj["paper_id"] for _, obj in iter_jsonl(path)] == ["a", "b"]
    later = tmp_path / "later.jsonl"  # a mark inside the file is still an error, as in the papers reader
    later.write_bytes(_line(paper_id="a").encode() + b"\n\xef\xbb\xbf" + _line(paper_id="b").encode() + b"\n")
    _both_refuse(later, r"later\.jsonl:2", r"later\.jsonl:2")


def test_jsonl_objects_decodes_utf8_as_the_papers_reader_does(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(_line(paper_id="a").encode() + b"\n" + _line(paper_id="b", title="t").encode()
                     .replace(b'"t"', b'"t\xed\xa0\x80"') + b"\n")  # U+D800 encoded in bytes: not UTF-8
    rejected = read_papers(path, skip_bad=True).rejected
    assert [(r.line, r.reason.split(":")[0]) for r in rejected] == [(2, "not valid UTF-8")]
    with pytest.raises(DataError, match=r"r\.jsonl:2: not a JSON line"):
        list(jsonl_objects(path))
    nbsp = tmp_path / "nbsp.jsonl"  # a line of no-break spaces is blank to both
    nbsp.write_bytes(_line(paper_id="a").encode() + b"\n\xc2\xa0\xc2\xa0\n")
    assert read_papers(nbsp).blank_lines == [2]
    assert [n for n, _ in jsonl_objects(nbsp)] == [1]


@pytest.mark.parametrize("pid_text, expected", [
    ("12.5", None),  # not an id; the old reading named paper '12', another paper's id
    ("1e5", None),
    ("1234567890123456789012345678901234", None),  # was its first 30 digits
    ("42", "42"),
    ('"P19-1001"', "P19-1001"),
])
def test_a_line_too_long_names_a_paper_id_only_when_it_read_the_whole_id(tmp_path, pid_text, expected):
    long = '{"paper_id": ' + pid_text + ', "title": "t", "abstract": ["' + "word " * 400 + '"]}'
    path = _write(tmp_path / "p.jsonl", [_line(paper_id="12"), long])
    rejected = read_papers(path, skip_bad=True, max_line_bytes=1000).rejected
    assert [(r.line, r.paper_id) for r in rejected] == [(2, expected)]
    assert "more than max_line_bytes=1000" in rejected[0].reason
