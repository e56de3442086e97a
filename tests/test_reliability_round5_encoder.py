"""Round-5 reliability of the contextual encoder: the truncation report, batch options, records taken
everywhere, and sentences without word pieces refused by every encoding."""

from __future__ import annotations

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import load_encoder

LONG = Paper("long", "A new model", [f"The model {k} improves the results of the task." for k in range(12)])
SHORT = Paper("short", "Two", ["Data.", "The paper show results."])


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    return load_encoder(tiny_model_dir)


@pytest.mark.parametrize("overflow", ["window", "truncate"])
def test_title_sentence_is_not_reported_as_split_by_the_window(tiny_model_dir, overflow):
    """With include_title the title (sentence 0) opens every window; it is never past the first one, so the
    report must not list it as split (it listed it for every long paper)."""
    titled = load_encoder(tiny_model_dir, max_length=40, include_title=True, overflow=overflow)
    plain = load_encoder(tiny_model_dir, max_length=40, overflow=overflow)
    (rec,) = titled.truncation_report([LONG, SHORT])
    (want,) = plain.truncation_report([LONG, SHORT])
    assert 0 not in rec.partial and 0 not in rec.cut
    assert rec.cut == [k + 1 for k in want.cut] and rec.partial == [k + 1 for k in want.partial]
    batch = titled.encode([LONG])
    assert batch.mask[0].tolist() == [k not in rec.cut or overflow == "window" for k in range(13)]


@pytest.mark.parametrize("call", ["encode", "truncation_report", "unseen_sentences", "embed_texts", "independent"])
@pytest.mark.parametrize("size", [0, -1])
def test_batch_size_below_one_is_refused_by_name(encoder, call, size):
    run = {
        "encode": lambda: encoder.encode([SHORT], batch_size=size),
        "truncation_report": lambda: encoder.truncation_report([SHORT], batch_size=size),
        "unseen_sentences": lambda: encoder.unseen_sentences([SHORT], batch_size=size),
        "embed_texts": lambda: encoder.embed_texts(["a model"], batch_size=size),
        "independent": lambda: encoder.encode_independent([SHORT], batch_size=size),
    }[call]
    with pytest.raises(ValueError, match=f"batch_size must be a whole number >= 1, got {size}"):
        run()


def test_forward_refuses_max_rows_below_one(encoder):
    with pytest.raises(ValueError, match="max_rows must be a whole number >= 1, got -1"):
        encoder(encoder.tokenize([SHORT]), max_rows=-1)


def test_unseen_sentences_takes_records_and_strings_like_encode(encoder):
    record = {"paper_id": "r", "title": "t", "abstract": ["A model.", "Data."]}
    assert encoder.unseen_sentences([record, "We propose a model. It is new.", SHORT]) == [[], [], []]
    assert encoder.unseen_sentences([Paper("bad", "t", ["A model.", "   "])]) == [[1]]


def test_embed_texts_refuses_pairs_of_another_length(encoder):
    with pytest.raises(ValueError, match="1 pairs for 2 texts"):
        encoder.embed_texts(["a model", "the data"], ["x"])
    with pytest.raises(ValueError, match="0 pairs for 2 texts"):  # an empty list was silently no pairs at all
        encoder.embed_texts(["a model", "the data"], [])
    torch.testing.assert_close(encoder.embed_texts(["a model"], ["the data"]),
                               encoder.encode_abstract([Paper("p", "a model", ["the data"])]))


def test_a_title_with_no_word_piece_is_refused_by_both_encodings_naming_the_title(tiny_model_dir):
    """With include_title a title is sentence 0; one the tokenizer cannot see gets no word piece: encode refused it
    without saying it was the title, and encode_independent gave it a vector of the special tokens alone, matched
    like any sentence. (A blank title, as a plain abstract string has, is no sentence: round 10.)"""
    titled = load_encoder(tiny_model_dir, include_title=True)
    for encode in (titled.encode, titled.encode_independent):
        with pytest.raises(ValueError, match=r"paper p: sentence\(s\) \[0\].*sentence 0 is the paper's title"):
            encode([Paper("p", "\u200b", ["We propose a model.", "It is new."])])
    with pytest.raises(ValueError, match=r"paper bad: sentence\(s\) \[1\]"):
        load_encoder(tiny_model_dir).encode_independent([Paper("bad", "Title", ["A model.", "   ", "Text."])])
    ok = titled.encode_independent([SHORT])
    assert ok.mask[0].tolist() == [True, True, True]
