"""Round 43 sweep of aspire/data/negatives/graph.py and sampled.py."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from aspire.data.negatives import citation_negatives, cocitation_partners, random_negatives, svd_vectors


def test_svd_keeps_weakly_linked_papers_whose_directions_are_kept():
    # a 20-paper clique co-cited 100 times a pair (sigma_max 1900), 10 pairs co-cited once, 5000 papers unlinked:
    # d = 64 keeps every non-zero direction, so each pair paper's exact U.Sigma row has norm 1 (numpy's SVD)
    n = 20 + 20 + 5000
    rows, cols, vals = [], [], []
    for i in range(20):
        for j in range(20):
            if i != j:
                rows.append(i)
                cols.append(j)
                vals.append(100.0)
    for p in range(10):
        a, b = 20 + 2 * p, 21 + 2 * p
        rows += [a, b]
        cols += [b, a]
        vals += [1.0, 1.0]
    m = sparse.coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsr()
    vectors, note = svd_vectors(m, 64, 0)
    u, s, _ = np.linalg.svd(m[:40, :40].toarray())
    exact = np.linalg.norm((u * s)[20:40], axis=1)
    np.testing.assert_allclose(exact, 1.0, atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(vectors[20:40], axis=1), exact, atol=1e-4)  # were all zero
    assert not vectors[40:].any()  # unlinked papers stay exactly zero
    np.testing.assert_allclose(np.sort(np.linalg.norm(vectors[:20], axis=1)),
                               np.sort(np.linalg.norm((u * s)[:20], axis=1)), rtol=1e-4)


def test_citation_negatives_hand_computed_and_partners_never_negatives():
    groups = [
        {"set_id": "s1", "paper_ids": ["a", "b"], "context_ids": ["X#1"]},
        {"set_id": "s2", "paper_ids": ["c", "d"], "context_ids": ["X#2", "Y#1"]},
        {"set_id": "s3", "paper_ids": ["a", "e"], "context_ids": ["Y#2"]},
        {"set_id": "s4", "paper_ids": ["b", "c"], "context_ids": ["Z#3"]},
    ]
    ids = list("abcdefg")
    mined = citation_negatives(groups, ids, 10)
    # X cites a b c d; Y cites c d a e; Z cites b c
    assert mined.negatives == {"a": ["c", "d"], "b": ["d"], "c": ["a", "e"], "d": ["a", "b", "e"],
                               "e": ["c", "d"], "f": [], "g": []}
    assert mined.dropped == {"partner": 8, "citation": 0}
    partners = cocitation_partners(groups)
    rnd = random_negatives(partners, ids, 100, 1)
    assert rnd.dropped == {"partner": 8}  # every partner drawn when all are drawn
    for pid in ids:
        assert not set(mined.negatives[pid]) & partners[pid]
        assert set(rnd.negatives[pid]) == set(ids) - partners[pid] - {pid}
    assert random_negatives(partners, ids, 100, 1) == rnd
