"""Round 37: `aspire.encoders.choice` (the `--backend auto` choice, with fake /proc/cpuinfo text) and
`aspire.encoders.adapters` (peft adapters on a tiny random BERT), checked against peft's own configs and layers."""

from __future__ import annotations

import json

import pytest
import torch

from aspire.encoders import adapters as A
from aspire.encoders import choice as C

INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse avx512f {extra}\nbugs\t\t: spectre\n"


def _cpuinfo(tmp_path, extra: str):
    path = tmp_path / "cpuinfo"
    path.write_text(INTEL.format(extra=extra), encoding="utf-8")
    return path


def test_bf16_flags_read_exactly(tmp_path):
    assert C.native_bf16_flags(_cpuinfo(tmp_path, "amx_tile amx_bf16 avx512_bf16")) == ["amx_bf16", "avx512_bf16"]
    assert C.native_bf16_flags(_cpuinfo(tmp_path, "avx512_bf16x")) == []  # whole flags, not substrings
    assert C.native_bf16_flags(tmp_path / "missing") is None


@pytest.mark.parametrize("extra,installed,device,backend,why", [
    ("amx_bf16", True, None, "openvino", "amx_bf16"),
    ("avx512_bf16", True, "cpu:0", "openvino", "avx512_bf16"),
    ("amx_bf16", False, "cpu", "torch", "OpenVINO is not installed"),
    ("", True, None, "torch", "no AMX or AVX512-BF16"),
    ("amx_bf16", True, "cuda", "torch", "on cuda"),
])
def test_choice_branches_say_why(tmp_path, extra, installed, device, backend, why):
    got = C.choose_backend(None, device, cpuinfo=_cpuinfo(tmp_path, extra), openvino_installed=installed)
    assert got.backend == backend and why in got.note and "\n" not in got.note
    assert got.quantize == ("bf16" if backend == "openvino" else None)
    assert got.options() == ({} if backend == "torch" else {"backend": "openvino", "quantize": "bf16"})


def test_unreadable_cpuinfo_and_query_adapter_keep_torch(tmp_path):
    got = C.choose_backend(None, None, cpuinfo=tmp_path / "missing", openvino_installed=True)
    assert got.backend == "torch" and "cannot be read" in got.note
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")  # a saved model's folder
    from aspire.encoders.pretrained import SETTINGS_FILE

    (model / SETTINGS_FILE).write_text(json.dumps({"adapter": {"names": ["query"], "kind": "lora",
                                                               "scope": "query"}}), encoding="utf-8")
    got = C.choose_backend(str(model), None, cpuinfo=_cpuinfo(tmp_path, "amx_bf16"), openvino_installed=True)
    assert got.backend == "torch" and "query adapter" in got.note


def test_resolve_backend_refusals(monkeypatch):
    monkeypatch.setenv(C.BACKEND_ENV, "fast")
    with pytest.raises(ValueError, match="valid: .*'openvino'"):
        C.resolve_backend(None, None)
    monkeypatch.setenv(C.BACKEND_ENV, "openvino")
    with pytest.raises(ValueError, match="cuda"):
        C.resolve_backend(None, None, device="cuda")
    with pytest.raises(ValueError, match="not auto"):
        C.resolve_backend("auto", "bf16")
    assert C.resolve_backend(None, "bf16") == ("torch", "bf16", None)


@pytest.fixture(scope="module")
def base_factory(tiny_model_dir):
    from transformers import AutoModel

    return lambda: AutoModel.from_pretrained(tiny_model_dir).eval()


def test_unknown_kind_refused_listing_valid(base_factory):
    with pytest.raises(ValueError, match=r"valid: \['lora', 'ia3'\]"):
        A.attach_adapters(base_factory(), "bottleneck", ["default"])


@pytest.mark.parametrize("kind", A.ADAPTER_KINDS)
def test_targets_match_peft_defaults_and_only_active_adapter_trains(base_factory, kind):
    from peft.utils.constants import (
        TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING,
        TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING,
        TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING,
    )

    model = A.attach_adapters(base_factory(), kind, ["x", "y"])
    config = model.peft_config["x"]
    peft_default = (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING if kind == "lora"
                    else TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING)["bert"]
    assert set(config.target_modules) == set(peft_default)
    if kind == "ia3":  # the docstring: keys/values scaled at their output, every output.dense at its input
        assert set(config.feedforward_modules) == set(TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING["bert"])
        ff = {n.split("layer.0.")[1]: m.is_feedforward for n, m in model.named_modules()
              if hasattr(m, "is_feedforward") and "layer.0." in n}
        assert ff == {"attention.self.key": False, "attention.self.value": False,
                      "attention.output.dense": True, "output.dense": True}
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(f".{model.base_model.prefix}" in n and n.split(".")[-2 if kind == "lora" else -1] == "x"
                             for n in trainable)
    assert A.adapter_settings(model) == {"kind": kind, "names": ["x", "y"], "scope": "all"}


@pytest.mark.parametrize("kind", A.ADAPTER_KINDS)
def test_saved_adapter_reloads_same_outputs(base_factory, tmp_path, kind):
    from transformers import AutoModel

    model = A.attach_adapters(base_factory(), kind, ["x", "y"])
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if model.base_model.prefix in name:
                p.add_(torch.randn_like(p) * 0.5)
    model.set_adapter("y")
    model.eval()
    x = torch.tensor([[2, 7, 9, 10, 11, 3]])
    ref = model(input_ids=x).last_hidden_state
    base_out = base_factory()(input_ids=x).last_hidden_state
    assert not torch.allclose(ref, base_out)  # the adapter changes something, so equality below means something
    A.save_adapted(model, tmp_path)
    settings = A.adapter_settings(model)
    assert settings["active"] == "y"
    torch.testing.assert_close(AutoModel.from_pretrained(tmp_path).eval()(input_ids=x).last_hidden_state, base_out)
    loaded = A.load_adapted(AutoModel.from_pretrained(tmp_path), tmp_path, settings).eval()
    assert loaded.active_adapter == "y"
    torch.testing.assert_close(loaded(input_ids=x).last_hidden_state, ref)
    torch.testing.assert_close(A.merged(model).eval()(input_ids=x).last_hidden_state, ref, atol=1e-5, rtol=1e-5)
    A.set_enabled(model, False)
    torch.testing.assert_close(model(input_ids=x).last_hidden_state, base_out)
    with pytest.raises(ValueError, match=r"valid: \['x', 'y'\]"):
        A.load_adapted(AutoModel.from_pretrained(tmp_path), tmp_path, settings, active="z")


def test_backend_names_match_backends_and_auto_option_parses():
    import argparse

    from aspire.cliutil import add_backend_options
    from aspire.encoders.backends import BACKENDS

    assert C.BACKENDS == BACKENDS
    parser = argparse.ArgumentParser()
    add_backend_options(parser)
    C.add_auto_backend_option(parser)
    assert parser.parse_args([]).backend is None
    assert parser.parse_args(["--backend", "auto"]).backend == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["--backend", "fast"])


def test_ia3_unused_lora_options_warned_and_codes_refused(caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger=A.__name__):
        config = A.adapter_config("ia3", "bert", r=4)
    assert "'r': 4" in caplog.text and "model.adapter.r" in caplog.text
    assert config.peft_type.value == "IA3"
    with pytest.raises(ValueError, match="ia3 adapters cannot train token embeddings"):
        A.adapter_config("ia3", "bert", trainable_tokens=[5])
    given = A.adapter_config("ia3", "bert", target_modules=["query"])
    assert set(given.target_modules) == {"query"} and not given.feedforward_modules


def test_settings_naming_another_adapter_kind_than_the_saved_one_are_refused(base_factory, tmp_path):
    # the settings say lora, the adapter on disk is ia3: it loaded as ia3 while the fingerprint and the fast backends
    # read 'lora' from the settings; now refused naming the settings file and the adapter's folder
    from transformers import AutoModel

    model = A.attach_adapters(base_factory(), "ia3", ["x"])
    A.save_adapted(model, tmp_path)
    settings = A.adapter_settings(model)
    assert A.load_adapted(AutoModel.from_pretrained(tmp_path), tmp_path, settings).peft_config["x"].peft_type.value == "IA3"
    with pytest.raises(ValueError, match=r"adapter 'kind' is 'lora', but adapter 'x' in .* is 'ia3'"):
        A.load_adapted(AutoModel.from_pretrained(tmp_path), tmp_path, {**settings, "kind": "lora"})
    with pytest.raises(ValueError, match=r"adapter 'kind' is 'lora'"):  # no kind: lora, as `check_adapter_settings` reads it
        A.load_adapted(AutoModel.from_pretrained(tmp_path), tmp_path, {k: v for k, v in settings.items() if k != "kind"})
