"""Atomic checkpoints: a checkpoint is complete before anything can read it.

Layout under `out_dir`:
    checkpoint-000120/model/           the DocumentModel in Hugging Face format (+ tokenizer)
    checkpoint-000120/trainer_state.pt optimizer, scheduler, per-rank RNG states and metrics window, step/epoch/position,
                                      the best dev loss so far and the world size
    checkpoint-000120/config.yaml      the resolved config
    latest                             JSON {"checkpoint": "checkpoint-000120", "step": 120}
    best                               JSON {"checkpoint": ..., "step": ..., "dev_loss": ...}

A checkpoint is written into a hidden temp directory, fsynced, then renamed into place; the
`best` pointer, when the checkpoint is the new best, and then the `latest` pointer (each written by
temp file + rename) are updated last. A run killed at any moment leaves either the previous `latest`
or the new one, never a half-written checkpoint behind a pointer, nor a new `latest` whose best step
the `best` pointer misses; leftover temp directories are removed on the next start. A checkpoint is
checked against the disk's free space before it is written, and one that meets a full disk is removed
on the way out (`aspire.storage.DiskFullError`, one line naming the folder): `latest` keeps naming the
previous one. A run holds `out_dir/.lock` from start to end (`run_lock`; under `torchrun`, rank 0): a second run into
the same folder fails at once, naming the first one's process. Re-saving a step that already
has a checkpoint (after a resume) moves the old copy aside before the new one is renamed into
place; if the run dies between the two renames, reading the pointer puts the old copy back.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from aspire.io import NonFiniteConstant, finite_dumps, loads_unique, write_text
from aspire.paths import BEST, LATEST, MODEL_DIR, STATE_FILE  # noqa: F401 (ckpt.BEST, ckpt.MODEL_DIR, ...)
from aspire.storage import check_free_space, folder_lock, on_disk_full

_TMP_PREFIX = ".tmp-checkpoint-"
_ASIDE_PREFIX = ".replaced-"


def checkpoint_name(step: int) -> str:
    return f"checkpoint-{step:06d}"


def _checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint folder's name (`checkpoint_name(step)`), None for any other name."""
    digits = name[len("checkpoint-"):]
    if name.startswith("checkpoint-") and digits.isascii() and digits.isdigit() and checkpoint_name(int(digits)) == name:
        return int(digits)
    return None


def _fsync_dir(path: Path) -> None:
    """Make the entries of folder `path` (its files' names, renames into it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    """fsync every file under `path`, then every folder, the deepest first (`model/`'s entries too, not only the top's)."""
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        with open(file, "rb") as handle:
            os.fsync(handle.fileno())
    for folder in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        _fsync_dir(folder)
    _fsync_dir(path)


def write_pointer(out_dir: Path, name: str, record: dict) -> None:
    """Write `out_dir/name` (a small JSON file) atomically, its rename made durable before this returns (`best` is
    on disk before `latest` moves). A value that is not JSON (a NaN, which `json.dumps` wrote as a bare `NaN` that
    `read_pointer` refuses; a numpy float32) is a ValueError naming the pointer and the (dotted) key, before anything
    is written (`aspire.io.finite_dumps`)."""
    write_text(out_dir / name, finite_dumps(record, f"{out_dir / name}: the `{name}` pointer") + "\n", fsync=True)
    _fsync_dir(out_dir)


def read_pointer(out_dir: str | Path, name: str = LATEST) -> dict | None:
    """The record of pointer `name` (`latest` or `best`), or None if the run has none yet.

    ValueError naming the pointer when it is not JSON `{"checkpoint": "checkpoint-NNNNNN", "step": NNNNNN}` (the
    step the name's, or not a file: a folder or a link to nothing in its place was read as "no pointer yet", so a
    run started over and pruning forgot the best), FileNotFoundError when its checkpoint has no trainer state (a
    deleted or half-copied one). A bare `NaN`, `Infinity` or `-Infinity` (which `json.loads` read as a float, and
    `write_pointer` never writes) or a key twice is such damage, named (`aspire.io.loads_unique`)."""
    path = Path(out_dir) / name
    if not path.exists() and not path.is_symlink():
        return None
    if not path.is_file():
        what = "a folder" if path.is_dir() else "a link to nothing" if not path.exists() else "not a plain file"
        raise ValueError(f"{path}: damaged `{name}` pointer, {what}; {_POINTER_FORM}")
    try:
        record = loads_unique(path.read_text(encoding="utf-8"), finite=True)
    except NonFiniteConstant as err:
        raise ValueError(f"{path}: damaged `{name}` pointer, a bare {err.constant}, which is not JSON (`write_pointer` "
                         f"refuses a non-finite number); {_POINTER_FORM}") from None
    except (ValueError, RecursionError) as err:  # not JSON, not UTF-8, a key twice, nested too deeply
        raise ValueError(f"{path}: damaged `{name}` pointer, not JSON ({err}); {_POINTER_FORM}") from None
    checkpoint = record.get("checkpoint") if isinstance(record, dict) else None
    step = record.get("step") if isinstance(record, dict) else None
    if type(step) is not int or step < 0 or checkpoint != checkpoint_name(step):
        raise ValueError(f"{path}: damaged `{name}` pointer {record!r}; {_POINTER_FORM}")
    final = Path(out_dir) / record["checkpoint"]
    aside = Path(out_dir) / f"{_ASIDE_PREFIX}{record['checkpoint']}"
    if not final.exists() and (aside / STATE_FILE).is_file():  # killed mid re-save: the old copy is whole
        os.replace(aside, final)
    if not (final / STATE_FILE).is_file():
        raise FileNotFoundError(f"{path} points at {record['checkpoint']}, which has no {STATE_FILE} (deleted, or "
                                f"copied in part): restore that checkpoint, or point `{name}` at another")
    return record


_POINTER_FORM = ('a pointer is JSON {"checkpoint": "checkpoint-000120", "step": 120} naming a checkpoint folder of '
                 "the run: rewrite it so")


def save_checkpoint(out_dir: str | Path, step: int, write_contents: Callable[[Path], None], state: dict[str, Any],
                    needed: int | None = None, best: dict | None = None) -> Path:
    """Write checkpoint `step` atomically and point `latest` at it.

    Args:
        write_contents: writes the model (and config) into the directory it is given.
        state: the trainer state, saved as `trainer_state.pt`.
        needed: the checkpoint's size in bytes where known (`checkpoint_bytes`): with less free space on
            the disk, DiskFullError is raised before anything is written.
        best: the `best` pointer's record when this checkpoint is the new best (its `checkpoint` this one's name),
            written before `latest`: a run stopped between the two resumes from the previous checkpoint and
            evaluates this step again, where `latest` first would resume past a best that `best` never named.
            A record that is not a dict naming this checkpoint (`checkpoint`, `step` an int), with a finite
            `dev_loss` and JSON values throughout, is a ValueError naming the key before anything is written.
    A disk that fills up while writing is one DiskFullError naming `out_dir` (`aspire.storage`); on any
    failure the half-written checkpoint is removed and `latest` still names the previous one.
    Returns the checkpoint directory. A step that is not an integer >= 0 is a ValueError before anything is written
    (-1 wrote `checkpoint--00001` behind a `latest` that `read_pointer` refuses; a numpy integer left a checkpoint
    that no pointer names).
    """
    if type(step) is not int or step < 0:
        raise ValueError(f"checkpoint step must be an integer >= 0, got {type(step).__name__} {step!r}")
    out_dir = Path(out_dir)
    final = out_dir / checkpoint_name(step)
    if best is not None:
        _check_best(best, final.name, step)
    what = f"{final.name} (the last checkpoint stays; --resume continues from it once there is room)"
    if needed is not None:
        check_free_space(out_dir, needed, what)
    tmp = out_dir / f"{_TMP_PREFIX}{step:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        with on_disk_full(out_dir, what, needed):
            tmp.mkdir(parents=True)
            write_contents(tmp)
            torch.save(state, tmp / STATE_FILE)
            _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    aside = out_dir / f"{_ASIDE_PREFIX}{final.name}"
    if final.exists():  # re-saving the same step (e.g. after a resume): the old copy goes aside first
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(final, aside)
    os.replace(tmp, final)
    _fsync_dir(out_dir)  # the rename on disk before a pointer names it: a power cut leaves no pointer to nothing
    if aside.exists():
        shutil.rmtree(aside)
    if best is not None:
        with on_disk_full(out_dir, f"the `{BEST}` pointer to {final.name} (`{LATEST}` still names the previous "
                                   "checkpoint)"):
            write_pointer(out_dir, BEST, best)
    with on_disk_full(out_dir, f"the `{LATEST}` pointer to {final.name} (it still names the previous checkpoint)"):
        write_pointer(out_dir, LATEST, {"checkpoint": final.name, "step": step})
    return final


def _check_best(best: Any, name: str, step: int) -> None:
    """ValueError naming the key when `best` is not the `best` pointer's record of checkpoint `name` (step `step`): a
    dict whose `checkpoint` is `name`, `step` the integer `step` (True or 3.0 was written, and the pointer then refused
    by `read_pointer` at resume), `dev_loss` a finite number, and every value JSON (`aspire.io.finite_dumps`: a numpy
    float32 raised TypeError with the checkpoint already renamed into place behind no pointer)."""
    if not isinstance(best, dict):
        raise ValueError(f"the `{BEST}` record must be a dict {{\"checkpoint\": ..., \"step\": ..., \"dev_loss\": ...}}, "
                         f"got {type(best).__name__} {best!r}")
    if best.get("checkpoint") != name or type(best.get("step")) is not int or best["step"] != step:
        raise ValueError(f"the `{BEST}` record {best!r} does not name checkpoint {name} (its `checkpoint` key "
                         f"{name!r}, `step` the integer {step})")
    loss = best.get("dev_loss")
    if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not math.isfinite(loss):
        raise ValueError(f"the `{BEST}` record's `dev_loss` must be a finite number, got {type(loss).__name__} {loss!r}")
    finite_dumps(best, f"the `{BEST}` pointer to {name}")  # the text `write_pointer` writes, refused now if at all


def tensor_bytes(obj: Any) -> int:
    """The bytes of every tensor in a nested dict / list / tuple (a state dict, an optimizer state)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def checkpoint_bytes(model: torch.nn.Module, optimizer_state: dict | None = None) -> int:
    """About how many bytes a checkpoint of `model` takes: its weights, plus the optimizer's state (when
    not yet created, AdamW's two float32 moments of every trainable parameter are counted)."""
    weights = tensor_bytes(model.state_dict())
    moments = tensor_bytes((optimizer_state or {}).get("state", {}))
    if not moments:
        moments = sum(2 * 4 * p.numel() for p in model.parameters() if p.requires_grad)
    return weights + moments


class RunLockedError(OSError):
    """Another process is training into the same `train.out_dir` (an OSError: the command line reports it in one line)."""


def run_lock(out_dir: str | Path):
    """Hold `out_dir/.lock` for a whole run (a context manager); RunLockedError at once, naming the holder,
    when another process holds it."""
    return folder_lock(out_dir, RunLockedError, "wait for that run to finish, or choose another train.out_dir")


def clean_temp(out_dir: str | Path) -> None:
    """Remove half-written checkpoints, and old copies a finished re-save left aside, of a killed run."""
    out_dir = Path(out_dir)
    for path in out_dir.glob(f"{_TMP_PREFIX}*"):
        shutil.rmtree(path)
    for path in out_dir.glob(f"{_ASIDE_PREFIX}*"):
        if (out_dir / path.name[len(_ASIDE_PREFIX):]).exists():
            shutil.rmtree(path)


def prune_checkpoints(out_dir: str | Path, keep: int) -> None:
    """Keep the newest `keep` checkpoints plus the ones `latest` and `best` point at. Only folders named as
    `checkpoint_name` names them count and are removed: another folder (`checkpoint-000120-copy`) is left alone.
    A `keep` that is not an integer >= 0 is a ValueError before anything is removed (-1 removed as 0 does)."""
    if type(keep) is not int or keep < 0:
        raise ValueError(f"checkpoints to keep must be an integer >= 0, got {type(keep).__name__} {keep!r}")
    out_dir = Path(out_dir)
    protected = {rec["checkpoint"] for rec in (read_pointer(out_dir, LATEST), read_pointer(out_dir, BEST)) if rec}
    # in step order: by name alone checkpoint-1000000 came before checkpoint-999999 and was pruned as the oldest
    ckpts = sorted((p.name for p in out_dir.glob("checkpoint-*") if p.is_dir() and _checkpoint_step(p.name) is not None),
                   key=_checkpoint_step)
    for name in ckpts[: max(len(ckpts) - keep, 0)]:
        if name not in protected:
            shutil.rmtree(out_dir / name)


def load_state(checkpoint_dir: str | Path) -> dict[str, Any]:
    """The trainer state of a checkpoint (on the CPU); ValueError naming the file when it cannot be read as one (a
    truncated or damaged copy)."""
    path = Path(checkpoint_dir) / STATE_FILE
    with damaged_torch_file(lambda reason: f"{path}: damaged trainer state, not readable ({reason}); resume from an "
                                           f"earlier checkpoint by pointing `{LATEST}` at it"):
        return torch.load(path, map_location="cpu", weights_only=False)


@contextlib.contextmanager
def damaged_torch_file(message: Callable[[str], str]) -> Iterator[None]:
    """Around reading a torch file: an OSError that names a file (missing, a folder, no permission) passes; anything
    else (torch and pickle raise many kinds on a damaged file, a truncated zip archive a bare `OSError: [Errno 22]
    Invalid argument` naming no file) becomes ValueError(`message(reason)`), reason being the error's type and first
    line."""
    try:
        yield
    except OSError as err:
        if err.filename is not None:
            raise
        raise ValueError(message(f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}")) from err
    except Exception as err:
        raise ValueError(message(f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}")) from err
