"""Round 56: an index's papers.jsonl (written only by aspire's strict JSONL writer) read strictly."""

import json

import pytest

from aspire.index.corpus import write_index_papers
from aspire.index.disk import IndexFormatError
from aspire.index.texts import SentencesOnDisk, read_index_papers


def _papers(tmp_path, lines):
    path = tmp_path / "papers.jsonl"
    path.write_bytes(b"".join(line.encode() + b"\n" for line in lines))
    return path


GOOD = json.dumps({"paper_id": "a", "title": "A", "sentences": ["s1", "s2"]})


@pytest.mark.parametrize("texts", ["memory", "disk"])
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_bare_constant_refused_naming_line(tmp_path, texts, constant):
    path = _papers(tmp_path, [GOOD, '{"paper_id": "b", "title": "B", "sentences": ["x"], "score": ' + constant + "}"])
    with pytest.raises(IndexFormatError, match=rf"papers.jsonl:2: .*bare {constant}"):
        read_index_papers(path, texts)


@pytest.mark.parametrize("texts", ["memory", "disk"])
def test_repeated_key_refused_naming_line(tmp_path, texts):
    path = _papers(tmp_path, [GOOD, '{"paper_id": "b", "title": "B", "sentences": ["x"], "paper_id": "c"}'])
    with pytest.raises(IndexFormatError, match=r"papers.jsonl:2: .*'paper_id' twice"):
        read_index_papers(path, texts)


@pytest.mark.parametrize("texts", ["memory", "disk"])
def test_huge_int_and_deep_nesting_are_index_format_errors(tmp_path, texts):
    deep = '{"paper_id": "b", "title": "B", "sentences": [], "x": ' + "[" * 100000 + "]" * 100000 + "}"
    for bad in ('{"paper_id": "b", "title": "B", "sentences": [], "n": ' + "1" * 5000 + "}", deep):
        path = _papers(tmp_path, [GOOD, bad])
        with pytest.raises(IndexFormatError, match=r"papers.jsonl:2: not an index paper record"):
            read_index_papers(path, texts)


def test_written_papers_round_trip_with_nan_free_text(tmp_path):
    """What the strict writer writes (a title "NaN" as a string, non-ASCII, a lone surrogate) still reads back,
    in memory and on disk alike, with the CRCs of the on-disk path intact."""
    path = tmp_path / "papers.jsonl"
    ids, titles = ["p1", "p2"], ["NaN", "Infinity é"]
    sents, labels = [["NaN", "s\ud800"], ["x"]], [["background", "method"], None]
    write_index_papers(path, ids, titles, sents, labels)
    for texts in ("memory", "disk"):
        got_ids, got_titles, got_sents, got_labels = read_index_papers(path, texts)
        assert (got_ids, got_titles, list(got_sents), got_labels) == (ids, titles, sents, labels)
    on_disk = read_index_papers(path, "disk")[2]
    assert isinstance(on_disk, SentencesOnDisk)
    assert on_disk[1] == ["x"]


def test_on_disk_reader_refuses_constant_written_in_place(tmp_path):
    """A line rewritten in place (same size) with a bare NaN after the read is refused by `SentencesOnDisk`."""
    path = _papers(tmp_path, [GOOD, '{"paper_id": "b", "title": "B", "sentences": ["x"], "s": 1.0}'])
    sentences = SentencesOnDisk(path, [0, len(GOOD) + 1, path.stat().st_size], ["a", "b"])  # no CRCs: the parse
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"s": 1.0}', b'"s": NaN}'))
    with pytest.raises(IndexFormatError, match=r"paper position 1.*bare NaN"):
        sentences[1]
    assert sentences[0] == ["s1", "s2"]
