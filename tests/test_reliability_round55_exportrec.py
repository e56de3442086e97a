"""Round 55: `export_low_rank` checks the given base against every record of the model's base, not only the chain
of document_model.json encoders: the encoder settings' "base", interpolation.json's "base", the adapters'
base_model_name_or_path."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from aspire.encoders import ContextualSentenceEncoder
from aspire.train.export import FOREIGN_BASE_NORM, _recorded_bases, export_adapter, export_low_rank
from tests.test_formats import perturb_adapters
from tests.test_reliability_round40_export import perturbed_copy
from tests.test_reliability_round53_export import _random_base


def _fine_tune(tiny_model_dir, path, seed: int):
    """A plain copy of the tiny model with every weight moved a little (no document_model.json)."""
    return perturbed_copy(tiny_model_dir, path, seed, 0.002)[0]


def _adapted(tiny_model_dir, path):
    """The tiny model with a small random LoRA adapter, saved (base weights plus `adapter/`) at `path`."""
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    encoder.add_adapters("lora", ["default"], r=2, alpha=2.0)
    perturb_adapters(encoder)
    with torch.no_grad():
        for name, p in encoder.model.named_parameters():
            if "lora_" in name:
                p.mul_(0.05)
    encoder.save_pretrained(path)
    return path


def test_an_interpolation_record_of_the_base_is_checked(tiny_model_dir, tmp_path, caplog):
    """A soup whose interpolation.json names the tiny BERT as its base, exported over a random BERT of its config
    (relative linear difference ~1.4), was only warned about: its record was not read. Now refused, naming both;
    over the recorded base it is written without a warning."""
    soup = _fine_tune(tiny_model_dir, tmp_path / "soup", 3)
    (soup / "interpolation.json").write_text(json.dumps({"model": "elsewhere", "base": str(tiny_model_dir),
                                                         "alpha": 0.5}))
    other = _random_base(tiny_model_dir, tmp_path / "other", 7)
    assert _recorded_bases(soup) == {str(tiny_model_dir): (tiny_model_dir.resolve(), "soup/interpolation.json base")}
    with pytest.raises(ValueError) as err:
        export_low_rank(soup, tmp_path / "bad", str(other), rank=2)
    assert str(tiny_model_dir) in str(err.value) and str(other) in str(err.value)
    assert "interpolation.json" in str(err.value) and not (tmp_path / "bad").exists()
    with caplog.at_level(logging.WARNING, logger="aspire.train.export"):
        out, _, report = export_low_rank(soup, tmp_path / "ok", str(tiny_model_dir), rank=2)
    assert (out / "low_rank.json").is_file() and report["relative_norms"]["linear"]["difference"] < FOREIGN_BASE_NORM
    assert not caplog.records


def test_an_adapters_recorded_base_is_checked(tiny_model_dir, tmp_path):
    """A model trained with a LoRA adapter over the tiny BERT (its adapter_config.json names it) and no
    document_model.json, exported over a random base: refused, naming the adapter config's base."""
    model = _adapted(tiny_model_dir, tmp_path / "m")
    config = json.loads((model / "adapter" / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tiny_model_dir)
    (model / "adapter" / "adapter_config.json").write_text(json.dumps(config))
    other = _random_base(tiny_model_dir, tmp_path / "other", 9)
    with pytest.raises(ValueError) as err:
        export_low_rank(model, tmp_path / "bad", str(other), rank=2)
    assert str(tiny_model_dir) in str(err.value) and "adapter_config.json" in str(err.value)
    assert not (tmp_path / "bad").exists()


def test_an_exported_adapters_settings_base_is_checked(tiny_model_dir, tmp_path):
    """An adapter export (settings "base" naming the tiny BERT; its adapter config naming no model found here)
    re-exported at low rank over a random base: refused, naming the settings' base; over its base it is written."""
    model = _adapted(tiny_model_dir, tmp_path / "m")
    exported, _ = export_adapter(model, tmp_path / "exported", str(tiny_model_dir))
    for config in (exported / "adapter").rglob("adapter_config.json"):
        config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": "no-such-model"}))
    assert json.loads((exported / "aspire_encoder.json").read_text())["base"] == str(tiny_model_dir)
    other = _random_base(tiny_model_dir, tmp_path / "other", 11)
    with pytest.raises(ValueError) as err:
        export_low_rank(exported, tmp_path / "bad", str(other), rank=2)
    assert str(tiny_model_dir) in str(err.value) and "aspire_encoder.json" in str(err.value)
    out, _, report = export_low_rank(exported, tmp_path / "ok", str(tiny_model_dir), rank=2)
    assert report["relative_norms"]["linear"]["difference"] < FOREIGN_BASE_NORM


def test_the_shipped_model_records_its_base_by_every_record():
    """aspire-minilm names minilm in its document_model.json, settings and adapter config: one base, found."""
    from aspire.encoders.pretrained import resolve_model

    recorded = _recorded_bases(resolve_model("aspire-minilm"))
    assert list(recorded) == ["minilm"] and recorded["minilm"][0] == resolve_model("minilm").resolve()


def test_the_interpolation_record_name_is_interpolates_own():
    """export names interpolate's record file in a constant of its own (interpolate imports export): the two agree."""
    from aspire.train import export, interpolate

    assert export.INTERPOLATION_RECORD == interpolate.RECORD_FILE
