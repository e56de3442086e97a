"""Round 55: mix_rerank's tail against a brute-force reference (sort by mixed score, then document id)."""

import random

import numpy as np
import pytest

from aspire.scoring.crossencoder import mix_rerank


def _by_score_then_id(ranked):
    return sorted(ranked, key=lambda kv: (-kv[1], kv[0]))


def test_tail_ties_go_by_id_whatever_order_the_first_stage_lists_them():
    cross = {"a": 0.0, "b": 1.0}
    one = [("a", 3.0), ("b", 2.0), ("z", 1.0), ("y", 1.0), ("x", 0.5)]
    two = [("a", 3.0), ("b", 2.0), ("y", 1.0), ("z", 1.0), ("x", 0.5)]
    ranked = mix_rerank(one, cross, top_n=2, weight=0.5)
    assert [d for d, _ in ranked] == ["a", "b", "y", "z", "x"]  # the old code gave z before y
    assert ranked == mix_rerank(two, cross, top_n=2, weight=0.5)
    assert ranked == _by_score_then_id(ranked)
    # weight 0 keeps the first stage's order exactly, the tail's ties too
    assert [d for d, _ in mix_rerank(one, cross, top_n=2, weight=0.0)] == ["a", "b", "z", "y", "x"]


def test_tail_scores_one_float_apart_stay_apart():
    lower = float(np.nextafter(0.011, 0.0))
    first = [("a", 3.0), ("b", 2.0), ("d", 0.011), ("c", lower), ("e", 0.0)]
    ranked = mix_rerank(first, {"a": 0.0, "b": 1.0}, top_n=2, weight=0.5)
    assert [d for d, _ in ranked] == ["a", "b", "d", "c", "e"]
    tail = [s for _, s in ranked[2:]]
    assert tail[0] > tail[1] > tail[2]  # the old shift rounded d and c to one score (-1.0), so c sorted first by id
    assert ranked == _by_score_then_id(ranked)


@pytest.mark.parametrize("weight", [0.3, 0.5, 1.0])
@pytest.mark.parametrize("norm", ["z", "minmax"])
def test_random_lists_with_ties_match_the_brute_force_order(weight, norm):
    rng = random.Random(55)
    for _ in range(200):
        n = rng.randint(1, 12)
        ids = [f"d{i}" for i in rng.sample(range(100), n)]
        pool = [rng.choice([0.0, 0.5, 1.0, 0.011, float(np.nextafter(0.011, 0.0))]) for _ in range(n)]
        first = sorted(zip(ids, pool), key=lambda kv: -kv[1])  # ties in random id order
        top_n = rng.randint(1, n + 3)
        cross = {d: rng.choice([0.0, 1.0, 2.0]) for d, _ in first[:top_n]}
        ranked = mix_rerank(first, cross, top_n, weight, norm)
        assert sorted(d for d, _ in ranked) == sorted(ids)
        assert ranked == _by_score_then_id(ranked)
        head, tail = ranked[:top_n], ranked[top_n:]
        if tail:
            assert max(s for _, s in tail) < min(s for _, s in head)
            fs = dict(first)
            # the tail's brute-force order: first-stage score, then id
            assert [d for d, _ in tail] == [d for d, _ in _by_score_then_id([(d, fs[d]) for d, _ in tail])]
            for (d1, s1), (d2, s2) in zip(tail, tail[1:]):
                assert (s1 == s2) == (fs[d1] == fs[d2])


def test_tail_scores_are_plain_floats():
    first = [("a", np.float32(3.0)), ("b", np.float32(2.0)), ("c", np.float32(1.0))]
    ranked = mix_rerank(first, {"a": 0.0, "b": 1.0}, top_n=2, weight=0.5)
    assert all(type(s) is float for _, s in ranked)
