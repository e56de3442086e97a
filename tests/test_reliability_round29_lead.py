"""Round 29, the lead's mends of leftovers named in earlier rounds: `unseen_sentences` excused a sentence cut by
overflow="truncate" by (paper id, position), so of two papers sharing an id in one call, one's sentence without a
word piece was let through because the other's same-numbered sentence was truncated."""

from __future__ import annotations

import numpy as np
import pytest

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.pieces import unseen_sentences

LONG = Paper("x", "a neural model", [f"sentence {i} of a long abstract about models and data." for i in range(8)])
BLANK = Paper("x", "t", ["a model.", "\u200b", "data."])  # sentence 1 gets no word piece


def test_unseen_sentences_tell_two_papers_sharing_an_id_apart(tiny_model_dir):
    """Paper LONG (id x) has sentence 1 cut by the truncation; paper BLANK (id x too) has sentence 1 without a word
    piece. The old rule excused ("x", 1) for both: BLANK's blank sentence was let through, unseen [[], []]."""
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, max_length=24, overflow="truncate")
    assert 1 in encoder.tokenize([LONG]).truncation[0].cut  # the premise: LONG's sentence 1 is truncated
    assert encoder.unseen_sentences([LONG, BLANK]) == [[], [1]]
    assert encoder.unseen_sentences([BLANK, LONG]) == [[1], []]
    with pytest.raises(ValueError, match=r"paper x: sentence\(s\) \[1\] produced no word pieces"):
        encoder.encode([LONG, BLANK])


def test_unseen_sentences_by_rows_against_a_loop():
    """Random rows: a sentence counts as unseen when no kept row of its paper holds it and no row left out does."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        n_papers = int(rng.integers(1, 5))
        n_sent = rng.integers(1, 6, size=n_papers).tolist()
        row_paper = np.sort(rng.integers(0, n_papers, size=int(rng.integers(1, 9))))
        sent_index = np.array([rng.integers(-1, n_sent[b], size=5) for b in row_paper]).reshape(len(row_paper), 5)
        keep = rng.random(len(row_paper)) < 0.6
        got = unseen_sentences(n_sent, sent_index, row_paper, keep)
        for b in range(n_papers):
            want = [i for i in range(n_sent[b])
                    if not any(row_paper[r] == b and i in sent_index[r] for r in range(len(row_paper)))]
            assert got[b] == want
