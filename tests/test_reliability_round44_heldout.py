"""Round 44: aspire.benchmarks.heldout against brute-force n-gram sets and the real benchmarks."""

import functools
import random
import re
from pathlib import Path

import pytest

from aspire.benchmarks import heldout as h
from aspire.data.acl import normalise_title

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def brute_grams(text, n):
    w = re.findall(r"\w+", text.lower())
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)} if len(w) >= n else set()


def brute_containment(a, b, n):
    ga = brute_grams(a, n)
    return len(ga & brute_grams(b, n)) / len(ga) if ga else None


def test_containment_matches_brute_force_on_tiny_texts():
    cases = [("The cat, sat ON the mat!", "the CAT sat on the mat today", 3),
             ("a b c d e f", "x a b c y d e f", 2), ("one two", "one two three", 3),
             ("Über große Modelle sind gut", "über GROSSE modelle", 2)]
    for a, b, n in cases:
        assert h.containment(a, b, n) == brute_containment(a, b, n), (a, b, n)
    assert h.containment("The cat, sat ON the mat!", "the cat sat on the mat", 3) == 1.0
    assert h.containment("one two", "one two", 3) is None


def test_bad_gram_size_is_refused_at_build():
    for n in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="word grams of n="):
            h.Containment([], n=n)  # was built, failing only at the first score
        with pytest.raises(ValueError, match="word grams of n="):
            h.GramIndex([], n=n)


def test_gram_index_finds_every_text_above_threshold_and_none_below():
    rng = random.Random(44)
    vocab = [f"w{i}" for i in range(12)]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 14))) for _ in range(300)]
    index = h.GramIndex(texts, 2)
    for _ in range(40):
        probe = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 40)))
        got = index.contained(probe)
        want = {row: brute_containment(t, probe, 2) for row, t in enumerate(texts)}
        want = {row: c for row, c in want.items() if c}
        assert got.keys() == want.keys()
        for row in want:
            assert got[row] == pytest.approx(want[row])
        rule = h.Containment(texts, threshold=0.5, n=2)
        best = max(want.values(), default=0.0)
        assert rule.matches(probe) == (best >= 0.5)


def test_titles_normalised_as_documented():
    assert normalise_title("BERT: Pre-training\tof  Deep\nBidirectional") == "bertpretrainingofdeepbidirectional"
    assert normalise_title("Poincaré Embeddings") == "poincarembeddings"  # dropped, not folded


@functools.lru_cache(maxsize=1)
def _real():
    ids: set[str] = set()
    texts = h._cited_benchmark_texts(DATA, ids)
    return h.benchmark_ids(DATA), ids, texts, h.ranking_titles(DATA)


@pytest.mark.skipif(not (DATA / "csfcube").is_dir(), reason=f"no real data at {DATA}")
def test_benchmark_ids_on_real_data():
    ids, cited_ids, texts, titles = _real()
    assert set(ids) == {"context2doc_test", "scirepeval_formats"}
    assert len(ids["context2doc_test"]) == 444 and len(ids["scirepeval_formats"]) == 1370
    # CSFCube's and the reviewer set's ids are Semantic Scholar's and OpenReview's: none is an Anthology id here
    assert not cited_ids & frozenset().union(*ids.values())
    assert len(titles["csfcube"]) <= 4205 and len(titles["csfcube"]) > 4000


def test_missing_benchmark_folder_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="csfcube"):
        h.cited_benchmark_papers(tmp_path)
    with pytest.raises(FileNotFoundError):
        h.benchmark_ids(tmp_path)
    with pytest.raises(FileNotFoundError):
        h.ranking_titles(tmp_path)
