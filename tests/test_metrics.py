"""Ranking metrics: known answers, a brute-force NDCG, agreement with ranx, and the bad-input rules."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import numpy as np
import pytest

from aspire.benchmarks.metrics import (
    AT_K_METRICS,
    BINARY_METRICS,
    WARMED_METRICS,
    _parse_metric,
    check_rankings,
    compile_metrics,
    evaluate_rankings,
    mean_metrics,
    ndcg_at_k,
    pool_cutoff,
    ranx_per_query,
)

QRELS = {"q": {"a": 3, "b": 0, "c": 2, "d": 0, "e": 1}}
RANKED = {"q": ["a", "b", "c", "d", "e"]}


def brute_ndcg(gains, k):
    """Loop version of the CSFCube formula: rank 1 undiscounted, rank i >= 2 divided by log2(i)."""

    def dcg(g):
        return sum(x if i == 1 else x / math.log2(i) for i, x in enumerate(g[:k], start=1))

    ideal = dcg(sorted(gains, reverse=True))
    return 0.0 if ideal == 0 else dcg(gains) / ideal


def test_ndcg_known_answer_from_published_rank_metrics():
    # rank_metrics.ndcg_at_k([2, 1, 2, 0], 4) (method 0, used by the CSFCube script) = 0.9203032077642922
    assert ndcg_at_k([2, 1, 2, 0], 4) == pytest.approx(0.9203032077642922, abs=1e-12)
    assert ndcg_at_k([3, 2, 3, 0, 0, 1, 2, 2, 3, 0], 1) == pytest.approx(1.0)
    assert ndcg_at_k([0, 0, 0], 2) == 0.0


def test_ndcg_matches_brute_force_loop():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 40)
        gains = [rng.choice([0, 0, 0, 1, 2, 3]) for _ in range(n)]
        k = rng.randint(1, n + 3)
        assert ndcg_at_k(gains, k) == pytest.approx(brute_ndcg(gains, k), abs=1e-12)


def test_trec_discount_matches_ranx_ndcg():
    rng = random.Random(1)
    qrels, run, ours = {}, {}, {}
    for qi in range(12):
        n = rng.randint(3, 30)
        gains = [rng.choice([0, 1, 2, 3]) for _ in range(n)]
        gains[0] = max(gains[0], 1)  # at least one relevant
        cands = [f"c{j}" for j in range(n)]
        rng.shuffle(cands)
        q = f"q{qi}"
        qrels[q] = dict(zip(cands, gains))
        run[q] = cands
        ours[q] = ndcg_at_k([qrels[q][c] for c in cands], 10, discount="trec")
    got = evaluate_rankings(qrels, run, ["ndcg@10"])
    for q in qrels:
        assert got[q]["ndcg@10"] == pytest.approx(ours[q], abs=1e-9)


def test_csfcube_and_trec_discounts_differ():
    assert ndcg_at_k([0, 1, 2], 3, "csfcube") != pytest.approx(ndcg_at_k([0, 1, 2], 3, "trec"))
    with pytest.raises(ValueError, match="discount"):
        ndcg_at_k([1], 1, discount="burges")


def test_pool_cutoff_equals_published_int_rounding():
    for n in range(5, 3000):
        assert pool_cutoff(n, 20) == int(0.2 * n)
    assert pool_cutoff(3, 20) == 1  # never 0


def test_binary_metrics_known_answers():
    got = evaluate_rankings(QRELS, RANKED, ["MAP", "P@2", "R@2", "R-precision", "MRR", "bpref"], threshold=2)["q"]
    # relevant (grade >= 2) at ranks 1 and 3; non-relevant a grade 0 at 2, 0 at 4, grade 1 at 5
    assert got["MAP"] == pytest.approx((1 / 1 + 2 / 3) / 2)
    assert got["P@2"] == pytest.approx(0.5)
    assert got["R@2"] == pytest.approx(0.5)
    assert got["R-precision"] == pytest.approx(0.5)
    assert got["MRR"] == pytest.approx(1.0)
    # bpref: rank 1 has 0 non-relevant above, rank 3 has 1 of min(R=2, N=3) = 2
    assert got["bpref"] == pytest.approx((1.0 + (1 - 1 / 2)) / 2)
    assert list(got) == ["MAP", "P@2", "R@2", "R-precision", "MRR", "bpref"]  # caller's names and order


def test_threshold_changes_binary_metrics_not_ndcg():
    at1 = evaluate_rankings(QRELS, RANKED, ["MAP", "NDCG%60", "ndcg@3"], threshold=1)["q"]
    at2 = evaluate_rankings(QRELS, RANKED, ["MAP", "NDCG%60", "ndcg@3"], threshold=2)["q"]
    assert at1["MAP"] == pytest.approx((1 + 2 / 3 + 3 / 5) / 3)
    assert at1["MAP"] != pytest.approx(at2["MAP"])
    assert at1["NDCG%60"] == pytest.approx(at2["NDCG%60"])
    assert at1["ndcg@3"] == pytest.approx(at2["ndcg@3"])
    # NDCG%60 of a 5-pool = NDCG@3 with the CSFCube discount
    assert at1["NDCG%60"] == pytest.approx(brute_ndcg([3, 0, 2, 0, 1], 3))


def test_order_matters_and_given_order_is_used():
    best = evaluate_rankings(QRELS, {"q": ["a", "c", "e", "b", "d"]}, ["MAP", "NDCG%40"], threshold=2)["q"]
    worst = evaluate_rankings(QRELS, {"q": ["d", "b", "e", "c", "a"]}, ["MAP", "NDCG%40"], threshold=2)["q"]
    assert best["MAP"] == pytest.approx(1.0)
    assert best["NDCG%40"] == pytest.approx(1.0)
    assert worst["MAP"] < 0.5
    assert worst["NDCG%40"] == 0.0


@pytest.mark.parametrize(
    "ranked, message",
    [
        (["a", "b", "c", "d"], "misses 1 of 5"),
        (["a", "b", "c", "d", "e", "zz"], "outside the pool"),
        (["a", "b", "c", "d", "e", "a"], "repeats"),
    ],
)
def test_bad_rankings_raise(ranked, message):
    with pytest.raises(ValueError, match=message):
        evaluate_rankings(QRELS, {"q": ranked}, ["MAP"])


def test_unknown_or_unranked_queries_raise():
    with pytest.raises(ValueError, match="without judgements"):
        check_rankings(QRELS, {**RANKED, "other": ["x"]})
    with pytest.raises(ValueError, match="no ranking"):
        check_rankings({**QRELS, "q2": {"x": 1}}, RANKED)
    with pytest.raises(ValueError, match="negative"):
        check_rankings({"q": {"a": -1}}, {"q": ["a"]})


def test_query_without_relevant_is_refused_or_skipped():
    qrels = {**QRELS, "dead": {"x": 0, "y": 1}}
    rankings = {**RANKED, "dead": ["x", "y"]}
    with pytest.raises(ValueError, match="no candidate with grade >= 2.*dead"):
        evaluate_rankings(qrels, rankings, ["MAP"], threshold=2)
    got = evaluate_rankings(qrels, rankings, ["MAP"], threshold=2, skip_no_relevant=True)
    assert set(got) == {"q"}
    assert set(evaluate_rankings(qrels, rankings, ["MAP"], threshold=1)) == {"q", "dead"}


def test_unknown_metric_lists_valid_ones():
    with pytest.raises(ValueError, match="valid"):
        evaluate_rankings(QRELS, RANKED, ["ndcg@0"])
    with pytest.raises(ValueError, match="valid"):
        evaluate_rankings(QRELS, RANKED, ["recall"])


def test_mean_metrics():
    per_query = {"a": {"m": 0.2}, "b": {"m": 0.6}, "c": {"m": 1.0}}
    assert mean_metrics(per_query, ["a", "b"])["m"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="no scores"):
        mean_metrics(per_query, ["a", "zz"])


def test_install_warm_up_runs_every_metric_kind():
    """`make install` compiles ranx's metrics through `compile_metrics`: its list must hold every kind a user can ask
    for, or that kind's first evaluation pays numba's compile."""
    kinds = {_parse_metric(name)[0] for name in WARMED_METRICS}
    assert kinds == set(BINARY_METRICS) | set(AT_K_METRICS) | {"ndcg%"}
    assert compile_metrics() >= 0.0


COUNT_COMPILES = """
import json, sys
import numba.core.dispatcher as dispatcher

compiled = []  # what numba compiles in this process (a function read back from its disk cache is not compiled)
compile_core = dispatcher._FunctionCompiler._compile_core
def counted(self, args, return_type):
    compiled.append(self.py_func.__module__ + "." + self.py_func.__qualname__)
    return compile_core(self, args, return_type)
dispatcher._FunctionCompiler._compile_core = counted

from aspire.benchmarks.metrics import evaluate_rankings
from aspire.benchmarks.runs import per_query

judged = {"query " + "q" * 30: {"doc " + "x" * 40 + c: g for c, g in {"a": 2, "b": 0, "c": 1}.items()},
          "2": {"d1": 0, "d2": 3}}
got = evaluate_rankings(judged, {q: list(pool) for q, pool in judged.items()}, ["map", "ndcg@2", "NDCG%20", "bpref"])
runs = per_query(judged, {q: [(c, 1.0) for c in pool] for q, pool in judged.items()}, ["map", "P@2"])
print(json.dumps({"compiled": compiled, "got": got, "runs": runs}))
"""


def test_a_fresh_process_evaluates_with_nothing_compiled_but_ranxs_len():
    """After the install's warm-up (`compile_metrics`), a new process's first evaluation, of ids of any length,
    compiles nothing but the small helper of ranx's `len` of a typed list (0.3 s): ranx's `Qrels`/`Run` from dicts
    compiled numba's typed-dictionary methods in every process (13 s of the demo's first metrics)."""
    compile_metrics()
    out = subprocess.run([sys.executable, "-c", COUNT_COMPILES], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert {name.partition(".<locals>")[0] for name in seen["compiled"]} <= {
        "numba.typed.typedlist._length", "numba.typed.listobject.impl_len"}, seen["compiled"]
    q = "query " + "q" * 30
    assert seen["got"][q] == pytest.approx({"map": (1 + 2 / 3) / 2, "ndcg@2": (2 + 0 / np.log2(3)) / (2 + 1 / np.log2(3)),
                                             "NDCG%20": 1.0, "bpref": 0.5})
    assert seen["got"]["2"]["map"] == 0.5 and seen["runs"]["P@2"] == {q: 0.5, "2": 0.5}


def test_evaluation_leaves_numbas_thread_count_as_it_was():
    """ranx sets numba's threads to 1 for fewer than 10 queries and leaves them so; the CPU Sinkhorn's parallel
    kernels then ran on one thread for the rest of the process."""
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here")
    before = numba.get_num_threads()
    numba.set_num_threads(2)
    try:
        evaluate_rankings({"q": {"a": 1, "b": 0}}, {"q": ["b", "a"]}, ["map"])
        assert numba.get_num_threads() == 2
    finally:
        numba.set_num_threads(before)


@pytest.mark.slow  # ranx's dictionaries compile numba's typed-dictionary methods in the process (about 10 s)
def test_ranx_lists_give_ranxs_own_values_from_its_dictionaries():
    """`ranx_per_query` hands ranx its typed lists directly; ranx's documented way in, `Qrels`/`Run.from_dict`, must
    give the same values to the last bit for every metric aspire asks of it, on pools as `evaluate_rankings` passes
    them (permutations) and as `runs.per_query` does (unjudged documents ranked, judged ones unranked, a query
    ranking nothing): a ranx upgrade that read the lists otherwise would fail here."""
    from ranx import Qrels, Run, evaluate

    rng = random.Random(7)
    names = ["map-l1", "map-l2", "mrr-l1", "r-precision-l1", "precision@5-l2", "recall@10-l1", "ndcg@3", "ndcg@20",
             "map@10-l1", "hits", "bpref-l1"]
    for case in range(40):
        qids = [f"q{i}" for i in range(rng.randint(1, 14))]
        qrels, rankings = {}, {}
        for q in qids:
            docs = [f"d{j:02d}" for j in range(rng.randint(2, 40))]  # one width: ranx compiles once a width
            judged = dict.fromkeys(docs[: rng.randint(1, len(docs))], 0)
            for d in judged:
                judged[d] = rng.choice([0, 0, 1, 2, 3])
            judged[rng.choice(list(judged))] = 3  # a relevant one at each level
            qrels[q] = judged
            ranked = [d for d in docs if case % 2 == 0 or rng.random() < 0.8]  # odd cases: runs' shape
            rng.shuffle(ranked)
            rankings[q] = [] if case % 2 and rng.random() < 0.15 else ranked
        if not any(rankings.values()):
            continue  # ranx's Run.from_dict cannot take a run of no document at all
        run = Run.from_dict({q: {d: float(len(rankings[q]) - i) for i, d in enumerate(rankings[q])} for q in qids})
        mine = ranx_per_query(qrels, rankings, qids, names)
        theirs = evaluate(Qrels.from_dict(qrels), run, names, return_mean=False, save_results_in_run=False)
        for name in names:
            expected = dict(zip(run.get_query_ids(), theirs[name]))
            for q in qids:
                assert mine[name][q] == expected[q] or (math.isnan(mine[name][q]) and math.isnan(expected[q])), \
                    (case, name, q, mine[name][q], expected[q])
