"""Round 52: control codes (`aspire.encoders.codes`): a code's text inside a paper must stay plain text."""

from __future__ import annotations

import torch

from aspire.data.papers import Paper
from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.codes import code_id


def _coded(tiny_model_dir) -> ContextualSentenceEncoder:
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    enc.add_codes(["[METHOD]", "[DOC]"], "[DOC]")
    return enc


def _ids(enc: ContextualSentenceEncoder, abstract: str) -> torch.Tensor:
    return enc.tokenize([Paper("p", "the model", [abstract])]).input_ids[0]


def test_code_text_in_a_paper_is_plain_text_and_the_placed_code_stays_one_token(tiny_model_dir):
    enc = _coded(tiny_model_dir)
    method, doc = code_id(enc.tokenizer, "[METHOD]"), code_id(enc.tokenizer, "[DOC]")
    literal, lower = _ids(enc, "we propose a [METHOD] for text."), _ids(enc, "we propose a [method] for text.")
    # the literal text reads as its pieces "[", "method", "]", exactly as the lowercase text does (lowercasing)
    assert literal.tolist() == lower.tolist()
    assert (literal == method).sum() == 0  # before: the text "[METHOD]" became the [METHOD] code's id
    assert literal[1] == doc and (literal == doc).sum() == 1  # the placed code: one token, in column 1
    assert (_ids(enc, "a [DOC] b.") == doc).sum() == 1  # the text "[DOC]" adds no second [DOC]


def test_saved_coded_encoder_still_reads_code_text_as_plain_text(tiny_model_dir, tmp_path):
    enc = _coded(tiny_model_dir)
    enc.save_pretrained(tmp_path / "coded")
    back = ContextualSentenceEncoder.from_pretrained(tmp_path / "coded")
    ids = _ids(back, "we propose a [METHOD] for text.")
    assert (ids == code_id(back.tokenizer, "[METHOD]")).sum() == 0
    assert ids.tolist() == _ids(enc, "we propose a [METHOD] for text.").tolist()
