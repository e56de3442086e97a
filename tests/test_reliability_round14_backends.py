"""Round 14 correctness sweep of the fast encoder backends: the exported graph's cache key (an adapted model's peft
settings are folded into the graph but are no weights, so the fingerprint naming the cached file does not see them).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder, backends, load_encoder

PAPERS = [Paper("p1", "A new model", ["We propose a new model for scientific text.", "It improves the results."]),
          Paper("p2", "Citation data", ["The document similarity of scientific text is based on citation data."])]


def save_random_lora(base, out):
    """`base` with a LoRA adapter (alpha 8, r 4) whose B is random (LoRA's B starts at zero: no change), saved to
    `out`; returns `out`."""
    encoder = ContextualSentenceEncoder.from_pretrained(base)
    encoder.add_adapters("lora", ["default"], r=4, alpha=8.0)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in encoder.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)
    encoder.eval().save_pretrained(out)
    return out


@pytest.fixture()
def adapted_dir(tiny_model_dir, tmp_path):
    """A tiny BERT with a random LoRA adapter (`save_random_lora`)."""
    return save_random_lora(tiny_model_dir, tmp_path / "adapted")


def set_alpha(folder, alpha: float) -> None:
    config = folder / "adapter" / "adapter_config.json"
    content = json.loads(config.read_text())
    content["lora_alpha"] = alpha
    config.write_text(json.dumps(content))


def test_a_changed_adapter_scale_is_exported_again(adapted_dir, cache):
    """The adapter's scale (alpha / r) is not a weight: the exact fingerprint, which names the cached graph, is the
    same at alpha 8 and 32, and the graph exported at alpha 8 was run for the alpha-32 model (vectors 0.43 from its
    exact ones, equal to the alpha-8 model's to 2e-7, under the old fast fingerprint)."""
    before = load_encoder(adapted_dir, backend="onnx")
    old = load_encoder(adapted_dir).encode(PAPERS).emb
    set_alpha(adapted_dir, 32.0)
    exact = load_encoder(adapted_dir)
    want = exact.encode(PAPERS).emb
    assert (want - old).abs().max() > 0.1  # the scale moves the vectors: the check below can fail
    fast = load_encoder(adapted_dir, backend="onnx")
    assert fast.model.exact is not None  # a changed file: not from the load record
    assert torch.allclose(fast.encode(PAPERS).emb, want, atol=1e-5)
    assert fast.fingerprint() != before.fingerprint()  # another graph, another fast fingerprint
    path = backends.cached_onnx_model(exact, None)
    assert backends.recorded(path, backends.CONFIG_KEY) == backends.model_digest(exact.model)


def test_the_adapter_digest_ignores_where_the_adapter_was_read_from(adapted_dir, tmp_path):
    """A copy of the model in another folder (peft records the base's path) hashes the same: the two copies share
    one export (same fingerprint) and must not export it again in turn; an unadapted model's hash is the config's
    alone, as before adapters were hashed, so its cached graphs stay valid."""
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(adapted_dir, copy)
    a, b = load_encoder(adapted_dir), load_encoder(copy)
    assert a.fingerprint() == b.fingerprint()
    assert backends.model_digest(a.model) == backends.model_digest(b.model)
    assert backends.model_digest(a.model) != backends.config_digest(a.model.config)
    set_alpha(copy, 32.0)
    assert backends.model_digest(load_encoder(copy).model) != backends.model_digest(a.model)
    base = a.model.get_base_model()
    assert backends.model_digest(base) == backends.config_digest(base.config)
