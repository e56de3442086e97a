"""Round 41: atomic checkpoints (`aspire.train.checkpoint`) and teacher vectors (`aspire.train.teacher`), checked
with temp dirs, hand-built folders and a direct encode by the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.train import checkpoint as ckpt
from aspire.train.teacher import load_teacher, main


def _save(out: Path, step: int, best: bool = False) -> Path:
    def write(d: Path) -> None:
        (d / "model").mkdir()
        (d / "model" / "w.txt").write_text(str(step))
    record = {"checkpoint": ckpt.checkpoint_name(step), "step": step, "dev_loss": 1.0 / (step + 1)} if best else None
    return ckpt.save_checkpoint(out, step, write, {"step": step}, best=record)


# ---- the fix: a pointer that is no file is damaged, not absent --------------------------------------------------
@pytest.mark.parametrize("pointer", [ckpt.LATEST, ckpt.BEST])
@pytest.mark.parametrize("kind, said", [("folder", "a folder"), ("link", "a link to nothing")])
def test_a_pointer_that_is_a_folder_or_a_broken_link_is_damaged_not_absent(tmp_path, pointer, kind, said):
    """`read_pointer` said "no pointer yet" (None) for a `latest`/`best` that is a folder or a link to nothing: a
    resume started the run over, and `prune_checkpoints` protected no best and removed it (keep=1 left only the
    newest of 3). Now a ValueError naming the pointer, and pruning removes nothing."""
    for step in (10, 20, 30):
        _save(tmp_path, step, best=step == 10)
    (tmp_path / pointer).unlink()
    if kind == "folder":
        (tmp_path / pointer).mkdir()
    else:
        (tmp_path / pointer).symlink_to(tmp_path / "gone")
    with pytest.raises(ValueError, match=rf"damaged `{pointer}` pointer, {said}"):
        ckpt.read_pointer(tmp_path, pointer)
    with pytest.raises(ValueError, match=rf"{pointer}"):
        ckpt.prune_checkpoints(tmp_path, keep=1)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == [ckpt.checkpoint_name(s) for s in (10, 20, 30)]


def test_absent_pointers_are_still_none_and_a_link_to_a_good_pointer_reads(tmp_path):
    assert ckpt.read_pointer(tmp_path) is None and ckpt.read_pointer(tmp_path, ckpt.BEST) is None
    _save(tmp_path, 5)
    (tmp_path / "real").write_text((tmp_path / ckpt.LATEST).read_text())
    (tmp_path / ckpt.LATEST).unlink()
    (tmp_path / ckpt.LATEST).symlink_to(tmp_path / "real")
    assert ckpt.read_pointer(tmp_path) == {"checkpoint": "checkpoint-000005", "step": 5}


# ---- checked, correct ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["contents", "state"])
def test_a_checkpoint_interrupted_midway_is_never_visible_and_latest_stays(tmp_path, where, monkeypatch):
    _save(tmp_path, 10, best=True)

    def write(d: Path) -> None:
        (d / "model").mkdir()
        (d / "model" / "w.txt").write_text("half")
        if where == "contents":
            raise KeyboardInterrupt

    if where == "state":
        monkeypatch.setattr(ckpt.torch, "save", lambda *a, **k: (_ for _ in ()).throw(OSError("boom")))
    with pytest.raises((KeyboardInterrupt, OSError)):
        ckpt.save_checkpoint(tmp_path, 20, write, {"step": 20},
                             best={"checkpoint": "checkpoint-000020", "step": 20, "dev_loss": 0.0})
    assert sorted(p.name for p in tmp_path.iterdir()) == [ckpt.BEST, "checkpoint-000010", ckpt.LATEST]
    assert ckpt.read_pointer(tmp_path)["step"] == 10 and ckpt.read_pointer(tmp_path, ckpt.BEST)["step"] == 10


def test_a_resave_killed_between_its_renames_reads_back_the_old_copy(tmp_path, monkeypatch):
    _save(tmp_path, 10)
    real = ckpt.os.replace
    calls = []

    def replace(src, dst):
        calls.append((Path(src).name, Path(dst).name))
        if len(calls) == 2:  # the new copy's rename into place
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, 10)
    monkeypatch.setattr(ckpt.os, "replace", real)
    assert not (tmp_path / "checkpoint-000010").exists()
    assert ckpt.read_pointer(tmp_path)["step"] == 10  # the old copy put back
    assert ckpt.load_state(tmp_path / "checkpoint-000010") == {"step": 10}
    ckpt.clean_temp(tmp_path)
    assert not list(tmp_path.glob(".tmp-*")) and not list(tmp_path.glob(".replaced-*"))


@pytest.mark.parametrize("keep", [0, 1, 2, 5])
def test_pruning_never_removes_best_or_latest_against_a_brute_force_rule(tmp_path, keep):
    steps = [3, 40, 7, 1000000, 999999, 120]
    for step in steps:
        _save(tmp_path, step, best=step == 7)
    _save(tmp_path, 40)  # latest: not the newest by step (a resume from an earlier checkpoint)
    (tmp_path / "checkpoint-000120-copy").mkdir()
    ckpt.prune_checkpoints(tmp_path, keep)
    newest = sorted(steps)[len(steps) - keep:] if keep else []
    expect = sorted({ckpt.checkpoint_name(s) for s in newest + [7, 40]} | {"checkpoint-000120-copy"})
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == expect


@pytest.mark.parametrize("text", ["", "{", '{"checkpoint": "checkpoint-000010", "step": 11}', "[1]",
                                  '{"checkpoint": "checkpoint-000010", "step": true}'])
def test_a_damaged_pointer_is_refused_naming_it(tmp_path, text):
    _save(tmp_path, 10)
    (tmp_path / ckpt.LATEST).write_text(text)
    with pytest.raises(ValueError, match=r"damaged `latest` pointer"):
        ckpt.read_pointer(tmp_path)


def test_a_pointer_at_a_partial_checkpoint_is_refused(tmp_path):
    _save(tmp_path, 10)
    (tmp_path / "checkpoint-000010" / ckpt.STATE_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="checkpoint-000010"):
        ckpt.read_pointer(tmp_path)


def test_teacher_rows_follow_ids_and_a_paper_without_text_is_rejected_not_a_zero_vector(tiny_model_dir, tmp_path):
    """Each row of vectors.npy is the direct encode of its ids.json paper; a record without abstract text is left out
    and counted in `rejected` (never a zero or title-only row)."""
    from aspire.data.papers import abstract_text
    from aspire.encoders import ContextualSentenceEncoder

    rows = [{"paper_id": f"R{i}", "title": f"title {i} parser", "abstract": [f"speech corpus {i} " * (i + 1) + "."]}
            for i in range(6)]
    rows.append({"paper_id": "EMPTY", "title": "no abstract here", "abstract": ["  "]})
    acl = tmp_path / "acl.jsonl"
    acl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "t"
    assert main(["--teacher", str(tiny_model_dir), "--out", str(out), "--acl-path", str(acl), "--benchmarks-dir", "",
                 "--max-papers", "0", "--max-length", "32", "--batch-size", "4"]) == 0
    t = load_teacher(out)
    assert "EMPTY" not in t.ids and sorted(t.ids) == [f"R{i}" for i in range(6)]
    assert t.meta["rejected"] == 1 and t.meta["papers"] == 6
    by_id = {r["paper_id"]: r for r in rows}
    enc = ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir), max_length=32)
    direct = enc.embed_texts([abstract_text(by_id[p]["title"], by_id[p]["abstract"]) for p in t.ids], normalize=True,
                             max_length=32, batch_size=1).numpy()
    np.testing.assert_allclose(t.vectors, direct, atol=1e-5)
    assert torch.allclose(torch.from_numpy(np.linalg.norm(t.vectors, axis=1)), torch.ones(6), atol=1e-5)
