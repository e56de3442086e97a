"""Round 26 correctness sweep of the on-disk layer (`aspire.storage`, `aspire.index.disk`): the reasons a folder is
refused, the full-disk test, the lock's holder record and the folders it makes, the live-generation pointer; each
against the docstrings' rules and what the file system holds afterwards."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aspire import storage
from aspire.index.disk import IndexFormatError, check_index_dir, clear_leftovers, live_generation
from aspire.storage import (
    HOLDER_FILE,
    LOCK_FILE,
    DiskFullError,
    check_record,
    check_replaceable,
    folder_lock,
    is_disk_full,
    lock_holder,
    on_disk_full,
    write_record,
)

UNKNOWN = "a process that has not recorded itself yet"


# ---- check_replaceable: the reason given is the one that holds -----------------------------------------------------
def test_a_symlinked_folder_is_refused_for_being_a_link_not_for_lacking_its_marker(tmp_path):
    """A stage folder that is a symbolic link to a folder holding a valid report.json was refused with "no report.json
    in it", which the user could see was false. The refusal stays; the message now names the link and its target."""
    real = tmp_path / "real stage é"  # a space and a non-ASCII letter on the way
    real.mkdir()
    (real / "report.json").write_text("{}")
    check_replaceable(real, "report.json", "an earlier output of stage 'filter'")  # the folder itself: replaceable
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(FileExistsError) as caught:
        check_replaceable(link, "report.json", "an earlier output of stage 'filter'")
    message = str(caught.value)
    assert "symbolic link" in message and str(real) in message and "no report.json" not in message
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    with pytest.raises(FileExistsError, match="symbolic link"):
        check_replaceable(dangling, "report.json", "an earlier output of stage 'filter'")
    assert (real / "report.json").read_text() == "{}" and link.is_symlink()  # nothing removed


def test_a_file_and_a_marker_that_is_a_folder_are_each_named(tmp_path):
    """A file in the folder's place and a folder named like the marker were both "no report.json in it"."""
    kind = "an earlier output of stage 'filter'"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(FileExistsError, match=r"is not an earlier output of stage 'filter' \(it is a file, not a folder\)"):
        check_replaceable(tmp_path / "afile", "report.json", kind)
    (tmp_path / "odd" / "report.json").mkdir(parents=True)
    with pytest.raises(FileExistsError, match=r"\(its report\.json is not a file\)"):
        check_replaceable(tmp_path / "odd", "report.json", kind)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"is not an earlier output of stage 'filter' \(no report\.json in it\)"):
        check_replaceable(tmp_path / "other", "report.json", kind)  # the wording the commands' tests match, unchanged
    (tmp_path / "empty").mkdir()
    check_replaceable(tmp_path / "empty", "report.json", kind)
    check_replaceable(tmp_path / "absent", "report.json", kind)


# ---- the full-disk test ------------------------------------------------------------------------------------------
class _Counted(ValueError):
    """An exception that allows its text to be read a few times only: a walk of its chain that loops fails."""

    reads = 0

    def __str__(self) -> str:
        type(self).reads += 1
        if type(self).reads > 20:
            raise AssertionError("the exception chain was walked round and round")
        return "a"


def _looping_chain() -> BaseException:
    """`a.__cause__` is b and `b.__cause__` is a, as Python leaves them after `raise a from b` inside the handler of
    `raise b from a`."""
    try:
        raise _Counted()
    except _Counted as a:
        try:
            try:
                raise KeyError("b") from a
            except KeyError as b:
                raise a from b
        except _Counted as final:
            return final


def test_an_exception_chain_that_loops_is_walked_once(tmp_path):
    """`is_disk_full` followed `__cause__` until None: a chain that loops (ordinary Python, above) hung
    `on_disk_full`, and with it the write it wrapped, for ever."""
    err = _looping_chain()
    assert err.__cause__.__cause__ is err  # the loop is real
    _Counted.reads = 0
    assert is_disk_full(err, tmp_path) is False
    _Counted.reads = 0
    with pytest.raises(_Counted):
        with on_disk_full(tmp_path, "the test file"):
            raise err


def test_an_error_that_names_its_errno_is_not_taken_for_a_full_disk(tmp_path, monkeypatch):
    """With under 1 MiB free, every OSError was reported as "the disk filled up": a permission refused or a folder
    missing said so too. Only an error that says no more than that a write fell short (numpy's OSError without errno,
    torch's RuntimeError) is tested against the free space."""
    monkeypatch.setattr(storage, "free_bytes", lambda folder: 4096)
    for err in (PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "x")),
                FileNotFoundError(errno.ENOENT, "No such file or directory", str(tmp_path / "x"))):
        assert not is_disk_full(err, tmp_path)
        with pytest.raises(type(err)):
            with on_disk_full(tmp_path, "the test file"):
                raise err
    for err in (OSError("100000 requested and 0 written"), RuntimeError("unexpected pos 704 vs 598"),
                OSError(errno.ENOSPC, "No space left on device")):
        with pytest.raises(DiskFullError, match="the disk filled up while writing the test file"):
            with on_disk_full(tmp_path, "the test file"):
                raise err
    monkeypatch.setattr(storage, "free_bytes", lambda folder: 10 << 30)  # room enough: a short write is something else
    assert not is_disk_full(OSError("100000 requested and 0 written"), tmp_path)


# ---- the lock --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pid", [2**64, 0, -1])
def test_a_holder_record_with_no_process_id_reads_as_unknown(tmp_path, pid):
    """A damaged holder record (a pid past any process's, 0 or -1) raised OverflowError out of `lock_holder`, in place
    of the lock error it words, or was named as a holder (`os.kill(0, 0)` asks about this process's own group)."""
    (tmp_path / HOLDER_FILE).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "command": "x",
                                                    "since": "then"}))
    assert lock_holder(tmp_path) == UNKNOWN


def test_a_lock_refused_names_the_live_holder_and_a_dead_one_is_taken_over(tmp_path):
    """Two writers: a second process is refused at once naming the first; once the first is killed (its holder record
    left behind), the lock is free and the next holder records itself in place of the dead one."""
    folder = tmp_path / "runs é"
    ready = tmp_path / "ready"
    code = ("import sys, time, pathlib\nfrom aspire.storage import folder_lock\n"
            "with folder_lock(sys.argv[1], OSError, 'wait'):\n"
            "    pathlib.Path(sys.argv[2]).write_text('x')\n    time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder), str(ready)], cwd=Path(__file__).parents[1])
    try:
        for _ in range(600):
            if ready.exists() or holder.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists()
        with pytest.raises(OSError, match=rf"is in use by another process \(pid {holder.pid} on "):
            with folder_lock(folder, OSError, "wait"):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert json.loads((folder / HOLDER_FILE).read_text())["pid"] == holder.pid  # left by the dead process
    with folder_lock(folder, OSError, "wait"):
        assert json.loads((folder / HOLDER_FILE).read_text())["pid"] == os.getpid()
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_FILE]


def test_the_parents_a_refused_command_made_are_removed_too(tmp_path):
    """`folder_lock` made `out` with its missing parents and removed only `out` when the command wrote nothing:
    `--out new/runs/idx` refused left `new/runs` behind. Parents that were there before stay, and so does
    everything once the command wrote something."""
    (tmp_path / "kept").mkdir()
    with pytest.raises(ValueError):
        with folder_lock(tmp_path / "kept" / "new" / "runs" / "idx", OSError, "wait"):
            raise ValueError("refused")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and not any((tmp_path / "kept").iterdir())
    out = tmp_path / "kept" / "a b" / "idx"
    with folder_lock(out, OSError, "wait"):
        (out / "CURRENT").write_text("gen-000001\n")
    assert (out / "CURRENT").is_file()
    with folder_lock(tmp_path / "kept" / "a b" / "other", OSError, "wait"):
        pass  # its parent holds `idx`: it stays
    assert sorted(p.name for p in (tmp_path / "kept" / "a b").iterdir()) == ["idx"]


# ---- records of cache files --------------------------------------------------------------------------------------
def test_a_record_rewrite_that_fails_midway_leaves_the_old_record(tmp_path, monkeypatch):
    """`write_record` writes beside the file atomically: an error raised inside the write leaves the old record whole
    (old or new, never a mix) and no temporary file."""
    cache = tmp_path / "cache dir é" / "vectors.npy"
    cache.parent.mkdir()
    cache.write_bytes(b"1234")
    write_record(cache)
    old = (tmp_path / "cache dir é" / "vectors.npy.sha256").read_text()
    cache.write_bytes(b"12345678")
    from aspire import io as aspire_io

    class HalfThenFull:
        """A file that takes half of what is written to it, then answers ENOSPC."""

        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

        def write(self, text):
            self.handle.write(text[: len(text) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(aspire_io, "open", lambda *a, **k: HalfThenFull(open(*a, **k)), raising=False)
    with pytest.raises(OSError):
        write_record(cache)
    monkeypatch.undo()
    assert (tmp_path / "cache dir é" / "vectors.npy.sha256").read_text() == old
    assert sorted(p.name for p in cache.parent.iterdir()) == ["vectors.npy", "vectors.npy.sha256"]
    assert "holds 8 bytes, 4 were written" in check_record(cache)
    write_record(cache)
    assert check_record(cache) is None


# ---- the live-generation pointer ---------------------------------------------------------------------------------
def test_a_pointer_that_is_a_folder_or_a_broken_link_is_damaged_not_absent(tmp_path):
    """`live_generation` said "no pointer" (None) for a CURRENT that is a folder or a link to nothing, so the index
    read as "holds no index (no CURRENT file)" beside a CURRENT. It is a damaged pointer, and says so."""
    root = tmp_path / "idx é"
    root.mkdir()
    assert live_generation(root) is None
    (root / "CURRENT").mkdir()
    with pytest.raises(IndexFormatError, match="CURRENT is a folder, not the file naming the live generation"):
        live_generation(root)
    (root / "CURRENT").rmdir()
    (root / "CURRENT").symlink_to(root / "gone")
    with pytest.raises(IndexFormatError, match="CURRENT is a link to nothing"):
        live_generation(root)
    (root / "CURRENT").unlink()
    (root / "CURRENT").write_text("gen-000003\n")
    assert live_generation(root) == "gen-000003"  # naming a missing folder: the reader (`read_manifest`) refuses it


def test_only_an_index_own_leftovers_are_cleared(tmp_path):
    """`clear_leftovers` removes the temporary generations and pointers and the generations not kept, nothing else:
    an entry an index never writes stops it before anything is removed; a generation that links out of the
    folder is removed as a link, its target kept."""
    root = tmp_path / "idx"
    outside = tmp_path / "outside"
    (outside / "keepme").mkdir(parents=True)
    for name in ("gen-000001", "gen-000002", ".tmp-gen-000003-abcd1234", ".CURRENT.0123456789ab.tmp"):
        (root / name).mkdir(parents=True) if "gen" in name else (root / name).write_text("gen-000003\n")
    (root / "gen-000004").symlink_to(outside)
    (root / "CURRENT").write_text("gen-000002\n")
    (root / "notes.txt").write_text("mine")
    with pytest.raises(IndexFormatError, match="entries an index never writes"):
        clear_leftovers(root, keep="gen-000002")
    assert len(list(root.iterdir())) == 7
    (root / "notes.txt").unlink()
    assert sorted(clear_leftovers(root, keep="gen-000002")) == sorted(
        [".CURRENT.0123456789ab.tmp", ".tmp-gen-000003-abcd1234", "gen-000001", "gen-000004"])
    assert sorted(check_index_dir(root)) == ["CURRENT", "gen-000002"] and (outside / "keepme").is_dir()


def test_overwrite_replaces_an_index_whose_pointer_is_a_folder(tmp_path):
    """`prepare_build_dir` with overwrite: a CURRENT that is a folder is a damaged index (refused without it) and is
    cleared with it (unlink raised IsADirectoryError)."""
    from aspire.index.build import prepare_build_dir
    from aspire.index.disk import IndexExistsError

    out = tmp_path / "idx"
    (out / "CURRENT").mkdir(parents=True)
    with pytest.raises(IndexExistsError, match="damaged"):
        prepare_build_dir(out)
    prepare_build_dir(out, overwrite=True)
    assert not (out / "CURRENT").exists()
