"""What can go wrong on a real disk, handled in one place: a full disk, a damaged cache file, a folder
two processes write at once.

- **A full disk.** `check_free_space(folder, needed, what)` refuses a write of known size before it
  starts (`DiskFullError`, saying how much is needed and how much is free). `on_disk_full(folder, what,
  needed)` wraps a write whose size is not known exactly: an exception that means the disk filled up
  (errno ENOSPC or EDQUOT anywhere in its chain, a library's message saying so, such as faiss' or
  safetensors', or a write that failed saying no more, with no errno, with under `NEARLY_FULL` bytes left, which is
  how numpy's and torch's writers report it) becomes one `DiskFullError` naming the folder; other exceptions pass
  unchanged. Callers remove their temporary files on the way out, so the previous version stays.
- **Cache files are never trusted.** `write_record(path)` records a cache file's size and SHA-256
  beside it (`PATH.sha256`, JSON), after the file itself is in place; `check_record(path)` says why the
  file cannot be used (no record, a size or checksum that differs), or None when it matches. A cache that
  fails the check is rebuilt by its owner with one warning. (Index generations are data, not cache: a
  damaged file there is an error, `aspire.index.disk`.)
- **One writer per folder.** `folder_lock(folder, ...)` holds `FOLDER/.lock` (filelock, no waiting) and
  records its holder (pid, host, command, start) in `FOLDER/.lock.holder` while it holds it, so a second
  process fails at once with a message naming the first.
- **A folder replaced is one aspire wrote.** `check_replaceable(path, marker, kind)` comes before a write
  that replaces its output folder or the files in it (an encoding's shard, an exported or interpolated model,
  teacher vectors):
  the folder may be absent, empty, or hold `marker`, the file an earlier write of the same kind left. Anything
  else (`--out runs` meant as `--out runs/vectors`) is refused before anything is removed or overwritten.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from aspire.checksum import file_sha256
from aspire.io import write_text
from aspire.text import cut_whole

NEARLY_FULL = 1 << 20  # a write that failed with less than this free (bytes) failed because the disk is full
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXTS = ("no space left on device", "disk quota exceeded", "os error 28", "not enough space")
LOCK_FILE, HOLDER_FILE = ".lock", ".lock.holder"
RECORD_SUFFIX = ".sha256"


# ---- a full disk --------------------------------------------------------------------------------------
class DiskFullError(OSError):
    """The disk holding a folder has no room for a write (errno ENOSPC): the command line reports it in
    one line, `error: <what it needed>: <folder>`."""

    def __init__(self, message: str, folder: str | Path) -> None:
        super().__init__(errno.ENOSPC, message, str(folder))


def size_text(n: int) -> str:
    """A byte count for a person: `512 bytes`, `3.2 KiB`, `1.5 MiB`, `2.0 GiB`."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def free_bytes(folder: str | Path) -> int:
    """Bytes free to this user on the disk holding `folder` (or its nearest existing parent)."""
    path = Path(folder)
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def check_free_space(folder: str | Path, needed: int, what: str) -> None:
    """Raise DiskFullError when the disk holding `folder` has fewer than `needed` bytes free for `what`."""
    free = free_bytes(folder)
    if needed > free:
        raise DiskFullError(f"not enough disk space for {what}: it needs about {size_text(needed)}, "
                            f"{size_text(free)} are free", folder)


def is_disk_full(err: BaseException, folder: str | Path) -> bool:
    """Whether `err` (or an exception it was raised from) says the disk holding `folder` filled up: errno ENOSPC or
    EDQUOT, a message saying so, or an OSError without an errno or a RuntimeError (a write that fell short) with under
    `NEARLY_FULL` bytes free; an OSError with another errno (EACCES, ENOENT, ...) says what failed and is not."""
    seen, walked = err, set()
    while seen is not None and id(seen) not in walked:  # a chain may loop (`raise a from b` while handling b from a)
        walked.add(id(seen))
        if isinstance(seen, OSError) and seen.errno in _FULL_ERRNOS:
            return True
        if any(text in str(seen).lower() for text in _FULL_TEXTS):
            return True
        seen = seen.__cause__ or seen.__context__
    if not isinstance(err, (OSError, RuntimeError)):
        return False
    if isinstance(err, OSError) and err.errno is not None:  # it says what failed (EACCES, ENOENT, ...): not the space
        return False
    try:  # numpy and torch say only that a write fell short: ask the disk
        return free_bytes(folder) < NEARLY_FULL
    except OSError:
        return False


@contextmanager
def on_disk_full(folder: str | Path, what: str, needed: int | None = None) -> Iterator[None]:
    """Turn an exception that means the disk filled up while writing `what` into `folder` into one
    DiskFullError naming the folder (and the space `needed`, where known); others pass unchanged."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as err:
        if not is_disk_full(err, folder):
            raise
        need = f"; it needs about {size_text(needed)}" if needed else ""
        raise DiskFullError(f"the disk filled up while writing {what}{need} "
                            f"({type(err).__name__}: {_one_line(err)})", folder) from err


def _one_line(err: BaseException, limit: int = 200) -> str:
    """`err`'s message on one line, at most `limit` characters (a letter kept with its combining marks: `cut_whole`)."""
    text = " ".join(str(err).split())
    return text if len(text) <= limit else cut_whole(text, limit - 3) + "..."


# ---- cache files --------------------------------------------------------------------------------------
def record_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + RECORD_SUFFIX)


def write_record(path: str | Path, extra: dict | None = None, source: str | Path | None = None) -> None:
    """Record the size and SHA-256 of the cache file `path` beside it (call once the file is in place), with any
    `extra` entries (what the file was made from; `recorded`). `source`: the file to be renamed to `path`, measured
    instead, so that the record is in place before the file is (a reader never finds the file without it)."""
    path = Path(path)
    measured = path if source is None else Path(source)
    record = {"size": measured.stat().st_size, "sha256": file_sha256(measured), **(extra or {})}
    write_text(record_path(path), json.dumps(record) + "\n")


def recorded(path: str | Path, key: str) -> object | None:
    """The entry `key` of the cache file `path`'s record (`write_record`'s `extra`), or None where it has none."""
    try:
        record = json.loads(record_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record.get(key) if isinstance(record, dict) else None


def check_record(path: str | Path) -> str | None:
    """Why the cache file `path` may not be used (no record, or a size or SHA-256 other than the one
    recorded when it was written), or None when it matches its record."""
    path, record_file = Path(path), record_path(path)
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        size, digest = record["size"], record["sha256"]
    except FileNotFoundError:
        return f"no size and checksum recorded beside it ({record_file.name} is missing)"
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"its record {record_file.name} is unreadable ({type(err).__name__})"
    # as `write_record` writes them: a count of bytes and 64 lower-case hex digits (a null, a fraction, `true` or
    # Infinity is a damaged record, named as such, not a size or checksum that differs, nor an OverflowError)
    if type(size) is not int or size < 0:
        return f"its record {record_file.name} is unreadable (size {size!r:.80} is not a count of bytes)"
    if not (isinstance(digest, str) and len(digest) == 64 and set(digest) <= set("0123456789abcdef")):
        return f"its record {record_file.name} is unreadable (sha256 {digest!r:.80} is not a SHA-256 in hex)"
    if not path.is_file():  # removed (or replaced by a folder) since its record was written
        return "it is missing" if not path.exists() else "it is not a file"
    try:
        actual = path.stat().st_size
        if actual != size:
            return f"it holds {actual} bytes, {size} were written"
        if file_sha256(path) != digest:
            return "its SHA-256 differs from the one recorded when it was written"
    except OSError as err:  # removed or made unreadable while it was checked
        return f"it cannot be read ({type(err).__name__}: {err.strerror})"
    return None


def remove_cache_file(path: str | Path) -> None:
    """Remove a cache file and its record (either may be missing)."""
    Path(path).unlink(missing_ok=True)
    record_path(path).unlink(missing_ok=True)


def is_empty_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder with nothing in it."""
    if not os.path.isdir(path):
        return False
    with os.scandir(path) as entries:
        return not any(entries)


def check_replaceable(path: str | Path, marker: str, kind: str) -> None:
    """FileExistsError unless `path` is absent, an empty folder, or a folder holding `marker` (an earlier `kind`
    written there, which the caller may replace), saying why: a symbolic link (even to such a folder), a file, or a
    folder without `marker`. Nothing is removed here."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink():  # refused whatever it links to: the reason is the link, not what is (or is not) in it
        raise FileExistsError(f"{path} is a symbolic link (to {os.readlink(path)}); it is left as it is: a folder that "
                              "is replaced may not be a link: give the folder itself, or a new or empty folder")
    if path.is_dir() and ((path / marker).is_file() or is_empty_folder(path)):
        return
    why = ("it is a file, not a folder" if not path.is_dir() else
           f"its {marker} is not a file" if (path / marker).exists() else f"no {marker} in it")
    raise FileExistsError(f"{path} exists and is not {kind} ({why}); it is left as it is: choose a new or empty folder")


# ---- one writer per folder -----------------------------------------------------------------------------
def _holder_text() -> str:
    command = " ".join(Path(sys.argv[0]).name if i == 0 else a for i, a in enumerate(sys.argv)) if sys.argv else "?"
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command[:300],
                       "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}) + "\n"


def lock_holder(folder: str | Path) -> str:
    """Who holds `folder`'s lock, in words, from its holder record ("a process that has not recorded
    itself yet" when there is none, or when the one recorded is no longer running on this host)."""
    unknown = "a process that has not recorded itself yet"
    try:
        record = json.loads((Path(folder) / HOLDER_FILE).read_text(encoding="utf-8"))
        pid, host = int(record["pid"]), str(record["host"])
    except (OSError, ValueError, KeyError, TypeError):
        return unknown
    if host == socket.gethostname() and not _running(pid):
        return unknown
    return f"pid {pid} on {host}, `{record.get('command', '?')}`, since {record.get('since', '?')}"


def _running(pid: int) -> bool:
    if pid <= 0:  # no process's id (0 and -1 would ask about a whole group, or every process)
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: past any pid, a damaged record
        return False
    except PermissionError:
        return True
    return True


def _remove_if_only_lock(folder: Path) -> None:
    """Remove `folder` when it holds nothing but its lock file: a refused command leaves no empty folder behind."""
    try:
        if {entry.name for entry in folder.iterdir()} <= {LOCK_FILE}:
            (folder / LOCK_FILE).unlink(missing_ok=True)
            folder.rmdir()
    except OSError:  # another process came in meanwhile: its folder now
        pass


def _remove_empty_parents(made: list[Path]) -> None:
    """Remove the parents `folder_lock` made for its folder (`made[1:]`, innermost first) once the folder is gone,
    each only while it is empty."""
    if made[0].exists():
        return
    for parent in made[1:]:
        try:
            parent.rmdir()
        except OSError:  # something was written there meanwhile: it stays, and so do the folders above it
            return


@contextmanager
def folder_lock(folder: str | Path, locked_error: Callable[[str], OSError], advice: str,
                activity: str = "in use") -> Iterator[Path]:
    """Hold `folder/.lock` (the folder, and any parent it lacks, is created if needed, and removed again when the
    command leaves nothing but the lock in it), re-entrant within a thread (another thread of this process is
    refused like another process: the lock's hold is per thread).

    Raises `locked_error(message)` at once (no waiting) when another process holds it; the message says
    "FOLDER is <activity> by another process (<the holder, `lock_holder`>; ...)" and ends with `advice`.
    """
    from filelock import FileLock, Timeout  # imported here: most commands never lock a folder

    folder = Path(folder)
    made = list(itertools.takewhile(lambda p: not p.exists(), (folder, *folder.parents)))  # folder, then parents
    created = bool(made)
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder / LOCK_FILE, timeout=0, is_singleton=True)
    try:
        lock.acquire()
    except Timeout:
        raise locked_error(f"{folder} is {activity} by another process ({lock_holder(folder)}; it holds "
                           f"{folder / LOCK_FILE}); {advice}") from None
    holder = folder / HOLDER_FILE
    try:
        if lock.lock_counter == 1:  # the outermost hold in this process records itself (written in place: no
            holder.write_text(_holder_text(), encoding="utf-8")  # temporary name; a torn record reads as unknown)
        yield folder
    finally:
        if lock.lock_counter == 1:  # removed before the lock is let go, so it never names the next holder
            holder.unlink(missing_ok=True)
        lock.release()
        if created and lock.lock_counter == 0:  # a folder made for a command that wrote nothing (it was refused)
            _remove_if_only_lock(folder)
            _remove_empty_parents(made)
