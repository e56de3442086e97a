"""Round 29: the training-side helpers checked against brute force: CoSentBert's distinct-set batch sampler
(`aspire.encoders.cosent_sampler`) and the cross-encoder's labelled pairs and negatives (`aspire.train.crossencoder`)."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from aspire.encoders.cosent_sampler import DistinctSetBatchSampler
from aspire.train.crossencoder import labelled_pairs, sample_negatives


def _rows(n: int = 60, seed: int = 0):
    """`n` rows: a co-cited set of 2-3 of 8 papers each, anchor and positive texts drawn from 30 (some repeat)."""
    from datasets import Dataset

    rng = random.Random(seed)
    papers = [f"p{i}" for i in range(8)]
    groups = ["|".join(sorted(rng.sample(papers, rng.choice([2, 3])))) for _ in range(n)]
    anchors = [f"t{rng.randrange(30)}" for _ in range(n)]
    positives = [f"t{rng.randrange(30)}" for _ in range(n)]
    return Dataset.from_dict({"anchor": anchors, "positive": positives}), groups, anchors, positives


def _clash(i: int, j: int, groups, anchors, positives) -> bool:
    """Brute force: two rows of one set, of sets sharing two papers (a co-cited pair), or sharing a text."""
    shared = set(groups[i].split("|")) & set(groups[j].split("|"))
    return groups[i] == groups[j] or len(shared) >= 2 or bool({anchors[i], positives[i]} & {anchors[j], positives[j]})


@pytest.mark.parametrize("window", [1, 3, 8])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sampler_batches_match_a_brute_force_check(window, drop_last):
    data, groups, anchors, positives = _rows()
    sampler = DistinctSetBatchSampler(data, batch_size=4, drop_last=drop_last, seed=5, groups=groups, window=window,
                                      passes=2)
    batches = list(sampler)
    assert len(sampler) == len(batches)
    for b in batches:
        assert 1 <= len(b) <= 4 and (len(b) == 4 or not drop_last)
        assert not any(_clash(i, j, groups, anchors, positives) for i, j in itertools.combinations(b, 2))
    used = Counter(i for b in batches for i in b)
    if not drop_last:  # two passes: every row exactly twice
        assert used == Counter({i: 2 for i in range(len(groups))})
    else:
        assert max(used.values()) <= 2
    again = DistinctSetBatchSampler(data, batch_size=4, drop_last=drop_last, seed=5, groups=groups, window=window,
                                    passes=2)
    assert list(again) == batches
    other = DistinctSetBatchSampler(data, batch_size=4, drop_last=drop_last, seed=6, groups=groups, window=window,
                                    passes=2)
    assert list(other) != batches


def test_a_window_below_one_is_refused():
    """window=0 let no batch stay open: every batch was one row, and with drop_last the sampler yielded no batch at
    all (len 0), so a training run trained nothing without a word."""
    data, groups, _, _ = _rows()
    with pytest.raises(ValueError, match="window"):
        DistinctSetBatchSampler(data, batch_size=4, drop_last=True, seed=5, groups=groups, window=0)


def test_a_document_labelled_positive_and_negative_is_refused():
    """Document p, a positive of q, also given as its negative, was trained as both (1.0 and 0.0)."""
    texts = {"p": "P", "n": "N"}
    with pytest.raises(ValueError, match=r"query q: document p is labelled twice \(positive, then negative\)"):
        labelled_pairs({"q": "Q"}, {"q": ["p"]}, {"q": ["n", "p"]}, texts)


def test_a_document_labelled_twice_with_one_label_is_refused():
    """A positive listed twice gave two identical pairs (trained twice, counted as two positives)."""
    texts = {"p": "P", "n": "N"}
    with pytest.raises(ValueError, match="query q: document p is labelled twice"):
        labelled_pairs({"q": "Q"}, {"q": ["p", "p"]}, {"q": ["n"]}, texts)
    with pytest.raises(ValueError, match="query q: document n is labelled twice"):
        labelled_pairs({"q": "Q"}, {"q": ["p"]}, {"q": ["n", "n"]}, texts)


def test_a_string_of_documents_is_a_type_error():
    """A string given as a query's documents was read letter by letter: 'pn' made positives p and n."""
    texts = {"p": "P", "n": "N"}
    with pytest.raises(TypeError, match="query q: positives is the string 'pn'"):
        labelled_pairs({"q": "Q"}, {"q": "pn"}, {}, texts)
    with pytest.raises(TypeError, match="query q: the ranking"):
        sample_negatives({"q": "abcd"}, {}, 2, 4, 0)
    with pytest.raises(TypeError, match="query q: positives"):
        sample_negatives({"q": ["a", "b"]}, {"q": "a"}, 2, 4, 0)


def test_a_ranking_naming_a_document_twice_is_refused():
    """A repeated document in the ranking could be drawn twice: seed 0 drew ['b', 'a', 'a'] from a, a, a, b."""
    with pytest.raises(ValueError, match=r"query q: the ranking names document\(s\) \['a'\] more than once"):
        sample_negatives({"q": ["a", "a", "a", "b"]}, {}, 3, 4, 0)


def test_pairs_and_negatives_against_brute_force():
    """Negatives: distinct, from the top `depth`, never a positive, all of the pool where it is short of `n`, the
    same for one seed; pairs: one per labelled document, positives first, each with its own label and text."""
    rng = random.Random(1)
    docs = [f"d{i}" for i in range(40)]
    ranked = {f"q{k}": rng.sample(docs, 25) for k in range(12)}
    positives = {q: sorted(rng.sample(r[:10], rng.randrange(0, 4))) for q, r in ranked.items()}
    for n, depth in [(3, 10), (8, 6), (0, 5)]:
        neg = sample_negatives(ranked, positives, n, depth, seed=7)
        assert neg == sample_negatives(ranked, positives, n, depth, seed=7)
        for q, got in neg.items():
            pool = [d for d in ranked[q][:depth] if d not in positives[q]]
            assert len(set(got)) == len(got) == min(n, len(pool)) and set(got) <= set(pool)
    neg = sample_negatives(ranked, positives, 3, 10, seed=7)
    texts = {d: d.upper() for d in docs}
    queries = {q: f"text of {q}" for q in ranked}
    pairs = labelled_pairs(queries, positives, neg, texts)
    expected = [(queries[q], texts[d], y) for q in queries
                for ds, y in ((positives[q], 1.0), (neg[q], 0.0)) for d in ds]
    assert pairs == expected
    assert sum(y for *_, y in pairs) == sum(len(v) for v in positives.values())
