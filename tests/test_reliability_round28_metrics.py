"""Round 28: ranking metrics (`aspire.benchmarks.metrics`, `aspire.benchmarks.runs`) against textbook loops.

The references below are written from the definitions (trec_eval's for bpref), not from the code under test.
"""

from __future__ import annotations

import math
import random

import pytest

from aspire.benchmarks.metrics import evaluate_rankings
from aspire.benchmarks.runs import per_query, ranx_name, read_run


def _ap(grades, n_rel, level, k=None):
    total, hits = 0.0, 0
    for i, g in enumerate(grades[:k] if k else grades, start=1):
        if g >= level:
            hits += 1
            total += hits / i
    return total / n_rel if n_rel else 0.0


def _rr(grades, level, k=None):
    for i, g in enumerate(grades[:k] if k else grades, start=1):
        if g >= level:
            return 1.0 / i
    return 0.0


def _ndcg(grades, judged_grades, k, level=1):
    gain = [g if g >= level else 0 for g in grades]
    ideal = sorted((g if g >= level else 0 for g in judged_grades), reverse=True)
    dcg = sum(g / math.log2(i + 1) for i, g in enumerate(gain[:k], start=1))
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal[:k], start=1))
    return dcg / idcg if idcg else 0.0


def _bpref(judged, ranked, level):
    n_rel = sum(g >= level for g in judged.values())
    n_nonrel = len(judged) - n_rel
    total, nonrel_above = 0.0, 0
    for doc in ranked:
        if doc not in judged:
            continue
        if judged[doc] >= level:
            total += (1.0 - min(nonrel_above, n_rel) / min(n_nonrel, n_rel)) if nonrel_above else 1.0
        else:
            nonrel_above += 1
    return total / n_rel if n_rel else 0.0


def test_evaluate_rankings_matches_textbook_definitions():
    rng = random.Random(28)
    metrics = ["MAP", "mrr", "bpref", "r-precision", "p@3", "r@3", "ndcg@3", "P@20", "ndcg@20"]
    for _ in range(8):
        qrels, rankings = {}, {}
        for qi in range(rng.randint(1, 5)):
            pool = {f"c{qi}_{j}": rng.choice([0, 0, 1, 2, 3]) for j in range(rng.randint(1, 12))}
            pool[next(iter(pool))] = max(pool[next(iter(pool))], 2)  # at least one at grade >= 2
            ranked = list(pool)
            rng.shuffle(ranked)
            qrels[f"q{rng.randint(0, 10**6)}"] = pool
            rankings[list(qrels)[-1]] = ranked
        threshold = rng.choice([1, 2])
        scores = evaluate_rankings(qrels, rankings, metrics, threshold=threshold)
        assert list(scores) == list(rankings)
        for q, got in scores.items():
            grades = [qrels[q][c] for c in rankings[q]]
            n_rel = sum(g >= threshold for g in grades)
            want = {"MAP": _ap(grades, n_rel, threshold), "mrr": _rr(grades, threshold),
                    "bpref": _bpref(qrels[q], rankings[q], threshold) if n_rel < len(grades) else None,
                    "r-precision": sum(g >= threshold for g in grades[:n_rel]) / n_rel,
                    "p@3": sum(g >= threshold for g in grades[:3]) / 3,
                    "r@3": sum(g >= threshold for g in grades[:3]) / n_rel,
                    "ndcg@3": _ndcg(grades, grades, 3), "P@20": sum(g >= threshold for g in grades[:20]) / 20,
                    "ndcg@20": _ndcg(grades, grades, 20)}
            for m in metrics:
                if want[m] is None:
                    assert got[m] is None, (q, m)
                else:
                    assert got[m] == pytest.approx(want[m], abs=1e-12), (q, m, grades)


def test_per_query_matches_textbook_definitions_with_unjudged_and_short_runs():
    rng = random.Random(280)
    metrics = ["map", "MAP@5", "mrr", "mrr@2", "bpref", "bpref-l2", "p@5", "r@5", "recall@40", "nDCG@5",
               "ndcg@5-l2", "p@3-l2", "map-l3"]
    for _ in range(8):
        qrels, run = {}, {}
        for qi in range(rng.randint(1, 5)):
            judged = {f"d{j}": rng.choice([0, 0, 1, 2, 3]) for j in rng.sample(range(30), rng.randint(1, 10))}
            judged[next(iter(judged))] = max(judged[next(iter(judged))], 1)
            docs = rng.sample([f"d{j}" for j in range(30)], rng.randint(1, 15))  # unjudged ones too
            qrels[f"q{qi}"] = judged
            run[f"q{qi}"] = [(d, 1.0 / (i + 1)) for i, d in enumerate(docs)]
        got = per_query(qrels, run, metrics)
        for q, judged in qrels.items():
            ranked = [d for d, _ in run[q]]
            grades = [judged.get(d, 0) for d in ranked]
            n_rel = {lv: sum(g >= lv for g in judged.values()) for lv in (1, 2, 3)}
            want = {"map": _ap(grades, n_rel[1], 1), "MAP@5": _ap(grades, n_rel[1], 1, 5), "mrr": _rr(grades, 1),
                    "mrr@2": _rr(grades, 1, 2), "bpref": _bpref(judged, ranked, 1),
                    "bpref-l2": _bpref(judged, ranked, 2), "p@5": sum(g >= 1 for g in grades[:5]) / 5,
                    "r@5": sum(g >= 1 for g in grades[:5]) / n_rel[1],
                    "recall@40": sum(g >= 1 for g in grades) / n_rel[1],
                    "nDCG@5": _ndcg(grades, list(judged.values()), 5),
                    "ndcg@5-l2": _ndcg(grades, list(judged.values()), 5, level=2),
                    "p@3-l2": sum(g >= 2 for g in grades[:3]) / 3, "map-l3": _ap(grades, n_rel[3], 3)}
            for m in metrics:
                assert got[m][q] == pytest.approx(want[m], abs=1e-12), (q, m, grades)


def test_per_query_scores_a_run_that_ranks_nothing_as_zero():
    # every query of the run ranks no document: ranx's Run.from_dict failed with "max() arg is an empty sequence"
    qrels = {"a": {"x": 1, "y": 0}, "b": {"z": 2}}
    got = per_query(qrels, {"a": [], "b": []}, ["map", "mrr", "p@2", "r@2", "ndcg@2", "bpref"])
    assert got == {m: {"a": 0.0, "b": 0.0} for m in ["map", "mrr", "p@2", "r@2", "ndcg@2", "bpref"]}
    # the same as ranx gives an empty ranking next to a non-empty one
    mixed = per_query(qrels, {"a": [], "b": [("z", 1.0)]}, ["map", "p@2"])
    assert mixed == {"map": {"a": 0.0, "b": 1.0}, "p@2": {"a": 0.0, "b": 0.5}}


def test_per_query_refuses_empty_qrels_clearly():
    with pytest.raises(ValueError, match="no judged query"):
        per_query({}, {}, ["map"])


@pytest.mark.parametrize("metric", ["map-l0", "ndcg@5-l0", "bpref-l0", "P@3-l00"])
def test_relevance_level_zero_is_refused(metric):
    # map-l0 counted judged grade-0 documents as relevant: a ranking of one non-relevant document scored MAP 1.0
    with pytest.raises(ValueError, match="N >= 1"):
        ranx_name(metric)
    assert ranx_name("map-l1") == "map-l1" and ranx_name("ndcg@5-l2") == "ndcg@5-l2"


def test_read_run_orders_ties_and_names_a_malformed_line(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text("q1 Q0 d 2 0.9 t\nq1 Q0 b 1 0.5 t\nq1 Q0 a 1 0.5 t\nq1 Q0 c 1 0.7 t\n", encoding="utf-8")
    assert [d for d, _ in read_run(path)["q1"]] == ["c", "a", "b", "d"]  # rank, falling score, document id
    path.write_text("q1 Q0 a 1 0.5 t\nq1 Q0 b 2 0.4\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"run\.txt:2:"):
        read_run(path)
