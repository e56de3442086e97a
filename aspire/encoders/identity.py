"""What decides an encoder's vectors besides its weights and settings, in forms that hash and compare: a transformer
config's encoding fields, an adapter's peft settings and the tokenizer's vocabulary.

Two uses, two rules:
- `encoding_identity` feeds the fingerprint (`ContextualSentenceEncoder.fingerprint`, version 2), which keys vector
  caches and indexes. It reads a fixed list of fields (`ENCODING_CONFIG`, `ADAPTER_SETTINGS`), so that a
  transformers or peft release that adds a field, or a flag set at run time (`output_hidden_states`, peft's
  `inference_mode`), leaves fingerprints as they were: a changed fingerprint makes every index built with the
  model refuse it.
- `config_digest` (an export graph's cache record) and `aspire.train.export.encoding_differences` (two models
  compared) read every config field but the naming ones (`CONFIG_NAMING`): there a difference costs an export.

Not hashed by the fingerprint: the tokenizer's normaliser and pre-tokeniser (lower-casing, accent stripping) and
any config field outside the list; `encoding_differences` compares those when an adapter is exported.
"""

from __future__ import annotations

import hashlib
import json

FINGERPRINT_VERSION = 2  # 2 (2026-11-30): `encoding_identity` hashed too; 1: 16 hex digits, weights and settings only
CONFIG_NAMING = ("_name_or_path", "transformers_version", "architectures", "_commit_hash")  # say nothing of the encoding
ADAPTER_BOOKKEEPING = ("base_model_name_or_path", "revision", "peft_version", "inference_mode", "auto_mapping")

ENCODING_CONFIG = (  # the fields of encoder configs (BERT, RoBERTa, MPNet, DeBERTa, DistilBERT, ELECTRA, ModernBERT)
    "model_type", "hidden_act", "hidden_activation", "activation", "hidden_size", "dim", "hidden_dim", "embedding_size",
    "intermediate_size", "num_hidden_layers", "n_layers", "num_attention_heads", "n_heads", "num_key_value_heads",
    "head_dim", "layer_norm_eps", "norm_eps", "max_position_embeddings", "position_embedding_type",
    "sinusoidal_pos_embds", "type_vocab_size", "vocab_size", "pad_token_id", "relative_attention",
    "relative_attention_num_buckets", "max_relative_positions", "position_buckets", "pos_att_type",
    "position_biased_input", "is_decoder", "global_attn_every_n_layers", "local_attention", "rope_theta", "global_rope_theta",
    "local_rope_theta", "attention_bias", "mlp_bias", "norm_bias",
    # transformers 5 reads ModernBERT's activation, its layers' attention (local or global) and rotary bases from
    # these (`global_attn_every_n_layers` and the `*_rope_theta` fields become `layer_types` and `rope_parameters`),
    # DeBERTa-v2's convolution its activation: none of them is a weight
    "layer_types", "rope_parameters", "conv_act")
ADAPTER_SETTINGS = (  # what a peft adapter computes with its weights (LoRA's scale alpha / r, rsLoRA, DoRA, IA3)
    "peft_type", "r", "lora_alpha", "use_rslora", "use_dora", "lora_bias", "bias", "fan_in_fan_out",
    "target_modules", "exclude_modules", "feedforward_modules", "modules_to_save", "layers_to_transform",
    "layers_pattern", "rank_pattern", "alpha_pattern", "layer_replication", "trainable_token_indices")


def versioned(hexdigest: str) -> str:
    """A fingerprint of this version from a hash's hex digest: `v2-` and its first 16 digits."""
    return f"v{FINGERPRINT_VERSION}-{hexdigest[:16]}"


def fingerprint_version(fingerprint: str) -> int:
    """The version of a fingerprint as recorded (an index's manifest, a shard): 1 for one without a `vN-` prefix."""
    head, sep, _ = fingerprint.partition("-")
    return int(head[1:]) if sep and head[:1] == "v" and head[1:].isdigit() else 1


def plain(value) -> object:
    """`json.dumps`' fallback here: a set (peft's target modules) as a sorted list, so that its hash is the same in
    every process (a set's order follows the string hash seed); anything else (peft's type enum) as its `str`."""
    return sorted(value, key=str) if isinstance(value, (set, frozenset)) else str(value)


def active_adapter_config(model):
    """The peft config of `model`'s active adapter (of the exact model a fast backend keeps, `exact`), or None for a
    model without adapters."""
    for candidate in (model, getattr(model, "exact", None)):
        if candidate is not None and hasattr(candidate, "peft_config") and hasattr(candidate, "active_adapter"):
            return candidate.peft_config[candidate.active_adapter]
    return None


# tokenizer call settings that change what the model sees, with the values every shipped tokenizer has: hashed only
# where a tokenizer departs from them (left truncation keeps a text's end, left padding shifts BERT's positions), so
# that no fingerprint of a tokenizer with these values changed when they joined the identity
TOKENIZER_CALL_DEFAULTS = {"truncation_side": "right", "padding_side": "right", "split_special_tokens": False}


def encoding_identity(model, tokenizer) -> bytes:
    """The model config's `ENCODING_CONFIG` fields, the active adapter's `ADAPTER_SETTINGS`, a hash of the
    tokenizer's vocabulary (every piece and its id, added tokens included) and its call settings that depart from
    `TOKENIZER_CALL_DEFAULTS`, as canonical JSON bytes."""
    config = model.config.to_dict()
    adapter = active_adapter_config(model)
    adapter_fields = adapter.to_dict() if adapter is not None else {}
    vocabulary = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode()
    identity = {
        "config": {k: config[k] for k in ENCODING_CONFIG if k in config},
        "adapter": {k: adapter_fields[k] for k in ADAPTER_SETTINGS if k in adapter_fields} if adapter else None,
        "vocabulary": hashlib.sha256(vocabulary).hexdigest(),
    }
    calls = {k: getattr(tokenizer, k, v) for k, v in TOKENIZER_CALL_DEFAULTS.items()}
    if calls != TOKENIZER_CALL_DEFAULTS:
        identity["tokenizer"] = calls
    return json.dumps(identity, sort_keys=True, default=plain).encode()


def config_digest(config, adapter=None) -> str:
    """A hash of a transformers config's fields but the naming ones (`CONFIG_NAMING`): what an exported graph
    computes besides the weights (heads, activation, normalisation epsilon, position embeddings). `adapter`: the peft
    config of an adapted model's active adapter, hashed with it but for `ADAPTER_BOOKKEEPING`."""
    fields = {k: v for k, v in config.to_dict().items() if k not in CONFIG_NAMING}
    if adapter is not None:
        fields["peft_adapter"] = {k: v for k, v in adapter.to_dict().items() if k not in ADAPTER_BOOKKEEPING}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=plain).encode()).hexdigest()[:16]
