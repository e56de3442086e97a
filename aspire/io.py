"""Files in and out: one reader per format, one atomic writer.

Writing: every file aspire writes in place goes through `atomic_write` (a context manager
yielding an open handle on a new temporary file beside the target, renamed over the target only
when the block ends without an exception; on an exception the temporary file is removed and the
target is left as it was). `write_text`, `write_json`, `write_jsonl` and `AtomicJsonl` are built on
it (`finite_dumps` is the text of a settings file that must hold no NaN). A reader thus never sees a
partial file. (Folders written whole, such as index generations, encoded shards, checkpoints and
downloaded models, are filled under a temporary name and renamed
as a folder, `atomic_folder` for the exported, interpolated and teacher folders; the training metrics log is
append-only.)

Reading:
- JSONL, any objects: `iter_jsonl` (streaming, `(line, object)`, errors name FILE:LINE, optional
  skip-and-record), `iter_checked_jsonl` (the same with a record check) and `read_jsonl` (a list);
  `require` checks an object's keys.
- Lines of text, cut where text mode cuts them and decoded one at a time (a byte that is not UTF-8 named by its line
  and 1-based byte column): `decoded_lines` (a file's bytes), `stream_lines` with `decoded_line` (stdin or a file
  opened "rb", a line as it arrives; a byte-order mark at the start is no part of line 1).
Papers JSONL (the input format) has its own reader with the record rules, `aspire.data.papers`,
which writes through `atomic_write`; this module imports nothing of aspire but `jsonsafe`.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from aspire.jsonsafe import dumps, escape_surrogates, finite_json, key_name

UTF8_BOM = b"\xef\xbb\xbf"  # a byte-order mark, which some editors write before a UTF-8 file's first line


class DataError(ValueError):
    """A malformed input line; the message names the file and the line."""


# ---- writing ------------------------------------------------------------------------------------
@contextmanager
def atomic_write(path: str | Path, mode: str = "w", *, fsync: bool = False, encoding: str = "utf-8") -> Iterator[IO]:
    """Open a new temporary file beside `path` for writing; rename it onto `path` on a clean exit.

    Args:
        path: the target; its folder is created if needed.
        mode: "w" (text, UTF-8, "\\n" line ends) or "wb" (bytes).
        fsync: flush the file to disk before the rename (for files that must survive a power cut,
            such as checkpoint pointers and index manifests).
    The temporary name is unique (`.NAME.<random>.tmp`), so concurrent writers of one target do
    not share a temporary file: the last rename wins, and each rename installs a whole file. A full disk (or quota)
    while writing is an OSError naming `path` (a write's own error names no file).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    if path.is_dir():  # said of the target, before anything is written (the rename would name the temporary file)
        raise IsADirectoryError(errno.EISDIR, "Is a directory, not a file", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    text = mode == "w"
    handle = open(tmp, "x" if text else "xb", **({"encoding": encoding, "newline": "\n"} if text else {}))
    try:
        with handle:
            yield handle
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.filename is None and err.errno in (errno.ENOSPC, errno.EDQUOT):  # a write's error names no file: it
            # was a bare "[Errno 28] No space left on device" (the demo's results on a full disk), naming nothing
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """A new folder beside `path` to fill: on a clean exit it replaces `path` whole (none of an earlier output's
    files outlive it), on an exception it is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}-{uuid.uuid4().hex[:12]}")
    staged.mkdir()  # made as any folder is (the umask's mode), not mkdtemp's owner-only 0o700, which it kept in place
    try:
        yield staged
        aside = path.with_name(f".{path.name}-old-{uuid.uuid4().hex[:12]}")
        if path.exists():
            path.rename(aside)
        try:
            staged.rename(path)
        except OSError:
            if aside.exists():  # the earlier folder goes back in place
                aside.rename(path)
            raise
        shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(staged, ignore_errors=True)  # gone already when it was moved into place


def write_text(path: str | Path, text: str, *, fsync: bool = False) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_write(path, fsync=fsync) as handle:
        handle.write(text)


def write_json(path: str | Path, obj: Any, *, indent: int | None = 2, fsync: bool = False) -> None:
    """Write one JSON document (UTF-8, non-ASCII kept as is) to `path` atomically, as strict JSON:
    a non-finite float is written as null, its path under "non_finite" (`aspire.jsonsafe.dumps`); a lone surrogate
    as its `\\uXXXX` escape (`aspire.jsonsafe.escape_surrogates`)."""
    text = dumps(obj, indent=indent, ensure_ascii=False) + "\n"
    try:
        write_text(path, text, fsync=fsync)
    except UnicodeEncodeError:  # a lone surrogate, not UTF-8: nothing was written
        write_text(path, escape_surrogates(text), fsync=fsync)


def finite_dumps(obj: Any, what: str, **kwargs) -> str:
    """`json.dumps(obj, **kwargs)` for a file of settings or a record whose numbers must stay numbers (where
    `write_json`'s null would lose a setting): a NaN or an infinity anywhere in `obj` is a ValueError naming `what` and
    each one's dotted key (`aspire.jsonsafe.finite_json`), before anything is written; `json.dumps` wrote it as a
    bare `NaN` / `Infinity`, which is not JSON (the `finite` readers refuse it). Two keys written as one JSON name
    (1 and "1"), or a non-finite key, is a ValueError naming `what` too, and so is a value or a dict key that
    `json.dumps` cannot write (a numpy float32, a set, a tuple key), naming its dotted key (`json.dumps`' TypeError
    named neither)."""
    try:
        non_finite = finite_json(obj)[1]  # {dotted key: "nan" | "inf" | "-inf"}
    except ValueError as err:
        raise ValueError(f"{what} {err}") from None
    if non_finite:
        raise ValueError(f"{what} records {', '.join(f'{key} {value}' for key, value in non_finite.items())}, which "
                         "JSON has no number for: give a finite number, or None")
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except TypeError as err:
        found = _unwritable(obj)
        if found is None:  # not a value's type (a `sort_keys` over keys that do not compare)
            raise TypeError(f"{what} {err}") from None
        raise ValueError(f"{what} records {found}, which JSON cannot write: give a Python number, string, bool, None, "
                         "list or dict") from None


def _unwritable(obj: Any, path: str | None = None) -> str | None:
    """The first value or dict key in `obj` that `json.dumps` cannot write (a numpy scalar or array, a set, a tuple
    key), as "KEY, a value of type T" or "the key K of KEY, of type T" (KEY dotted as `aspire.jsonsafe.finite_json`
    names it, "$" for `obj` itself); None when there is none."""
    where = "$" if path is None else path
    if obj is None or isinstance(obj, (str, int, float)):  # their subclasses too (bool, numpy's float64), as json does
        return None
    if isinstance(obj, (dict, list, tuple)):
        for key, value in obj.items() if isinstance(obj, dict) else enumerate(obj):
            name = key_name(key)  # a list position as its number
            if name is None:
                return f"the key {key!r} of {where}, of type {type(key).__name__}"
            found = _unwritable(value, name if path is None else f"{path}.{name}")
            if found is not None:
                return found
        return None
    return f"{where}, a value of type {type(obj).__name__}"


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    """Write `records` as JSONL (one object a line) atomically; returns the number written."""
    with AtomicJsonl(path) as out:
        for record in records:
            out.write(record)
        return out.count


class AtomicJsonl:
    """Write JSONL through `atomic_write`: `with AtomicJsonl(path) as out: out.write(obj)`.

    Each line is strict JSON, as `write_json` writes: a non-finite float is null, its path under the record's
    "non_finite" (`aspire.jsonsafe.dumps`); a lone surrogate is its `\\uXXXX` escape. `count` is the number of
    objects written so far.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.count = 0

    def __enter__(self) -> "AtomicJsonl":
        self._context = atomic_write(self.path)
        self._handle = self._context.__enter__()
        return self

    def write(self, obj: dict) -> None:
        """Write `obj` as one line; a TypeError, before anything of it is written, when it is not a dict (a JSONL
        line here is one object, as `iter_jsonl` reads it)."""
        if not isinstance(obj, dict):
            raise TypeError(f"{self.path}: record {self.count + 1} is a {type_name(obj)}, not a dict: a JSONL line "
                            "is one JSON object")
        try:
            if not _str_keys_only(obj):  # `dumps` names two keys written as one JSON name (1 and "1")
                raise ValueError("a key that is not a string")
            line = json.dumps(obj, ensure_ascii=False, allow_nan=False)
        except (ValueError, TypeError):  # a NaN or an infinity, a numpy value, a key that is no string (the rare
            try:  # record: the walk of `dumps` only then; its TypeError stands)
                line = dumps(obj, ensure_ascii=False)
            except ValueError as err:  # two keys written as one name, a non-finite key
                raise ValueError(f"{self.path}: record {self.count + 1}: {err}") from None
        try:
            self._handle.write(line + "\n")
        except UnicodeEncodeError:  # a lone surrogate (a "\\ud800" escape read back): the text wrapper encodes as it
            self._handle.write(escape_surrogates(line) + "\n")  # writes, so nothing of the line was written yet
        self.count += 1

    def __exit__(self, exc_type, exc, tb) -> bool | None:
        return self._context.__exit__(exc_type, exc, tb)


def _str_keys_only(obj: Any) -> bool:
    """Whether every dict in `obj` (dicts, lists and tuples, nested) has only string keys, which `json.dumps` writes
    as they are (it writes 1 and "1" both as the name "1", a key twice in the line)."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str) or (isinstance(value, (dict, list, tuple)) and not _str_keys_only(value)):
                return False
        return True
    return all(_str_keys_only(v) for v in obj if isinstance(v, (dict, list, tuple)))


# ---- reading ------------------------------------------------------------------------------------
def decoded_lines(data: bytes, where: str | Path) -> list[str]:
    """`data` (a file's bytes) cut into lines where text mode cuts them (\\n, \\r\\n, \\r; not at a U+2028 inside a
    JSON string, as `str.splitlines` would), each decoded on its own: bytes that are not UTF-8 are a ValueError
    naming `where`, the line and the column (a whole-file decode named a byte offset of the file, no line). A UTF-8
    byte-order mark at the very start is no part of the first line, as `stream_lines` and `iter_jsonl` have it."""
    lines = []
    for line_no, raw in enumerate(data.removeprefix(UTF8_BOM).splitlines(), start=1):
        try:
            lines.append(decoded_line(raw))
        except ValueError as err:
            raise ValueError(f"{where}:{line_no}: {err}") from None
    return lines


def decoded_line(raw: bytes) -> str:
    """One line's bytes decoded as UTF-8; bytes that are not are a ValueError naming the first bad byte and its
    1-based byte column in the line (the caller names the file and line)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1})") from None


def stream_lines(stream: IO) -> Iterator[bytes]:
    """The lines of a text stream (stdin) or a binary one (a file opened "rb"), undecoded, cut where text mode cuts
    them (as `decoded_lines`), one at a time as they arrive; a text stream is read from its binary `buffer` where it
    has one, so that a byte that is not UTF-8 reaches its own line's `decoded_line` (a strict text stream's read
    stopped at it, naming a byte offset of its buffer and no line; a surrogateescape one made it a lone surrogate, read
    as text). A text stream without a buffer (a `StringIO`) gives its text back as the bytes it was decoded from
    (surrogateescape). A UTF-8 byte-order mark at the very start of the stream is no part of its first line, as a
    papers file's is not (`iter_jsonl`)."""
    source = stream if isinstance(stream, (io.BufferedIOBase, io.RawIOBase)) else getattr(stream, "buffer", None)
    chunks = source if source is not None else (text.encode("utf-8", "surrogateescape") for text in stream)
    for n, chunk in enumerate(chunks):  # a chunk ends at \n (or the end): a \r inside one cuts it as text mode would
        yield from (chunk.removeprefix(UTF8_BOM) if n == 0 else chunk).splitlines()


def iter_jsonl(path: str | Path, on_error: str = "raise", bad: list[str] | None = None, *,
               finite: bool = False) -> Iterator[tuple[int, dict]]:
    """Yield `(line_number, object)` for each non-blank line of a JSONL file, streaming.

    A line that is not UTF-8 or not a JSON object, or holds an object with a key twice (naming the key: JSON readers
    differ on which value they keep), raises `DataError("FILE:LINE: ...")`, or with
    `on_error="skip"` is appended to `bad` (which must then be given) and skipped. A UTF-8 byte-order mark at the
    very start of the file is ignored, as the papers reader ignores it. A gzip-compressed file (its magic bytes) is
    refused whole with `DataError` naming it, skip or not: its bytes are no lines of JSON. With `finite`, a bare
    `NaN`, `Infinity` or `-Infinity` (Python's json reads them; aspire's writers never write them) is such a bad
    line too, naming the constant (for files aspire wrote; a third-party file may hold them as data).
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if on_error == "skip" and bad is None:
        raise ValueError("on_error='skip' needs a `bad` list to record the skipped lines")
    path = Path(path)
    with path.open("rb") as handle:  # decoded line by line, so a bad byte is named by its line
        for lineno, raw in enumerate(handle, start=1):
            if lineno == 1 and raw.startswith(b"\x1f\x8b"):  # gzip's magic bytes: no JSON text starts so
                raise DataError(f"{path}: the file is gzip-compressed; this reader takes plain JSONL (decompress it)")
            if lineno == 1:
                raw = raw.removeprefix(UTF8_BOM)
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                obj = loads_unique(line, finite=finite)
                if not isinstance(obj, dict):
                    raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            except (RepeatedKey, NonFiniteConstant) as err:
                message = f"{path}:{lineno}: {err}"
            except UnicodeDecodeError as err:
                message = f"{path}:{lineno}: not UTF-8 ({err.reason} at byte {err.start})"
            except json.JSONDecodeError as err:
                message = f"{path}:{lineno}: invalid JSON: {err}"
            except DataError as err:
                message = str(err)
            except ValueError as err:  # a number of over 4300 digits, which Python's int() refuses
                message = f"{path}:{lineno}: invalid JSON: {err}"
            except RecursionError:
                message = f"{path}:{lineno}: invalid JSON: nested too deeply"
            else:
                yield lineno, obj
                continue
            if on_error == "raise":
                raise DataError(message) from None
            bad.append(message)


def iter_checked_jsonl(path: str | Path, check: Callable[[dict, Path, int], None], on_error: str = "raise",
                       bad: list[str] | None = None, *, finite: bool = False) -> Iterator[tuple[int, dict]]:
    """`iter_jsonl` (`finite` as there), then `check(obj, path, line)` on each object; `check` raises `DataError` for a
    bad record, which stops reading, or with `on_error="skip"` is appended to `bad` and skipped."""
    path = Path(path)
    for lineno, obj in iter_jsonl(path, on_error, bad, finite=finite):
        try:
            check(obj, path, lineno)
        except DataError as err:
            if on_error == "raise":
                raise
            bad.append(str(err))
            continue
        yield lineno, obj


def input_under(out: str | Path, inputs: Iterable[str | Path]) -> str | Path | None:
    """The first of `inputs` (paths that exist) that is the output `out` or lies inside it (symlinks resolved): writing
    `out` would replace it. None when writing `out` replaces no input (an `out` inside an input replaces none)."""
    where = Path(out).resolve()
    for path in inputs:
        source = Path(path).resolve()
        if os.path.exists(path) and (source == where or where in source.parents):
            return path
    return None


def type_name(value: object) -> str:
    """A value's type as an error message names it: "null" for None (as JSON says it), else its Python type."""
    return "null" if value is None else type(value).__name__


class RepeatedKey(ValueError):
    """A key twice in one JSON object (`_unique_keys`); `key` names it, and its message says so for the readers that
    name the line before it."""

    def __init__(self, key: str):
        super().__init__(f"the key {key!r} twice in one object; a key names one value")
        self.key = key


class NonFiniteConstant(ValueError):
    """A bare `NaN`, `Infinity` or `-Infinity` in JSON text read with `finite` (`loads_unique`); `constant` names it."""

    def __init__(self, constant: str):
        super().__init__(f"a bare {constant}, which is not JSON (aspire never writes one: a result's non-finite "
                         "number as null, a setting's refused)")
        self.constant = constant


def _refuse_constant(constant: str) -> Any:
    """`json.loads`' `parse_constant` for `finite` readers: `NonFiniteConstant` naming the constant."""
    raise NonFiniteConstant(constant)


def loads_unique(text: str, *, finite: bool = False) -> Any:
    """`json.loads` of `text` refusing a key twice in one object: `RepeatedKey` (a ValueError; `.key` names it), where
    Python's json keeps the last value and drops the other unseen. With `finite`, a bare `NaN`, `Infinity` or
    `-Infinity` (which Python's json reads as a float) is `NonFiniteConstant` (a ValueError; `.constant` names it)."""
    if finite:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_refuse_constant)
    return json.loads(text, object_pairs_hook=_unique_keys)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """`json.loads`' `object_pairs_hook`: the object as a dict; `RepeatedKey` when a key is in it twice (Python's
    json would keep the last value and drop the other unseen)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise RepeatedKey(key)
            seen.add(key)
    return obj


def read_json(path: str | Path, what: str, *, mapping: bool = False, finite: bool = False) -> Any:
    """A JSON file's content; ValueError naming `what` and the file when it is missing, not UTF-8 JSON, holds an
    object with a key twice (naming the key: JSON readers differ on which value they keep), with `mapping` is
    not a JSON object, or with `finite` holds a bare `NaN`, `Infinity` or `-Infinity` (naming it: Python's json reads
    them, aspire's writers never write them; leave `finite` off for third-party files that may hold them as data).
    A UTF-8 byte-order mark at the file's start is ignored, as the line readers ignore it (`decoded_lines`)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{what} not found: {path}")
    try:
        content = loads_unique(path.read_text(encoding="utf-8-sig"), finite=finite)
    except NonFiniteConstant as err:
        raise ValueError(f"{path}: the {what} holds {err}") from None
    except RepeatedKey as err:
        raise ValueError(f"{path}: the {what} has the key {err.key!r} twice in one object; a key names one "
                         "value") from None
    except (ValueError, RecursionError) as err:  # not UTF-8, not JSON, a number of over 4300 digits, nested too deeply
        raise ValueError(f"{path}: not JSON: the {what} cannot be read ({err})") from None
    if mapping and not isinstance(content, dict):
        raise ValueError(f"{path}: the {what} holds a JSON {type(content).__name__}, not an object")
    return content


def read_jsonl(path: str | Path, *, finite: bool = False) -> list[dict]:
    """Every object of a JSONL file (blank lines skipped; a bad line raises `DataError`; `finite` as in `iter_jsonl`)."""
    return [obj for _, obj in iter_jsonl(path, finite=finite)]


def unique_id(value: Any, key: str, where: str, seen: dict[str, str]) -> str:
    """`value`, a record's `key` read at `where` ("FILE:LINE"): a non-empty string that `seen` (id -> where it was
    met) does not hold yet, added to it; `DataError` at `where` otherwise."""
    if not isinstance(value, str) or not value:
        raise DataError(f"{where}: {key} must be a non-empty string, got {type_name(value)} {value!r:.60}")
    if value in seen:
        raise DataError(f"{where}: {key} {value!r} repeats the one of {seen[value]}")
    seen[value] = where
    return value


def require(obj: dict, keys: Iterable[str], path: str | Path, lineno: int, where: str = "") -> None:
    """Raise `DataError` naming the file and line (and `where` in the record, e.g. "cited[2]") if `obj` lacks any
    of `keys`."""
    missing = [k for k in keys if k not in obj]
    if missing:
        raise DataError(f"{path}:{lineno}: {where + ': ' if where else ''}missing key(s) {missing}")
