"""aspire.io: the one atomic writer and the JSONL / papers readers."""

from __future__ import annotations

import json

import pytest

from aspire.data.papers import read_paper_map
from aspire.io import (
    AtomicJsonl,
    DataError,
    atomic_write,
    iter_checked_jsonl,
    read_jsonl,
    require,
    write_json,
    write_jsonl,
    write_text,
)


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    write_text(path, "old\n")
    with pytest.raises(RuntimeError):
        with atomic_write(path) as fh:
            fh.write("half of the new")
            raise RuntimeError("killed mid-write")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.txt"]  # the temporary file is gone
    with atomic_write(path, "wb", fsync=True) as fh:
        fh.write(b"new\n")
    assert path.read_bytes() == b"new\n"
    with pytest.raises(ValueError, match="mode must be 'w' or 'wb'"):
        with atomic_write(path, "a"):
            pass


def test_a_folder_as_the_target_is_named_before_anything_is_written(tmp_path):
    """`papers split X --out DIR` once did all its work, then failed naming its temporary file
    ("Is a directory: .DIR.0ee92cbb9dde.tmp")."""
    (tmp_path / "out").mkdir()
    with pytest.raises(IsADirectoryError, match=f"Is a directory, not a file: '{tmp_path / 'out'}'"):
        with atomic_write(tmp_path / "out"):
            pytest.fail("opened for writing")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_concurrent_writers_use_their_own_temporary_files(tmp_path):
    path = tmp_path / "x.json"
    with atomic_write(path) as first, atomic_write(path) as second:
        assert first.name != second.name
        first.write("1")
        second.write("2")
    assert path.read_text() in ("1", "2")


def test_json_and_jsonl_round_trip(tmp_path):
    write_json(tmp_path / "a.json", {"é": [1, 2]})
    assert json.loads((tmp_path / "a.json").read_text(encoding="utf-8")) == {"é": [1, 2]}
    assert write_jsonl(tmp_path / "b.jsonl", [{"i": i} for i in range(3)]) == 3
    assert read_jsonl(tmp_path / "b.jsonl") == [{"i": 0}, {"i": 1}, {"i": 2}]
    with pytest.raises(RuntimeError):
        with AtomicJsonl(tmp_path / "b.jsonl") as out:
            out.write({"i": 9})
            raise RuntimeError("stopped mid-file")
    assert read_jsonl(tmp_path / "b.jsonl") == [{"i": 0}, {"i": 1}, {"i": 2}]  # untouched


def test_checked_jsonl_raises_or_skips_and_records(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": 1}\n{"other": 2}\nnot json\n{"id": 3}\n')

    def check(obj, p, n):
        require(obj, ("id",), p, n)

    with pytest.raises(DataError, match=r"r\.jsonl:2: missing key\(s\) \['id'\]"):
        list(iter_checked_jsonl(path, check))
    bad: list[str] = []
    assert [n for n, _ in iter_checked_jsonl(path, check, "skip", bad)] == [1, 4]
    assert len(bad) == 2 and "r.jsonl:2:" in bad[0] and "r.jsonl:3: invalid JSON" in bad[1]


def test_paper_map_reads_by_the_papers_rules(tmp_path):
    path = tmp_path / "abstracts.jsonl"
    rows = [{"paper_id": 7, "title": "T", "abstract": ["One.", "Two."]},
            {"paper_id": "b", "title": "U", "abstract": "First sentence. Second sentence."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    papers = read_paper_map(path)
    assert list(papers) == ["7", "b"] and papers["7"].sentences == ["One.", "Two."]  # ids as strings
    assert read_paper_map(path, ids=["b"]).keys() == {"b"}
    with pytest.raises(ValueError, match=r"1 pooled papers missing: \['zz'\]"):
        read_paper_map(path, ids=["b", "zz"], needed_by="pooled")
    with pytest.raises(DataError, match=r"abstracts\.jsonl:2 \(paper_id 'b'\): abstract must be a list of sentences"):
        read_paper_map(path, split_strings=False)  # pipeline files hold sentence lists
