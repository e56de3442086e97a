"""Hostile model folders for `load_encoder` (aspire.encoders.backends, pretrained, adapters): a folder without its
tokenizer's vocabulary, a damaged or mistyped settings file, and adapters that are incomplete or made for another
model are clear errors naming the file or key, never a silently wrong encoder or a traceback from deep inside."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from aspire.encoders import load_encoder
from aspire.encoders.pretrained import SETTINGS_FILE


@pytest.fixture()
def model_dir(tiny_model_dir, tmp_path):
    """A private copy of the tiny model: the tests change its files."""
    return shutil.copytree(tiny_model_dir, tmp_path / "tiny")


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_a_folder_without_its_tokenizer_vocabulary_is_refused(model_dir, cache, backend):
    """transformers builds a tokenizer of the five special tokens alone from a folder without vocab.txt and
    tokenizer.json: every word became [UNK] and every sentence got nearly the same vector, silently."""
    for name in ("vocab.txt", "tokenizer.json"):
        (model_dir / name).unlink()
    with pytest.raises(ValueError, match=re.escape(f"{model_dir} holds no tokenizer vocabulary (none of "
                                                   "tokenizer.json, vocab.txt)")):
        load_encoder(model_dir, backend=backend)


def test_a_folder_with_one_vocabulary_file_loads(model_dir):
    (model_dir / "tokenizer.json").unlink()  # vocab.txt alone is a whole tokenizer
    encoder = load_encoder(model_dir)
    assert len(encoder.tokenizer) > 100


@pytest.mark.parametrize(("text", "says"), [
    ("{not json", ": not JSON: the encoder settings cannot be read"),
    ("[]", ": the encoder settings holds a JSON list, not an object"),
    ('"max_length"', ": the encoder settings holds a JSON str, not an object"),
])
def test_a_damaged_settings_file_is_named(model_dir, text, says):
    (model_dir / SETTINGS_FILE).write_text(text)
    with pytest.raises(ValueError, match=re.escape(f"{model_dir / SETTINGS_FILE}{says}")):
        load_encoder(model_dir)


def test_a_damaged_settings_file_of_an_adapter_folder_is_named(tmp_path):
    (tmp_path / "adapted").mkdir()  # no config.json: resolving the model reads its settings for a base
    (tmp_path / "adapted" / SETTINGS_FILE).write_text("{")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'adapted' / SETTINGS_FILE}: not JSON")):
        load_encoder(tmp_path / "adapted")


def test_an_unknown_setting_is_named_with_its_file(model_dir):
    (model_dir / SETTINGS_FILE).write_text(json.dumps({"max_lenght": 32}))
    with pytest.raises(ValueError, match=re.escape(f"{model_dir / SETTINGS_FILE}: unknown encoder setting(s) "
                                                   "['max_lenght']; valid: ['code', 'codes', 'include_title', ")):
        load_encoder(model_dir, backend="onnx")
    (model_dir / SETTINGS_FILE).write_text(json.dumps({"max_length": 32}))
    assert load_encoder(model_dir).max_length == 32
    with pytest.raises(ValueError, match=re.escape("load_encoder's keywords: unknown encoder setting(s) ['overflw']")):
        load_encoder(model_dir, overflw="truncate")


def test_a_missing_base_is_named_with_the_settings_file(tmp_path):
    (tmp_path / "adapted").mkdir()
    (tmp_path / "adapted" / SETTINGS_FILE).write_text(json.dumps({"base": str(tmp_path / "gone")}))
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'adapted' / SETTINGS_FILE}: its base model "
                                                   f"'{tmp_path / 'gone'}' is not found")):
        load_encoder(tmp_path / "adapted")


# ---- adapters (aspire.encoders.adapters.load_adapted) ------------------------------------------------------
@pytest.fixture(scope="module")
def adapted(tiny_model_dir, tmp_path_factory):
    """The tiny model with a trained-looking LoRA adapter, exported adapter-only over the tiny model."""
    from test_hybrid import adapted_tiny_model

    return adapted_tiny_model(tiny_model_dir, tmp_path_factory.mktemp("adapted"))


def _with_settings(adapted, tmp_path, change) -> object:
    folder = shutil.copytree(adapted, tmp_path / "changed")
    settings = json.loads((folder / SETTINGS_FILE).read_text())
    (folder / SETTINGS_FILE).write_text(json.dumps(change(settings)))
    return folder


@pytest.mark.parametrize(("change", "says"), [
    (lambda s: {**s, "adapter": {"kind": "lora", "scope": "all"}}, "adapter 'names' must be a list of distinct "
                                                                   "adapter names, got None"),
    (lambda s: {**s, "adapter": {**s["adapter"], "names": "default"}}, "adapter 'names' must be a list"),
    (lambda s: {**s, "adapter": {**s["adapter"], "scope": "queries"}}, "adapter 'scope' 'queries' is unknown; "
                                                                       "valid: ['all', 'query']"),
    (lambda s: {**s, "adapter": {**s["adapter"], "kind": "houlsby"}}, "adapter 'kind' 'houlsby' is unknown"),
    (lambda s: {**s, "adapter": "lora"}, "'adapter' holds 'lora', not an object"),
])
def test_bad_adapter_settings_are_named(adapted, tmp_path, change, says):
    """A missing `names` was a bare KeyError; an unknown scope was taken silently (the adapter left on, as `all`)."""
    folder = _with_settings(adapted, tmp_path, change)
    with pytest.raises(ValueError, match=re.escape(f"{folder / SETTINGS_FILE}: {says}")):
        load_encoder(folder)


def test_an_adapter_of_another_width_is_named(adapted, tmp_path):
    """Adapters trained on a 32-wide model over a 48-wide base: a RuntimeError of peft's naming neither folder."""
    from conftest import build_tiny_model

    wide = build_tiny_model(tmp_path / "wide", hidden=48)
    folder = _with_settings(adapted, tmp_path, lambda s: {**s, "base": str(wide)})
    with pytest.raises(ValueError, match=re.escape(f"{folder}: its adapters do not fit the base model (hidden size "
                                                   "48)")):
        load_encoder(folder)
    assert load_encoder(adapted).dim == 32  # the folder it came from loads as before


def test_the_training_path_checks_the_folder_as_load_encoder_does(model_dir):
    """Training, export and the teacher open a model with `ContextualSentenceEncoder.from_pretrained`, past
    `load_encoder`: a folder without its vocabulary loaded there with special tokens alone, and an unknown saved
    setting was a TypeError naming neither file nor key."""
    from aspire.encoders import ContextualSentenceEncoder

    (model_dir / SETTINGS_FILE).write_text(json.dumps({"max_lenght": 32}))
    with pytest.raises(ValueError, match=re.escape(f"{model_dir / SETTINGS_FILE}: unknown encoder setting(s) "
                                                   "['max_lenght']")):
        ContextualSentenceEncoder.from_pretrained(model_dir)
    (model_dir / SETTINGS_FILE).unlink()
    with pytest.raises(ValueError, match=re.escape("the settings given: unknown encoder setting(s) ['overflw']")):
        ContextualSentenceEncoder.from_pretrained(model_dir, overflw="chunk")
    for name in ("vocab.txt", "tokenizer.json"):
        (model_dir / name).unlink()
    with pytest.raises(ValueError, match=re.escape(f"{model_dir} holds no tokenizer vocabulary")):
        ContextualSentenceEncoder.from_pretrained(model_dir)
