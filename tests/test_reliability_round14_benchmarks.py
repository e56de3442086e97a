"""Round 14 of the benchmark checks: TREC-run metrics against trec_eval's definitions on random runs (score ties,
unjudged documents, grades 0-3, relevance levels), and a metric name that bypassed the module's own bpref."""

from __future__ import annotations

import math
import random

import pytest

from aspire.benchmarks.runs import per_query, ranx_name


def _brute(qrels: dict, ranked: list[str], metric: str) -> float:
    """trec_eval's definitions over a ranked list (the run's order): relevant = grade >= N (`-lN`, default 1),
    unjudged = not relevant; `ndcg@K-lN` gives grades below N no gain, the ideal ranking too."""
    base, _, level = metric.partition("-l")
    level = int(level or 1)
    name, _, k = base.partition("@")
    k = int(k) if k else None
    rel = {d for d, g in qrels.items() if g >= level}
    top = ranked[:k] if k else ranked
    if name == "map":
        hits, total = 0, 0.0
        for i, d in enumerate(top, start=1):
            if d in rel:
                hits += 1
                total += hits / i
        return total / len(rel) if rel else 0.0
    if name == "mrr":
        return next((1 / i for i, d in enumerate(top, start=1) if d in rel), 0.0)
    if name == "p":
        return sum(d in rel for d in top) / k
    if name == "r":
        return sum(d in rel for d in top) / len(rel) if rel else 0.0
    if name == "ndcg":
        gain = lambda d: qrels.get(d, 0) if qrels.get(d, 0) >= level else 0  # noqa: E731
        dcg = sum(gain(d) / math.log2(i + 1) for i, d in enumerate(top, start=1))
        ideal = sorted((g for g in qrels.values() if g >= level), reverse=True)[:k]
        idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
        return dcg / idcg if idcg else 0.0
    if name == "bpref":  # trec_eval: (1/R) sum over retrieved relevant r of 1 - |n ranked above r| / min(R, N)
        judged = [d for d in ranked if d in qrels]
        n_rel, n_non = len(rel), sum(g < level for g in qrels.values())
        terms = [1 - min(sum(qrels[n] < level for n in judged[:i]), n_rel) / max(min(n_non, n_rel), 1)
                 for i, d in enumerate(judged) if qrels[d] >= level]
        return sum(terms) / n_rel if n_rel else 0.0
    raise AssertionError(metric)


def test_run_metrics_match_trec_eval_definitions_on_random_runs_with_ties_and_unjudged_documents():
    rng = random.Random(14)
    qrels, run = {}, {}
    for t in range(12):
        docs = [f"d{rng.randint(0, 10 ** rng.randint(1, 4))}_{i}" for i in range(rng.randint(3, 25))]
        judged = rng.sample(docs, rng.randint(1, len(docs)))  # the rest of the run is unjudged
        unranked = [f"x{i}" for i in range(rng.randint(0, 3))]  # judged, not retrieved
        qrels[f"q{t}"] = {d: rng.choice([0, 0, 1, 2, 3]) for d in judged + unranked}
        qrels[f"q{t}"][judged[0]] = max(1, qrels[f"q{t}"][judged[0]])
        scores = [(d, float(rng.randint(0, 4))) for d in docs]  # many ties in score
        run[f"q{t}"] = sorted(scores, key=lambda x: -x[1])  # stable: ties keep this order, as scored
    qrels["q_low"], run["q_low"] = {"a": 1, "b": 0}, [("a", 1.0), ("b", 0.5)]  # nothing at grade >= 2
    metrics = ["map", "map@5", "mrr", "mrr@3", "p@5", "r@5", "ndcg@10", "bpref",
               "map-l2", "mrr-l3", "p@5-l2", "r@5-l3", "ndcg@10-l2", "bpref-l2"]
    got = per_query(qrels, run, metrics)
    for m in metrics:
        for q in qrels:
            ref = _brute(qrels[q], [d for d, _ in run[q]], m)
            assert got[m][q] == pytest.approx(ref, abs=1e-12), (m, q)
    # a query with relevant documents but none at the level scores 0 at that level (trec_eval's -lN), as documented
    assert all(got[m]["q_low"] == 0.0 for m in ("map-l2", "mrr-l3", "p@5-l2", "r@5-l3", "ndcg@10-l2", "bpref-l2"))


def test_bpref_with_a_cut_off_is_refused_not_scored_by_ranx():
    # `bpref@10` passed the name check and went to ranx, not to trec_eval's bpref of this module: NaN for q2 and q3
    # (every judged document relevant), and at level 2 q3's 1.0 read 0.0 beside q1 and q2, which have no relevant one
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"a": 1, "b": 1}, "q3": {"a": 2, "b": 1, "c": 1}}
    run = {"q1": [("b", 2.0), ("a", 1.0)], "q2": [("a", 2.0), ("b", 1.0)], "q3": [("x", 2.0), ("a", 1.0)]}
    for name in ("bpref@10", "BPREF@5-l2"):
        with pytest.raises(ValueError, match=r"unknown metric .*bpref \(no cut-off\)"):
            ranx_name(name)
        with pytest.raises(ValueError, match="unknown metric"):
            per_query(qrels, run, ["map", name])
    assert per_query(qrels, run, ["bpref-l2"])["bpref-l2"] == {"q1": 0.0, "q2": 0.0, "q3": 1.0}
    assert ranx_name("mrr@10") == "mrr@10" and ranx_name("bpref-l2") == "bpref-l2"
