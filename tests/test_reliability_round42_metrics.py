"""Round 42: aspire.benchmarks.metrics against brute-force references (trec_eval definitions, sklearn)."""

import math
import random

import numpy as np
import pytest
from sklearn.metrics import ndcg_score

from aspire.benchmarks.metrics import evaluate_rankings, ndcg_at_k, pool_cutoff
from tests.test_reliability_round13_evalmetrics import _bpref


def _brute(pool, ranked, thr, name):
    rel = [1 if pool[c] >= thr else 0 for c in ranked]
    big_r = sum(rel)
    if name == "map":
        hits, total = 0, 0.0
        for i, r in enumerate(rel, 1):
            if r:
                hits += 1
                total += hits / i
        return total / big_r
    if name == "mrr":
        return next((1 / i for i, r in enumerate(rel, 1) if r), 0.0)
    if name == "r-precision":
        return sum(rel[:big_r]) / big_r
    if name == "bpref":
        return _bpref(rel)  # round 13's trec_eval loop
    kind, k = name.split("@")
    k = int(k)
    if kind == "p":
        return sum(rel[:k]) / k
    if kind == "r":
        return sum(rel[:k]) / big_r
    gains = [pool[c] for c in ranked]
    dcg = sum(g / math.log2(i + 1) for i, g in enumerate(gains[:k], 1))
    ideal = sum(g / math.log2(i + 1) for i, g in enumerate(sorted(gains, reverse=True)[:k], 1))
    return dcg / ideal if ideal else 0.0


NAMES = ["map", "mrr", "bpref", "r-precision", "p@1", "p@3", "p@10", "r@2", "r@5", "ndcg@1", "ndcg@3", "ndcg@10"]


def test_every_ranx_metric_matches_brute_force_on_random_pools_with_awkward_ids():
    rng = random.Random(0)
    for _ in range(8):
        qrels, rankings = {}, {}
        for qi in range(rng.randint(1, 4)):
            q = rng.choice([f"q{qi}", str(qi * 7), f" sp {qi}", f"é{qi}", str(10 - qi)])
            cands = [rng.choice([f"c{j}", str(j), f"{j} ", f"ü{j}"]) + f"_{j}" for j in range(rng.randint(1, 8))]
            pool = {c: rng.choice([0, 0, 1, 2, 3]) for c in cands}
            if not any(pool.values()):
                pool[cands[0]] = 2
            qrels[q] = pool
            rankings[q] = rng.sample(cands, len(cands))
        thr = rng.choice([1, 2])
        out = evaluate_rankings(qrels, rankings, NAMES, threshold=thr, skip_no_relevant=True)
        for q, scores in out.items():
            for m in NAMES:
                want = _brute(qrels[q], rankings[q], thr, m)
                assert (want is None) == (scores[m] is None), (q, m)
                if want is not None:
                    assert scores[m] == pytest.approx(want, abs=1e-9), (q, m, thr)


def test_ndcg_at_k_matches_sklearn_and_csfcube_discount():
    rng = np.random.default_rng(1)
    for _ in range(50):
        n = int(rng.integers(2, 10))
        g = rng.integers(0, 4, n).astype(float)
        k = int(rng.integers(1, 12))
        if not g.any():
            continue
        assert ndcg_at_k(g, k, "trec") == pytest.approx(ndcg_score([g], [np.arange(n, 0, -1)], k=k))
        disc = [1.0] + [math.log2(i) for i in range(2, n + 1)]
        ideal = sorted(g, reverse=True)
        want = sum(g[i] / disc[i] for i in range(min(k, n))) / sum(ideal[i] / disc[i] for i in range(min(k, n)))
        assert ndcg_at_k(g, k) == pytest.approx(want)
    assert [pool_cutoff(n, 20) for n in (1, 4, 5, 9, 10, 14, 15, 123)] == [1, 1, 1, 1, 2, 2, 3, 24]


def test_query_ids_of_mixed_types_are_scored_and_kept_distinct():
    # 1 and "1" are distinct keys; ranx's numba dictionaries failed to compile on the mix (TypingError)
    qrels = {1: {"x": 1, "y": 0}, "1": {"x": 0, "y": 1}}
    rankings = {1: ["x", "y"], "1": ["x", "y"]}
    out = evaluate_rankings(qrels, rankings, ["MRR", "bpref"])
    assert out == {1: {"MRR": 1.0, "bpref": 1.0}, "1": {"MRR": 0.5, "bpref": 0.0}}


def test_metric_names_that_are_not_a_list_of_strings_are_refused_clearly():
    qrels, rankings = {"a": {"x": 1, "y": 0}}, {"a": ["y", "x"]}
    with pytest.raises(ValueError, match="metric name None is not a string"):
        evaluate_rankings(qrels, rankings, [None])
    with pytest.raises(ValueError, match=r"got the string 'map'"):
        evaluate_rankings(qrels, rankings, "map")
    out = evaluate_rankings(qrels, rankings, ["MAP", "map", " P@1 ", "NDCG%50", "nDcG@2"])
    assert out["a"] == pytest.approx(
        {"MAP": 0.5, "map": 0.5, " P@1 ": 0.0, "NDCG%50": 0.0, "nDcG@2": 1 / math.log2(3)})
