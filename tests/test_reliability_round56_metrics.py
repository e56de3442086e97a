"""Round 56: aspire.benchmarks.metrics against brute-force implementations written here (trec_eval conventions)."""

from __future__ import annotations

import math
import random

import pytest

from aspire.benchmarks.metrics import evaluate_rankings, ndcg_at_k, ranx_per_query


def _relevant(pool, threshold):
    return {c for c, g in pool.items() if g >= threshold}


def bf_ap(ranked, rel, k=None, denominator="R"):
    """Average precision over the top k (all when None); denominator 'R' (trec_eval map_cut) or 'min' (min(R, k))."""
    top = ranked if k is None else ranked[:k]
    hits, total = 0, 0.0
    for i, c in enumerate(top, start=1):
        if c in rel:
            hits += 1
            total += hits / i
    denom = len(rel) if denominator == "R" or k is None else min(len(rel), k)
    return total / denom


def bf_mrr(ranked, rel):
    for i, c in enumerate(ranked, start=1):
        if c in rel:
            return 1.0 / i
    return 0.0


def bf_p(ranked, rel, k):
    return sum(c in rel for c in ranked[:k]) / k  # trec_eval: divided by k even past the ranking's end


def bf_r(ranked, rel, k):
    return sum(c in rel for c in ranked[:k]) / len(rel)


def bf_rprec(ranked, rel):
    return sum(c in rel for c in ranked[: len(rel)]) / len(rel)


def bf_ndcg_trec(ranked, pool, k):
    """Linear gains (grade), rank i discounted by log2(i + 1) (Jarvelin & Kekalainen as ranx / trec_eval)."""
    dcg = sum(pool[c] / math.log2(i + 1) for i, c in enumerate(ranked[:k], start=1))
    ideal = sorted(pool.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg else 0.0


def bf_ndcg_csfcube(ranked, pool, k):
    def disc(i):
        return 1.0 if i == 1 else math.log2(i)

    dcg = sum(pool[c] / disc(i) for i, c in enumerate(ranked[:k], start=1))
    ideal = sorted(pool.values(), reverse=True)[:k]
    idcg = sum(g / disc(i) for i, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg else 0.0


def _random_case(seed, n_queries=6):
    rng = random.Random(seed)
    qrels, rankings = {}, {}
    for q in range(n_queries):
        n = rng.randint(3, 12)
        pool = {f"d{q}_{i}": rng.choice([0, 0, 0, 1, 2, 3]) for i in range(n)}
        pool[f"d{q}_0"] = rng.choice([1, 2, 3])  # at least one relevant at grade >= 1
        order = list(pool)
        rng.shuffle(order)
        qrels[f"q{q}"], rankings[f"q{q}"] = pool, order
    return qrels, rankings


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("threshold", [1, 2])
def test_evaluate_rankings_matches_brute_force(seed, threshold):
    qrels, rankings = _random_case(seed)
    names = ["MAP", "MRR", "R-precision", "P@3", "P@20", "R@3", "R@20", "nDCG@3", "nDCG@20", "NDCG%20", "NDCG%50"]
    out = evaluate_rankings(qrels, rankings, names, threshold=threshold, skip_no_relevant=True)
    assert out, "every case has queries with a relevant candidate"
    for q, scores in out.items():
        pool, ranked = qrels[q], rankings[q]
        rel = _relevant(pool, threshold)
        assert rel
        n = len(ranked)
        expected = {
            "MAP": bf_ap(ranked, rel), "MRR": bf_mrr(ranked, rel), "R-precision": bf_rprec(ranked, rel),
            "P@3": bf_p(ranked, rel, 3), "P@20": bf_p(ranked, rel, 20),
            "R@3": bf_r(ranked, rel, 3), "R@20": bf_r(ranked, rel, 20),
            "nDCG@3": bf_ndcg_trec(ranked, pool, 3), "nDCG@20": bf_ndcg_trec(ranked, pool, 20),
            "NDCG%20": bf_ndcg_csfcube(ranked, pool, max(1, n * 20 // 100)),
            "NDCG%50": bf_ndcg_csfcube(ranked, pool, max(1, n * 50 // 100)),
        }
        for name, value in expected.items():
            assert scores[name] == pytest.approx(value, abs=1e-12), (q, name, threshold)
    left_out = {q for q, pool in qrels.items() if not _relevant(pool, threshold)}
    assert set(out) == set(qrels) - left_out


def test_ndcg_gains_are_linear_not_exponential():
    # grades 3 then 1 ranked in reverse: linear gains give (1 + 3/log2 3) / (3 + 1/log2 3); 2^g - 1 gains would give
    # (1 + 7/log2 3) / (7 + 1/log2 3), a different number
    qrels = {"q": {"a": 3, "b": 1, "c": 0}}
    out = evaluate_rankings(qrels, {"q": ["b", "a", "c"]}, ["nDCG@3"])
    linear = (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3))
    burges = (1 + 7 / math.log2(3)) / (7 + 1 / math.log2(3))
    assert out["q"]["nDCG@3"] == pytest.approx(linear, abs=1e-12)
    assert abs(linear - burges) > 0.05
    assert ndcg_at_k([1, 3, 0], 3, discount="trec") == pytest.approx(linear, abs=1e-12)


def test_ranx_map_at_k_divides_by_number_relevant_like_trec_eval_map_cut():
    # 4 relevant, hits at ranks 1 and 3: AP@2 = (1/1) / R = 0.25 (trec_eval map_cut_2); min(R, K) would give 0.5
    qrels = {"q": {"a": 1, "b": 0, "c": 1, "d": 1, "e": 1, "f": 0}}
    rankings = {"q": ["a", "b", "c", "f", "d", "e"]}
    got = ranx_per_query(qrels, rankings, ["q"], ["map@2-l1", "map@3-l1", "map-l1"])
    rel = _relevant(qrels["q"], 1)
    assert got["map@2-l1"]["q"] == pytest.approx(0.25)
    assert got["map@2-l1"]["q"] == pytest.approx(bf_ap(rankings["q"], rel, 2, "R"))
    assert bf_ap(rankings["q"], rel, 2, "min") == pytest.approx(0.5)
    assert got["map@3-l1"]["q"] == pytest.approx((1 + 2 / 3) / 4)
    assert got["map-l1"]["q"] == pytest.approx(bf_ap(rankings["q"], rel))


@pytest.mark.parametrize("seed", [3, 4])
def test_ranx_map_at_k_random_against_brute_force(seed):
    qrels, rankings = _random_case(seed)
    qids = list(qrels)
    got = ranx_per_query(qrels, rankings, qids, ["map@2-l1", "map@5-l2"])
    for q in qids:
        for name, k, thr in (("map@2-l1", 2, 1), ("map@5-l2", 5, 2)):
            rel = _relevant(qrels[q], thr)
            expected = bf_ap(rankings[q], rel, k, "R") if rel else 0.0
            assert got[name][q] == pytest.approx(expected, abs=1e-12), (q, name)


def test_mrr_and_map_of_a_query_without_relevant_candidate():
    # evaluate_rankings refuses it, or leaves it out with skip_no_relevant; ranx alone scores it 0
    qrels = {"q1": {"a": 0, "b": 0}, "q2": {"a": 0, "b": 2}}
    rankings = {"q1": ["a", "b"], "q2": ["a", "b"]}
    with pytest.raises(ValueError, match="q1"):
        evaluate_rankings(qrels, rankings, ["MRR"])
    out = evaluate_rankings(qrels, rankings, ["MRR", "MAP"], skip_no_relevant=True)
    assert out == {"q2": {"MRR": 0.5, "MAP": 0.5}}
    with pytest.raises(ValueError, match="q2"):  # at threshold 3 neither query has a relevant candidate
        evaluate_rankings(qrels, rankings, ["MRR"], threshold=3)
    raw = ranx_per_query(qrels, rankings, ["q1", "q2"], ["mrr-l1", "map-l1"])
    assert raw["mrr-l1"]["q1"] == 0.0 and raw["map-l1"]["q1"] == 0.0
