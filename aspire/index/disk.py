"""An index directory on disk: the live-generation pointer, per-file checksums, the writers' lock and
the clean-up of what a crashed writer left behind.

    DIR/.lock                 held (filelock) by the process writing DIR: build, add, merge, save
    DIR/.lock.holder          who holds it (pid, host, command), while held: a second writer's error names it
    DIR/CURRENT               the live generation's name, `gen-NNNNNN`, a directory inside DIR
    DIR/gen-NNNNNN/           generations (only the live one survives a completed save)
    DIR/.tmp-gen-NNNNNN-XXXX  a generation being written (left behind by a crash)
    DIR/.CURRENT.XXXX.tmp     a pointer being written (left behind by a crash)

Every path read is confined to DIR: the pointer must name `gen-NNNNNN`, the generation and its
files must resolve inside DIR (no symbolic link out), and the manifest may list only the known
file names. Checksums: the manifest records each file's size and SHA-256; loading checks every
size and the checksum of every file up to `FAST_VERIFY_BYTES` (fast path), `verify=True` checks
them all. A manifest recording the checksums of some files and not of others is damaged; one recording
none (an index saved before checksums) loads, and `verify=True` refuses it: nothing could be verified.
"""

from __future__ import annotations

import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from aspire.checksum import file_sha256
from aspire.storage import HOLDER_FILE, LOCK_FILE, folder_lock

GENERATION = re.compile(r"gen-[0-9]{6}\Z")  # ASCII digits, the whole name (`$` let "gen-000001\n" by)
FAST_VERIFY_BYTES = 64 << 20  # loading checksums files up to 64 MiB; larger ones with verify=True
SHARD_META = "shard.json"  # what marks a shard folder (`aspire.index.corpus.EncodedCorpus.save_shard`, `aspire encode`)
_LEFTOVER = re.compile(r"(\.tmp-gen-[0-9]{6}-.+|\.CURRENT\..+\.tmp)\Z", re.DOTALL)


class IndexFormatError(ValueError):
    """The directory holds no index, an incomplete or corrupted one, or one written by an incompatible version."""


class IndexLockedError(OSError):
    """Another process is writing the index directory (an OSError: the command line reports it in one line)."""


class IndexExistsError(FileExistsError):
    """The output directory already holds a live index (use `add`, or overwrite it)."""


ADD_OR_OVERWRITE = "use `aspire index add --index {out} --corpus FILE` to extend it or --overwrite to replace it"


def index_exists(out: Path, hint: str | None = None) -> IndexExistsError:
    return IndexExistsError(f"{out} already holds an index; {hint or ADD_OR_OVERWRITE.format(out=out)}")


def refuse_existing_index(out: Path, hint: str | None = None) -> None:
    """The first check of a command that writes a new index to `out` (build, merge, encode-shard --merge-into), before
    any heavy import: IndexExistsError when `out` holds a live index (its pointer names a generation with a manifest);
    `hint` says what to do instead (default: `add`, or --overwrite). A damaged one (a pointer that is no file or names
    no generation folder there, a generation without its manifest) is refused too, with the reason, as
    `build.prepare_build_dir` refuses it under the lock (a merge once replaced it without a word, deleting the
    generation's files)."""
    current = out / "CURRENT"
    if not current.exists() and not current.is_symlink():
        return
    try:
        gen = out / require_live_generation(out)
        if not (gen / "manifest.json").is_file():
            raise IndexFormatError(f"{gen} is incomplete: no manifest.json")
    except IndexFormatError as err:
        raise IndexExistsError(f"{out} holds a damaged index ({err}); "
                               f"{hint or 'use --overwrite to replace it'}") from None
    raise index_exists(out, hint)


@contextmanager
def index_lock(root: str | Path) -> Iterator[Path]:
    """Hold `root/.lock` while writing `root` (created if needed); re-entrant within a thread (another thread of this
    process is refused like another process: `aspire.storage.folder_lock`).

    Raises IndexLockedError at once (no waiting) when another process holds it, naming that process
    (`aspire.storage.folder_lock` records the holder in `root/.lock.holder` while it holds the lock).
    """
    with folder_lock(root, IndexLockedError, "wait until that build/add finishes, or write to another directory",
                     activity="being written") as held:
        yield held


def live_generation(root: Path) -> str | None:
    """The live generation's name from `root/CURRENT` (None when there is no pointer), confined to `root`;
    IndexFormatError when CURRENT is there but is no file (a folder, a link to nothing), is a link out of `root`
    (its name would be read from another folder's file), or names no generation inside `root`."""
    current = root / "CURRENT"
    if not current.exists() and not current.is_symlink():
        return None
    if not current.is_file():
        what = "a folder" if current.is_dir() else "a link to nothing" if not current.exists() else "not a plain file"
        raise IndexFormatError(f"{current} is {what}, not the file naming the live generation (gen-NNNNNN)")
    confined(root, current)  # a link out: the live generation was named by a file outside the index
    name = current.read_text(encoding="utf-8", errors="replace").strip()
    if not GENERATION.match(name):
        raise IndexFormatError(f"{current} names {name[:80]!r}, not a generation of this index (gen-NNNNNN)")
    confined(root, root / name)
    return name


def require_live_generation(root: Path) -> str:
    """`live_generation(root)`, the name of a generation folder that is there; IndexFormatError when `root` holds
    no index (no CURRENT file) or CURRENT names a generation folder that is not there (the early check of
    `index add`/`info`, `search` and `serve`, before their heavy imports)."""
    live = live_generation(root)
    if live is None:
        raise IndexFormatError(f"{root} holds no index (no CURRENT file); build one with `python -m aspire.index build`")
    if not (root / live).is_dir():
        raise IndexFormatError(f"{root}/CURRENT names {live}, which is not there: no folder {root / live} "
                               "(a generation deleted by hand?)")
    return live


def confined(root: Path, path: Path) -> Path:
    """`path`, after checking it resolves inside `root` (no symbolic link or `..` out of it)."""
    real_root, real = root.resolve(), path.resolve()
    if real != real_root and real_root not in real.parents:
        raise IndexFormatError(f"{path} resolves to {real}, outside the index directory {real_root}")
    return path


def check_files(gen: Path, manifest: dict, expected: tuple[str, ...], full: bool = False) -> None:
    """Check the generation's files against the manifest: the known names only, each inside `gen`
    with its recorded size, and its SHA-256 when `full` or small enough. IndexFormatError when the manifest
    records the checksums of some files only, or (`full`) of none."""
    files, sums = manifest.get("files", {}), manifest.get("sha256", {})
    if not isinstance(files, dict) or not isinstance(sums, dict):  # a damaged or hand-edited manifest
        raise IndexFormatError(f"{gen}/manifest.json is damaged: its `files` ({type(files).__name__}) and `sha256` "
                               f"({type(sums).__name__}) must map file names to sizes and checksums")
    if set(files) != set(expected):
        raise IndexFormatError(f"{gen}/manifest.json lists files {sorted(files)}, expected {sorted(expected)}")
    unsummed = sorted(set(expected) - set(sums))
    if unsummed and (sums or full):  # every writer records all checksums (an index before checksums: none)
        raise IndexFormatError(f"{gen}/manifest.json records no SHA-256 for {unsummed}"
                               + ("; it is damaged" if sums else
                                  " (an index saved before checksums): it cannot be verified; rebuild it to verify it"))
    for name in expected:
        path = confined(gen, gen / name)
        if not path.is_file() or path.stat().st_size != files[name]:
            raise IndexFormatError(f"{path} is missing or does not have the size the manifest records")
        if name in sums and (full or files[name] <= FAST_VERIFY_BYTES) and file_sha256(path) != sums[name]:
            raise IndexFormatError(f"{path} is corrupted: its SHA-256 differs from the one the manifest records")


def index_entries(root: Path) -> list[str]:
    """The names in `root` that only an index writes (its pointer CURRENT and its `gen-NNNNNN` generations), sorted."""
    names = [p.name for p in root.iterdir()] if root.is_dir() else []
    return sorted(n for n in names if n == "CURRENT" or GENERATION.match(n))


def check_index_dir(root: Path) -> list[str]:
    """The names in `root`; raises IndexFormatError when one is anything an index never writes
    (then `root` is not an index directory and nothing may be written or removed there)."""
    names = [p.name for p in root.iterdir()] if root.is_dir() else []
    foreign = [n for n in names if n not in ("CURRENT", LOCK_FILE, HOLDER_FILE) and not GENERATION.match(n) and not _LEFTOVER.match(n)]
    if foreign and index_entries(root):
        raise IndexFormatError(f"{root} holds an index and also entries an index never writes ({sorted(foreign)[:5]}); "
                               "refusing to write into it: move those entries out of the index folder")
    if foreign:
        raise IndexFormatError(f"{root} is not empty and holds no index (found {sorted(foreign)[:5]}); "
                               "refusing to write an index into it")
    return names


def clear_leftovers(root: Path, keep: str | None) -> list[str]:
    """Remove what interrupted writes left in `root`: generations other than `keep`, temporary
    generations and pointers (after `check_index_dir`). Returns the names removed."""
    removed = [n for n in check_index_dir(root) if n not in ("CURRENT", LOCK_FILE, HOLDER_FILE, keep)]
    for name in removed:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return removed
