"""Round 47: the cross-encoder's scoring (`aspire.scoring.crossencoder`) and its negative sampling
(`aspire.train.crossencoder`) checked with a tiny random cross-encoder and brute force."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from aspire.scoring.crossencoder import CrossEncoderReranker, mix_rerank
from aspire.train.crossencoder import sample_negatives

PAIRS = [("the cat sat", "a dog ran " * k) for k in range(6)] + [("", ""), ("a query", ""), ("", "some text")]


@pytest.fixture(scope="module")
def reranker(tiny_cross_encoder_dir):
    return CrossEncoderReranker(str(tiny_cross_encoder_dir), max_length=16, batch_size=4)


def test_scores_do_not_depend_on_batch_size_or_order(reranker, tiny_cross_encoder_dir):
    one = CrossEncoderReranker(str(tiny_cross_encoder_dir), max_length=16, batch_size=1).score_pairs(PAIRS)
    four = reranker.score_pairs(PAIRS)
    backwards = reranker.score_pairs(PAIRS[::-1])[::-1]
    assert one.shape == (len(PAIRS),) and np.isfinite(one).all()  # empty queries and texts are scored too
    np.testing.assert_allclose(four, one, atol=1e-5)
    np.testing.assert_allclose(backwards, one, atol=1e-5)
    assert np.ptp(one) > 1e-4  # the pairs are told apart at all


def _longest_first(tokenizer, query: str, text: str, max_length: int) -> dict:
    """Brute force: drop word pieces from the end of the longer of the two (the query on a tie, as the fast tokenizer does) until
    [CLS] q [SEP] t [SEP] fits."""
    q = tokenizer(query, add_special_tokens=False)["input_ids"]
    t = tokenizer(text, add_special_tokens=False)["input_ids"]
    while len(q) + len(t) + 3 > max_length:
        if len(q) >= len(t):
            q = q[:-1]
        else:
            t = t[:-1]
    ids = [tokenizer.cls_token_id, *q, tokenizer.sep_token_id, *t, tokenizer.sep_token_id]
    types = [0] * (len(q) + 2) + [1] * (len(t) + 1)
    return {"input_ids": torch.tensor([ids]), "token_type_ids": torch.tensor([types]),
            "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}


def test_long_pairs_are_cut_longest_first_as_documented(reranker):
    model = reranker.model
    pairs = [("alpha beta " * 20, "short text"), ("short", "gamma delta " * 20), ("one two " * 9, "three four " * 7)]
    got = reranker.score_pairs(pairs)
    with torch.no_grad():
        want = [float(model.model(**_longest_first(model.tokenizer, q, t, 16)).logits.reshape(-1)[0]) for q, t in pairs]
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_rerank_reorders_the_head_and_keeps_the_tail(reranker):
    first = [(f"d{i}", 10.0 - i) for i in range(7)]
    texts = {d: f"text of {d} " * (i + 1) for i, (d, _) in enumerate(first)}
    ranked = reranker.rerank("query", first, texts, top_n=4, weight=1.0)
    logits = reranker.score("query", [texts[d] for d, _ in first[:4]])
    want_head = [d for _, d in sorted(zip(-logits, [d for d, _ in first[:4]]))]
    assert [d for d, _ in ranked] == want_head + ["d4", "d5", "d6"]
    scores = [s for _, s in ranked]
    assert all(a >= b for a, b in zip(scores, scores[1:]))
    assert [d for d, _ in reranker.rerank("query", first, texts, top_n=4, weight=0.0)] == [d for d, _ in first]


def test_ties_in_the_head_are_ordered_by_id_at_weight_one():
    first = [("z", 3.0), ("b", 2.0), ("m", 1.0), ("a", 0.5)]
    ranked = mix_rerank(first, {"z": 1.0, "b": 1.0, "m": 1.0}, 3, 1.0)
    assert [d for d, _ in ranked] == ["b", "m", "z", "a"]


@pytest.mark.parametrize("top_n", [0, -1, 2.5, True])
def test_a_bad_top_n_is_refused_before_any_pair_is_scored(tiny_cross_encoder_dir, top_n):
    # top_n -1 once scored all but the last document through the model before it was refused; 2.5 was a TypeError
    # of a slice, not an error naming top_n
    fresh = CrossEncoderReranker(str(tiny_cross_encoder_dir), max_length=16)
    first = [("a", 3.0), ("b", 2.0), ("c", 1.0)]
    with pytest.raises(ValueError, match="top_n"):
        fresh.rerank("q", first, {"a": "x", "b": "y", "c": "z"}, top_n=top_n)
    assert fresh.pairs_scored == 0


def _ranking(seed: int = 0):
    rng = random.Random(seed)
    ranked = {f"q{i}": rng.sample([f"p{j}" for j in range(12)], 10) for i in range(6)}
    positives = {q: rng.sample(docs[:5], 2) for q, docs in ranked.items()}
    return ranked, positives


def test_negatives_come_from_the_top_depth_without_positives_and_repeat_for_a_seed():
    ranked, positives = _ranking()
    for n, depth in ((3, 5), (2, 10), (9, 4), (0, 3)):
        got = sample_negatives(ranked, positives, n, depth, seed=7)
        assert got == sample_negatives(ranked, positives, n, depth, seed=7)
        for q, neg in got.items():
            pool = [d for d in ranked[q][:depth] if d not in positives[q]]
            assert len(neg) == len(set(neg)) == min(n, len(pool))
            assert set(neg) <= set(pool)


def test_negative_sampling_takes_numpy_integers():
    # np.int64(2) is a whole number >= 0, but it was refused as "must be a whole number >= 0, got 2"
    ranked, positives = _ranking()
    got = sample_negatives(ranked, positives, np.int64(2), np.int64(6), seed=3)
    assert got == sample_negatives(ranked, positives, 2, 6, seed=3)


@pytest.mark.parametrize("n, depth, name", [(-1, 5, "n"), (2.0, 5, "n"), (True, 5, "n"), (2, 0, "depth"),
                                            (2, -1, "depth"), (2, 1.5, "depth")])
def test_bad_n_or_depth_is_refused_naming_it(n, depth, name):
    ranked, positives = _ranking()
    with pytest.raises(ValueError, match=rf"sampling {name}"):
        sample_negatives(ranked, positives, n, depth, seed=0)
