"""Evaluation analysis code checked against independent references (round 13): the pool metrics against
brute-force definitions, the intervals and paired test against scipy, the two-fold choice against a brute-force
re-implementation, pool ranking against a per-candidate loop, the facet masks against the labels, and the
same-author proximity metrics against the pool metrics."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.benchmarks.metrics import evaluate_rankings
from aspire.benchmarks.stats import UnitScores, paired_test
from aspire.data.papers import Paper
from aspire.evaluate import two_fold
from aspire.evaluate.facets import facet_candidates, facet_queries
from aspire.evaluate.probes import proximity_scores
from aspire.evaluate.rank import get_eval_scorer, rank_pools

# ---- brute-force definitions (binary relevance `rel` and graded `gains`, both in rank order) ----


def _ap(rel):
    hits, total = 0, 0.0
    for i, r in enumerate(rel, 1):
        if r:
            hits += 1
            total += hits / i
    return total / sum(rel)


def _rr(rel):
    return next((1.0 / i for i, r in enumerate(rel, 1) if r), 0.0)


def _bpref(rel):
    R, N = sum(rel), len(rel) - sum(rel)
    if N == 0:
        return None
    seen, total = 0, 0.0
    for r in rel:
        if r:
            total += 1 - min(seen, R) / min(R, N)
        else:
            seen += 1
    return total / R


def _dcg(gains, k, csfcube):
    # CSFCube: rank 1 undiscounted, rank i >= 2 divided by log2(i); trec: rank i divided by log2(i + 1)
    return sum(g / ((1.0 if i == 1 else math.log2(i)) if csfcube else math.log2(i + 1))
               for i, g in enumerate(gains[:k], 1))


def _ndcg(gains, k, csfcube):
    ideal = _dcg(sorted(gains, reverse=True), k, csfcube)
    return _dcg(gains, k, csfcube) / ideal if ideal else 0.0


def _reference(rel, gains):
    R, n = sum(rel), len(rel)
    return {"MAP": _ap(rel), "mrr": _rr(rel), "bpref": _bpref(rel), "r-precision": sum(rel[:R]) / R,
            "P@5": sum(rel[:5]) / 5, "r@5": sum(rel[:5]) / R, "NDCG@7": _ndcg(gains, 7, False),
            "NDCG%20": _ndcg(gains, max(1, int(0.2 * n)), True), "ndcg%50": _ndcg(gains, max(1, n // 2), True)}


def test_pool_metrics_match_brute_force_definitions_at_every_threshold():
    rng = random.Random(13)
    qrels, rankings = {}, {}
    for t in range(12):  # query ids of several widths, in no sorted order; pools of 1 to 40, tied grades
        q = f"q{rng.randint(0, 10 ** rng.randint(1, 5))}_{t}"
        cands = [f"c{rng.randint(0, 10 ** rng.randint(1, 6))}_{i}" for i in range(rng.randint(1, 40))]
        qrels[q] = {c: rng.choice([0, 0, 0, 1, 2, 3]) for c in cands}
        rankings[q] = rng.sample(cands, len(cands))
    qrels["all_relevant"] = {"a": 2, "b": 3}
    rankings["all_relevant"] = ["b", "a"]
    metrics = list(_reference([1], [1]))
    for threshold in (1, 2, 3):
        got = evaluate_rankings(qrels, rankings, metrics, threshold=threshold, skip_no_relevant=True)
        empty = {q for q, g in qrels.items() if not any(v >= threshold for v in g.values())}
        assert set(got) == set(qrels) - empty and list(got) == [q for q in rankings if q not in empty]
        for q, scores in got.items():
            ref = _reference([int(qrels[q][c] >= threshold) for c in rankings[q]], [qrels[q][c] for c in rankings[q]])
            for m in metrics:
                assert (scores[m] is None) == (ref[m] is None), (threshold, q, m)
                if ref[m] is not None:
                    assert scores[m] == pytest.approx(ref[m], abs=1e-12), (threshold, q, m)
    with pytest.raises(ValueError, match="no candidate with grade >= 4"):
        evaluate_rankings(qrels, rankings, ["MAP"], threshold=4)
    q = next(iter(qrels))
    with pytest.raises(ValueError, match=f"query {q}: ranking misses 1 of"):  # a candidate absent from the run
        evaluate_rankings({q: qrels[q]}, {q: rankings[q][:-1]}, ["MAP"], skip_no_relevant=True)


def test_bootstrap_interval_and_paired_test_match_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    x = rng.random(40)
    y = x + rng.normal(0.05, 0.1, 40)
    lo, hi = UnitScores.means({f"q{i}": v for i, v in enumerate(x)}).bootstrap(n_boot=20000)
    ref = scipy_stats.bootstrap((x,), np.mean, n_resamples=20000, method="percentile", random_state=1)
    assert (lo, hi) == pytest.approx(tuple(ref.confidence_interval), abs=0.005)
    a = UnitScores.means({f"q{i}": v for i, v in enumerate(x[:10])})
    b = UnitScores.means({f"q{i}": v for i, v in enumerate(y[:10])})
    test = paired_test(a, b, n_perm=20000)
    exact = scipy_stats.permutation_test((x[:10], y[:10]), lambda s, t, axis: np.mean(s - t, axis=axis),
                                         permutation_type="samples", n_resamples=np.inf, vectorized=True)
    assert test["delta"] == pytest.approx(exact.statistic) and test["p_value"] == pytest.approx(exact.pvalue, abs=0.01)
    # two folds: the figure is the mean of the fold means, not the mean over queries
    groups = {"fold1_test": [f"q{i}" for i in range(15)], "fold2_test": [f"q{i}" for i in range(15, 40)]}
    two = UnitScores.means({f"q{i}": v for i, v in enumerate(x)}, groups)
    assert two.value() == pytest.approx((x[:15].mean() + x[15:].mean()) / 2)


def test_unit_scores_refuse_a_unit_named_twice_in_a_group():
    # once: q1 counted once in the figure (2.0), where a mean over the group's list counts it twice (7/3)
    with pytest.raises(ValueError, match=r"group 'fold1_test' names units more than once: \['q1'\]"):
        UnitScores.means({"q1": 3.0, "q2": 1.0}, {"fold1_test": ["q1", "q2", "q1"]})


def test_unit_scores_name_the_unit_without_a_finite_value():
    for bad in (None, float("nan")):
        with pytest.raises(ValueError, match=r"units \['q2'\] have no finite value"):
            UnitScores.means({"q1": 1.0, "q2": bad, "q3": 0.5})


def _facet_run(rng, keys):
    """A CSFCube run's per-query figures and the results.json figures they average to (fold1_dev = fold2_test)."""
    per_query = {k: {"facet": f, "test_fold": tf, "MAP": round(rng.uniform(0, 100), 4),
                     "NDCG%20": round(rng.uniform(0, 100), 4)} for k, (f, tf) in keys.items()}
    other = {"fold1_test": "fold2_dev", "fold2_test": "fold1_dev"}
    folds = {}
    for g in two_fold.GROUPS:
        for tf in two_fold.TEST_FOLDS:
            rows = [r for r in per_query.values() if r["test_fold"] == tf and g in ("all", r["facet"])]
            means = {m: sum(r[m] for r in rows) / len(rows) for m in two_fold.REPORTED}
            folds.setdefault(g, {})[tf] = folds[g][other[tf]] = means
    return {"folds": folds}, per_query


def test_two_fold_choices_match_a_brute_force_cross_fit():
    rng = random.Random(7)
    keys = {f"p{i}_{f}": (f, two_fold.TEST_FOLDS[i % 2]) for f in two_fold.FACETS for i in range(5)}
    built = {f"run{j}": _facet_run(rng, keys) for j in range(6)}
    candidates = {n: doc for n, (doc, _) in built.items()}
    per_query = {n: pq for n, (_, pq) in built.items()}

    def dev(name, facet, fold):  # foldK_dev holds the queries of the other fold's test half (facet None: all)
        rows = [r for r in per_query[name].values()
                if facet in (None, r["facet"]) and r["test_fold"] != f"{fold}_test"]
        return sum(r["MAP"] for r in rows) / len(rows)

    result = two_fold.select_two_fold(candidates)
    for fold in two_fold.FOLDS:
        assert result["chosen"][fold] == max(candidates, key=lambda n: dev(n, None, fold))
    for g in two_fold.GROUPS:
        for m in two_fold.REPORTED:
            want = sum(candidates[result["chosen"][fold]]["folds"][g][f"{fold}_test"][m] for fold in two_fold.FOLDS) / 2
            assert result["test"][g][m] == pytest.approx(want)

    per_facet = two_fold.select_per_facet(candidates, per_query)
    for fold in two_fold.FOLDS:
        rows = []
        for f in two_fold.FACETS:
            best = max(candidates, key=lambda n: dev(n, f, fold))
            assert per_facet["chosen"][fold][f] == best
            rows += [r for r in per_query[best].values() if r["facet"] == f and r["test_fold"] == f"{fold}_test"]
        # the chosen runs never scored their own test half: each was chosen on the other half only
        assert {id(r) for r in rows}.isdisjoint(
            {id(r) for n in candidates for r in per_query[n].values() if r["test_fold"] != f"{fold}_test"})
    # one candidate: the per-facet choice reproduces its own test figures, facets and `all` alike
    alone = two_fold.select_per_facet({"run0": candidates["run0"]}, {"run0": per_query["run0"]})
    for g in two_fold.GROUPS:
        for m in two_fold.REPORTED:
            want = sum(candidates["run0"]["folds"][g][t][m] for t in two_fold.TEST_FOLDS) / 2
            assert alone["test"][g][m] == pytest.approx(want)


def _batch(ids, gen, S=6, D=8):
    lengths = torch.randint(1, S + 1, (len(ids),), generator=gen)
    mask = torch.arange(S)[None] < lengths[:, None]
    emb = torch.randn(len(ids), S, D, generator=gen) * mask[..., None]
    return DocBatch(emb, mask, list(ids), [[f"s{j}" for j in range(int(n))] for n in lengths],
                    torch.randn(len(ids), D, generator=gen))


@pytest.mark.parametrize("scorer", ["minl2", "abstract", "attention"])
def test_rank_pools_matches_scoring_each_candidate_alone(scorer):
    gen = torch.Generator().manual_seed(0)
    S = 1 if scorer == "abstract" else 6  # the abstract scorer: one vector a paper
    cands, queries = _batch([f"c{i}" for i in range(30)], gen, S), _batch(["qa", "qb"], gen, S)
    pools = {"qb": ["c5", "c3", "c29", "c0", "c12", "c7"], "qa": [f"c{i}" for i in range(29, -1, -2)]}
    score = get_eval_scorer(scorer)
    ranked = rank_pools(queries, cands, pools, score)
    for q, pool in pools.items():
        one = queries.index([queries.paper_ids.index(q)])
        sims = {c: float(score.score(one, cands.index([cands.paper_ids.index(c)]))[0, 0]) for c in pool}
        assert [c for c, _ in ranked[q]] == sorted(pool, key=lambda c: -sims[c])
        assert [s for _, s in ranked[q]] == pytest.approx([sims[c] for c, _ in ranked[q]], abs=1e-5)

    class Tied:
        def score(self, q, c):
            return torch.zeros(len(q), len(c))

    assert [c for c, _ in rank_pools(queries, cands, pools, Tied())["qb"]] == pools["qb"]  # ties: pool order


def test_facet_masks_follow_the_labels_with_and_without_a_title_row():
    labels = {"a": ["background_label", "method_label", "result_label"], "b": ["method_label", "other_label"],
              "c": ["result_label", "objective_label"]}
    papers = {p: Paper(p, f"title {p}", [f"{p}{i}" for i in range(len(ls))], ls) for p, ls in labels.items()}
    to_facet = {"background_label": "background", "objective_label": "background", "method_label": "method",
                "result_label": "result"}
    for title in (False, True):  # with the title as sentence 0 (of no facet) the labels move one row down
        rows = [([papers[p].title] if title else []) + papers[p].sentences for p in labels]
        S = max(map(len, rows))
        mask = torch.tensor([[j < len(r) for j in range(S)] for r in rows])
        batch = DocBatch(torch.randn(3, S, 4), mask, list(labels), rows)
        for facet in ("background", "method", "result"):
            want = torch.tensor([[j >= title and j - title < len(labels[p]) and to_facet.get(labels[p][j - title]) == facet
                                  for j in range(S)] for p in labels])
            narrowed, whole = facet_candidates(batch, papers, facet, to_facet)
            empty = [p for p, row in zip(labels, want) if not row.any()]
            assert whole == empty
            assert torch.equal(narrowed.mask, torch.where(want.any(1, keepdim=True), want, mask))
        assert torch.equal(facet_queries(batch.index([0]), papers, "method", to_facet).mask[0],
                           torch.tensor([j == 1 + title for j in range(S)]))


def test_same_author_proximity_matches_the_pool_metrics():
    rng = np.random.default_rng(0)
    pool = [f"p{i}" for i in range(25)]
    X = rng.normal(size=(25, 6)).astype(np.float32)
    qrels = {}
    for i in range(0, 25, 3):
        judged = {p: int(rng.random() < 0.2) for p in pool if p != pool[i]}
        if any(judged.values()):
            qrels[pool[i]] = judged
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    sims = unit @ unit.T
    rankings = {q: [pool[j] for j in np.argsort(-sims[pool.index(q)], kind="stable") if pool[j] != q] for q in qrels}
    ref = evaluate_rankings(qrels, rankings, ["map", "ndcg@10"], threshold=1)
    got = proximity_scores(X, pool, qrels)
    assert len(got) == len(qrels) >= 3
    for q in qrels:
        assert got[q]["MAP"] == pytest.approx(ref[q]["map"]) and got[q]["nDCG@10"] == pytest.approx(ref[q]["ndcg@10"])
