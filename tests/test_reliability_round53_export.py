"""Round 53: `export_low_rank` over a base of the model's architecture that is not its base."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from transformers import BertConfig, BertModel

from aspire.train.export import FOREIGN_BASE_NORM, export_low_rank
from tests.test_interpolate import tuned_model
from tests.test_reliability_round40_export import perturbed_copy


def _random_base(tiny_model_dir, path, seed: int):
    """The tiny model's tokenizer with a random BERT of its very config at `path`: same names and shapes."""
    shutil.copytree(tiny_model_dir, path)
    torch.manual_seed(seed)
    BertModel(BertConfig(**json.loads((tiny_model_dir / "config.json").read_text()))).save_pretrained(path)
    return path


def test_low_rank_export_refuses_a_base_its_record_contradicts(tiny_model_dir, examples_dir, tmp_path):
    """A model whose document_model.json names the tiny BERT, exported over a random BERT of the same config, was
    written as an adapter of the whole difference (relative linear norm ~1.4) over the wrong base, silently."""
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    other = _random_base(tiny_model_dir, tmp_path / "other", 7)
    with pytest.raises(ValueError) as err:
        export_low_rank(tuned, tmp_path / "out", str(other), rank=2)
    assert str(tiny_model_dir) in str(err.value) and str(other) in str(err.value)
    assert not (tmp_path / "out").exists()
    out, _, report = export_low_rank(tuned, tmp_path / "ok", str(tiny_model_dir), rank=2)  # its own base: written
    assert (out / "low_rank.json").is_file() and report["base"] == str(tiny_model_dir)


def test_low_rank_export_warns_over_an_unrecorded_foreign_base(tiny_model_dir, tmp_path, caplog):
    """A plain fine-tune (no document_model.json) over a random base of its config: the report gives the linear
    difference against numpy's norms and a warning names the base; over its real base no warning."""
    tuned, model = perturbed_copy(tiny_model_dir, tmp_path / "tuned", seed=5, scale=0.002)
    other = _random_base(tiny_model_dir, tmp_path / "other", 8)
    with caplog.at_level(logging.WARNING, logger="aspire.train.export"):
        _, _, report = export_low_rank(tuned, tmp_path / "bad", str(other), rank=2)
    end, wrong = model.state_dict(), BertModel.from_pretrained(other).state_dict()
    names = [n for n in end if n.endswith(".weight") and end[n].dim() == 2 and n.split(".")[-2] in
             ("query", "key", "value", "dense")]
    d = sum(float((end[n] - wrong[n]).double().square().sum()) for n in names)
    b = sum(float(wrong[n].double().square().sum()) for n in names)
    moved = report["relative_norms"]["linear"]["difference"]
    assert moved == pytest.approx((d / b) ** 0.5, rel=1e-6) and moved > FOREIGN_BASE_NORM
    assert any("likely not the base" in r.getMessage() and str(other) in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aspire.train.export"):
        _, _, good = export_low_rank(tuned, tmp_path / "good", str(tiny_model_dir), rank=2)
    assert good["relative_norms"]["linear"]["difference"] < 0.2
    assert not any("likely not the base" in r.getMessage() for r in caplog.records)


def test_a_record_that_stops_short_of_the_base_is_warned_not_refused(tiny_model_dir, tmp_path, caplog):
    """A model whose record names a start folder with no record of its own (a copy of the base here) is exported
    over the real base with a warning naming the recorded start: the chain of records cannot reach the base, and
    the weights say it is the base's fine-tune (the record alone refused it before the lead's mend)."""
    start = tmp_path / "start"
    shutil.copytree(tiny_model_dir, start)
    tuned, model = perturbed_copy(tiny_model_dir, tmp_path / "tuned", seed=6, scale=0.002)
    (tuned / "document_model.json").write_text(json.dumps({"model": {"encoder": str(start)}}))
    with caplog.at_level(logging.WARNING, logger="aspire.train.export"):
        out, _, report = export_low_rank(tuned, tmp_path / "out", str(tiny_model_dir), rank=2)
    assert (out / "low_rank.json").is_file() and report["relative_norms"]["linear"]["difference"] < FOREIGN_BASE_NORM
    assert any(str(start) in r.getMessage() and "not from the base" in r.getMessage() for r in caplog.records)
