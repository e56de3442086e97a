"""The tokenizer of a load record (`aspire.encoders.backends.load_recorded`) without importing transformers.

transformers' fast tokenizers call the Rust `tokenizers.Tokenizer` they hold: set its truncation and padding,
`encode_batch`, flatten each encoding's overflow windows after it (`overflow_to_sample_mapping`). The first,
exact load of a model saves that Rust tokenizer, as it is, into the load record (`record_spec`), with the few
settings transformers adds (padding token, sides, model inputs), and checks that `RecordedTokenizer` gives the
same encodings as transformers on sample papers; a later load builds it from there (`tokenizers` imports in
0.06 s, transformers in about 1.5 s).

`RecordedTokenizer` is called the way `ContextualSentenceEncoder` calls a tokenizer (pairs cut `only_second` with
overflow windows and offsets, padding to the longest, tensors for `embed_texts`); any other argument raises
TypeError. With truncation, a `max_length` below 1 or below the special pieces (where the Rust tokenizer cut
nothing, silently, and took 0 for the model's limit) or of 2**64 and above (OverflowError) raises ValueError naming it. Models with
control codes keep transformers' tokenizer (they add tokens and read more of its API).
"""

from __future__ import annotations

import json
import numbers
from typing import Sequence

import tokenizers

SAMPLE = [  # (title, abstract) pairs: one long enough for two overflow windows at 64 pieces, accents, digits
    ("Aspect-based document similarity", "We propose a contextual sentence encoder. It improves results, e.g. "
     "on CSFCube (MAP 40.1 vs. 34.2, p < 0.05). " * 6 + "Café naïve résumé → α."),
    ("A", "One sentence."),
    ("Fig. 2 and et al. in titles", "Results hold [1, 2]. ÜBER-long tokens: supercalifragilisticexpialidocious."),
]
SAMPLE_MAX_LENGTH = 64
NO_LIMIT = int(1e20)  # transformers' LARGE_INTEGER: a model_max_length above it is no limit (int(1e30) is its default)


class RecordedEncoding(dict):
    """A tokenizer's output: lists (or tensors) by key, as transformers' `BatchEncoding`, with `sequence_ids`."""

    def __init__(self, data: dict, encodings: list) -> None:
        super().__init__(data)
        self.encodings = encodings

    def sequence_ids(self, index: int) -> list[int | None]:
        return self.encodings[index].sequence_ids


class RecordedTokenizer:
    """A Rust tokenizer saved from a transformers fast tokenizer, called as `ContextualSentenceEncoder` calls it."""

    is_fast = True

    def __init__(self, backend: tokenizers.Tokenizer, settings: dict) -> None:
        self._tokenizer = backend
        self.model_max_length = settings["model_max_length"]
        self.model_input_names = list(settings["model_input_names"])
        self.pad_token, self.pad_token_id = settings["pad_token"], settings["pad_token_id"]
        self.pad_token_type_id = settings["pad_token_type_id"]
        self.padding_side, self.truncation_side = settings["padding_side"], settings["truncation_side"]
        self.split_special_tokens = settings["split_special_tokens"]
        self._size = settings["size"]

    def __len__(self) -> int:
        return self._size

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """Special pieces the post-processor adds to one text or a pair, as transformers' fast tokenizer counts."""
        return self._tokenizer.num_special_tokens_to_add(pair)

    def __call__(self, text: Sequence[str], text_pair: Sequence[str] | None = None, *, add_special_tokens: bool = True,
                 truncation: bool | str = False, max_length: int | None = None, stride: int = 0,
                 return_overflowing_tokens: bool = False, return_offsets_mapping: bool = False,
                 padding: bool = False, return_tensors: str | None = None) -> RecordedEncoding:
        if isinstance(text, str) or (text_pair is not None and (isinstance(text_pair, str) or len(text_pair) != len(text))):
            raise TypeError("RecordedTokenizer encodes batches: a list of texts and an equal list of pairs")
        if return_tensors not in (None, "pt") or padding not in (False, True) or truncation not in (
                False, True, "only_second", "longest_first"):
            raise TypeError(f"RecordedTokenizer: unsupported return_tensors={return_tensors!r}, padding={padding!r} "
                            f"or truncation={truncation!r}")
        backend = self._tokenizer
        if truncation and max_length is None and self.model_max_length > NO_LIMIT:
            truncation = False  # as transformers: a tokenizer without a length limit cuts nothing (was OverflowError)
        if truncation and max_length is not None:  # 0 was read as the model's limit; below the specials, no cut
            least = self.num_special_tokens_to_add(text_pair is not None) if add_special_tokens else 0
            if isinstance(max_length, bool) or not isinstance(max_length, numbers.Integral) or not max(1, least) <= max_length < 2**64:
                raise ValueError(f"RecordedTokenizer: max_length must be an integer from {max(1, least)} (the special "
                                 f"pieces plus none of the text) to 2**64 - 1, got {max_length!r}")
        if truncation:
            strategy = "longest_first" if truncation is True else truncation
            backend.enable_truncation(int(max_length or self.model_max_length), stride=stride, strategy=strategy,
                                      direction=self.truncation_side)
        else:
            backend.no_truncation()
        if padding:
            backend.enable_padding(direction=self.padding_side, pad_id=self.pad_token_id, pad_type_id=self.pad_token_type_id,
                                   pad_token=self.pad_token, length=None, pad_to_multiple_of=None)
        else:
            backend.no_padding()
        backend.encode_special_tokens = self.split_special_tokens
        inputs = list(text) if text_pair is None else list(zip(text, text_pair))
        out: dict[str, list] = {"input_ids": []}
        if "token_type_ids" in self.model_input_names:
            out["token_type_ids"] = []
        if "attention_mask" in self.model_input_names:
            out["attention_mask"] = []
        if return_offsets_mapping:
            out["offset_mapping"] = []
        rows, sample_of = [], []
        for i, encoding in enumerate(backend.encode_batch(inputs, add_special_tokens=add_special_tokens)):
            for e in [encoding, *(encoding.overflowing if return_overflowing_tokens else [])]:
                rows.append(e)
                sample_of.append(i)
                out["input_ids"].append(e.ids)
                if "token_type_ids" in out:
                    out["token_type_ids"].append(e.type_ids)
                if "attention_mask" in out:
                    out["attention_mask"].append(e.attention_mask)
                if return_offsets_mapping:
                    out["offset_mapping"].append(e.offsets)
        if return_overflowing_tokens:
            out["overflow_to_sample_mapping"] = sample_of
        if return_tensors == "pt":
            import torch

            out = {key: torch.tensor(value) for key, value in out.items()}
        return RecordedEncoding(out, rows)


def record_spec(tokenizer) -> dict | None:
    """What a load record keeps of transformers' fast `tokenizer` to rebuild it as a `RecordedTokenizer`, or None
    when it cannot: no Rust tokenizer inside, or encodings of `SAMPLE` that differ from transformers' own (added
    tokens beyond the saved vocabulary are fine: the Rust tokenizer holds them). This function does not look at
    control codes: `aspire.encoders.backends.write_load_record` records no tokenizer for an encoder with codes."""
    backend = getattr(tokenizer, "_tokenizer", None)
    if not isinstance(backend, tokenizers.Tokenizer):
        return None
    spec = {
        "backend": backend.to_str(),
        "settings": {
            "model_max_length": tokenizer.model_max_length, "model_input_names": list(tokenizer.model_input_names),
            "pad_token": tokenizer.pad_token, "pad_token_id": tokenizer.pad_token_id,
            "pad_token_type_id": tokenizer.pad_token_type_id, "padding_side": tokenizer.padding_side,
            "truncation_side": tokenizer.truncation_side,
            "split_special_tokens": bool(getattr(tokenizer, "split_special_tokens", False)), "size": len(tokenizer),
        },
    }
    return spec if _same_encodings(tokenizer, rebuild(spec)) else None


def rebuild(spec: dict) -> RecordedTokenizer:
    return RecordedTokenizer(tokenizers.Tokenizer.from_str(spec["backend"]), spec["settings"])


def _same_encodings(reference, recorded: RecordedTokenizer) -> bool:
    """Whether `recorded` encodes `SAMPLE` exactly as `reference` (transformers) in the encoder's three calls."""
    titles, texts = [t for t, _ in SAMPLE], [a for _, a in SAMPLE]
    calls = [
        dict(text=titles, add_special_tokens=False, return_offsets_mapping=True),
        dict(text=titles, text_pair=texts, truncation="only_second", max_length=SAMPLE_MAX_LENGTH, stride=0,
             return_overflowing_tokens=True, return_offsets_mapping=True, padding=True),
        dict(text=texts, truncation=True, max_length=SAMPLE_MAX_LENGTH, padding=True),
        dict(text=titles, text_pair=texts, truncation="longest_first", max_length=SAMPLE_MAX_LENGTH, padding=True),
    ]
    for call in calls:
        want, got = reference(**call), recorded(**call)
        if json.dumps(dict(want), sort_keys=True) != json.dumps(dict(got), sort_keys=True):
            return False
        if any(want.sequence_ids(r) != got.sequence_ids(r) for r in range(len(want["input_ids"]))):
            return False
    return True
