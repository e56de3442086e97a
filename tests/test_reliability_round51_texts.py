"""Round 51: `SentencesOnDisk` refuses a papers file rewritten in place with the same byte size (the map showed the
new bytes, returned as the old paper's sentences), and `read_rows` refuses rows outside 0..N-1 or not integers (a
boolean mask was read as rows 0 and 1)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aspire.index.disk import IndexFormatError
from aspire.index.shards import load_shards
from aspire.index.stream import plan_shards, read_rows
from aspire.index.texts import read_index_papers
from tests.test_index_stream import write_shards


def _line(paper_id: str, sentence: str) -> str:
    return json.dumps({"paper_id": paper_id, "title": "t", "sentences": [sentence]}) + "\n"


def test_sentences_on_disk_refuses_a_same_size_rewrite_in_place(tmp_path):
    path = tmp_path / "papers.jsonl"
    path.write_text(_line("a", "cat sat") + "\n" + _line("b", "x"))
    ids, _, sentences, _ = read_index_papers(path, texts="disk")
    assert sentences[0] == ["cat sat"] and sentences[1] == ["x"]  # the blank line after a is part of a's bytes
    size = path.stat().st_size
    with path.open("r+") as handle:  # same paper id, same byte size, other text
        handle.write(_line("a", "dog ran"))
    assert path.stat().st_size == size
    with pytest.raises(IndexFormatError, match=r"papers\.jsonl: bytes 0-.*paper position 0.*changed after it was read"):
        sentences[0]
    assert sentences[1] == ["x"]  # an untouched paper still reads


def test_sentences_on_disk_refuses_a_changed_blank_line_after_a_record(tmp_path):
    path = tmp_path / "papers.jsonl"
    path.write_text(_line("a", "cat") + "  \n" + _line("b", "x"))
    _, _, sentences, _ = read_index_papers(path, texts="disk")
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b"\n  \n", b"\n\t \n"))  # still JSON whitespace, other bytes
    with pytest.raises(IndexFormatError, match="paper position 0"):
        sentences[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    shards = write_shards(tmp_path_factory.mktemp("r51"))
    plans, meta, _ = plan_shards(shards)
    return plans, meta["dim"], load_shards(shards)[0].vectors


def test_read_rows_equals_numpy_indexing_over_the_merged_vectors(store):
    plans, dim, vectors = store
    n = len(vectors)
    for dtype in (np.int64, np.int32, np.uint32):
        rows = np.array([n - 1, 0, 5, 5, n // 2], dtype=dtype)
        np.testing.assert_array_equal(read_rows(plans, rows, dim), vectors[rows.astype(np.int64)])
    assert read_rows(plans, np.array([], dtype=np.int64), dim).shape == (0, dim)


@pytest.mark.parametrize("bad", [-1, "n", "-n-1"])
def test_read_rows_refuses_a_row_outside_the_store_naming_it(store, bad):
    plans, dim, vectors = store
    row = {"n": len(vectors), "-n-1": -len(vectors) - 1}.get(bad, bad)
    with pytest.raises(IndexError, match=rf"row\(s\) \[{row}\] out of range for the {len(vectors)} rows"):
        read_rows(plans, np.array([0, row]), dim)


@pytest.mark.parametrize("rows", [np.array([True, False, True]), np.array([1.0, 2.0]), np.array([[0, 1]])])
def test_read_rows_refuses_rows_that_are_not_integer_positions(store, rows):
    plans, dim, _ = store
    with pytest.raises(IndexError, match="1-D array of integer row positions"):
        read_rows(plans, rows, dim)
