"""The contextual encoder tokenises the next batch on a worker thread while the model runs on this one (on a GPU
the tokenizer was the bottleneck: 1.40x sentence-transformers' time on an H200, 1.04x after), and refuses, naming
the cause, windows that stop short of an abstract's end (tokenizers 0.23.1 loses a long text's end,
huggingface/tokenizers#2091) instead of calling the paper's last sentences pieceless."""

from __future__ import annotations

import threading

import pytest
import torch
from transformers import BatchEncoding

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.recorded_tokenizer import rebuild, record_spec

PAPERS = [Paper(f"p{i}", f"title {i}", [f"we propose model {i} for the task.", "the results show gains."] * (1 + i % 3))
          for i in range(7)]
LONG = Paper("long", "a neural model", [f"sentence {i} of a long abstract about models and data." for i in range(8)])


class RecordingTokenize:
    """Wraps `encoder.tokenize`, recording the thread and the papers of each call."""

    def __init__(self, encoder):
        self.inner, self.calls = encoder.tokenize, []

    def __call__(self, papers, codes=None):
        self.calls.append((threading.current_thread().name, [p.paper_id for p in papers]))
        return self.inner(papers, codes)


def test_encode_tokenizes_on_a_worker_thread_with_the_same_vectors(tiny_model_dir):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    want = [encoder.encode([p]) for p in PAPERS]  # one paper at a time
    recording = encoder.tokenize = RecordingTokenize(encoder)
    batch = encoder.encode(PAPERS, batch_size=2)
    assert len(recording.calls) == 4  # four batches of at most two papers, each tokenised once
    assert {name.split("_")[0] for name, _ in recording.calls} == {"aspire-tokenize"}
    assert sorted(pid for _, ids in recording.calls for pid in ids) == sorted(p.paper_id for p in PAPERS)
    assert batch.paper_ids == [p.paper_id for p in PAPERS]  # input order, whatever the batches' order
    for i, one in enumerate(want):
        n = len(PAPERS[i].sentences)
        torch.testing.assert_close(batch.emb[i, :n], one.emb[0, :n], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(batch.whole[i], one.whole[0], atol=1e-5, rtol=1e-5)


def test_a_later_batch_refused_by_the_tokenizer_still_names_its_paper(tiny_model_dir):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    bad = Paper("bad", "Data", ["The data.", "  \u200b ", "x"])  # the shortest paper: its batch comes last
    with pytest.raises(ValueError, match=r"paper bad: sentence\(s\) \[1\] produced no word pieces"):
        encoder.encode(PAPERS + [bad], batch_size=2)


class DroppingLastWindow:
    """A tokenizer that, asked for overflow windows, leaves out each text's last one when it has several (as
    tokenizers 0.23.1 loses the end of a long text, huggingface/tokenizers#2091)."""

    def __init__(self, tokenizer):
        self.inner = tokenizer

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __len__(self):
        return len(self.inner)

    def __call__(self, *args, **kwargs):
        enc = self.inner(*args, **kwargs)
        if not kwargs.get("return_overflowing_tokens"):
            return enc
        rows = enc["overflow_to_sample_mapping"]
        last = [r + 1 == len(rows) or rows[r + 1] != rows[r] for r in range(len(rows))]
        first = [r == 0 or rows[r - 1] != rows[r] for r in range(len(rows))]
        keep = [r for r in range(len(rows)) if first[r] or not last[r]]
        return BatchEncoding({k: [v[r] for r in keep] for k, v in enc.items()}, [enc.encodings[r] for r in keep])


@pytest.mark.parametrize("overflow", ["window", "truncate"])
def test_windows_that_stop_short_of_the_abstract_are_refused(tiny_model_dir, overflow):
    """tokenizers 0.23.1 on a GPU machine's image lost the end of long abstracts: the encoder refused the paper's
    last sentences as having no word piece, with no word of the cause (and a sentence cut inside would have lost
    its end without a word)."""
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, max_length=24, overflow=overflow)
    assert encoder.tokenize([LONG]).truncation[0].cut  # the paper needs windows past its first
    encoder.tokenizer = DroppingLastWindow(encoder.tokenizer)
    with pytest.raises(RuntimeError, match=r"paper long: the tokenizer's windows stop at character \d+ of its "
                                           r"\d+-character abstract.*tokenizers#2091"):
        encoder.encode([PAPERS[0], LONG])
    with pytest.raises(RuntimeError, match="paper long: the tokenizer's windows stop"):
        encoder.unseen_sentences([LONG])
    assert encoder.unseen_sentences([PAPERS[0]]) == [[]]  # papers in one window are not affected


@pytest.mark.parametrize("recorded", [False, True])
def test_an_abstract_ending_in_characters_without_pieces_is_covered(tiny_model_dir, recorded):
    """Text after the last window's last piece that has no word piece of its own (a zero-width space) is not a
    lost end; the check asks the tokenizer as a fast backend's recorded tokenizer takes it (a batch of texts)."""
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, max_length=24)
    if recorded:
        encoder.tokenizer = rebuild(record_spec(encoder.tokenizer))
    tail = Paper("tail", "a neural model", LONG.sentences + ["x \u200b"])
    assert encoder.encode([tail]).paper_ids == ["tail"]
    assert encoder.unseen_sentences([Paper("blank", "t", ["a model.", "\u200b"])]) == [[1]]
