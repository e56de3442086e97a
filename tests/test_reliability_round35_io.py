"""Round 35: the readers and writers of `aspire.io` and `aspire.checksum`, checked against json, gzip and hashlib."""

from __future__ import annotations

import gzip
import hashlib
import json
import os

import numpy as np
import pytest

from aspire.checksum import file_sha256
from aspire.io import DataError, atomic_write, iter_jsonl, read_json, read_jsonl, write_json, write_jsonl


def leftovers(folder, target):
    """Temporary files of `atomic_write` for `target` left in `folder`."""
    return [name for name in os.listdir(folder) if name.startswith(f".{target}.") and name.endswith(".tmp")]


# ---- reading: every malformed line named by file and line -------------------------------------------------------
@pytest.mark.parametrize("line, said", [
    (b'{"a": 1', "invalid JSON"),
    (b"[1, 2]", "expected a JSON object, got list"),
    (b'"text"', "expected a JSON object, got str"),
    (b'\xef\xbb\xbf{"a": 1}', "invalid JSON"),  # a BOM past the first line is no BOM to skip
    (b'{"a": "\xff"}', "not UTF-8"),
    (b'{"a": "\xed\xa0\x80"}', "not UTF-8"),  # an encoded surrogate is not UTF-8
    (b'{"a": 1, "a": 2}', "the key 'a' twice"),
])
def test_each_malformed_line_is_named_by_file_and_line(tmp_path, line, said):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"ok": 1}\r\n\n' + line + b"\n" + b'{"ok": 2}\n')
    with pytest.raises(DataError, match=rf"x\.jsonl:3: .*{said}"):
        list(iter_jsonl(path))
    bad = []
    assert list(iter_jsonl(path, "skip", bad)) == [(1, {"ok": 1}), (4, {"ok": 2})]
    assert len(bad) == 1 and f"{path}:3: " in bad[0] and said in bad[0]


def test_iter_jsonl_names_a_repeated_key_instead_of_keeping_the_last_value(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"paper_id": "p1"}\n{"paper_id": "p2", "title": "A", "title": "B"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"r\.jsonl:2: the key 'title' twice in one object"):
        read_jsonl(path)
    # the same key in two objects of one line, or in two lines, is no repeat
    path.write_text('{"a": {"k": 1}, "b": {"k": 2}}\n{"a": 3}\n', encoding="utf-8")
    assert read_jsonl(path) == [{"a": {"k": 1}, "b": {"k": 2}}, {"a": 3}]


def test_bom_crlf_blank_lines_and_line_separators_in_strings_read_as_json_reads_them(tmp_path):
    records = [{"t": "a\u2028b\u2029c\x85d"}, {"n": 1.5, "s": "\u00e9"}]
    body = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in records)
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + body.replace("\r\n", "\r\n \t\r\n").encode("utf-8") + b"\r\n")
    assert list(iter_jsonl(path)) == [(1, records[0]), (3, records[1])]


def test_iter_jsonl_refuses_a_gzip_file_whole_even_when_skipping(tmp_path):
    # it read a gzip file's bytes as lines: with on_error="skip", 0 records and a list of "not UTF-8" lines
    path = tmp_path / "g.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i in range(500):
            f.write(json.dumps({"id": str(i), "text": "x" * (i % 37)}) + "\n")
    bad = []
    with pytest.raises(DataError, match=r"g\.jsonl\.gz: the file is gzip-compressed"):
        list(iter_jsonl(path, "skip", bad))
    assert bad == []
    plain = tmp_path / "g.jsonl"
    with gzip.open(path, "rb") as f:
        plain.write_bytes(f.read())
    assert [obj for _, obj in iter_jsonl(plain)] == [{"id": str(i), "text": "x" * (i % 37)} for i in range(500)]


def test_read_json_names_the_file_for_each_failure(tmp_path):
    path = tmp_path / "c.json"
    with pytest.raises(ValueError, match="config not found"):
        read_json(path, "config")
    for content, said in [(b"\xff{}", "not JSON"), (b'{"a": 1,}', "not JSON"), (b'{"a": {"b": 1, "b": 2}}', "'b' twice"),
                          (b"[1]", "holds a JSON list")]:
        path.write_bytes(content)
        with pytest.raises(ValueError, match=rf"c\.json: .*{said}"):
            read_json(path, "config", mapping=True)


# ---- writing: whole or not at all -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["w", "wb"])
def test_a_failure_midway_leaves_the_old_file_whole_and_no_temporary_file(tmp_path, mode):
    path = tmp_path / "out.txt"
    path.write_text("old\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="midway"):
        with atomic_write(path, mode) as handle:
            handle.write("new " * 100_000 if mode == "w" else b"new " * 100_000)
            handle.flush()
            raise RuntimeError("midway")
    assert path.read_text(encoding="utf-8") == "old\n"
    assert leftovers(tmp_path, "out.txt") == []
    with atomic_write(path, mode) as handle:
        handle.write("new\n" if mode == "w" else b"new\n")
    assert path.read_bytes() == b"new\n" and leftovers(tmp_path, "out.txt") == []


def test_atomic_jsonl_failing_midway_keeps_the_old_file(tmp_path):
    path = tmp_path / "r.jsonl"
    write_jsonl(path, [{"a": 1}])

    def records():
        yield {"a": 2}
        yield {"b": object()}  # not JSON

    with pytest.raises(TypeError):
        write_jsonl(path, records())
    assert read_jsonl(path) == [{"a": 1}] and leftovers(tmp_path, "r.jsonl") == []
    with pytest.raises(TypeError):
        write_json(tmp_path / "r.jsonl", {"x": object()})
    assert read_jsonl(path) == [{"a": 1}] and leftovers(tmp_path, "r.jsonl") == []


def test_atomic_jsonl_refuses_two_keys_written_as_one_name(tmp_path):
    # it wrote {"1": "a", "1": "b"}: a line with a key twice, which write_json refuses and readers read differently
    path = tmp_path / "r.jsonl"
    write_jsonl(path, [{"a": 1}])
    with pytest.raises(ValueError, match=r"r\.jsonl: record 2: .*keys 1 and '1'"):
        write_jsonl(path, [{"ok": 1}, {"x": {1: "a", "1": "b"}}])
    assert read_jsonl(path) == [{"a": 1}] and leftovers(tmp_path, "r.jsonl") == []
    with pytest.raises(ValueError, match="keys 1 and '1'"):
        write_json(tmp_path / "w.json", {"x": {1: "a", "1": "b"}})
    # one key that is not a string is written as json writes it
    write_jsonl(path, [{"m": {1: "a", None: "b"}}, {"n": [{2.5: "c"}]}])
    assert read_jsonl(path) == [{"m": {"1": "a", "null": "b"}}, {"n": [{"2.5": "c"}]}]


def test_atomic_jsonl_writes_numpy_values_as_write_json_does(tmp_path):
    # it raised TypeError ("Object of type float32 is not JSON serializable") where write_json wrote the value
    record = {"score": np.float32(0.5), "rank": np.int64(3), "vec": np.arange(3), "ok": True,
              np.int64(7): "key", "bad": np.float32("nan")}
    write_json(tmp_path / "r.json", record, indent=None)
    write_jsonl(tmp_path / "r.jsonl", [record])
    line = (tmp_path / "r.jsonl").read_text(encoding="utf-8")
    assert line.count("\n") == 1 and line.strip() == (tmp_path / "r.json").read_text(encoding="utf-8").strip()
    assert read_jsonl(tmp_path / "r.jsonl") == [{"score": 0.5, "rank": 3, "vec": [0, 1, 2], "ok": True, "7": "key",
                                                 "bad": None, "non_finite": {"bad": "nan"}}]


def test_atomic_jsonl_refuses_a_record_that_is_not_an_object(tmp_path):
    # it wrote [1, 2] and "s" as lines, which its own reader refuses ("expected a JSON object")
    path = tmp_path / "r.jsonl"
    for record in ([1, 2], "s", None):
        with pytest.raises(TypeError, match=r"r\.jsonl: record 2 is a"):
            write_jsonl(path, [{"a": 1}, record])
        assert not path.exists() and leftovers(tmp_path, "r.jsonl") == []


def test_lone_surrogates_and_line_separators_survive_a_round_trip(tmp_path):
    records = [{"a": "ok"}, {"a": "\ud800x", "b": "\u2028"}, {"c": 1}]
    assert write_jsonl(tmp_path / "r.jsonl", records) == 3
    raw = (tmp_path / "r.jsonl").read_bytes()
    assert raw.count(b"\n") == 3 and b"\\ud800" in raw
    assert read_jsonl(tmp_path / "r.jsonl") == records


# ---- checksums ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 17])
def test_file_sha256_is_hashlib_of_the_same_bytes(tmp_path, size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
    assert file_sha256(str(path)) == hashlib.sha256(path.read_bytes()).hexdigest()
