"""Round 6 of the reliability work on the evaluation statistics: TREC-run metrics against trec_eval's definitions
worked by hand, the paired test against its exact sign-flip distribution, and the defects found on the way (a
NaN bpref averaged into a figure, a document ranked twice dropped silently, a raw numpy error for an empty
bootstrap, float64 similarities ordered at float32 precision)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from test_evaluate_pools import DotScorer

from aspire.batch import DocBatch
from aspire.benchmarks.runs import mean_scores, per_query
from aspire.benchmarks.stats import UnitScores, paired_test
from aspire.evaluate.rank import rank_pools

# graded judgements; the run ranks an unjudged document first and leaves two judged relevant ones (d, e) out
QRELS = {"q": {"a": 2, "b": 1, "c": 0, "d": 2, "e": 1}}
RUN = {"q": [("x", 4.0), ("b", 3.0), ("c", 2.0), ("a", 1.0)]}


def test_run_metrics_equal_trec_eval_definitions_worked_by_hand():
    names = ["map", "mrr", "p@10", "r@10", "bpref", "ndcg@10", "map-l2", "mrr-l2", "p@10-l2", "r@10-l2", "bpref-l2",
             "ndcg@10-l2"]
    got = {m: v["q"] for m, v in per_query(QRELS, RUN, names).items()}
    log2 = math.log2
    expected = {
        # relevant = grade >= 1: a, b, d, e (R = 4, the unretrieved d and e count in MAP's and recall's denominator)
        "map": (1 / 2 + 2 / 4) / 4, "mrr": 1 / 2, "p@10": 2 / 10, "r@10": 2 / 4,
        "bpref": (1 + 0) / 4,  # b above every judged non-relevant one; a below c, the only one (min(R, N) = 1)
        # graded gains; the ideal ranking holds the judged documents the run left out
        "ndcg@10": (1 / log2(3) + 2 / log2(5)) / (2 + 2 / log2(3) + 1 / log2(4) + 1 / log2(5)),
        # relevant = grade >= 2: a, d (R = 2)
        "map-l2": (1 / 4) / 2, "mrr-l2": 1 / 4, "p@10-l2": 1 / 10, "r@10-l2": 1 / 2,
        "bpref-l2": 0.0,  # a below b and c: min(2, R) / min(R, N) = 1
        "ndcg@10-l2": (2 / log2(5)) / (2 + 2 / log2(3)),  # grades below 2 give no gain, ideal included
    }
    assert got == pytest.approx(expected, abs=1e-12)


def test_per_query_bpref_is_trec_evals_where_ranx_gives_nan_or_zeroes_other_queries():
    # every judged document of q2 and q3 is relevant: ranx's bpref is 0/0, which reached the mean as NaN; trec_eval
    # counts each relevant document ranked as 1 (q3: one of three ranked, the unjudged x skipped)
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"a": 1, "b": 1}, "q3": {"a": 2, "b": 1, "c": 1}}
    run = {"q1": [("b", 2.0), ("a", 1.0)], "q2": [("a", 2.0), ("b", 1.0)], "q3": [("x", 2.0), ("a", 1.0)]}
    values = per_query(qrels, run, ["bpref", "bpref-l2"])
    assert values["bpref"] == {"q1": 0.0, "q2": 1.0, "q3": pytest.approx(1 / 3)}
    assert mean_scores(values)["bpref"] == pytest.approx(4 / 9)
    # at level 2, q1 and q2 have no relevant document (bpref 0); ranx's division by zero on them zeroed q3's 1.0
    assert values["bpref-l2"] == {"q1": 0.0, "q2": 0.0, "q3": 1.0}


def test_per_query_refuses_a_document_ranked_twice():
    # ranx keeps one score a document: the second `b` replaced the first and MAP read 0.5 instead of refusing
    qrels = {"q": {"a": 1, "b": 0, "c": 1}}
    with pytest.raises(ValueError, match=r"1 queries rank a document twice \(e\.g\. query q: \['b'\]\)"):
        per_query(qrels, {"q": [("b", 3.0), ("a", 2.0), ("b", 1.0), ("c", 0.5)]}, ["map"])


def test_bootstrap_refuses_no_sample_as_paired_test_does():
    units = UnitScores.means({"a": 0.2, "b": 0.4})
    for n_boot in (0, -3):  # numpy's "need at least one array to stack" before
        with pytest.raises(ValueError, match=f"at least one bootstrap sample, got n_boot={n_boot}"):
            units.bootstrap(n_boot)


def test_bootstrap_is_seeded_and_degenerate_cases_are_points():
    units = UnitScores.means({f"q{i}": i / 10 for i in range(10)})
    assert units.bootstrap(300, seed=3) == units.bootstrap(300, seed=3) != units.bootstrap(300, seed=4)
    assert UnitScores.means({"only": 0.3}).bootstrap(50) == (0.3, 0.3)
    assert UnitScores.means({f"q{i}": 0.5 for i in range(7)}).bootstrap(50) == (0.5, 0.5)


def test_paired_test_p_value_is_the_exact_sign_flip_one():
    deltas = [0.1, 0.2, -0.05, 0.3, 0.15, -0.1, 0.05]
    a = UnitScores.means({f"q{i}": d for i, d in enumerate(deltas)})
    b = UnitScores.means({f"q{i}": 0.0 for i in range(len(deltas))})
    flips = np.array(list(itertools.product([1, -1], repeat=len(deltas))))
    exact = float(np.mean(np.abs((flips * deltas).mean(axis=1)) >= abs(np.mean(deltas)) - 1e-12))  # 0.171875
    ab, ba = paired_test(a, b, n_perm=20000), paired_test(b, a, n_perm=20000)
    assert ab["p_value"] == pytest.approx(exact, abs=0.01) and ba["p_value"] == pytest.approx(exact, abs=0.01)
    assert ab["delta"] == pytest.approx(np.mean(deltas)) == -ba["delta"]
    assert ab["ci95"] == pytest.approx([-x for x in reversed(ba["ci95"])])


def test_rank_pools_orders_float64_similarities_exactly():
    # 1 + 1e-12 and 1 are one float32: sorted at float32, b's higher similarity ranked below a (pool order)
    emb = torch.tensor([[[1.0]], [[1.0]], [[1.0 + 1e-12]]], dtype=torch.float64)
    batch = DocBatch(emb, torch.ones(3, 1, dtype=torch.bool), ["q", "a", "b"], [["s"]] * 3)
    ranked = rank_pools(batch.index([0]), batch, {"q": ["a", "b"]}, DotScorer())["q"]
    assert [c for c, _ in ranked] == ["b", "a"] and ranked[0][1] > ranked[1][1]
