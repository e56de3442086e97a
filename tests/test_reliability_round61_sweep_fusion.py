"""Round 61: a sweep of score fusion (aspire.scoring.fusion) and BM25 (aspire.scoring.lexical). `z` fusion ranked
documents whose fused scores are equal by the order of each list's documents (its mean summed in that order), not by
id; BM25 texts or queries that are no strings failed with unicodedata's TypeError, naming no document or query."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from aspire.scoring.fusion import fuse_ranked, normalise
from aspire.scoring.lexical import BM25Index

# mirror-image lists: d0 and d3 score 1.1 + 3.3 either way, d1 and d2 0.2 + 0.1, so each pair ties
MIRROR = ({"d0": 1.1, "d1": 0.2, "d2": 0.1, "d3": 3.3}, {"d0": 3.3, "d1": 0.1, "d2": 0.2, "d3": 1.1})


def _reordered(scores: dict[str, float], order) -> dict[str, float]:
    return {d: scores[d] for d in order}


def test_z_fusion_ties_by_id_whatever_the_order_of_each_lists_documents():
    """Once d3 came before d0 (their z sums a last bit apart, each list's mean summed in its documents' order), and
    two lists equal as dicts fused to other scores."""
    first, second = MIRROR
    seen = set()
    for order in itertools.permutations(first):
        fused = fuse_ranked([_reordered(first, order), second], method="z")
        assert [d for d, _ in fused] == ["d0", "d3", "d1", "d2"], order
        scores = dict(fused)
        assert scores["d0"] == scores["d3"] and scores["d1"] == scores["d2"], order
        seen.add(tuple(fused))
    assert len(seen) == 1  # the same scores, whatever the order


def test_normalise_does_not_hang_on_the_values_order():
    rng = np.random.default_rng(61)
    for method in ("z", "minmax"):
        for _ in range(200):
            values = rng.choice([0.1, 0.2, 0.3, 0.7, 1.1, 3.3, -0.01], int(rng.integers(2, 9)))
            perm = rng.permutation(len(values))
            got = normalise(values[perm], method)
            assert np.array_equal(got, normalise(values, method)[perm]), (method, values, perm)
    z = normalise(np.array([0.1, 0.2, 0.3]), "z")
    assert np.allclose(z, [-np.sqrt(1.5), 0.0, np.sqrt(1.5)])  # still zero mean, unit population variance


@pytest.mark.parametrize("bad", [None, b"graph bytes", 3.0])
def test_bm25_text_that_is_no_string_names_its_document(bad):
    with pytest.raises(ValueError, match=r"BM25 texts must be strings: document 'p2' has "):
        BM25Index(["graph neural networks", bad], ["p1", "p2"])


def test_bm25_query_that_is_no_string_names_its_position():
    index = BM25Index(["graph neural networks", "protein folding"], ["p1", "p2"])
    with pytest.raises(ValueError, match=r"BM25 queries must be strings: query 1 is None"):
        index.scores(["graph", None])
    assert index.scores(["graph", "folding"]).argmax(axis=1).tolist() == [0, 1]
