"""Round 45: control codes, peft adapters and task formats on a tiny random BERT (checked against
brute-force expectations: same vocabulary and rows, torch.equal vectors, peft's own switching)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from aspire.data.papers import Paper
from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.adapters import attach_adapters, check_adapter_settings, is_adapted, load_adapted
from aspire.encoders.codes import add_control_codes, code_id, codes_for

PAPERS = [Paper("a", "the model", ["we propose a new method.", "results show it improves."]),
          Paper("b", "neural text", ["the data is text."])]


def perturb(encoder, seed: int) -> None:
    """Random values for the active adapter's weights (LoRA's B starts at zero) and the codes' deltas."""
    gen = torch.Generator().manual_seed(seed)
    active = encoder.model.active_adapter
    with torch.no_grad():
        for name, p in encoder.model.named_parameters():
            if f".{active}." in f"{name}." and ("lora_" in name or "trainable_tokens_delta" in name):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


def test_adding_the_same_codes_again_changes_nothing(tiny_model_dir):
    tok, model = AutoTokenizer.from_pretrained(tiny_model_dir), AutoModel.from_pretrained(tiny_model_dir)
    old = model.get_input_embeddings().weight.detach().clone()
    assert add_control_codes(model, tok, ["[COCITE]", "[METHOD]"]) == ["[COCITE]", "[METHOD]"]
    vocab, table = tok.get_vocab(), model.get_input_embeddings().weight.detach().clone()
    for code in ("[COCITE]", "[METHOD]"):  # brute force: the mean of the name's pieces in the old table
        pieces = tok(code.strip("[]").lower(), add_special_tokens=False)["input_ids"]
        assert pieces and torch.allclose(table[code_id(tok, code)], old[pieces].mean(0))
    assert add_control_codes(model, tok, ["[METHOD]", "[COCITE]", "[METHOD]"]) == []
    assert tok.get_vocab() == vocab and torch.equal(model.get_input_embeddings().weight, table)
    # one new code beside known ones: only that one row added, the others kept
    assert add_control_codes(model, tok, ["[COCITE]", "[RESULT]"]) == ["[RESULT]"]
    assert len(tok) == len(vocab) + 1 and torch.equal(model.get_input_embeddings().weight[: len(vocab)], table)


def test_adapters_switch_and_round_trip_exactly(tiny_model_dir, tmp_path):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    codes, code = codes_for("task", ["cocite", "search"])
    encoder.add_codes(codes, code)
    encoder.add_adapters("lora", ["cocite", "search"], r=4, alpha=8.0,
                         trainable_tokens=[code_id(encoder.tokenizer, c) for c in codes])
    perturb(encoder, 0)
    encoder.model.set_adapter("search")
    perturb(encoder, 1)
    encoder.model.eval()
    v_search, f_search = encoder.encode(PAPERS).emb, encoder.fingerprint()
    encoder.model.set_adapter("cocite")
    v_cocite, f_cocite = encoder.encode(PAPERS).emb, encoder.fingerprint()
    assert not torch.equal(v_search, v_cocite) and f_search != f_cocite
    encoder.model.set_adapter("search")  # and back: the very same vectors
    assert torch.equal(encoder.encode(PAPERS).emb, v_search)
    encoder.save_pretrained(tmp_path / "m")
    again = ContextualSentenceEncoder.from_pretrained(tmp_path / "m")
    assert again.model.active_adapter == "search" and again.fingerprint() == f_search
    assert torch.equal(again.encode(PAPERS).emb, v_search)
    again.model.set_adapter("cocite")
    assert torch.equal(again.encode(PAPERS).emb, v_cocite) and again.fingerprint() == f_cocite


@pytest.mark.parametrize("names", [[], [""], ["x", "x"], "xy", ["x", 3]])
def test_empty_repeated_or_non_string_adapter_names_are_refused(tiny_model_dir, names):
    with pytest.raises(ValueError, match="adapter names must be a list of distinct non-empty strings"):
        attach_adapters(AutoModel.from_pretrained(tiny_model_dir), "lora", names)


def test_a_dotted_adapter_name_is_refused_before_the_model_changes(tiny_model_dir):
    """A '.' in an adapter name was a KeyError from torch's module registry, raised after peft had already put
    the first adapter's layers into the caller's model (its parameter names then held `lora_` layers)."""
    model = AutoModel.from_pretrained(tiny_model_dir)
    keys = set(model.state_dict())
    with pytest.raises(ValueError, match=r"cannot contain '\.'.*\['a\.b'\]"):
        attach_adapters(model, "lora", ["x", "a.b"])
    assert set(model.state_dict()) == keys and not is_adapted(model)


def test_saved_settings_with_a_dotted_adapter_name_are_a_valueerror_naming_the_file(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"settings.*cannot contain '\.'.*'v1\.2'"):
        check_adapter_settings({"names": ["v1.2"], "kind": "lora", "scope": "all"}, str(tmp_path / "settings.json"))
    with pytest.raises(ValueError, match=r"cannot contain '\.'"):
        load_adapted(AutoModel.from_pretrained(tiny_model_dir), tmp_path, {"names": ["v1.2"], "kind": "lora"})


def test_unknown_adapter_to_activate_and_unknown_formats_list_the_valid_ones(tiny_model_dir, tmp_path):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    encoder.add_adapters("lora", ["cocite", "search"], r=4, alpha=8.0)
    encoder.save_pretrained(tmp_path / "m")
    settings = {"names": ["cocite", "search"], "kind": "lora", "scope": "all"}
    with pytest.raises(ValueError, match=r"no adapter 'nope'.*\['cocite', 'search'\]"):
        load_adapted(AutoModel.from_pretrained(tmp_path / "m"), tmp_path / "m", settings, active="nope")
    with pytest.raises(ValueError, match=r"'active' 'nope' is none of its names \['cocite', 'search'\]"):
        check_adapter_settings({**settings, "active": "nope"}, "m/settings.json")
    with pytest.raises(ValueError, match=r"unknown control-code mode 'facets'; valid: \['none', 'task', 'facet'\]"):
        codes_for("facets", ["cocite"])
    with pytest.raises(ValueError, match=r"unknown adapter kind 'bottleneck'; valid: \['lora', 'ia3'\]"):
        attach_adapters(AutoModel.from_pretrained(tiny_model_dir), "bottleneck", ["x"])
