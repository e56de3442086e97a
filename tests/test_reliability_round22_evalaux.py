"""Round 22: the evaluation helpers (compare, probes, ensemble) against independent references."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest


def _write_folder(folder: pathlib.Path, qrels: dict, run: dict, results: dict | None) -> str:
    folder.mkdir(parents=True)
    (folder / "qrels.trec").write_text("".join(f"{q} 0 {d} {g}\n" for q, j in qrels.items() for d, g in j.items()))
    (folder / "run.trec").write_text("".join(f"{q} Q0 {d} {i + 1} {10.0 - i} t\n" for q, docs in run.items()
                                             for i, d in enumerate(docs)))
    if results is not None:
        (folder / "results.json").write_text(json.dumps(results))
    return str(folder)


def _count_results_reads(monkeypatch) -> list[str]:
    """The paths of the results.json files read through `Path.read_text` from now on (a list that fills)."""
    reads: list[str] = []
    real = pathlib.Path.read_text

    def counting(self, *args, **kwargs):
        if self.name == "results.json":
            reads.append(str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", counting)
    return reads


def _ap(judged: dict, ranked: list, level: int) -> float:
    """Brute-force average precision at a relevance level: relevant = grade >= level, over every relevant judged."""
    rel = [d for d, g in judged.items() if g >= level]
    hits, total = 0, 0.0
    for i, d in enumerate(ranked, start=1):
        if judged.get(d, 0) >= level:
            hits += 1
            total += hits / i
    return total / len(rel)


QRELS = {
    "q1": {"d1": 2, "d2": 1, "d3": 0, "d4": 2},
    "q2": {"d1": 1, "d2": 0, "d3": 1},          # nothing at grade 2: left out at threshold 2
    "q3": {"d1": 0, "d2": 2, "d3": 2, "d4": 1},
    "q4": {"d1": 2, "d2": 0, "d3": 0},
    "q5": {"d1": 0, "d2": 0, "d3": 2, "d4": 2},
    "q6": {"d1": 2, "d2": 1, "d3": 0},
    "q7": {"d1": 0, "d2": 2, "d3": 1},
}
RUN_A = {"q1": ["d1", "d3", "d4", "d2"], "q2": ["d1", "d2", "d3"], "q3": ["d2", "d1", "d3"], "q4": ["d1", "d2"],
         "q5": ["d3", "d1", "d4"], "q6": ["d3", "d1"], "q7": ["d2", "d1", "d3"]}
RUN_B = {"q1": ["d3", "d2", "d1"], "q2": ["d3", "d1", "d2"], "q3": ["d1", "d4", "d2", "d3"], "q4": ["d2", "d3", "d1"],
         "q5": ["d1", "d2", "d3", "d4"], "q6": ["d1", "d2"], "q7": ["d1", "d3", "d2"]}


def test_compare_reads_each_results_json_once(tmp_path, monkeypatch):
    """`compare` on two ranked results folders read each `results.json` twice (benchmark_of, then
    recorded_protocol): 4 reads for 2 folders; once each now."""
    from aspire.evaluate.compare import compare

    a = _write_folder(tmp_path / "a", QRELS, RUN_A, {"relevance_threshold": 2})
    b = _write_folder(tmp_path / "b", QRELS, RUN_B, {"relevance_threshold": 2})
    reads = _count_results_reads(monkeypatch)
    out = compare(a, b, metrics=["MAP"], n_perm=10)
    assert list(out) == ["MAP-l2"]
    assert sorted(reads) == sorted([str(tmp_path / "a" / "results.json"), str(tmp_path / "b" / "results.json")])


def test_compare_ranked_path_matches_brute_force(tmp_path):
    """Per-query MAP at the recorded threshold (2), the skipped query, the paired bootstrap (same draws,
    recomputed by hand) and the p-value (scipy's exact paired permutation test)."""
    from scipy.stats import permutation_test

    from aspire.evaluate.compare import compare

    a = _write_folder(tmp_path / "a", QRELS, RUN_A, {"relevance_threshold": 2})
    b = _write_folder(tmp_path / "b", QRELS, RUN_B, None)  # records none: takes a's
    out = compare(a, b, metrics=["MAP"], n_perm=20000, seed=3)["MAP-l2"]
    queries = sorted(q for q in QRELS if q != "q2")
    ap_a = np.array([_ap(QRELS[q], RUN_A[q], 2) for q in queries])
    ap_b = np.array([_ap(QRELS[q], RUN_B[q], 2) for q in queries])
    assert sorted(out["per_unit_delta"]) == queries
    np.testing.assert_allclose([out["per_unit_delta"][q] for q in queries], ap_a - ap_b, atol=1e-12)
    assert out["a"] == pytest.approx(ap_a.mean()) and out["b"] == pytest.approx(ap_b.mean())
    assert out["delta"] == pytest.approx(ap_a.mean() - ap_b.mean())
    assert out["n_units"] == len(queries)
    # the bootstrap: resample queries with replacement, delta of the means (numpy's generator, seed 3, as drawn)
    rng = np.random.default_rng(3)
    draws = rng.integers(0, len(queries), size=(2000, len(queries)))
    deltas = [(ap_a[d] - ap_b[d]).mean() for d in draws]
    np.testing.assert_allclose(out["ci95"], np.quantile(deltas, [0.025, 0.975]), atol=1e-12)
    exact = permutation_test((ap_a, ap_b), lambda x, y: np.mean(x - y), permutation_type="samples",
                             n_resamples=np.inf, alternative="two-sided").pvalue
    assert out["p_value"] == pytest.approx(exact, abs=0.015)


def test_compare_probe_results_names_an_unreadable_file(tmp_path):
    """A results.json that is no JSON was a bare JSONDecodeError naming neither run."""
    from aspire.evaluate.probes import compare_probe_results

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text("{not json")
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"format": "venue", "representations": {}}))
    with pytest.raises(ValueError, match=r"a/results\.json"):
        compare_probe_results(tmp_path / "a", b)
    with pytest.raises(ValueError, match="nope"):
        compare_probe_results(b, tmp_path / "nope")


def test_proximity_scores_match_sklearn():
    """MAP and nDCG@10 of each query's pool ranked by cosine: sklearn's average_precision_score and ndcg_score
    (binary gains, no ties in the random features)."""
    from sklearn.metrics import average_precision_score, ndcg_score

    from aspire.evaluate.probes import proximity_scores

    rng = np.random.default_rng(0)
    pool = [f"p{i}" for i in range(30)]
    X = rng.normal(size=(30, 8)) * rng.uniform(0.5, 3.0, size=(30, 1))  # norms differ: cosine, not dot
    qrels = {}
    for qi in (0, 4, 11, 29):
        rel = set(rng.choice([i for i in range(30) if i != qi], size=5, replace=False).tolist())
        qrels[pool[qi]] = {p: int(j in rel) for j, p in enumerate(pool) if j != qi}
    out = proximity_scores(X, pool, qrels)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    for q, judged in qrels.items():
        i = pool.index(q)
        others = [j for j in range(30) if j != i]
        y = np.array([judged[pool[j]] for j in others])
        s = unit[others] @ unit[i]
        assert out[q]["MAP"] == pytest.approx(average_precision_score(y, s))
        assert out[q]["nDCG@10"] == pytest.approx(ndcg_score(y[None], s[None], k=10))


def test_compare_probe_results_same_author_matches_exact_permutation(tmp_path):
    """The same-author paired test over queries: means, and the p-value against scipy's exact paired test."""
    from scipy.stats import permutation_test

    from aspire.evaluate.probes import compare_probe_results

    rng = np.random.default_rng(1)
    qs = [f"q{i}" for i in range(7)]
    va, vb = rng.uniform(size=(2, 7, 2))

    def doc(v):
        per_query = {q: {"MAP": float(v[i, 0]), "nDCG@10": float(v[i, 1])} for i, q in enumerate(qs)}
        return {"format": "same-author", "representations": {"abstract": {"per_query": per_query}}}

    (tmp_path / "a.json").write_text(json.dumps(doc(va)))
    (tmp_path / "b.json").write_text(json.dumps(doc(vb)))
    out = compare_probe_results(tmp_path / "a.json", tmp_path / "b.json", n_perm=20000)
    for k, m in enumerate(("MAP", "nDCG@10")):
        r = out[f"abstract/{m}"]
        assert r["a"] == pytest.approx(va[:, k].mean()) and r["b"] == pytest.approx(vb[:, k].mean())
        exact = permutation_test((va[:, k], vb[:, k]), lambda x, y: np.mean(x - y), permutation_type="samples",
                                 n_resamples=np.inf).pvalue
        assert r["p_value"] == pytest.approx(exact, abs=0.015)


def test_concat_features_cosine_is_mean_of_cosines():
    """`ConcatFeatures`: the cosine of two papers' concatenated vectors is the mean of the models' cosines, and
    each concatenated vector has norm 1."""
    from aspire.evaluate.probes import ConcatFeatures

    rng = np.random.default_rng(2)

    class Part:
        seconds = 0.0

        def __init__(self, d):
            self.x = {rep: rng.normal(size=(5, d)) * 4 for rep in ("abstract", "sentences")}

        def of(self, ids):
            return {rep: v[: len(ids)] for rep, v in self.x.items()}

    parts = [Part(3), Part(6), Part(4)]
    out = ConcatFeatures(parts).of(list("abcde"))
    for rep in ("abstract", "sentences"):
        np.testing.assert_allclose(np.linalg.norm(out[rep], axis=1), 1.0)
        cos = [p.x[rep] / np.linalg.norm(p.x[rep], axis=1, keepdims=True) for p in parts]
        want = np.mean([c @ c.T for c in cos], axis=0)
        np.testing.assert_allclose(out[rep] @ out[rep].T, want, atol=1e-12)


def test_venue_and_year_probe_tie_breaks_take_the_stronger_regularisation(monkeypatch):
    """Equal dev scores: the smaller C (venue) and the larger alpha (year), as the comments say; brute force over
    the grid with sklearn's models."""
    from aspire.evaluate import probes

    rng = np.random.default_rng(4)
    X = {s: rng.normal(size=(n, 4)) for s, n in (("train", 40), ("dev", 20), ("test", 10))}
    y_class = {s: (x[:, 0] > 0).astype(int).astype(str) for s, x in X.items()}
    r = probes.venue_probe(X, y_class, grid=(0.01, 0.1, 1.0, 10.0))
    from sklearn.linear_model import LogisticRegression

    from aspire.benchmarks.venue import macro_f1
    tr, dv, te = probes._standardise(X["train"], X["dev"], X["test"])
    scores = {c: macro_f1(y_class["dev"], LogisticRegression(C=c, max_iter=3000, random_state=0)
                          .fit(tr, y_class["train"]).predict(dv)) for c in (0.01, 0.1, 1.0, 10.0)}
    best = min(c for c in scores if scores[c] == max(scores.values()))
    assert r["chosen"]["C"] == best
    y_year = {s: x[:, 1] * 3 + 2000 for s, x in X.items()}
    fixed = probes.year_probe({s: np.zeros_like(x) for s, x in X.items()}, y_year, grid=(0.1, 10.0, 1.0))
    assert fixed["chosen"]["alpha"] == 10.0  # constant features: every alpha predicts the train mean


def test_load_ensemble_refuses_bad_weights_and_fusion(tmp_path):
    """An ensemble YAML: an unknown fusion lists the valid ones; NaN, infinite or negative weights and an all-zero
    sum are refused naming the member or file, before anything runs."""
    from aspire.evaluate.ensemble import load_ensemble

    def write(fusion="z", w0="0.5", w1="0.5"):
        path = tmp_path / "e.yaml"
        path.write_text(f"fusion: {fusion}\nmembers:\n - {{name: a, model: m, scorer: abstract, weight: {w0}}}\n"
                        f" - {{name: b, model: m2, scorer: abstract, weight: {w1}}}\n")
        return path

    with pytest.raises(ValueError, match="valid: z, minmax, rrf"):
        load_ensemble(write(fusion="sum"))
    for bad in (".nan", ".inf", "-1"):
        with pytest.raises(ValueError, match=r"members\[0\] \(a\): weight"):
            load_ensemble(write(w0=bad))
    with pytest.raises(ValueError, match="sum to 0"):
        load_ensemble(write(w0="0", w1="0"))
    assert [m.weight for m in load_ensemble(write()).members] == [0.5, 0.5]


def test_compare_refuses_runs_over_other_queries_naming_the_run(tmp_path):
    """A run that leaves out a judged query (or ranks one the qrels do not judge) is refused naming it, not
    compared over the queries both hold; two folders recording different thresholds are refused."""
    from aspire.evaluate.compare import compare

    a = _write_folder(tmp_path / "a", QRELS, RUN_A, {"relevance_threshold": 2})
    short = {q: r for q, r in RUN_B.items() if q != "q5"}
    b = _write_folder(tmp_path / "b", QRELS, short, {"relevance_threshold": 2})
    with pytest.raises(ValueError, match=r"b: .*q5"):
        compare(a, b, metrics=["MAP"], n_perm=10)
    c = _write_folder(tmp_path / "c", QRELS, RUN_B, {"relevance_threshold": 1})
    with pytest.raises(ValueError, match="different relevance thresholds"):
        compare(a, c, metrics=["MAP"], n_perm=10)
