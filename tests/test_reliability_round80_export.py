"""Round 80: an adapter-only export names a local base folder by its absolute path.

`export_adapter(model, out, base)` wrote `base` into the export's settings as given: a relative folder
(`--adapter-only models/base`) was read against the working directory of every later load, so the export loaded
from its own folder's parent only (elsewhere: "its base model ... is not found")."""

from __future__ import annotations

import json
import shutil

import torch
from test_formats import PAPERS, perturb_adapters
from test_train import tiny_config

from aspire.encoders import load_encoder
from aspire.encoders.pretrained import SETTINGS_FILE
from aspire.train.export import export_adapter
from aspire.train.trainer import build_model


def test_an_export_over_a_relative_base_folder_loads_from_any_working_directory(tiny_model_dir, examples_dir, tmp_path,
                                                                              monkeypatch):
    work = tmp_path / "work"
    shutil.copytree(tiny_model_dir, work / "models" / "base")
    adapted = build_model(tiny_config(work / "models" / "base", examples_dir, tmp_path / "run", "model.kind=abstract",
                                      "model.adapter.kind=lora"))
    perturb_adapters(adapted.encoder)
    adapted.save_pretrained(tmp_path / "adapted")
    monkeypatch.chdir(work)
    out, fingerprint = export_adapter(tmp_path / "adapted", tmp_path / "shipped", "models/base")
    assert json.loads((out / SETTINGS_FILE).read_text())["base"] == str((work / "models" / "base").absolute())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    encoder = load_encoder(out)  # once: "its base model 'models/base' is not found"
    assert encoder.fingerprint() == fingerprint
    with torch.no_grad():
        assert torch.equal(encoder.encode(PAPERS[:2]).emb, adapted.encoder.encode(PAPERS[:2]).emb)
    short = export_adapter(tmp_path / "adapted", tmp_path / "again", str(work / "models" / "base"))[0]
    assert json.loads((short / SETTINGS_FILE).read_text())["base"] == str(work / "models" / "base")  # as given
