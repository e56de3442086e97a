"""Round 49, the sentence store: `search_sentences` handed faiss queries of another dimension, 1-d queries or k < 1,
and faiss refused them with a bare AssertionError (a Python `assert`, skipped under `python -O`, where faiss then
read past the query buffer). What held, checked here against independent references: gather equal to the stored
rows (zero padding, mask), position round trips, add equal to a fresh build over all papers, the sentence search
equal to a numpy brute force with rows mapped to the right papers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aspire.index import EncodedCorpus, SentenceIndex
from tests.test_reliability_round18_store import cfg, corpus


def _queries(n: int = 4, dim: int = 16) -> np.ndarray:
    return np.random.default_rng(5).standard_normal((n, dim)).astype(np.float32)


@pytest.mark.parametrize("queries, k", [(_queries(dim=8), 3), (_queries()[0], 3), (_queries(), 0), (_queries(), -2)])
def test_search_sentences_refuses_queries_of_another_shape_and_k_below_one(queries, k):
    index = SentenceIndex.build(corpus(6), cfg(), "fp", "m")
    with pytest.raises(ValueError, match=r"search_sentences takes queries \(n, 16\) and k >= 1, got \("):
        index.search_sentences(queries, k)


def test_gather_and_positions_match_the_stored_rows():
    index = SentenceIndex.build(corpus(10, seed=1), cfg(), "fp", "m")
    batch = index.gather([3, 0, -1, 7])
    for c, p in enumerate([3, 0, 9, 7]):
        rows = np.asarray(index.vectors[index.offsets[p] : index.offsets[p + 1]])
        n = len(rows)
        assert torch.equal(batch.emb[c, :n], torch.from_numpy(rows)) and not batch.emb[c, n:].any()
        assert batch.mask[c, :n].all() and not batch.mask[c, n:].any() and batch.paper_ids[c] == index.paper_ids[p]
        assert batch.sentences[c] == index.sentences[p]
    assert [index.position(pid) for pid in index.paper_ids] == list(range(index.n_papers))


def test_add_equals_a_fresh_build_and_search_equals_a_numpy_brute_force():
    first, second = corpus(10, seed=1), corpus(5, start=10, seed=2)
    index = SentenceIndex.build(first, cfg(), "fp", "m").add(second, "fp")
    fresh = SentenceIndex.build(EncodedCorpus.concat([first, second]), cfg(), "fp", "m")
    assert index.paper_ids == fresh.paper_ids
    for a, b in ((index.vectors, fresh.vectors), (index.offsets, fresh.offsets), (index.whole, fresh.whole)):
        np.testing.assert_array_equal(a, b)
    q = _queries()
    dist, rows = index.search_sentences(q, 7)
    vectors = np.asarray(fresh.vectors, dtype=np.float64)
    brute = np.sqrt(((q[:, None, :] - vectors[None]) ** 2).sum(-1))  # (n, N)
    order = np.argsort(brute, axis=1)[:, :7]
    np.testing.assert_array_equal(rows, order)
    np.testing.assert_allclose(dist, np.take_along_axis(brute, order, 1), rtol=1e-4)
    owners = [[next(p for p in range(fresh.n_papers) if fresh.offsets[p] <= r < fresh.offsets[p + 1]) for r in row]
              for row in order]
    np.testing.assert_array_equal(index.sentence_papers(rows), owners)
    n_before = index.n_papers
    index.add(corpus(3, start=12, seed=3), "fp")  # every id indexed already: nothing added, each one named
    assert index.n_papers == n_before
    assert index.rejected[-3:] == [{"paper_id": f"p{i}", "reason": "duplicate paper_id (already indexed)"}
                                   for i in (12, 13, 14)]
