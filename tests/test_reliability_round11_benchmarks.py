"""Round 11 of the benchmark checks: the scoring primitives against brute-force definitions, and what the TREC files
carry (every digit of a score, the scorers' own scores in a pool set's run, whole-number grades)."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest


def _brute_force(judged: dict[str, int], ranked: list[str], level: int) -> dict[str, float]:
    """trec_eval's definitions, written out: binary metrics at grade >= `level`, graded nDCG (linear gains, rank i
    divided by log2(i + 1)), bpref over the judged documents, and CSFCube's NDCG%P (rank 1 undiscounted, rank
    i >= 2 divided by log2(i), k = floor(P% of the pool))."""
    rel = [int(judged.get(d, 0) >= level) for d in ranked]
    n_rel = sum(g >= level for g in judged.values())
    n_non = len(judged) - n_rel
    out, hits, ap = {}, 0, 0.0
    for i, r in enumerate(rel, 1):
        hits += r
        ap += hits / i if r else 0.0
    out["map"] = ap / n_rel
    out["mrr"] = next((1.0 / i for i, r in enumerate(rel, 1) if r), 0.0)
    out["r-precision"] = sum(rel[:n_rel]) / n_rel
    for k in (1, 5, 20):
        out[f"p@{k}"] = sum(rel[:k]) / k
        out[f"r@{k}"] = sum(rel[:k]) / n_rel
        gains = [judged.get(d, 0) for d in ranked][:k]
        ideal = sorted(judged.values(), reverse=True)[:k]
        idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, 1))
        out[f"ndcg@{k}"] = sum(g / math.log2(i + 1) for i, g in enumerate(gains, 1)) / idcg if idcg else 0.0
    above, bpref = 0, 0.0
    for d in ranked:
        if d in judged and judged[d] < level:
            above += 1
        elif d in judged:
            bpref += 1.0 - min(above, n_rel) / min(n_non, n_rel) if above else 1.0
    out["bpref"] = bpref / n_rel
    gains = [judged.get(d, 0) for d in ranked]
    k = max(1, 20 * len(gains) // 100)
    disc = [1.0 if i == 1 else math.log2(i) for i in range(1, k + 1)]
    idcg = sum(g / x for g, x in zip(sorted(gains, reverse=True), disc))
    out["ndcg%20"] = sum(g / x for g, x in zip(gains, disc)) / idcg if idcg else 0.0
    return out


def test_pool_metrics_and_trec_run_metrics_match_the_definitions_written_out():
    """`evaluate_rankings` (whole pools, graded, thresholds 1-3) and `runs.per_query` (runs that rank unjudged
    documents and leave judged ones out) against `_brute_force` on random judged pools."""
    from aspire.benchmarks.metrics import evaluate_rankings
    from aspire.benchmarks.runs import per_query

    rng = random.Random(11)
    names = ["map", "mrr", "r-precision", "bpref", "ndcg%20"] + [f"{m}@{k}" for m in ("p", "r", "ndcg") for k in (1, 5, 20)]
    for level in (1, 2, 3):
        qrels = {}
        for q in range(4):
            pool = {f"d{q}_{i}": rng.choice([0, 0, 0, 1, 2, 3]) for i in range(rng.randint(2, 30))}
            pool[f"d{q}_0"], pool[f"d{q}_1"] = level, 0  # a relevant and a non-relevant one
            qrels[f"q{q}"] = pool
        rankings = {q: rng.sample(list(p), len(p)) for q, p in qrels.items()}
        got = evaluate_rankings(qrels, rankings, names, threshold=level)
        for q in qrels:
            want = _brute_force(qrels[q], rankings[q], level)
            assert got[q] == pytest.approx({m: want[m] for m in names}, abs=1e-12)
        run = {}
        for q, pool in qrels.items():  # unjudged documents in, some judged ones left out
            docs = rng.sample([*pool, "x1", "x2", "x3"], rng.randint(1, len(pool) + 3))
            run[q] = [(d, float(len(docs) - i)) for i, d in enumerate(docs)]
        trec = [m for m in names if m not in ("r-precision", "ndcg%20")]
        spelled = [m if m.startswith("ndcg") else f"{m}-l{level}" for m in trec]
        scored = per_query(qrels, run, spelled)
        for q in qrels:
            want = _brute_force(qrels[q], [d for d, _ in run[q]], level)
            assert {m: scored[s][q] for m, s in zip(trec, spelled)} == pytest.approx({m: want[m] for m in trec}, abs=1e-12)


def test_a_run_file_keeps_every_digit_of_its_scores_and_odd_ids(tmp_path):
    """`run_line` wrote six significant digits: 0.12345671 and 0.12345674 both read back 0.123457, and 1234567 and
    1234568 both 1.23457e+06, ties that trec_eval orders by document id and z / minmax fusion reads as equal."""
    from aspire.benchmarks.runs import read_run, write_run

    run = {"q:1": [("d#é", 1234568.0), ("d'2", 1234567.0), ("d\"3", 0.12345674), ("D/4", 0.12345671),
                   ("e5", 0.1 + 0.2), ("e6", -1e-300), ("e7", -1e-300)],  # a real tie keeps the run's order
           "q2": [("x", np.float32(0.1)), ("y", np.float64(-2.5))]}
    write_run(tmp_path / "run.trec", run, "tag")
    back = read_run(tmp_path / "run.trec")
    assert back == {q: [(d, float(s)) for d, s in r] for q, r in run.items()}
    assert [d for d, _ in back["q:1"]] == ["d#é", "d'2", "d\"3", "D/4", "e5", "e6", "e7"]


def _pool_set(tmp_path):
    from aspire.benchmarks.pools import load_pool_set

    anns = {"q1": {"cands": ["a", "b", "c"], "relevance_adju": [2, 0, 1]},
            "q2": {"cands": ["b", "c", "d", "q2"], "relevance_adju": [0, 3, 1, 0]}}
    for facet in ("method", "result"):
        (tmp_path / f"test-pid2anns-toy-{facet}.json").write_text(json.dumps(anns))
    return load_pool_set(tmp_path, "toy", ("method", "result"))


def test_write_trec_writes_the_ranked_files_scores_not_the_ranks(tmp_path, caplog):
    """A pool set's `run.trec` held pool size - rank + 1 for every candidate, so `fuse-runs --fusion z` of two such
    folders fused normalised ranks; it now holds the scores of the ranked files the evaluation wrote (similarities
    as they are, distances negated so they fall down the list), and rank scores where no matching file is there."""
    from aspire.benchmarks.pools import ranked_path, write_ranked, write_trec
    from aspire.benchmarks.runs import read_qrels, read_run

    pool_set = _pool_set(tmp_path)
    out = tmp_path / "out"
    write_ranked(ranked_path(out, "toy", "exp", "method"), {"q1": [("c", 0.91), ("a", 0.905), ("b", -0.2)],
                                                             "q2": [("d", 3.0), ("c", 3.0), ("b", 1.5)]})
    write_ranked(ranked_path(out, "toy", "exp", "result"), {"q1": [("a", 0.5), ("b", 0.75), ("c", 12.0)],  # distances
                                                             "q2": [("b", 1.0), ("d", 2.0), ("c", 2.5)]})
    rankings = {"method": {"q1": ["c", "a", "b"], "q2": ["d", "c", "b"]},
                "result": {"q1": ["a", "b", "c"], "q2": ["b", "d", "c"]}}
    write_trec(out, pool_set, rankings, "exp")
    assert read_run(out / "run.trec") == {
        "q1_method": [("c", 0.91), ("a", 0.905), ("b", -0.2)], "q2_method": [("d", 3.0), ("c", 3.0), ("b", 1.5)],
        "q1_result": [("a", -0.5), ("b", -0.75), ("c", -12.0)], "q2_result": [("b", -1.0), ("d", -2.0), ("c", -2.5)]}
    assert read_qrels(out / "qrels.trec")["q2_result"] == {"b": 0, "c": 3, "d": 1}  # the query left out of its pool

    other = {"method": {"q1": ["a", "c", "b"], "q2": ["d", "c", "b"]}, "result": rankings["result"]}
    with caplog.at_level("WARNING"):
        write_trec(out, pool_set, other, "exp")  # the method file ranks q1 otherwise: that facet gets rank scores
    assert "does not rank query q1" in caplog.text
    back = read_run(out / "run.trec")
    assert back["q1_method"] == [("a", 3.0), ("c", 2.0), ("b", 1.0)] and back["q2_method"] == [("d", 3.0), ("c", 2.0),
                                                                                               ("b", 1.0)]
    assert back["q1_result"] == [("a", -0.5), ("b", -0.75), ("c", -12.0)]
    write_trec(tmp_path / "none", pool_set, rankings, "exp")  # no ranked file: ranks, as before
    assert read_run(tmp_path / "none" / "run.trec")["q1_result"] == [("a", 3.0), ("b", 2.0), ("c", 1.0)]


def test_paired_test_counts_only_the_units_of_the_figure():
    """A reviewer neither prediction names has no pair in any draw (`den` 0): the bootstrap leaves it out (it is no
    unit of the figure, `stats` docstring), but `paired_test` reported it in `n_units` (3 for 2 reviewers)."""
    from aspire.benchmarks.stats import UnitScores, paired_test

    den = np.array([[2.0, 4.0, 0.0], [1.0, 2.0, 0.0]])
    a = UnitScores(["r1", "r2", "r3"], np.array([[1.0, 2.0, 0.0], [0.5, 1.0, 0.0]]), den)
    b = UnitScores(["r1", "r2", "r3"], np.array([[0.0, 1.0, 0.0], [0.5, 0.0, 0.0]]), den)
    result = paired_test(a, b, n_perm=50, n_boot=50)
    assert result["n_units"] == 2
    assert result["delta"] == pytest.approx(np.mean([3 / 6 - 1 / 6, 1.5 / 3 - 0.5 / 3]))


def test_bootstrap_resamples_are_the_figure_of_the_resampled_queries():
    """Each bootstrap weight vector is the two-fold figure (mean of fold means) of the queries it draws, counted as
    often as drawn; a fold drawn empty is left out of that resample's mean."""
    from aspire.benchmarks.stats import UnitScores

    rng = np.random.default_rng(5)
    values = {f"u{i}": float(rng.random()) for i in range(7)}
    folds = {"fold1": ["u0", "u1", "u2"], "fold2": ["u3", "u4", "u5", "u6"]}
    scores = UnitScores.means(values, folds)
    draws = np.random.default_rng(0).integers(0, 7, size=(40, 7))  # the draws `_weights(40, seed=0)` makes
    for weights, drawn in zip(scores._weights(40, 0), draws):
        picked = [f"u{i}" for i in drawn]
        means = [np.mean([values[u] for u in picked if u in f]) for f in folds.values() if set(picked) & set(f)]
        assert scores.value(weights) == pytest.approx(np.mean(means), abs=1e-12)


@pytest.mark.parametrize("grade", [0.5, float("nan"), "2", True])
def test_write_qrels_refuses_a_grade_that_is_not_a_whole_number(tmp_path, grade):
    """`write_qrels` wrote `int(grade)`: 0.5 became 0 (a relevant document judged non-relevant) unsaid."""
    from aspire.benchmarks.runs import read_qrels, write_qrels

    with pytest.raises(ValueError, match="query q1 document d2"):
        write_qrels(tmp_path / "qrels.trec", {"q1": {"d1": 1, "d2": grade}})
    write_qrels(tmp_path / "qrels.trec", {"q1": {"d1": 1, "d2": 2.0, "d3": 0}})
    assert read_qrels(tmp_path / "qrels.trec") == {"q1": {"d1": 1, "d2": 2, "d3": 0}}
    with pytest.raises(ValueError, match="query q1 document d3"):  # a negative grade is refused since round 29
        write_qrels(tmp_path / "qrels.trec", {"q1": {"d1": 1, "d3": -1}})
