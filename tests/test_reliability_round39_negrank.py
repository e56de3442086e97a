"""Round 39: nearest-neighbour negatives (aspire.data.negatives.rank) and the cross-encoder's negative draws
(aspire.train.crossencoder.sample_negatives), checked against hand loops."""

import numpy as np
import pytest

from aspire.data.negatives.rank import nearest_negatives
from aspire.train.crossencoder import sample_negatives


def _brute(vectors, partners, ids, k, skip=0, margin=None, reference="max"):
    """Hand loop of the documented rule: negatives and the per-guard dropped counts."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1)
    cos = lambda i, j: float(v[i] @ v[j] / (norms[i] * norms[j]))  # noqa: E731
    out, drop_p, drop_m = {}, 0, 0
    for i, a in enumerate(ids):
        if norms[i] == 0:
            out[a] = []
            continue
        mates = [j for j, b in enumerate(ids) if j != i and b in partners.get(a, ()) and norms[j] > 0]
        ref = None
        if margin is not None and mates:
            ref = (min if reference == "min" else max)(cos(i, j) for j in mates)
        cands = [j for j, b in enumerate(ids) if j != i and b not in partners.get(a, ()) and norms[j] > 0]
        close = [j for j in cands if ref is not None and cos(i, j) > ref - margin]
        survivors = sorted((j for j in cands if j not in close), key=lambda j: (-cos(i, j), j))
        kept = survivors[skip : skip + k]
        out[a] = [ids[j] for j in kept]
        floor = np.inf if k == 0 else cos(i, kept[-1]) if len(kept) == k else -np.inf
        drop_p += sum(cos(i, j) > floor for j in mates)
        drop_m += sum(cos(i, j) > floor for j in close)
    return out, drop_p, drop_m


def _data(seed=0, n=12, d=4):
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(n, d)).astype(np.float32)  # no two cosines within float32 rounding of each other
    vecs[9] = vecs[10]  # a duplicated abstract: an exact tie, to the earlier paper
    vecs[3] = 0.0  # a paper without a vector
    ids = [f"p{i}" for i in range(n)]
    partners = {"p0": {"p1", "p2", "p3"}, "p1": {"p0"}, "p2": {"p0"}, "p5": {"p6"}, "p6": {"p5"}}
    return vecs, partners, ids


@pytest.mark.parametrize("k,skip,margin,reference", [(3, 0, None, "max"), (2, 1, None, "max"), (4, 0, 0.2, "max"),
                                                     (3, 1, 0.3, "min"), (20, 0, 0.1, "max"), (0, 0, 2.0, "max")])
def test_matches_hand_loop(k, skip, margin, reference):
    vecs, partners, ids = _data()
    mined = nearest_negatives(vecs, partners, ids, k, skip, margin, reference, chunk=5)
    want, drop_p, drop_m = _brute(vecs, partners, ids, k, skip, margin, reference)
    assert mined.negatives == want
    assert mined.dropped["partner"] == drop_p
    if margin is not None:
        assert mined.dropped["margin"] == drop_m
    assert mined.notes["papers_without_vector"] == ["p3"]
    for a, negs in mined.negatives.items():
        assert a not in negs and not set(negs) & partners.get(a, set()) and "p3" not in negs
        assert len(negs) == len(set(negs)) <= k


def test_margin_dropped_is_zero_when_no_negative_is_asked_for():
    # k = 0 keeps nothing, so no candidate "would have been a negative but for the guard": the partner count already
    # said 0, the margin count said 44 (margin 2: every candidate of each anchor with a partner)
    vecs, partners, ids = _data()
    mined = nearest_negatives(vecs, partners, ids, 0, margin=2.0)
    assert mined.dropped == {"partner": 0, "margin": 0}


def test_unknown_reference_is_an_error():
    vecs, partners, ids = _data()
    # "mean" was read as "max" without a word
    with pytest.raises(ValueError, match=r"unknown margin reference 'mean'; valid: \['max', 'min'\]"):
        nearest_negatives(vecs, partners, ids, 2, margin=0.1, reference="mean")


@pytest.mark.parametrize("chunk", [-1, 0, 1.5])
def test_bad_chunk_is_an_error(chunk):
    vecs, partners, ids = _data()
    # chunk=-1 returned Mined(negatives={}): no anchor mined, nothing said
    with pytest.raises(ValueError, match="chunk"):
        nearest_negatives(vecs, partners, ids, 2, chunk=chunk)


def test_chunk_does_not_change_the_result():
    vecs, partners, ids = _data(seed=3)
    vecs[7] = vecs[8]  # a duplicated abstract
    base = nearest_negatives(vecs, partners, ids, 4, 1, 0.2)
    for chunk in (1, 2, 7, 100):
        again = nearest_negatives(vecs, partners, ids, 4, 1, 0.2, chunk=chunk)
        assert (again.negatives, again.dropped) == (base.negatives, base.dropped)


RANKED = {"q1": ["a", "b", "c", "d", "e", "f"], "q2": ["f", "e", "d"], "q3": ["x", "y"]}
POS = {"q1": ["b", "d"], "q2": ["f"], "q3": ["x", "y"]}


def test_sample_negatives_draws_as_documented():
    got = sample_negatives(RANKED, POS, 2, 4, seed=5)
    assert got == sample_negatives(RANKED, POS, 2, 4, seed=5)  # seeded
    assert set(got["q1"]) <= {"a", "c"} and len(got["q1"]) == 2  # top 4 less the positives: exactly a, c
    assert got["q2"] in (["e", "d"], ["d", "e"])  # fewer left than asked: all of them
    assert got["q3"] == []  # every ranked document a positive
    draws = {tuple(sample_negatives(RANKED, POS, 1, 6, seed=s)["q1"]) for s in range(40)}
    assert draws == {("a",), ("c",), ("e",), ("f",)}  # every non-positive of the top 6 can be drawn, never a positive


@pytest.mark.parametrize("n,depth", [(2, -1), (2, 0), (-1, 4), (2, 2.5), (True, 4)])
def test_sample_negatives_bad_counts_are_errors(n, depth):
    # depth=-1 left the last ranked document out of the pool without a word; depth=0 drew nothing
    with pytest.raises(ValueError, match="negative sampling"):
        sample_negatives(RANKED, POS, n, depth, seed=0)
