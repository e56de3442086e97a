"""Round 42: the encoder's identity (`aspire.encoders.identity`), its task formats (`aspire.encoders.task_formats`) and
the int8 recipe's block quantizer (`aspire.encoders.onnx_int8.block_quantize`), checked against brute-force references."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.identity import encoding_identity
from aspire.encoders.onnx_int8 import block_quantize

PAPERS = [{"paper_id": "a", "title": "Model text", "abstract": "A model of text. It reads words."}]


@pytest.mark.parametrize("codes", ["[PRX]", ["[PRX]", ""], ["[PRX]", None]])
def test_add_codes_refuses_a_bare_string_or_an_empty_code_before_touching_the_tokenizer(codes, tiny_model_dir):
    """A bare string was read as its letters: add_codes("[PRX]", None) added 'P', 'R', 'X' as special tokens (the
    vocabulary grew by 3, every later 'p' of a text could split off) and recorded codes ['[', 'P', 'R', 'X', ']']."""
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    size, fingerprint = len(encoder.tokenizer), encoder.fingerprint()
    with pytest.raises(ValueError, match="list of non-empty strings"):
        encoder.add_codes(codes, None)
    assert len(encoder.tokenizer) == size and encoder.codes == [] and encoder.fingerprint() == fingerprint


def test_unknown_code_is_refused_listing_the_valid_ones_and_switching_back_gives_identical_vectors(tiny_model_dir):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    encoder.add_codes(["[PRX]", "[CLF]"], "[PRX]")
    before, fingerprint = encoder.encode(PAPERS).emb.clone(), encoder.fingerprint()
    with pytest.raises(ValueError, match=r"'\[ABC\]'.*\['\[PRX\]', '\[CLF\]'\]"):
        encoder.set_code("[ABC]")
    with encoder.using_code("[CLF]"):
        other = encoder.encode(PAPERS).emb
        assert encoder.fingerprint() != fingerprint  # another code: other vectors, another fingerprint
    assert (other - before).abs().max() > 0
    assert torch.equal(encoder.encode(PAPERS).emb, before) and encoder.fingerprint() == fingerprint


def test_run_time_flags_keep_the_fingerprint_and_encoding_fields_change_it(tiny_model_dir):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    fingerprint = encoder.fingerprint()
    encoder.model.config.output_hidden_states = True
    assert encoder.fingerprint() == fingerprint
    for field, value in [("layer_norm_eps", 1e-5), ("hidden_act", "relu"), ("pad_token_id", 3)]:
        saved = getattr(encoder.model.config, field)
        setattr(encoder.model.config, field, value)
        assert encoder.fingerprint() != fingerprint, field
        setattr(encoder.model.config, field, saved)
    assert encoder.fingerprint() == fingerprint


@pytest.mark.slow
def test_encoding_identity_is_the_same_in_processes_with_other_hash_seeds(tiny_model_dir):
    """peft keeps target modules as a set, whose order follows the string hash seed: the identity must not."""
    script = (f"import torch, hashlib; from aspire.encoders import ContextualSentenceEncoder as E; "
              f"from aspire.encoders.identity import encoding_identity as i; e = E.from_pretrained({str(tiny_model_dir)!r}); "
              "torch.manual_seed(0); e.add_adapters('lora', ['a'], target_modules=['query', 'value', 'key', 'dense']); "
              "print(hashlib.sha256(i(e.model, e.tokenizer)).hexdigest(), e.fingerprint())")
    outs = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.split()[-2:][0] for seed in ("1", "2")}
    assert len(outs) == 1


def test_encoding_identity_is_canonical_json(tiny_model_dir):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    identity = json.loads(encoding_identity(encoder.model, encoder.tokenizer))
    assert identity["config"]["hidden_size"] == 32 and identity["adapter"] is None and "tokenizer" not in identity


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("k", [40, 64])
def test_block_quantize_matches_a_numpy_reference_and_its_error_is_at_most_half_a_step(bits, k):
    rng = np.random.default_rng(bits + k)
    w = rng.normal(size=(k, 5)).astype(np.float32)
    w[:16, 1] = 0.0  # an all-zero block: scale 1, stored at the zero point
    q, scale = block_quantize(w, bits, 16)
    blocks, qmax, zero = -(-k // 16), 2 ** (bits - 1) - 1, 2 ** (bits - 1)
    assert q.shape == (5, blocks, 16 * bits // 8) and q.dtype == np.uint8 and scale.shape == (5 * blocks,)
    if bits == 4:
        q = np.stack([q & 0xF, q >> 4], -1).reshape(5, blocks, 16)
    back = ((q.astype(np.float32) - zero) * scale.reshape(5, blocks, 1)).reshape(5, -1)[:, :k].T  # (K, N)
    for n in range(5):  # brute force, block by block
        for b in range(blocks):
            col = w[b * 16:(b + 1) * 16, n]
            s = np.abs(col).max() / qmax or 1.0
            assert np.isclose(scale[n * blocks + b], s, rtol=1e-6)
            assert np.abs(back[b * 16:(b + 1) * 16, n] - col).max() <= s / 2 * (1 + 1e-5)
