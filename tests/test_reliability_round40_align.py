"""The recorded tokenizer (`aspire.encoders.recorded_tokenizer`) against transformers' own tokenizer on varied texts
(Unicode, empty, blank, very long), truncation strategies, strides, overflow windows and padding/truncation sides."""

from __future__ import annotations

import itertools
import json

import pytest

from aspire.encoders.recorded_tokenizer import rebuild, record_spec

TITLES = ["T", "", "A title", "b", "ü", "", "Fig. 2"]
TEXTS = ["", "Café naïve résumé → α", "x " * 300, "One.", "日本語のテキスト 🙂", "  ", "Results hold [1, 2]."]


def _byte_level_tokenizer():
    """A RoBERTa-like byte-level BPE fast tokenizer, trained in code on a few sentences."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(["We propose a contextual sentence encoder. Café naïve résumé → α 12345"] * 10, trainer)
    bpe.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", model_max_length=40)


def _calls():
    for truncation, max_length, padding, stride, pair in itertools.product(
            [False, True, "only_second", "longest_first"], [None, 16], [False, True], [0, 2], [False, True]):
        if truncation == "only_second" and not pair:
            continue  # transformers and the Rust tokenizer both raise: there is no second text to cut
        yield dict(text=TITLES, text_pair=TEXTS if pair else None, truncation=truncation, max_length=max_length,
                   padding=padding, stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True)


@pytest.mark.parametrize("kind", ["wordpiece", "byte-level"])
@pytest.mark.parametrize("padding_side,truncation_side", [("right", "right"), ("left", "left")])
def test_recorded_tokenizer_equals_transformers_on_varied_texts_and_settings(tiny_model_dir, kind, padding_side,
                                                                            truncation_side):
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(tiny_model_dir) if kind == "wordpiece" else _byte_level_tokenizer()
    tok.padding_side, tok.truncation_side = padding_side, truncation_side
    spec = record_spec(tok)
    assert spec is not None
    recorded = rebuild(spec)
    for call in _calls():
        want, got = tok(**call), recorded(**call)
        assert json.dumps(dict(got), sort_keys=True) == json.dumps(dict(want), sort_keys=True), call["truncation"]
        assert all(got.sequence_ids(r) == want.sequence_ids(r) for r in range(len(want["input_ids"])))
    want = tok(TEXTS, truncation=True, padding=True, return_tensors="pt")
    got = recorded(TEXTS, truncation=True, padding=True, return_tensors="pt")
    assert set(got) == set(want) and all(bool((got[k] == want[k]).all()) and got[k].dtype == want[k].dtype for k in want)
    assert want["input_ids"].shape[1] == tok.model_max_length  # the long text was cut at the tokenizer's own limit


def test_recorded_tokenizer_without_a_length_limit_cuts_nothing_as_transformers(tiny_model_dir):
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(tiny_model_dir)
    tok.model_max_length = int(1e30)
    recorded = rebuild(record_spec(tok))
    want, got = tok(["x " * 300], truncation=True), recorded(["x " * 300], truncation=True)
    assert dict(got) == dict(want) and len(got["input_ids"][0]) == 302
