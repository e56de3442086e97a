"""Round 18: the word 5-gram containment of experiments/check_reworded_leak.py against a brute-force count."""

from __future__ import annotations

import random

import pytest

from experiments.check_reworded_leak import GramIndex, containment, ngrams, scan, table


def brute_containment(a: list[str], b: list[str], n: int) -> float | None:
    """The share of a's distinct n-word windows that occur as a window of b, by explicit loops over word lists."""
    windows: list[list[str]] = []
    for i in range(len(a) - n + 1):
        if a[i : i + n] not in windows:
            windows.append(a[i : i + n])
    if not windows:
        return None
    found = 0
    for w in windows:
        for j in range(len(b) - n + 1):
            if b[j : j + n] == w:
                found += 1
                break
    return found / len(windows)


def test_containment_known_answer():
    # a's 5-grams: "the cat sat on the", "cat sat on the mat", "sat on the mat today"; b holds the last two
    assert containment("The cat sat on the mat today.", "A cat, sat on THE mat today indeed") == pytest.approx(2 / 3)
    assert containment("a b c d", "a b c d e") is None  # fewer than five words: no 5-gram
    assert containment("a b c d e", "a b c d") == 0.0
    assert containment("x y z w v x y z w v", "x y z w v") == pytest.approx(1 / 5)  # distinct grams, not counts


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_containment_matches_brute_force_on_short_texts(n):
    rng = random.Random(n)
    vocab = ["alpha", "beta", "gamma", "delta"]  # few words, so grams repeat and overlap often
    for _ in range(300):
        a = [rng.choice(vocab) for _ in range(rng.randint(0, 12))]
        b = [rng.choice(vocab) for _ in range(rng.randint(0, 12))]
        want = brute_containment(a, b, n)
        got = containment(" ".join(a), " ".join(b), n)
        assert (got is None) == (want is None), (a, b)
        if want is not None:
            assert got == pytest.approx(want), (a, b)


def test_index_gives_every_pairwise_containment():
    rng = random.Random(7)
    vocab = ["p", "q", "r", "s", "t"]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 14))) for _ in range(40)]
    bench, train = texts[:15], texts[15:]
    index = GramIndex(bench, n=3)
    for t in train:
        got = index.contained(t)
        for row, b in enumerate(bench):
            want = brute_containment(b.split(), t.split(), 3)
            if want:  # rows sharing no gram are left out
                assert got[row] == pytest.approx(want)
            else:
                assert row not in got


def test_scan_lists_pairs_from_the_threshold_and_marks_one_paper_id():
    bench = [{"benchmark": "b", "paper_id": "1", "title": "", "text": "one two three four five six"},
             {"benchmark": "b", "paper_id": "2", "title": "", "text": "seven eight nine ten eleven twelve"}]
    sources = {"s": [{"paper_id": "1", "title": "", "text": "one two three four five six"},
                     {"paper_id": "x", "title": "", "text": "zero one two three four five"},  # 1 of 2 grams of "1"
                     {"paper_id": "y", "title": "", "text": "seven eight nine ten"}]}  # too short to hold a 5-gram
    pairs = scan(bench, sources, report_from=0.5, n=5)
    assert sorted((p["bench_id"], p["train_id"], p["containment"], p["same_id"]) for p in pairs) == [
        ("1", "1", 1.0, True), ("1", "x", 0.5, False)]
    rows = {r["threshold"]: r for r in table(pairs, ["b"], ["s"], thresholds=(0.5, 0.8))}
    assert (rows[0.5]["pairs"], rows[0.5]["benchmark_papers"], rows[0.5]["same_id"]) == (1, 1, 1)
    assert (rows[0.8]["pairs"], rows[0.8]["same_id"]) == (0, 1)


def test_ngrams_are_lower_case_words():
    assert ngrams("BERT's pre-training, done.", n=2) == {"bert s", "s pre", "pre training", "training done"}
