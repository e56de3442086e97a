"""Training records and resume: the encoder a saved model names, and what a resumed run may not change (its gradient
clipping, the examples it reads)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from aspire.train import checkpoint as ckpt
from aspire.train.config import example_files
from aspire.train.export import _recorded_bases
from aspire.train.interpolate import RECORD_FILE, interpolate
from aspire.train.trainer import METRICS, check_state, run
from tests.test_train import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
FAST = ("model.kind=max", "data.use_dev=false", "train.max_steps=2", "train.save_every=1", "train.warmup_steps=0")


def _model_json(out: Path, step: int) -> dict:
    return json.loads((out / ckpt.checkpoint_name(step) / ckpt.MODEL_DIR / "document_model.json").read_text())


@pytest.fixture()
def relative_base(tiny_model_dir, tmp_path, monkeypatch) -> Path:
    """The tiny model copied to `work/base`, the working directory `work`: `model.encoder=base` names it relatively."""
    work = tmp_path / "work"
    shutil.copytree(tiny_model_dir, work / "base")
    monkeypatch.chdir(work)
    return work


def test_a_relative_encoder_is_recorded_as_its_absolute_folder_so_interpolate_finds_it_from_elsewhere(
        relative_base, examples_dir, tmp_path, monkeypatch):
    run(tiny_config(Path("base"), examples_dir, relative_base / "run", *FAST))
    out = relative_base / "run"
    # document_model.json held "base": read against the working directory of each later command
    assert _model_json(out, 2)["model"]["encoder"] == str(relative_base / "base")
    assert "encoder: base\n" in (out / ckpt.checkpoint_name(2) / "config.yaml").read_text()  # the setting as given
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    model = out / ckpt.checkpoint_name(2) / ckpt.MODEL_DIR
    assert (relative_base / "base").resolve() in {path for path, _ in _recorded_bases(model).values()}  # was {}
    interpolate(model, 0.5, elsewhere / "wise")  # was "unknown model 'base'" here (and another `base` folder, silently)
    assert json.loads((elsewhere / "wise" / RECORD_FILE).read_text())["base"] == str(relative_base / "base")


def test_interpolate_records_a_relative_base_given_as_its_absolute_folder(relative_base, examples_dir):
    run(tiny_config(Path("base"), examples_dir, relative_base / "run", *FAST, "train.max_steps=1"))
    model = relative_base / "run" / ckpt.checkpoint_name(1) / ckpt.MODEL_DIR
    interpolate(model, 0.5, relative_base / "wise", base="base")  # its record held "base"
    assert json.loads((relative_base / "wise" / RECORD_FILE).read_text())["base"] == str(relative_base / "base")


def test_a_run_folder_as_encoder_is_recorded_as_the_checkpoint_it_started_from(relative_base, examples_dir):
    run(tiny_config(Path("base"), examples_dir, relative_base / "first", *FAST, "train.max_steps=1"))
    run(tiny_config(Path("first"), examples_dir, relative_base / "second", *FAST, "train.max_steps=1"))
    # "first" named whatever its best checkpoint is at each later read, from wherever it is read
    start = relative_base / "first" / ckpt.checkpoint_name(1) / ckpt.MODEL_DIR
    assert _model_json(relative_base / "second", 1)["model"]["encoder"] == str(start)


def test_a_run_resumed_with_the_same_relative_encoder_from_its_folder_resumes(relative_base, examples_dir):
    out = relative_base / "run"
    run(tiny_config(Path("base"), examples_dir, out, *FAST, "train.stop_after=1"))
    final = run(tiny_config(Path("base"), examples_dir, out, *FAST), resume=True)
    assert final["step"] == 2
    assert _model_json(out, 2)["model"]["encoder"] == str(relative_base / "base")


def test_a_resume_with_another_clip_norm_is_refused_naming_it(tiny_model_dir, examples_dir, tmp_path):
    out = tmp_path / "run"
    run(tiny_config(tiny_model_dir, examples_dir, out, *FAST, "train.stop_after=1"))
    with pytest.raises(ValueError, match=r"--resume with a changed config .*train\.clip_norm: 1\.0 -> 0\.5"):
        run(tiny_config(tiny_model_dir, examples_dir, out, *FAST, "train.clip_norm=0.5"), resume=True)
    assert ckpt.read_pointer(out)["step"] == 1  # it trained on, clipping the resumed steps at 0.5


@pytest.mark.parametrize("name", ["examples.train.jsonl", "abstracts.jsonl"])
def test_a_resume_whose_examples_were_rewritten_is_refused_naming_the_file(tiny_model_dir, examples_dir, tmp_path, name):
    examples = shutil.copytree(examples_dir, tmp_path / "examples")
    out = tmp_path / "run"
    run(tiny_config(tiny_model_dir, examples, out, *FAST, "train.stop_after=1"))
    metrics = (out / METRICS).read_text()
    lines = (examples / name).read_text().splitlines(keepends=True)
    (examples / name).write_text("".join(lines[1:] + lines[:1]))  # the same path, other bytes (other pairs or order)
    with pytest.raises(ValueError, match=rf"examples changed since it started \({examples / name} "
                                         r"\(data\.examples_dir\): sha256 \w{12}\.\.\. when the run started"):
        run(tiny_config(tiny_model_dir, examples, out, *FAST), resume=True)  # trained on, on other data
    assert (out / METRICS).read_text() == metrics and ckpt.read_pointer(out)["step"] == 1


def test_the_dev_split_is_among_the_files_a_run_records_where_it_is_read(tiny_model_dir, examples_dir, tmp_path):
    def names(*overrides: str) -> set[str]:
        return {p.name for _, p in example_files(tiny_config(tiny_model_dir, examples_dir, tmp_path, *overrides))}

    assert names() == {"abstracts.jsonl", "examples.train.jsonl", "examples.dev.jsonl"}
    assert names("data.use_dev=false") == {"abstracts.jsonl", "examples.train.jsonl"}


def test_a_checkpoint_without_recorded_examples_still_resumes_and_records_them(tiny_model_dir, examples_dir, tmp_path):
    out = tmp_path / "run"
    run(tiny_config(tiny_model_dir, examples_dir, out, *FAST, "train.stop_after=1"))
    path = out / ckpt.checkpoint_name(1) / ckpt.STATE_FILE
    state = torch.load(path, weights_only=False)
    assert str(examples_dir / "examples.train.jsonl") in state["examples"]
    for bad in ({"x": "not a digest"}, ["a list"]):  # damage is named with the file
        with pytest.raises(ValueError, match=rf"{path}: the trainer state's examples must map each examples file"):
            check_state({**state, "examples": bad}, path, 1)
    del state["examples"]  # as written before they were recorded
    torch.save(state, path)
    assert run(tiny_config(tiny_model_dir, examples_dir, out, *FAST), resume=True)["step"] == 2
    recorded = torch.load(out / ckpt.checkpoint_name(2) / ckpt.STATE_FILE, weights_only=False)["examples"]
    assert set(recorded) == {str(examples_dir / n) for n in ("abstracts.jsonl", "examples.train.jsonl")}
