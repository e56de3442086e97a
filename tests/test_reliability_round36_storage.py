"""Round 36 correctness sweep of `aspire.storage`: a cache file's record never vouches for a changed file, a damaged
record is refused naming it (not taken for a checksum that differs, nor a crash), and `folder_lock` lets go on
error, is re-entrant in its thread and refuses another thread as its docstring says."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from aspire import storage
from aspire.storage import HOLDER_FILE, LOCK_FILE, check_record, folder_lock, record_path, write_record

DATA = bytes(range(256)) * 3 + b"tail"


# ---- records of cache files ---------------------------------------------------------------------------------------
def test_a_record_never_vouches_for_a_file_changed_by_one_byte_or_in_size(tmp_path):
    """Every single byte changed (same size), one byte cut or added: each is refused; the file put back matches."""
    path = tmp_path / "cache é.bin"
    path.write_bytes(DATA)
    write_record(path)
    assert check_record(path) is None
    for i in range(0, len(DATA), 7):
        changed = bytearray(DATA)
        changed[i] ^= 0x01
        path.write_bytes(bytes(changed))
        assert check_record(path) == "its SHA-256 differs from the one recorded when it was written", i
    path.write_bytes(DATA[:-1])
    assert check_record(path) == f"it holds {len(DATA) - 1} bytes, {len(DATA)} were written"
    path.write_bytes(DATA + b"\0")
    assert check_record(path) == f"it holds {len(DATA) + 1} bytes, {len(DATA)} were written"
    path.write_bytes(DATA)
    assert check_record(path) is None


@pytest.mark.parametrize("size, digest", [
    ("Infinity", '"%s"'),  # int(inf) raised OverflowError out of check_record
    ("-Infinity", '"%s"'),
    ("null", '"%s"'),  # int(None): TypeError, named already; kept
    ("%d", "null"),  # str(None) == "None": reported as "its SHA-256 differs"
    ("%d", "5"),
    ("%d", '"%s"[:-1]'),  # 63 hex digits
    ("%d", '"upper"'),  # the digest in upper case: not what write_record writes
    ("%d.5", '"%s"'),  # int(11.5) == 11: a fraction was read as a size
    ("true", '"%s"'),  # int(True) == 1: "it holds N bytes, 1 were written"
    ("-1", '"%s"'),
])
def test_a_damaged_record_is_refused_naming_the_record(tmp_path, size, digest):
    """A record whose size is not a count of bytes or whose sha256 is not 64 lower-case hex digits was written by
    nothing in aspire: it is damaged, and `check_record` says so naming it. Before, Infinity raised OverflowError
    (a cache check that crashes instead of rebuilding), and a null or numeric sha256, a fraction or `true` as the
    size were reported as a checksum or size that differs, blaming the cache file for its record's damage."""
    path = tmp_path / "vectors.npy"
    path.write_bytes(DATA)
    good = hashlib.sha256(DATA).hexdigest()
    size_text = size % len(DATA) if "%d" in size else size
    digest_text = {'"%s"': f'"{good}"', '"%s"[:-1]': f'"{good[:-1]}"', '"upper"': f'"{good.upper()}"'}.get(digest,
                                                                                                       digest)
    record_path(path).write_text(f'{{"size": {size_text}, "sha256": {digest_text}}}\n', encoding="utf-8")
    problem = check_record(path)
    assert problem is not None and problem.startswith("its record vectors.npy.sha256 is unreadable ("), problem


def test_a_record_as_write_record_writes_it_still_matches_and_a_huge_field_is_cut_in_the_message(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"")  # an empty file is a valid cache file: size 0
    write_record(path, extra={"config": "abc"})
    assert json.loads(record_path(path).read_text())["size"] == 0 and check_record(path) is None
    record_path(path).write_text(json.dumps({"size": "x" * 100_000, "sha256": "y"}), encoding="utf-8")
    problem = check_record(path)
    assert problem.startswith("its record model.onnx.sha256 is unreadable (size 'xxx") and len(problem) < 300


# ---- folder_lock ---------------------------------------------------------------------------------------------------
def test_the_lock_is_let_go_when_the_body_or_the_holder_record_fails(tmp_path, monkeypatch):
    folder = tmp_path / "out"
    with pytest.raises(KeyError):
        with folder_lock(folder, OSError, "wait"):
            assert (folder / HOLDER_FILE).is_file()
            raise KeyError("boom")
    assert not folder.exists()  # made for the command, which wrote nothing: removed
    folder.mkdir()
    (folder / "kept.txt").write_text("x")

    def refuse(self, *args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(Path, "write_text", refuse)
    with pytest.raises(OSError, match="No space left"):
        with folder_lock(folder, OSError, "wait"):
            pytest.fail("the body ran without a holder record")
    monkeypatch.undo()
    with folder_lock(folder, OSError, "wait"):  # free again
        assert json.loads((folder / HOLDER_FILE).read_text())["pid"] == os.getpid()
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_FILE, "kept.txt"]


def test_the_lock_is_reentrant_in_its_thread_under_another_spelling_and_refuses_another_thread(tmp_path, monkeypatch):
    """Nested holds in one thread (a relative and an absolute spelling of the folder) are one hold: the holder record
    stays until the outer one ends. Another thread is refused at once, as the docstring says (the hold is per
    thread), so two threads never write one folder together."""
    monkeypatch.chdir(tmp_path)
    with folder_lock("runs", OSError, "wait") as held:
        with folder_lock(tmp_path / "runs", OSError, "wait"):
            (held / "written").write_text("x")
        assert (tmp_path / "runs" / HOLDER_FILE).is_file()
        seen: list[BaseException | None] = []

        def other() -> None:
            try:
                with folder_lock(tmp_path / "runs", OSError, "wait for it"):
                    seen.append(None)
            except OSError as err:
                seen.append(err)
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(60)
        assert len(seen) == 1 and isinstance(seen[0], OSError) and str(seen[0]).endswith("wait for it"), seen
        assert (tmp_path / "runs" / HOLDER_FILE).is_file()  # the refused thread did not remove the holder record
    assert not (tmp_path / "runs" / HOLDER_FILE).exists() and (tmp_path / "runs" / "written").is_file()
    assert storage.lock_holder(tmp_path / "runs") == "a process that has not recorded itself yet"
