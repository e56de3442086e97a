"""Training records: the models an interpolation or a soup records, as a later command in another folder reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aspire.encoders.pretrained import resolve_model
from aspire.train import checkpoint as ckpt
from aspire.train.export import _recorded_bases
from aspire.train.interpolate import RECORD_FILE, interpolate, soup
from aspire.train.trainer import run
from tests.test_train import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
FAST = ("model.kind=max", "data.use_dev=false", "train.max_steps=2", "train.save_every=1", "train.warmup_steps=0")


# ---- interpolation records ----------------------------------------------------------------------------------
@pytest.fixture()
def work(tiny_model_dir, examples_dir, tmp_path, monkeypatch) -> Path:
    """`work/a` and `work/b`: two one-step runs of the tiny model (two seeds), the working directory `work/sub`, from
    which `../a` names the first relatively."""
    work = tmp_path / "work"
    for name, seed in (("a", 0), ("b", 1)):
        run(tiny_config(tiny_model_dir, examples_dir, work / name, *FAST, "train.max_steps=1", f"train.seed={seed}"))
    (work / "sub").mkdir()
    monkeypatch.chdir(work / "sub")
    return work


def _model(run_dir: Path) -> Path:
    return run_dir / ckpt.checkpoint_name(1) / ckpt.MODEL_DIR


def _record(folder: Path) -> dict:
    return json.loads((folder / RECORD_FILE).read_text())


def test_interpolate_records_a_relative_model_as_its_absolute_folder(work, tiny_model_dir, tmp_path, monkeypatch):
    interpolate("../a/checkpoint-000001/model", 0.5, work / "wise")  # its record held the path as given
    record = _record(work / "wise")
    assert record["model"] == str(Path.cwd() / "../a/checkpoint-000001/model")  # was "../a/checkpoint-000001/model"
    interpolate("../b", 0.5, work / "wise-b")  # a run's folder: the checkpoint interpolated, not the run's best later
    assert _record(work / "wise-b")["model"] == str(Path.cwd() / "../b/checkpoint-000001/model")  # was "../b/..."
    monkeypatch.chdir(tmp_path)  # read back from another folder: the same models
    assert resolve_model(record["model"]).resolve() == _model(work / "a").resolve()
    assert tiny_model_dir.resolve() in {path for path, _ in _recorded_bases(work / "wise").values()}


def test_a_soup_records_its_relative_members_as_their_absolute_folders(work, tmp_path, monkeypatch):
    """`soup`, `members`, `weights` and a soup of soups' leaves: each a path that loads from any folder (a relative
    `../a/...` was read against the working directory of whichever command read the record)."""
    inner = soup(["../a", "../b/checkpoint-000001/model"], work / "soup")
    a, b = (str(Path.cwd() / f"../{name}/checkpoint-000001/model") for name in "ab")
    record = _record(inner)
    assert record["soup"] == [a, b] and list(record["members"]) == [a, b]  # were "../a/checkpoint-000001/model", ...
    assert record["weights"] == pytest.approx({a: 0.5, b: 0.5})
    interpolate("../a", 0.5, work / "wise")
    monkeypatch.chdir(tmp_path)
    nested = _record(soup(["work/soup", "work/wise"], work / "nested"))
    assert nested["soup"] == [str(work / "soup"), str(work / "wise")]  # were "work/soup", "work/wise"
    assert nested["weights"] == pytest.approx({a: 0.25, b: 0.25, str(work / "wise"): 0.5})
    for name in nested["weights"]:
        assert (resolve_model(name) / "config.json").is_file()
