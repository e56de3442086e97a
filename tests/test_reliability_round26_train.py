"""Round 26: training checkpoints (pruning, durability, a crash mid re-save) and the process RNG states."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.train import checkpoint as ckpt
from aspire.train.process import rng_state, seed_everything, set_rng_state


def _save(out: Path, step: int, best: bool = False) -> None:
    def contents(path: Path) -> None:
        (path / ckpt.MODEL_DIR).mkdir()
        (path / ckpt.MODEL_DIR / "weights.bin").write_text(str(step))
    record = {"checkpoint": ckpt.checkpoint_name(step), "step": step, "dev_loss": 1.0 / step} if best else None
    ckpt.save_checkpoint(out, step, contents, {"step": step}, best=record)


def test_pruning_counts_and_removes_only_checkpoint_folders(tmp_path):
    """A folder named like a checkpoint but not one (`checkpoint-000004-copy`, `checkpoint-old`) was sorted among the
    checkpoints by name length: the copy counted as the newest, so checkpoint-000004 (the second newest, with
    keep=2) was removed, and `checkpoint-old` (short: the "oldest") was removed with shutil.rmtree."""
    (tmp_path / "checkpoint-000004-copy").mkdir()
    (tmp_path / "checkpoint-old").mkdir()
    (tmp_path / "checkpoint-old" / "notes.txt").write_text("mine")
    (tmp_path / "checkpoint-0002").mkdir()  # not the name checkpoint_name gives step 2
    for step in (2, 4, 6):
        _save(tmp_path, step)
    ckpt.prune_checkpoints(tmp_path, keep=2)
    names = sorted(p.name for p in tmp_path.glob("checkpoint-*"))
    assert names == ["checkpoint-000004", "checkpoint-000004-copy", "checkpoint-000006", "checkpoint-0002",
                     "checkpoint-old"]
    assert (tmp_path / "checkpoint-old" / "notes.txt").read_text() == "mine"
    # an old best is kept beside the newest `keep`, in step order past six digits too
    _save(tmp_path, 1_000_000, best=True)
    for step in (1_000_001, 1_000_002):
        _save(tmp_path, step)
    ckpt.prune_checkpoints(tmp_path, keep=1)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-??????*") if ckpt._checkpoint_step(p.name) is not None) \
        == ["checkpoint-1000000", "checkpoint-1000002"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads fsynced paths from /proc/self/fd")
def test_a_checkpoint_is_durable_before_a_pointer_names_it(tmp_path, monkeypatch):
    """The model folder's entries and the rename of the checkpoint into place were never fsynced: after a power cut
    `latest` (fsynced) could name a checkpoint whose folder or model files the disk never recorded."""
    events: list[tuple] = []
    fsync, replace = os.fsync, os.replace

    def record_fsync(fd: int) -> None:
        events.append(("fsync", os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))))
        fsync(fd)

    def record_replace(src, dst) -> None:
        replace(src, dst)
        events.append(("replace", os.path.realpath(src), os.path.realpath(dst)))

    monkeypatch.setattr(os, "fsync", record_fsync)
    monkeypatch.setattr(os, "replace", record_replace)
    out = tmp_path.resolve()
    _save(out, 2, best=True)
    tmp_model = str(out / ".tmp-checkpoint-000002" / ckpt.MODEL_DIR)
    final = str(out / ckpt.checkpoint_name(2))
    fsynced = [e[1] for e in events if e[0] == "fsync"]
    assert tmp_model in fsynced  # model/'s entries, before the rename
    moved = next(i for i, e in enumerate(events) if e[0] == "replace" and e[2] == final)
    best = next(i for i, e in enumerate(events) if e[0] == "replace" and e[2] == str(out / ckpt.BEST))
    latest = next(i for i, e in enumerate(events) if e[0] == "replace" and e[2] == str(out / ckpt.LATEST))
    assert moved < best < latest
    assert ("fsync", str(out)) in events[moved:best]  # the checkpoint's rename, before `best` names it
    assert ("fsync", str(out)) in events[best:latest]  # `best` on disk before `latest` moves
    assert ("fsync", str(out)) in events[latest:]


def test_a_resave_killed_between_its_renames_reads_back_the_old_copy(tmp_path, monkeypatch):
    """Re-saving a step moves the old copy aside, then renames the new one in: killed between the two, the pointer
    still finds a whole checkpoint, and a finished re-save leaves no old copy behind."""
    _save(tmp_path, 2)
    _save(tmp_path, 4)
    replace = os.replace
    calls = []

    def killed_at_second(src, dst) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt
        replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_at_second)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, 4)
    monkeypatch.setattr(os, "replace", replace)
    assert not (tmp_path / "checkpoint-000004").exists()
    assert ckpt.read_pointer(tmp_path) == {"checkpoint": "checkpoint-000004", "step": 4}
    assert ckpt.load_state(tmp_path / "checkpoint-000004") == {"step": 4}
    ckpt.clean_temp(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-000002", "checkpoint-000004", "latest"]
    _save(tmp_path, 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-000002", "checkpoint-000004", "latest"]


def test_rng_states_round_trip_through_a_saved_state():
    """python (with its cached gauss), numpy (with its cached normal) and torch continue as if never interrupted,
    after the state went through torch.save / torch.load as a checkpoint's does."""
    seed_everything(7)
    random.gauss(0, 1), np.random.standard_normal(), torch.randn(2)
    buffer = io.BytesIO()
    torch.save(rng_state(), buffer)
    straight = (random.gauss(0, 1), random.random(), np.random.standard_normal(), np.random.rand(3).tolist(),
                torch.randn(4).tolist())
    seed_everything(123)  # anything in between
    buffer.seek(0)
    set_rng_state(torch.load(buffer, weights_only=False))
    resumed = (random.gauss(0, 1), random.random(), np.random.standard_normal(), np.random.rand(3).tolist(),
               torch.randn(4).tolist())
    assert resumed == straight
