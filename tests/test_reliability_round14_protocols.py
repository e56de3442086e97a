"""Round 14, evaluation protocols: the two-fold choice against a hand-written loop (and its ties), context2doc's
ranking and metrics against brute force, the paired comparison against scipy, the SciRepEval probes against
scikit-learn, the suite's columns, and the encoding an ensemble's suite.json records for each member."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest

from aspire.benchmarks.csfcube import FACETS, GROUPS
from aspire.evaluate import two_fold

FOLDS = ("fold1", "fold2")
HALVES = ("fold1_dev", "fold2_dev", "fold1_test", "fold2_test")


# ---- the two-fold protocol ------------------------------------------------------------------------------------

def _random_doc(rng) -> dict:
    return {"folds": {g: {h: {"MAP": float(rng.uniform(0, 100)), "NDCG%20": float(rng.uniform(0, 100))}
                          for h in HALVES} for g in GROUPS}}


def _reference_two_fold(candidates: dict, group: str, metric: str) -> tuple[dict, dict]:
    """The protocol as evaluation_splits.json documents it, by an explicit loop: on each fold, the candidate best
    on that fold's dev half (the first of tied ones) is scored on the same fold's test half; the reported figure
    is the mean of the two folds' test figures."""
    chosen = {}
    for fold in FOLDS:
        best, best_value = None, -math.inf
        for name, doc in candidates.items():
            value = doc["folds"][group][f"{fold}_dev"][metric]
            if value > best_value:
                best, best_value = name, value
        chosen[fold] = best
    test = {}
    for g in GROUPS:
        test[g] = {}
        for m in ("MAP", "NDCG%20"):
            total = 0.0
            for fold in FOLDS:
                total += candidates[chosen[fold]]["folds"][g][f"{fold}_test"][m]
            test[g][m] = total / 2
    return chosen, test


@pytest.mark.parametrize("seed", range(5))
def test_two_fold_choice_matches_a_hand_written_loop(seed):
    rng = np.random.default_rng(seed)
    candidates = {f"run{i}": _random_doc(rng) for i in range(6)}
    for group, metric in (("all", "MAP"), ("method", "NDCG%20")):
        chosen, test = _reference_two_fold(candidates, group, metric)
        got = two_fold.select_two_fold(candidates, group, metric)
        assert got["chosen"] == chosen
        for g in GROUPS:
            assert got["test"][g] == pytest.approx(test[g], abs=1e-12)


def test_a_tie_on_dev_goes_to_the_candidate_given_first_and_is_named(caplog):
    """A tie on a dev figure decides which run's test half is reported (here 10 against 90): the first candidate
    given wins, as the docstring now says, and a warning names the tied runs (the choice was once made unsaid)."""
    rng = np.random.default_rng(0)
    a, b = _random_doc(rng), _random_doc(rng)
    for g in GROUPS:
        for fold in FOLDS:
            b["folds"][g][f"{fold}_dev"] = dict(a["folds"][g][f"{fold}_dev"])
        a["folds"][g]["fold1_test"]["MAP"], b["folds"][g]["fold1_test"]["MAP"] = 10.0, 90.0
    for order in (("a", "b"), ("b", "a")):
        candidates = {name: {"a": a, "b": b}[name] for name in order}
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="aspire.evaluate.two_fold"):
            got = two_fold.select_two_fold(candidates)
        assert got["chosen"] == {"fold1": order[0], "fold2": order[0]}
        assert got["test"]["all"]["MAP"] == pytest.approx(_reference_two_fold(candidates, "all", "MAP")[1]["all"]["MAP"])
        warned = [r.getMessage() for r in caplog.records]
        assert any("tie on fold1_dev all MAP" in w and "a, b" in w.replace("b, a", "a, b") for w in warned), warned


def test_the_cli_breaks_a_tie_by_the_sorted_folder_name(tmp_path):
    rng = np.random.default_rng(1)
    doc = _random_doc(rng)
    for name in ("zz", "aa"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(doc))
    folders = two_fold.unique_folders([str(tmp_path / "zz"), str(tmp_path / "aa")])
    assert two_fold.choose(folders)["chosen"] == {"fold1": str(tmp_path / "aa"), "fold2": str(tmp_path / "aa")}


def test_per_facet_choice_matches_a_hand_written_loop():
    """Two candidates, each query's figures random; each facet's choice on each fold's dev half (its results.json
    figure), its test half read query by query; `all` the mean over every test query of a fold, then of folds."""
    rng = np.random.default_rng(3)
    keys = {(f, fold): [f"{f}{fold}{i}" for i in range(2 + (f == "method"))] for f in FACETS for fold in FOLDS}
    candidates, per_query = {}, {}
    for name in ("x", "y"):
        rows = {}
        for (f, fold), qs in keys.items():
            for q in qs:
                rows[q] = {"facet": f, "test_fold": f"{fold}_test", "MAP": float(rng.uniform(0, 100)),
                           "NDCG%20": float(rng.uniform(0, 100))}
        folds = {}
        for g in GROUPS:
            folds[g] = {}
            for fold in FOLDS:
                test = [r for r in rows.values() if r["test_fold"] == f"{fold}_test" and g in ("all", r["facet"])]
                folds[g][f"{fold}_test"] = {m: sum(r[m] for r in test) / len(test) for m in ("MAP", "NDCG%20")}
                folds[g][f"{fold}_dev"] = {m: float(rng.uniform(0, 100)) for m in ("MAP", "NDCG%20")}
        candidates[name], per_query[name] = {"folds": folds}, rows
    got = two_fold.select_per_facet(candidates, per_query)
    fold_means = {g: [] for g in GROUPS}
    for fold in FOLDS:
        picked = {}
        for f in FACETS:
            best = max(candidates, key=lambda n: candidates[n]["folds"][f][f"{fold}_dev"]["MAP"])
            assert got["chosen"][fold][f] == best
            picked[f] = [per_query[best][q] for q in keys[(f, fold)]]
        for g in GROUPS:
            rows = [r for f in FACETS for r in picked[f] if g in ("all", f)]
            fold_means[g].append({m: sum(r[m] for r in rows) / len(rows) for m in ("MAP", "NDCG%20")})
    for g in GROUPS:
        for m in ("MAP", "NDCG%20"):
            assert got["test"][g][m] == pytest.approx(sum(x[m] for x in fold_means[g]) / 2, abs=1e-12)


# ---- context2doc: ranking and metrics ------------------------------------------------------------------------

def _tiny_c2d():
    from aspire.benchmarks.context2doc import Context2Doc
    from aspire.data.papers import Paper

    cands = [Paper(f"p{j}", f"title {j}", [f"sentence {j}"]) for j in range(6)]
    queries = {"q1": "one", "q2": "two", "q3": "three"}
    qrels = {"q1": {"p2": 1, "p4": 1}, "q2": {"p0": 1}, "q3": {"p5": 1, "p1": 1, "p3": 1}}
    return Context2Doc("test", queries, qrels, cands, {q: "c" for q in queries})


def _brute(ranked: list[str], relevant: set[str]) -> dict[str, float]:
    hits = [d in relevant for d in ranked]
    first = next((i for i, h in enumerate(hits) if h), None)
    precisions = [sum(hits[: i + 1]) / (i + 1) for i, h in enumerate(hits) if h]
    dcg = sum(1 / math.log2(i + 2) for i, h in enumerate(hits[:10]) if h)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(10, len(relevant))))
    return {"MRR": 0.0 if first is None else 1 / (first + 1), "nDCG@10": dcg / idcg,
            "R@100": sum(hits[:100]) / len(relevant), "MAP": sum(precisions) / len(relevant),
            "MAP@20": sum(p for i, p in zip([i for i, h in enumerate(hits) if h], precisions) if i < 20) / len(relevant)}


def test_context2doc_ranking_and_metrics_match_brute_force(tmp_path):
    from aspire.benchmarks.runs import read_run
    from aspire.evaluate.context2doc_run import METRICS, score_and_write, to_run

    bench = _tiny_c2d()
    scores = np.array([[0.1, 0.9, 0.5, 0.5, 0.5, -1.0],   # a three-way tie: candidate order
                       [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],    # all tied: candidate order, p0 first
                       [0.3, 0.2, 0.7, 0.2, 0.1, 0.4]])
    run = to_run(bench, scores, depth=6)
    ids = [p.paper_id for p in bench.candidates]
    for qi, q in enumerate(bench.queries):
        want = sorted(range(len(ids)), key=lambda j: (-scores[qi, j], j))
        assert [d for d, _ in run[q]] == [ids[j] for j in want]
    res = score_and_write(bench, run, tmp_path, "t", {}, n_boot=10)
    assert read_run(tmp_path / "run.trec") == run  # the file holds the ranking scored
    for q in bench.queries:
        want = _brute([d for d, _ in run[q]], set(bench.qrels[q]))
        for m in METRICS:
            assert res["per_query"][m][q] == pytest.approx(want[m], abs=1e-12), (q, m)
    for m in METRICS:
        assert res["metrics"][m] == pytest.approx(np.mean([res["per_query"][m][q] for q in bench.queries]))
    # a shallower run: the relevant documents past the depth count as not found
    shallow = to_run(bench, scores, depth=2)
    res2 = score_and_write(bench, shallow, tmp_path / "s", "t", {}, n_boot=10)
    assert res2["per_query"]["R@100"]["q3"] == pytest.approx(_brute([d for d, _ in shallow["q3"]], {"p5", "p1", "p3"})["R@100"])


def test_context2doc_scores_of_another_shape_or_nan_are_refused():
    from aspire.evaluate.context2doc_run import to_run

    bench = _tiny_c2d()
    with pytest.raises(ValueError, match="expected one row a query"):
        to_run(bench, np.zeros((2, 6)), 6)
    bad = np.zeros((3, 6))
    bad[1, 4] = np.nan
    with pytest.raises(ValueError, match="query q2: NaN scores for 1 of 6 candidates: \\['p4'\\]"):
        to_run(bench, bad, 6)


# ---- the paired comparison against scipy ---------------------------------------------------------------------

def _folder(path, qrels, run):
    from aspire.benchmarks.runs import write_qrels, write_run

    path.mkdir()
    write_qrels(path / "qrels.trec", qrels)
    write_run(path / "run.trec", run, "x")
    return str(path)


def test_paired_comparison_matches_scipys_exact_permutation_test_and_bootstrap(tmp_path):
    from scipy import stats

    from aspire.evaluate.compare import compare

    rng = np.random.default_rng(5)
    docs = [f"d{i}" for i in range(8)]
    qrels = {f"q{i}": {docs[i % 8]: 1, docs[(i + 3) % 8]: 1} for i in range(9)}
    runs = []
    for _ in range(2):
        runs.append({q: [(d, float(s)) for d, s in zip(rng.permutation(docs), np.linspace(1, 0, 8))] for q in qrels})
    a, b = _folder(tmp_path / "a", qrels, runs[0]), _folder(tmp_path / "b", qrels, runs[1])
    result = compare(a, b, metrics=["MRR"], n_perm=20000)["MRR"]
    deltas = np.array([result["per_unit_delta"][q] for q in sorted(qrels)])
    assert result["delta"] == pytest.approx(deltas.mean())
    exact = stats.permutation_test((deltas,), np.mean, permutation_type="samples", n_resamples=np.inf,
                                   alternative="two-sided")
    assert result["p_value"] == pytest.approx(exact.pvalue, abs=0.015)
    boot = stats.bootstrap((deltas,), np.mean, method="percentile", n_resamples=20000, random_state=0)
    lo, hi = result["ci95"]
    assert lo == pytest.approx(boot.confidence_interval.low, abs=0.03)
    assert hi == pytest.approx(boot.confidence_interval.high, abs=0.03)


def test_paired_comparison_refuses_runs_of_other_queries_or_qrels(tmp_path):
    from aspire.evaluate.compare import compare

    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}}
    run = {"q1": [("d1", 1.0), ("d2", 0.5)], "q2": [("d2", 1.0), ("d1", 0.5)]}
    a = _folder(tmp_path / "a", qrels, run)
    b = _folder(tmp_path / "b", qrels, {"q1": run["q1"]})  # a query left out
    with pytest.raises(ValueError, match="b: run and qrels disagree: 1 judged queries not ranked"):
        compare(a, b, metrics=["MRR"], n_perm=10)
    c = _folder(tmp_path / "c", {**qrels, "q3": {"d1": 1}}, {**run, "q3": run["q1"]})  # another query set
    with pytest.raises(ValueError, match="judged by different qrels"):
        compare(a, c, metrics=["MRR"], n_perm=10)


# ---- the SciRepEval probes against scikit-learn ----------------------------------------------------------------

def _splits(rng, n=(40, 20, 20), d=5, classes=3):
    X = {s: rng.normal(size=(k, d)).astype(np.float32) for s, k in zip(("train", "dev", "test"), n)}
    w = rng.normal(size=(d, classes))
    y = {s: np.array([f"v{c}" for c in (X[s] @ w + rng.normal(scale=0.8, size=(len(X[s]), classes))).argmax(1)])
         for s in X}
    return X, y


def test_venue_probe_matches_a_scikit_learn_loop():
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.preprocessing import StandardScaler

    from aspire.benchmarks.venue import macro_f1
    from aspire.evaluate.probes import C_GRID, venue_probe

    X, y = _splits(np.random.default_rng(2))
    got = venue_probe(X, y)
    scaler = StandardScaler().fit(X["train"])
    best, best_f1 = None, -1.0
    for c in sorted(C_GRID):  # ties: the smaller C (stronger regularisation)
        fit = LogisticRegression(C=c, max_iter=3000, random_state=0).fit(scaler.transform(X["train"]), y["train"])
        f1 = f1_score(y["dev"], fit.predict(scaler.transform(X["dev"])), average="macro")
        assert got["dev"][str(c)] == pytest.approx(f1, abs=1e-9)
        if f1 > best_f1 + 1e-12:
            best, best_f1, pred = c, f1, fit.predict(scaler.transform(X["test"]))
    assert got["chosen"]["C"] == best
    assert (got["pred"] == pred).all()
    assert macro_f1(y["test"], got["pred"]) == pytest.approx(f1_score(y["test"], pred, average="macro"))
    # a class predicted but absent from the truth counts (scikit-learn's labels = union), F1 0
    assert macro_f1(np.array(["a", "a", "b"]), np.array(["a", "c", "b"])) == pytest.approx(
        f1_score(["a", "a", "b"], ["a", "c", "b"], average="macro", zero_division=0))


def test_year_probe_matches_a_scikit_learn_loop():
    from scipy.stats import kendalltau
    from sklearn.linear_model import Ridge
    from sklearn.metrics import mean_squared_error
    from sklearn.preprocessing import StandardScaler

    from aspire.benchmarks.year import kendall_tau, rmse
    from aspire.evaluate.probes import ALPHA_GRID, year_probe

    rng = np.random.default_rng(4)
    X = {s: rng.normal(size=(k, 6)) for s, k in (("train", 50), ("dev", 20), ("test", 20))}
    w = rng.normal(size=6)
    y = {s: np.round(2000 + 3 * X[s] @ w + rng.normal(size=len(X[s]))) for s in X}
    got = year_probe(X, y)
    scaler = StandardScaler().fit(X["train"])
    dev = {}
    for a in ALPHA_GRID:
        fit = Ridge(alpha=a).fit(scaler.transform(X["train"]), y["train"])
        dev[a] = (math.sqrt(mean_squared_error(y["dev"], fit.predict(scaler.transform(X["dev"])))), fit)
        assert got["dev"][str(a)] == pytest.approx(dev[a][0], rel=1e-6)
    best = min(ALPHA_GRID, key=lambda a: (dev[a][0], -a))
    assert got["chosen"]["alpha"] == best
    want = dev[best][1].predict(scaler.transform(X["test"]))
    assert got["pred"] == pytest.approx(want, rel=1e-6)
    assert kendall_tau(y["test"], got["pred"]) == pytest.approx(kendalltau(y["test"], want).statistic, abs=1e-9)
    assert rmse(y["test"], got["pred"]) == pytest.approx(math.sqrt(mean_squared_error(y["test"], want)), rel=1e-6)


def test_same_author_proximity_matches_scikit_learn():
    from sklearn.metrics import average_precision_score, ndcg_score

    from aspire.evaluate.probes import proximity_scores

    rng = np.random.default_rng(6)
    pool = [f"p{i}" for i in range(15)]
    X = rng.normal(size=(15, 4))
    qrels = {}
    for q in ("p0", "p3", "p9"):
        rel = rng.random(15) < 0.3
        rel[[pool.index(q), (pool.index(q) + 1) % 15]] = [False, True]
        qrels[q] = {p: int(r) for p, r in zip(pool, rel) if p != q}
    got = proximity_scores(X, pool, qrels)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    for q, judged in qrels.items():
        i = pool.index(q)
        others = [j for j in range(15) if j != i]
        sims = unit[others] @ unit[i]
        truth = np.array([judged[pool[j]] for j in others])
        assert got[q]["MAP"] == pytest.approx(average_precision_score(truth, sims))
        assert got[q]["nDCG@10"] == pytest.approx(ndcg_score(truth[None], sims[None], k=10))


# ---- the suite's columns -------------------------------------------------------------------------------------

def test_each_suite_row_names_a_figure_its_benchmark_writes():
    """The suite's table reads `bench.metrics` from what each runner writes: context2doc's METRICS, the probes'
    METRICS[format]; a registered metric a runner does not write would be a KeyError after the run."""
    from aspire.benchmarks import BENCHMARKS
    from aspire.evaluate import context2doc_run, probes
    from aspire.evaluate.suite import RUNNERS

    assert set(RUNNERS) == set(BENCHMARKS)
    assert set(BENCHMARKS["context2doc"].metrics) <= set(context2doc_run.METRICS)
    for name in probes.FORMATS:
        assert BENCHMARKS[name].metrics == probes.METRICS[name]


def test_probe_suite_rows_carry_each_representations_figures():
    from aspire.benchmarks import BENCHMARKS
    from aspire.evaluate.probes import _suite_rows

    res = {"sizes": {"test": 7}, "representations": {
        rep: {"chosen": {"alpha": 10.0}, "metrics": {"Kendall tau": 0.1 + k, "RMSE (years)": 2.0 + k},
              "ci95": {"Kendall tau": [0.0, 0.2], "RMSE (years)": [1.0, 3.0]}}
        for k, rep in enumerate(("abstract", "sentences"))}}
    rows = _suite_rows(BENCHMARKS["year"], res)
    assert [(r["benchmark"], r["metric"], r["value"], r["n"]) for r in rows] == [
        ("ACL year regression (abstract)", "Kendall tau", 0.1, 7),
        ("ACL year regression (abstract)", "RMSE (years)", 2.0, 7),
        ("ACL year regression (sentences)", "Kendall tau", 1.1, 7),
        ("ACL year regression (sentences)", "RMSE (years)", 3.0, 7)]


# ---- the encoding an ensemble's suite.json records -------------------------------------------------------------

@pytest.mark.parametrize("members, want", [
    ("[{name: a, model: m, scorer: abstract}, {name: b, model: bm25}]", ["abstract", None]),
    ("[{name: a, model: m, scorer: abstract, encoding: pass}, {name: b, model: m, scorer: minl2}]",
     ["pass", "contextual"]),
    ("[{name: a, model: m, scorer: ot, encoding: independent}, {name: b, model: m, scorer: abstract}]",
     ["independent", "abstract"]),
])
def test_ensemble_record_names_the_encoding_each_member_runs_with(tmp_path, members, want):
    from aspire.evaluate.ensemble import as_run, load_ensemble

    path = tmp_path / "e.yaml"
    path.write_text(f"members: {members}\n")
    config = load_ensemble(path)
    given = [m.encoding for m in config.members]
    assert [m["encoding"] for m in as_run(config)["members"]] == want
    assert [m.encoding for m in config.members] == given  # the config itself is left as given


def test_ensemble_suite_json_labels_an_abstract_member_abstract(tmp_path, tiny_model_dir, monkeypatch):
    """suite.json recorded `encoding: contextual` for a member whose abstract scorer encoded whole abstracts (and
    for a bm25 member, which encodes nothing); the member's own results.json says `abstract`."""
    from test_benchmarks import tiny_context2doc

    import aspire.benchmarks.context2doc as c2d
    from aspire.evaluate.ensemble import run_ensemble_suite

    bench = tiny_context2doc(tmp_path)
    monkeypatch.setattr(c2d, "load_context2doc", lambda data, split: bench)
    path = tmp_path / "e.yaml"
    path.write_text(f"members: [{{name: whole, model: {tiny_model_dir}, scorer: abstract}}, {{name: lex, model: bm25}}]\n")
    suite = run_ensemble_suite(path, tmp_path / "out", tmp_path, benchmarks=["context2doc"], batch_size=4)
    written = json.loads((tmp_path / "out" / "suite.json").read_text())
    member = json.loads((tmp_path / "out" / "members" / "whole" / "context2doc" / "results.json").read_text())
    assert member["encoding"] == "abstract"
    assert [m["encoding"] for m in written["ensemble"]["members"]] == ["abstract", None]
    assert [r["metric"] for r in suite["rows"]] == ["MRR", "nDCG@10", "R@100", "MAP"]


# ---- probe comparisons name the runs that do not pair ---------------------------------------------------------

def _probe_doc(fmt: str, queries=("q1", "q2", "q3")) -> dict:
    per_query = {q: {"MAP": 0.1 * i, "nDCG@10": 0.2 * i} for i, q in enumerate(queries)}
    return {"format": fmt, "representations": {"abstract": {"per_query": per_query}}}


def test_same_author_comparison_of_other_queries_names_the_runs_and_queries(tmp_path):
    from aspire.evaluate.probes import compare_probe_results

    (tmp_path / "a.json").write_text(json.dumps(_probe_doc("same-author")))
    (tmp_path / "b.json").write_text(json.dumps(_probe_doc("same-author", ("q1", "q2", "q4"))))
    with pytest.raises(ValueError, match=r"a.json and .*b.json score different same-author queries \(abstract\): "
                                         r"2 in one only, e.g. \['q3', 'q4'\]"):
        compare_probe_results(tmp_path / "a.json", tmp_path / "b.json", n_perm=5)
    same = compare_probe_results(tmp_path / "a.json", tmp_path / "a.json", n_perm=5)
    assert same["abstract/MAP"]["delta"] == 0.0 and same["abstract/MAP"]["p_value"] == 1.0


def test_probe_comparison_with_another_benchmarks_results_names_the_file(tmp_path):
    from aspire.evaluate.probes import compare_probe_results

    (tmp_path / "a.json").write_text(json.dumps(_probe_doc("same-author")))
    (tmp_path / "c.json").write_text(json.dumps({"benchmark": "context2doc-test", "metrics": {"MRR": 0.3}}))
    with pytest.raises(ValueError, match=r"c.json: not the results of a SciRepEval format"):
        compare_probe_results(tmp_path / "a.json", tmp_path / "c.json", n_perm=5)
