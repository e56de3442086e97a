"""Reading papers from JSONL: every bad record is reported with its file and line, every line is accounted for."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aspire.data.papers import (
    BadRecordError,
    Paper,
    ReadResult,
    RejectedRecord,
    iter_papers,
    main,
    read_papers,
    write_papers,
)
from aspire.data.sentences import SentenceSplitter, get_splitter
from aspire.io import DataError

GOOD = {"paper_id": "p1", "title": "A title", "abstract": ["First sentence.", "Second sentence."]}


def line(**fields) -> bytes:
    record = {**GOOD, **fields}
    record = {k: v for k, v in record.items() if v is not _DROP}
    return json.dumps(record).encode("utf-8")


_DROP = object()
_LATIN1 = '{"paper_id": "b", "title": "café", "abstract": ["x."]}'.encode("latin-1")


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def assert_accounted(result: ReadResult) -> None:
    lines = result.paper_lines + [r.line for r in result.rejected] + result.blank_lines
    assert sorted(lines) == list(range(1, result.n_lines + 1))


# (bad line, paper id the error should name or None, words the reason must contain)
BAD_RECORDS = [
    (b'{"paper_id": "x", "title": "t", ', None, "invalid JSON"),
    (b'["paper_id", "x"]', None, "expected a JSON object, got list"),
    (b'"just a string"', None, "expected a JSON object, got str"),
    (line(paper_id=_DROP), None, "missing field 'paper_id'"),
    (line(paper_id=""), None, "paper_id is empty"),
    (line(paper_id="   "), None, "paper_id is empty"),
    (line(paper_id=" 42 "), " 42 ", "paper_id ' 42 ' holds whitespace"),  # once indexed beside '42', a second copy
    (line(paper_id="a\tb"), "a\tb", "paper_id 'a\\tb' holds whitespace"),  # once broke run files and query lines
    (line(paper_id=None), None, "paper_id must be a string or an integer, got null"),
    (line(paper_id=1.5), None, "got float"),
    (line(paper_id=True), None, "got bool"),
    (line(paper_id="b", title="", abstract=[]), "b", "empty title and abstract"),
    (line(paper_id="b", title="  ", abstract="   "), "b", "empty title and abstract"),
    (line(paper_id="b", abstract=[]), "b", "abstract is empty"),
    (line(paper_id="b", title=_DROP), "b", "missing field 'title'"),
    (line(paper_id="b", abstract=_DROP), "b", "missing field 'abstract'"),
    (line(paper_id="b", title=7), "b", "title must be a string, got int"),
    (line(paper_id="b", abstract=42), "b", "abstract must be a string or a list of strings, got int"),
    (line(paper_id="b", abstract={"text": "x"}), "b", "got dict"),
    (line(paper_id="b", abstract=["Fine.", 3]), "b", "abstract[1] must be a string, got int"),
    (line(paper_id="b", abstract=["Fine.", ["nested"]]), "b", "abstract[1] must be a string, got list"),
    (line(paper_id="b", abstract=["Fine.", "  "]), "b", "abstract[1] is empty"),
    (line(paper_id="b", pred_labels=["method_label"]), "b", "pred_labels has 1 labels for 2 sentences"),
    (line(paper_id="b", pred_labels="method_label"), "b", "pred_labels must be a list of strings"),
    (line(paper_id="b", pred_labels=["a", 1]), "b", "pred_labels must be a list of strings"),
    (line(paper_id="b", abstract="One. Two.", pred_labels=["a", "b"]), "b", "needs the abstract as a list"),
    (_LATIN1, "b", f"not valid UTF-8: byte 0xe9 at column {_LATIN1.index(0xE9) + 1}"),
]


@pytest.mark.parametrize("bad, pid, reason", BAD_RECORDS, ids=[r for _, _, r in BAD_RECORDS])
def test_bad_record_raises_naming_file_line_and_id(tmp_path, bad, pid, reason):
    path = write_lines(tmp_path / "papers.jsonl", [line(paper_id="ok1"), b"", bad, line(paper_id="ok2")])
    with pytest.raises(BadRecordError) as err:
        read_papers(path)
    assert isinstance(err.value, ValueError)
    message = str(err.value)
    assert message.startswith(f"{path}:3")
    assert reason in message
    assert err.value.record.line == 3
    assert err.value.record.paper_id == pid
    if pid is not None:
        assert repr(pid) in message


def test_skip_bad_lists_every_bad_record(tmp_path):
    lines = [line(paper_id=f"ok{i}") for i in range(3)]
    for bad, _, _ in BAD_RECORDS:
        lines.append(bad)
        lines.append(b"   ")
    path = write_lines(tmp_path / "papers.jsonl", lines)
    result = read_papers(path, skip_bad=True)
    assert [p.paper_id for p in result.papers] == ["ok0", "ok1", "ok2"]
    assert [r.line for r in result.rejected] == [4 + 2 * i for i in range(len(BAD_RECORDS))]
    for rejected, (_, pid, reason) in zip(result.rejected, BAD_RECORDS):
        assert reason in rejected.reason
        assert rejected.paper_id == pid
        assert rejected.path == str(path)
    assert result.blank_lines == [5 + 2 * i for i in range(len(BAD_RECORDS))]
    assert result.n_lines == 3 + 2 * len(BAD_RECORDS)
    assert_accounted(result)


def test_duplicate_id_names_first_line(tmp_path):
    path = write_lines(
        tmp_path / "dup.jsonl",
        [line(paper_id="a"), line(paper_id="b"), line(paper_id="a"), line(paper_id=7), line(paper_id="7")],
    )
    with pytest.raises(BadRecordError, match=r"dup.jsonl:3 \(paper_id 'a'\): duplicate paper_id, first seen on line 1"):
        read_papers(path)
    result = read_papers(path, skip_bad=True)
    assert [p.paper_id for p in result.papers] == ["a", "b", "7"]
    assert [(r.line, r.reason) for r in result.rejected] == [
        (3, "duplicate paper_id, first seen on line 1"),
        (5, "duplicate paper_id, first seen on line 4"),
    ]


def test_a_rejected_record_does_not_claim_its_id(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [line(paper_id="a", abstract=[]), line(paper_id="a")])
    result = read_papers(path, skip_bad=True)
    assert [p.paper_id for p in result.papers] == ["a"]
    assert result.paper_lines == [2]
    assert [r.line for r in result.rejected] == [1]


def test_integer_ids_become_strings(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [line(paper_id=10010426)])
    assert read_papers(path).papers[0].paper_id == "10010426"


def test_list_abstracts_are_kept_exactly_as_given(tmp_path):
    sentences = ["  Odd  spacing stays.", "e.g. this is kept whole. Even with two sentences inside."]
    path = write_lines(tmp_path / "p.jsonl", [line(abstract=sentences)])
    assert read_papers(path).papers[0].sentences == sentences


def test_string_abstracts_are_split(tmp_path):
    text = "We follow Smith et al. (2020) closely. Results in Fig. 2 are strong (p < 0.05). We conclude."
    path = write_lines(tmp_path / "p.jsonl", [line(abstract=text)])
    paper = read_papers(path).papers[0]
    assert paper.sentences == [
        "We follow Smith et al. (2020) closely.",
        "Results in Fig. 2 are strong (p < 0.05).",
        "We conclude.",
    ]
    assert paper.labels is None


class _Recording(SentenceSplitter):
    name = "recording"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def starts(self, text: str) -> list[int]:
        self.texts.append(text)
        return [i + 1 for i, c in enumerate(text) if c == ";"]


def test_splitter_is_swappable_and_only_used_for_strings(tmp_path):
    splitter = _Recording()
    path = write_lines(tmp_path / "p.jsonl", [line(paper_id="a", abstract="one; two; three"), line(paper_id="b")])
    papers = read_papers(path, splitter=splitter).papers
    assert papers[0].sentences == ["one;", "two;", "three"]
    assert papers[1].sentences == GOOD["abstract"]
    assert splitter.texts == ["one; two; three"]
    with pytest.raises(ValueError, match="unknown sentence splitter"):
        read_papers(path, splitter="no_such_splitter")


def test_labels_and_extra_fields_are_kept(tmp_path):
    labels = ["background_label", "method_label"]
    path = write_lines(tmp_path / "p.jsonl", [line(pred_labels=labels, year=2020, venue="ACL")])
    paper = read_papers(path).papers[0]
    assert paper.labels == labels
    assert paper.extra == {"year": 2020, "venue": "ACL"}


def test_empty_title_with_an_abstract_is_fine(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [line(title="")])
    assert read_papers(path).papers[0].title == ""


def test_length_rules(tmp_path):
    one = line(paper_id="one", abstract=["Only one sentence."])
    many = line(paper_id="many", abstract=[f"Sentence {i}." for i in range(200)])
    huge = line(paper_id="huge", abstract=["word " * 2000 + "end.", "Short."])
    path = write_lines(tmp_path / "p.jsonl", [one, many, huge])
    result = read_papers(path)
    assert [len(p.sentences) for p in result.papers] == [1, 200, 2]
    assert len(result.papers[2].sentences[0]) > 10_000
    limited = read_papers(path, skip_bad=True, max_sentences=100, max_sentence_chars=5000)
    assert [p.paper_id for p in limited.papers] == ["one"]
    assert [r.reason for r in limited.rejected] == [
        "abstract has 200 sentences, more than max_sentences=100",
        "sentence 0 has 10004 characters, more than max_sentence_chars=5000",
    ]


def test_blank_lines_bom_crlf_and_missing_final_newline(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + line(paper_id="a") + b"\r\n\r\n  \t\n" + line(paper_id="b"))
    result = read_papers(path)
    assert [p.paper_id for p in result.papers] == ["a", "b"]
    assert result.blank_lines == [2, 3]
    assert result.n_lines == 4
    assert_accounted(result)


def test_bom_after_the_first_line_is_an_error(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [line(paper_id="a"), b"\xef\xbb\xbf" + line(paper_id="b")])
    with pytest.raises(BadRecordError, match=r"p.jsonl:2: invalid JSON"):
        read_papers(path)


def test_gzip_files_are_read(tmp_path):
    path = tmp_path / "p.jsonl.gz"
    with gzip.open(path, "wb") as f:
        f.write(line(paper_id="a") + b"\n" + b"{oops\n")
    result = read_papers(path, skip_bad=True)
    assert [p.paper_id for p in result.papers] == ["a"]
    assert str(result.rejected[0]).startswith(f"{path}:2: invalid JSON")


def test_iter_papers_streams_and_reports(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [line(paper_id="a"), b"{", line(paper_id="b")])
    seen: list[RejectedRecord] = []
    assert [p.paper_id for p in iter_papers(path, on_reject=seen.append)] == ["a", "b"]
    assert [r.line for r in seen] == [2]
    stream = iter_papers(path)
    assert next(stream).paper_id == "a"
    with pytest.raises(BadRecordError, match="p.jsonl:2"):
        next(stream)


def test_write_then_read_round_trip(tmp_path):
    papers = [
        Paper("a", "Café résumé", ["Naïve sentence.", "Another one."], ["background_label", "result_label"]),
        Paper("b", "", ["Only one."], None, {"year": 2021}),
    ]
    path = tmp_path / "out" / "papers.jsonl"
    assert write_papers(path, papers) == 2
    back = read_papers(path).papers
    assert back == papers
    assert back[1].extra == {"year": 2021}
    assert "Café" in path.read_text(encoding="utf-8")


def test_write_is_atomic(tmp_path):
    path = tmp_path / "papers.jsonl"
    write_papers(path, [Paper("a", "t", ["s."])])
    before = path.read_bytes()
    clashing = Paper("b", "t", ["s."], None, {"abstract": "sneaky"})
    with pytest.raises(ValueError, match="clash with reserved fields"):
        write_papers(path, [Paper("c", "t", ["s."]), clashing])
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["papers.jsonl"]


def test_check_cli_reports_counts_and_every_rejected_record(tmp_path, capsys):
    path = write_lines(tmp_path / "p.jsonl", [line(paper_id="a"), b"[1]", b"", line(paper_id="a")])
    assert main(["check", str(path), "--skip-bad", "--splitter", "spacy_sentencizer"]) == 1
    out = capsys.readouterr().out
    assert f"{path}: 4 lines: 1 papers, 2 rejected, 1 blank" in out
    assert f"rejected: {path}:2: expected a JSON object, got list" in out
    assert f"rejected: {path}:4 (paper_id 'a'): duplicate paper_id, first seen on line 1" in out
    assert main(["check", str(path)]) == 1
    assert f"{path}:2" in capsys.readouterr().err
    clean = write_lines(tmp_path / "clean.jsonl", [line(paper_id="a")])
    assert main(["check", str(clean)]) == 0


def test_split_cli_writes_sentence_lists_once_and_names_what_it_leaves_out(tmp_path, capsys):
    src = write_lines(tmp_path / "p.jsonl", [
        line(paper_id="a", abstract="We study X. It works.", venue="ACL"),
        line(paper_id="b", abstract=["Kept as given.", "Twice."]),
        line(paper_id="c", abstract=["Fine.", "\ufeff"]),
    ])
    out = tmp_path / "split.jsonl"
    assert main(["split", str(src), "--out", str(out), "--splitter", "spacy_sentencizer"]) == 0
    printed = capsys.readouterr().out
    assert f"2 papers written to {out}, 1 rejected record(s) not written" in printed
    assert f"rejected: {src}:3 (paper_id 'c'): abstract[1] has no visible character" in printed
    records = [json.loads(x) for x in out.read_text().splitlines()]
    expected = get_splitter("spacy_sentencizer").split("We study X. It works.")
    assert records[0] == {"paper_id": "a", "title": "A title", "abstract": expected, "venue": "ACL"}
    assert records[1]["abstract"] == ["Kept as given.", "Twice."]
    # the split file reads back to the same papers with no splitter at all
    again = read_papers(out, splitter=None)
    assert [list(p.sentences) for p in again.papers] == [expected, ["Kept as given.", "Twice."]]


def gzip_lines(path: Path, n: int) -> Path:
    """A gzip papers file of `n` papers whose titles are random letters, so the compressed stream is about as long
    as the text and a cut through it leaves many whole lines before it."""
    rng = random.Random(0)
    with gzip.open(path, "wb") as f:
        for i in range(n):
            title = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(400))
            f.write(line(paper_id=f"p{i}", title=title) + b"\n")
    return path


def one_error_line(err: str, path: Path) -> str:
    """The single `error:` line a command printed for `path`, no traceback."""
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert str(path) in err
    return err


def test_split_to_a_gz_name_writes_gzip_that_reads_back(tmp_path, capsys):
    """`split a.jsonl.gz --out b.jsonl.gz` once wrote plain NDJSON under the .gz name, which nothing could read."""
    src = gzip_lines(tmp_path / "a.jsonl.gz", 5)
    out = tmp_path / "b.jsonl.gz"
    assert main(["split", str(src), "--out", str(out)]) == 0
    assert out.read_bytes()[:2] == b"\x1f\x8b"  # the gzip magic
    assert read_papers(out, splitter=None).papers == read_papers(src).papers
    assert main(["check", str(out)]) == 0
    assert "5 lines: 5 papers, 0 rejected, 0 blank" in capsys.readouterr().out
    # the header names the target, not the temporary file, and carries no time: the same papers, the same bytes
    first = out.read_bytes()
    assert first[10:].startswith(b"b.jsonl\x00")  # FNAME, after the 10-byte fixed header
    write_papers(out, read_papers(src).papers)
    assert out.read_bytes() == first


@pytest.mark.parametrize("how", ["same name", "another name for it"])
def test_split_refuses_to_write_over_its_own_input(tmp_path, capsys, how):
    """`split odd.jsonl --out odd.jsonl` once replaced the user's only copy, its rejected records dropped."""
    src = write_lines(tmp_path / "odd.jsonl", [line(paper_id="a"), b"{oops", line(paper_id="b")])
    before = src.read_bytes()
    out = src
    if how != "same name":
        out = tmp_path / "alias.jsonl"
        os.symlink(src.name, out)
    assert main(["split", str(src), "--out", str(out)]) == 2
    err = one_error_line(capsys.readouterr().err, src)
    assert f"the output {out} is the input file {src}" in err
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({src.name, out.name})


def test_split_replaces_another_existing_output_file(tmp_path):
    """As every single output file (`aspire search --run-out`): an existing other --out is replaced, atomically."""
    src = write_lines(tmp_path / "p.jsonl", [line(paper_id="a")])
    out = write_lines(tmp_path / "split.jsonl", [line(paper_id="old")])
    assert main(["split", str(src), "--out", str(out)]) == 0
    assert [p.paper_id for p in read_papers(out).papers] == ["a"]


def test_a_truncated_gzip_file_is_one_error_naming_the_file_and_the_line_reached(tmp_path, capsys):
    """A cut .gz file once ended in a traceback (EOFError); its first papers must not pass for the whole file."""
    whole = gzip_lines(tmp_path / "a.jsonl.gz", 60)
    cut = tmp_path / "t.jsonl.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    seen: list[Paper] = []
    with pytest.raises(DataError) as err:
        for paper in iter_papers(cut, on_reject=lambda r: None):  # not a bad record: the file as a whole is bad
            seen.append(paper)
    found = re.fullmatch(rf"{re.escape(str(cut))}: the gzip stream ends early, after line (\d+) "
                         r"\(a truncated or partly copied file\)", str(err.value))
    assert found, str(err.value)
    reached = int(found.group(1))
    assert 0 < reached < 60 and len(seen) == reached  # every whole line before the cut was read, and named
    with pytest.raises(DataError, match="ends early"):
        read_papers(cut, skip_bad=True)
    out = tmp_path / "x.jsonl"
    for argv in (["check", str(cut)], ["check", str(cut), "--skip-bad"], ["split", str(cut), "--out", str(out)]):
        assert main(argv) == 2
        assert f"after line {reached}" in one_error_line(capsys.readouterr().err, cut)
    assert not out.exists()  # no partial output
    head = tmp_path / "h.jsonl.gz"
    head.write_bytes(whole.read_bytes()[:20])
    with pytest.raises(DataError, match=f"{re.escape(str(head))}: the gzip stream ends early, before the end of its first line"):
        read_papers(head)


def test_a_damaged_gzip_stream_is_one_error_naming_the_file(tmp_path):
    whole = gzip_lines(tmp_path / "a.jsonl.gz", 3)
    data = bytearray(whole.read_bytes())
    data[-6] ^= 0xFF  # the stored CRC
    bad = tmp_path / "crc.jsonl.gz"
    bad.write_bytes(bytes(data))
    with pytest.raises(DataError, match=f"{re.escape(str(bad))}: the gzip stream is damaged, after line 3 \\(CRC check failed"):
        read_papers(bad)


def test_a_gz_name_that_is_not_gzip_is_named(tmp_path, capsys):
    """`printf xx > n.jsonl.gz` once gave `error: Not a gzipped file (b'xx')`, naming no file."""
    path = tmp_path / "n.jsonl.gz"
    path.write_bytes(b"xx")
    with pytest.raises(DataError, match=f"{re.escape(str(path))}: not a gzip file, though its name ends in .gz"):
        read_papers(path)
    assert main(["check", str(path)]) == 2
    one_error_line(capsys.readouterr().err, path)


def test_documented_module_command_runs_the_cli(tmp_path):
    """`python -m aspire.data.papers check|split` (README, experiments/results) goes on working,
    with no runpy warning about the module being imported before it runs."""
    path = write_lines(tmp_path / "p.jsonl", [line(paper_id="a"), b"[1]"])
    proc = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "aspire.data.papers", "check", str(path),
                           "--skip-bad"], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 1, proc.stderr
    assert f"{path}: 2 lines: 1 papers, 1 rejected, 0 blank" in proc.stdout


@pytest.mark.slow
def test_real_csfcube_file_reads_completely(shared_data):
    path = shared_data / "csfcube" / "abstracts-csfcube-preds.jsonl"
    result = read_papers(path, splitter=get_splitter("spacy_sentencizer"))
    assert len(result.papers) == 4205
    assert result.rejected == [] and result.blank_lines == []
    assert all(p.labels is not None and len(p.labels) == len(p.sentences) for p in result.papers)
    assert_accounted(result)


@pytest.mark.slow
def test_real_abstracts_as_strings_are_split_like_the_gold(shared_data, tmp_path):
    """Re-joined CSFCube abstracts, read as strings, mostly come back as the gold sentence lists."""
    src = read_papers(shared_data / "csfcube" / "abstracts-csfcube-preds.jsonl")
    sample = [p for p in src.papers[:200]]
    path = tmp_path / "joined.jsonl"
    path.write_text(
        "".join(json.dumps({"paper_id": p.paper_id, "title": p.title, "abstract": " ".join(p.sentences)}) + "\n"
                for p in sample),
        encoding="utf-8",
    )
    back = read_papers(path).papers
    assert [p.paper_id for p in back] == [p.paper_id for p in sample]
    same = sum(b.sentences == [s.strip() for s in p.sentences] for b, p in zip(back, sample))
    assert same / len(sample) > 0.85


def test_a_paper_built_in_python_is_checked_as_a_record_is():
    """A string abstract was encoded one character a sentence; a label short was a facet selection off by one."""
    with pytest.raises(TypeError, match="paper zz: sentences must be a list of sentences, not one string"):
        Paper("zz", "T", "One sentence. Two.")
    with pytest.raises(ValueError, match="paper e: 1 labels for 2 sentences"):
        Paper("e", "T", ["a.", "b."], ["method_label"])
    assert Paper("e", "T", ["a.", "b."], ["method_label", "result_label"]).labels == ["method_label", "result_label"]


def test_the_acl_readers_name_a_damaged_gzip_or_a_bad_line(tmp_path):
    """They opened `.gz` files themselves: a truncated file was a traceback (EOFError), a bad line a raw
    JSONDecodeError."""
    from aspire.benchmarks.acl_formats import read_records
    from aspire.data.acl import read_acl
    from aspire.io import DataError

    record = {"paper_id": "a", "title": "A title", "abstract": "One sentence. Two.", "year": 2020}
    whole = gzip.compress("".join(json.dumps({**record, "paper_id": f"p{i}"}) + "\n" for i in range(50)).encode())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    for read in (lambda p: read_acl(p, frozenset(), 0), read_records):
        with pytest.raises(DataError, match=f"{cut}: the gzip stream ends early, after line"):
            read(cut)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(record) + "\n{broken\n")
    for read in (lambda p: read_acl(p, frozenset(), 0), read_records):
        with pytest.raises(DataError, match=f"{bad}:2: not a JSON line"):
            read(bad)
