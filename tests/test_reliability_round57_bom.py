"""Round 57: an index's papers.jsonl decoded as UTF-8 the way `aspire.io.iter_jsonl` decodes JSONL: a byte-order mark
before the first line skipped, one at the start of a later line refused naming the file and line (json.loads of the
line's bytes had taken a BOM on any line, and UTF-16 too)."""

import json

import pytest

from aspire.index.disk import IndexFormatError
from aspire.index.texts import SentencesOnDisk, read_index_papers
from aspire.io import DataError, read_jsonl
from tests.test_reliability_round56_indexpapers import GOOD

BOM = b"\xef\xbb\xbf"
SECOND = json.dumps({"paper_id": "b", "title": "B", "sentences": ["x"]})


@pytest.mark.parametrize("texts", ["memory", "disk"])
def test_bom_before_first_line_skipped_as_iter_jsonl_skips_it(tmp_path, texts):
    path = tmp_path / "papers.jsonl"
    path.write_bytes(BOM + GOOD.encode() + b"\n" + SECOND.encode() + b"\n")
    ids, titles, sentences, _ = read_index_papers(path, texts)
    assert [r["paper_id"] for r in read_jsonl(path)] == ids == ["a", "b"]
    assert titles == ["A", "B"]
    assert list(sentences) == [["s1", "s2"], ["x"]]


def test_bom_before_first_line_on_disk_maps_the_record_after_it(tmp_path):
    """The first paper's bytes on disk start after the mark: its CRC and its parse are those of the record."""
    path = tmp_path / "papers.jsonl"
    path.write_bytes(BOM + GOOD.encode() + b"\n" + SECOND.encode() + b"\n")
    sentences = read_index_papers(path, "disk")[2]
    assert isinstance(sentences, SentencesOnDisk)
    assert sentences.nbytes == path.stat().st_size - len(BOM)
    assert sentences[0] == ["s1", "s2"]
    assert sentences[1] == ["x"]


@pytest.mark.parametrize("texts", ["memory", "disk"])
def test_bom_alone_on_first_line_is_a_blank_line(tmp_path, texts):
    path = tmp_path / "papers.jsonl"
    path.write_bytes(BOM + b"\n" + GOOD.encode() + b"\n")
    ids, _, sentences, _ = read_index_papers(path, texts)
    assert ids == [r["paper_id"] for r in read_jsonl(path)] == ["a"]
    assert list(sentences) == [["s1", "s2"]]


@pytest.mark.parametrize("texts", ["memory", "disk"])
def test_bom_on_later_line_refused_naming_file_and_line(tmp_path, texts):
    path = tmp_path / "papers.jsonl"
    path.write_bytes(GOOD.encode() + b"\n" + BOM + SECOND.encode() + b"\n")
    with pytest.raises(DataError, match=r"papers.jsonl:2: .*BOM"):  # the project's JSONL reader refuses it
        read_jsonl(path)
    with pytest.raises(IndexFormatError, match=r"papers.jsonl:2: not an index paper record .*BOM"):
        read_index_papers(path, texts)


@pytest.mark.parametrize("texts", ["memory", "disk"])
def test_second_bom_after_the_first_refused(tmp_path, texts):
    """Only one mark is the file's: a second one right after it starts the first line's bytes."""
    path = tmp_path / "papers.jsonl"
    path.write_bytes(BOM + BOM + GOOD.encode() + b"\n")
    with pytest.raises(IndexFormatError, match=r"papers.jsonl:1: not an index paper record .*BOM"):
        read_index_papers(path, texts)


@pytest.mark.parametrize("texts", ["memory", "disk"])
def test_utf16_lines_refused_as_not_utf8_json(tmp_path, texts):
    """A file in UTF-16-BE (no mark): each line, split at its newline byte, was whole UTF-16 that json.loads of
    bytes detected and read."""
    path = tmp_path / "papers.jsonl"
    path.write_bytes((GOOD + "\n" + SECOND + "\n").encode("utf-16-be"))
    with pytest.raises(IndexFormatError, match=r"papers.jsonl:1: not an index paper record"):
        read_index_papers(path, texts)


def test_on_disk_reader_refuses_bom_written_in_place(tmp_path):
    """`SentencesOnDisk` parses a line as `read_index_papers` does: a mark put at a line's start in place after the
    read (no CRCs to compare: the parse is the check) is refused naming the paper's position."""
    path = tmp_path / "papers.jsonl"
    second = '{"paper_id": "b", "title": "B", "sentences": ["x"]}   '
    path.write_bytes(GOOD.encode() + b"\n" + second.encode() + b"\n")
    sentences = SentencesOnDisk(path, [0, len(GOOD) + 1, path.stat().st_size], ["a", "b"])
    path.write_bytes(GOOD.encode() + b"\n" + BOM + second.rstrip().encode() + b"\n")  # the same size
    with pytest.raises(IndexFormatError, match=r"paper position 1\).*BOM"):
        sentences[1]
    assert sentences[0] == ["s1", "s2"]
