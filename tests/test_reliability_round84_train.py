"""Records that name models by folder: a `..` in a recorded path, and soups of models whose records name one base
two ways (as typed, before such names were pinned, and as its absolute folder)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from aspire.encoders.pretrained import pinned_model, resolve_model
from aspire.train import checkpoint as ckpt
from aspire.train.interpolate import soup
from aspire.train.trainer import run
from tests.test_train import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
FAST = ("model.kind=max", "data.use_dev=false", "train.max_steps=1", "train.save_every=1", "train.warmup_steps=0")


def test_a_parent_step_is_resolved_in_the_recorded_folder(tiny_model_dir, tmp_path, monkeypatch):
    """`../models/base` run from `w/sub` was recorded `w/sub/../models/base`, which no longer loads once `sub` is
    gone; it is `w/models/base`."""
    shutil.copytree(tiny_model_dir, tmp_path / "models" / "base")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    recorded = pinned_model("../models/base")
    assert recorded == str(tmp_path / "models" / "base")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").rmdir()
    assert resolve_model(recorded) == tmp_path / "models" / "base"


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_a_parent_step_past_a_symbolic_link_is_kept(tiny_model_dir, tmp_path, monkeypatch):
    """`link/../base` is the parent of the link's target: the text is not shortened to a folder it does not name."""
    shutil.copytree(tiny_model_dir, tmp_path / "far" / "base")
    (tmp_path / "far" / "deep").mkdir()
    (tmp_path / "near").mkdir()
    os.symlink(tmp_path / "far" / "deep", tmp_path / "near" / "link")
    monkeypatch.chdir(tmp_path / "near")
    recorded = pinned_model("link/../base")
    assert Path(recorded).resolve() == (tmp_path / "far" / "base").resolve()


def test_a_soup_takes_a_model_whose_record_names_its_base_as_typed(tiny_model_dir, examples_dir, tmp_path,
                                                                   monkeypatch):
    """A model saved before encoders were pinned records `model.encoder` as typed (`base`); souped with a seed of the
    same base saved since (its absolute folder), the soup was refused, 'model.encoder is 'base', '/.../base' in ...'
    with advice (--mixed-kinds) that could not help."""
    work = tmp_path / "work"
    shutil.copytree(tiny_model_dir, work / "base")
    monkeypatch.chdir(work)
    for name, seed in (("a", 0), ("b", 1)):
        run(tiny_config(Path("base"), examples_dir, work / name, *FAST, f"train.seed={seed}"))
    b = work / "b" / ckpt.checkpoint_name(1) / ckpt.MODEL_DIR
    meta = json.loads((b / "document_model.json").read_text())
    meta["model"]["encoder"] = "base"  # as the setting was saved before
    (b / "document_model.json").write_text(json.dumps(meta))
    soup([str(work / "a"), str(work / "b")], work / "soup")
    assert (work / "soup" / "document_model.json").is_file()
    shutil.copytree(tiny_model_dir, work / "other")
    meta["model"]["encoder"] = str(work / "other")
    (b / "document_model.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"model\.encoder is .*other.*base") as err:
        soup([str(work / "a"), str(work / "b")], work / "soup2")
    assert "--mixed-kinds" not in str(err.value)  # it cannot soup two bases
