"""Round 49: correctness sweep of aspire/data/papers.py with tiny hand-made files."""

from __future__ import annotations

import json

import pytest

from aspire.data.papers import (
    BadRecordError,
    Paper,
    read_paper_map,
    read_papers,
    write_papers,
)
from aspire.data.sentences import DEFAULT_SPLITTER, resolve_splitter
from aspire.index.disk import IndexFormatError
from aspire.index.texts import read_index_papers
from aspire.io import DataError


def _rec(pid, abstract=("A b.",), title="t", **extra):
    return {"paper_id": pid, "title": title, "abstract": list(abstract) if isinstance(abstract, tuple) else abstract,
            **extra}


def _write_lines(path, lines):
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode("utf-8")) + b"\n" for x in lines))
    return path


# ---- fixes ---------------------------------------------------------------------------------------------------

def test_empty_gz_file_refused_naming_it(tmp_path):
    """A 0-byte `.gz` is not gzip (gzip writes a header even for no lines): it was read as 0 papers, unsaid."""
    path = tmp_path / "papers.jsonl.gz"
    path.write_bytes(b"")
    with pytest.raises(DataError, match=r"papers\.jsonl\.gz.*not a gzip file.*empty"):
        read_papers(path)
    # a real gzip file of no papers is still read as empty
    good = tmp_path / "none.jsonl.gz"
    assert write_papers(good, []) == 0 and good.stat().st_size > 0
    assert read_papers(good).n_lines == 0


def test_read_paper_map_refuses_one_string_as_ids(tmp_path):
    """ids="12" was iterated as {"1", "2"} and returned papers 1 and 2, not paper 12."""
    path = _write_lines(tmp_path / "p.jsonl", [json.dumps(_rec(p)) for p in ("1", "2", "12")])
    with pytest.raises(TypeError, match=r"p\.jsonl.*ids must be a collection.*'12'"):
        read_paper_map(path, "12")
    assert list(read_paper_map(path, ["12"])) == ["12"]


# ---- checks of behaviour found correct ---------------------------------------------------------------------------

@pytest.mark.parametrize("line, reason", [
    ('{"paper_id": "1", "title": "t", "abstract": ["A."]', "invalid JSON"),
    ('{"paper_id": "1", "paper_id": "2", "title": "t", "abstract": ["A."]}', "'paper_id' twice"),
    ('{"paper_id": "1", "title": "t", "abstract": ["A."], "x": {"k": 1, "k": 2}}', "'k' twice"),
    ('{"paper_id": 1.0, "title": "t", "abstract": ["A."]}', "paper_id must be a string or an integer"),
    ('{"paper_id": true, "title": "t", "abstract": ["A."]}', "paper_id must be a string or an integer"),
    ('{"paper_id": "1", "title": 3, "abstract": ["A."]}', "title must be a string"),
    ('{"paper_id": "1", "title": "t", "abstract": ["A.", 2]}', r"abstract\[1\] must be a string"),
    ('{"paper_id": "1", "title": "t", "abstract": ["A."], "pred_labels": ["x", "y"]}', "2 labels for 1 sentences"),
    ('{"paper_id": "1", "title": "t", "abstract": "A. B.", "pred_labels": ["x", "y"]}', "needs the abstract as a list"),
    ('{"paper_id": "1", "title": "t", "abstract": ["A \\ud800"]}', "lone surrogate U\\+D800"),
    ('{"paper_id": "1", "title": "\\udc00", "abstract": ["A."]}', "title holds a lone surrogate"),
    ('{"paper_id": "1", "title": "", "abstract": []}', "empty title and abstract"),
    ('[1, 2]', "expected a JSON object"),
])
def test_bad_line_refused_naming_file_line_and_reason(tmp_path, line, reason):
    path = _write_lines(tmp_path / "bad.jsonl", [json.dumps(_rec("0")), line])
    with pytest.raises(BadRecordError, match=r"bad\.jsonl:2\b.*" + reason):
        read_papers(path)
    result = read_papers(path, skip_bad=True)
    assert [p.paper_id for p in result.papers] == ["0"] and [r.line for r in result.rejected] == [2]
    assert len(result.papers) + len(result.rejected) + len(result.blank_lines) == result.n_lines == 2


def test_repeated_id_names_first_line_and_rejected_record_claims_no_id(tmp_path):
    path = _write_lines(tmp_path / "dup.jsonl", [
        json.dumps(_rec("5", title=3)),  # rejected: does not claim "5"
        json.dumps(_rec(5)),  # integer id 5 is "5"
        "   ",
        json.dumps(_rec("5")),
    ])
    result = read_papers(path, skip_bad=True)
    assert [p.paper_id for p in result.papers] == ["5"] and result.paper_lines == [2]
    assert [(r.line, r.paper_id) for r in result.rejected] == [(1, "5"), (4, "5")]
    assert "first seen on line 2" in result.rejected[1].reason
    assert result.blank_lines == [3] and result.n_lines == 4


def test_bom_only_at_file_start(tmp_path):
    bom = b"\xef\xbb\xbf"
    path = _write_lines(tmp_path / "bom.jsonl", [bom + json.dumps(_rec("1")).encode(), bom + json.dumps(_rec("2")).encode()])
    result = read_papers(path, skip_bad=True)
    assert [p.paper_id for p in result.papers] == ["1"]
    assert [r.line for r in result.rejected] == [2]


def test_bad_utf8_reported_with_line_and_id(tmp_path):
    path = _write_lines(tmp_path / "u.jsonl", [json.dumps(_rec("1")), b'{"paper_id": "7", "title": "\xff", "abstract": ["A."]}'])
    with pytest.raises(BadRecordError, match=r"u\.jsonl:2 \(paper_id '7'\): not valid UTF-8: byte 0xff"):
        read_papers(path)


def test_gzip_round_trip_and_truncated_gzip(tmp_path):
    papers = [Paper("1", "t", ["A b.", "C d."], ["x", "y"], {"year": 2020}), Paper("2", "", ["E."])]
    path = tmp_path / "p.jsonl.gz"
    assert write_papers(path, papers) == 2
    back = read_papers(path).papers
    assert back == papers and back[0].extra == {"year": 2020}
    data = path.read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[:-6])
    with pytest.raises(DataError, match=r"cut\.jsonl\.gz"):
        read_papers(cut)
    plain = tmp_path / "gz_named_plain.jsonl"
    plain.write_bytes(data)
    with pytest.raises(DataError, match=r"gz_named_plain\.jsonl.*gzip-compressed"):
        read_papers(plain)


def test_string_abstract_split_by_default_splitter_without_loss(tmp_path):
    abstract = "We study transport. Results (Fig. 2) improve by 3.5 points! Is it new? Yes."
    path = _write_lines(tmp_path / "s.jsonl", [json.dumps(_rec("1", abstract=abstract))])
    (paper,) = read_papers(path).papers
    assert paper.sentences == resolve_splitter(DEFAULT_SPLITTER).split(abstract)
    assert len(paper.sentences) > 1
    assert "".join(paper.sentences).replace(" ", "") == abstract.replace(" ", "")
    with pytest.raises(BadRecordError, match=r"s\.jsonl:1.*without a splitter"):
        read_papers(path, splitter=None)


def test_read_paper_map_names_missing_ids(tmp_path):
    path = _write_lines(tmp_path / "m.jsonl", [json.dumps(_rec(p)) for p in ("1", "2")])
    assert list(read_paper_map(path, [2, "1"])) == ["1", "2"]
    with pytest.raises(ValueError, match=r"m\.jsonl: 2 pooled papers missing: \['3', '9'\]"):
        read_paper_map(path, ["1", "3", "9"], needed_by="pooled")


def test_sentences_on_disk_returns_written_and_refuses_truncation(tmp_path):
    path = tmp_path / "papers.jsonl"
    rows = [{"paper_id": "a", "title": "t", "sentences": ["A é.", "B."]}, {"paper_id": "b", "title": "", "sentences": ["C."]}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    ids, _, sentences, _ = read_index_papers(path, texts="disk")
    assert ids == ["a", "b"] and [sentences[0], sentences[1], sentences[-1]] == [r["sentences"] for r in rows + rows[1:]]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 5])
    with pytest.raises(IndexFormatError, match=r"papers\.jsonl.*truncated"):
        sentences[1]
