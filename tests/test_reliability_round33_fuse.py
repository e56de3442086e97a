"""Round 33: comparing and fusing evaluation runs (`aspire.evaluate.compare`, `aspire.evaluate.fuse`), checked against
hand computations on tiny results folders: a brute-force paired permutation test and bootstrap, hand z-score and RRF
fusion with ties and missing documents; fuse-runs scores on one set of judgments, a run without a name is no longer
left unchecked, a damaged results.json is refused naming it, and a metric is read at the recorded threshold as
ranx_name reads it."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from aspire.benchmarks.runs import write_qrels, write_run


def _average_precision(judged: dict, ranked: list, level: int) -> float:
    """Hand AP: precision at each relevant (grade >= level) document ranked, over the relevant documents judged."""
    hits, total = 0, 0.0
    for i, doc in enumerate(ranked, start=1):
        if judged.get(doc, 0) >= level:
            hits += 1
            total += hits / i
    n_rel = sum(g >= level for g in judged.values())
    return total / n_rel


def _folder(root: pathlib.Path, name: str, run: dict, qrels: dict, doc: dict | None = None) -> str:
    folder = root / name
    folder.mkdir()
    write_run(folder / "run.trec", run, "t")
    write_qrels(folder / "qrels.trec", qrels)
    (folder / "results.json").write_text(json.dumps({"experiment": name, **(doc or {})}))
    return str(folder)


def _random_run(qrels: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {q: sorted(((d, float(rng.random())) for d in pool), key=lambda x: -x[1]) for q, pool in qrels.items()}


QRELS = {f"q{i}": {f"d{j}": (2 if j == 0 else int(g)) for j, g in enumerate(np.random.default_rng(i).integers(0, 3, 6))}
         for i in range(7)}
QRELS["q7"] = {"d0": 1, "d1": 0, "d2": 1}  # nothing at grade 2: left out at threshold 2


# ---- checks against brute force -----------------------------------------------------------------------------------

@pytest.mark.parametrize("threshold", [None, 2])
def test_compare_matches_a_brute_force_paired_permutation_and_bootstrap(tmp_path, threshold):
    """compare's MAP delta, p-value and interval against a loop written here: hand AP per query (at the recorded
    threshold, the query without a document at it left out), sign flips drawn from default_rng(seed) one uniform a
    query (`< 0.5` swaps), bootstrap draws default_rng(seed).integers over the queries, 2000 resamples."""
    from aspire.evaluate.compare import compare

    doc = {"relevance_threshold": threshold} if threshold else {}
    run_a, run_b = _random_run(QRELS, 1), _random_run(QRELS, 2)
    a, b = _folder(tmp_path, "a", run_a, QRELS, doc), _folder(tmp_path, "b", run_b, QRELS, doc)
    out = compare(a, b, metrics=["MAP"], n_perm=300, seed=7)
    level = threshold or 1
    metric = "MAP-l2" if threshold else "MAP"
    assert list(out) == [metric]
    queries = [q for q in sorted(QRELS) if any(g >= level for g in QRELS[q].values())]
    assert ("q7" in queries) == (threshold is None)
    delta = np.array([_average_precision(QRELS[q], [d for d, _ in run_a[q]], level)
                      - _average_precision(QRELS[q], [d for d, _ in run_b[q]], level) for q in queries])
    rng, hits = np.random.default_rng(7), 1
    for _ in range(300):
        flip = rng.random(len(queries)) < 0.5
        hits += abs(np.where(flip, -delta, delta).mean()) >= abs(delta.mean()) - 1e-12
    draws = np.random.default_rng(7).integers(0, len(queries), size=(2000, len(queries)))
    boot = np.array([delta[d].mean() for d in draws])
    r = out[metric]
    assert r["delta"] == pytest.approx(delta.mean())
    assert r["p_value"] == pytest.approx(hits / 301)
    assert r["ci95"] == pytest.approx(list(np.quantile(boot, [0.025, 0.975])))
    assert r["n_units"] == len(queries)
    assert list(r["per_unit_delta"]) == queries
    assert list(r["per_unit_delta"].values()) == pytest.approx(list(delta))


def test_compare_refuses_runs_over_different_queries_naming_the_run_and_query(tmp_path):
    from aspire.evaluate.compare import compare

    run_a = _random_run(QRELS, 1)
    run_b = {q: r for q, r in _random_run(QRELS, 2).items() if q != "q3"}
    a, b = _folder(tmp_path, "a", run_a, QRELS), _folder(tmp_path, "b", run_b, QRELS)
    with pytest.raises(ValueError, match=r"b: run and qrels disagree: 1 judged queries not ranked \(e\.g\. \['q3'\]\)"):
        compare(a, b, n_perm=5)


def test_fuse_runs_matches_hand_z_and_rrf_fusion_with_ties_and_missing_documents():
    """Run 1 ties b and c and leaves e out; run 2 holds distances (rising) and leaves b and d out. z: population
    z-scores, a missing document adds 0, weights default 1/2; rrf: 1 / (k + position), the run's order for ties,
    weights default 1; fused ties by document id."""
    from aspire.evaluate.fuse import fuse_runs

    r1 = {"q": [("a", 3.0), ("b", 2.0), ("c", 2.0), ("d", 1.0)]}
    r2 = {"q": [("c", 0.1), ("e", 0.5), ("a", 0.9)]}

    def z(values):
        v = np.array(values)
        return (v - v.mean()) / v.std()

    z1, z2 = dict(zip("abcd", z([3, 2, 2, 1]))), dict(zip("cea", z([-0.1, -0.5, -0.9])))
    hand = {d: 0.5 * z1.get(d, 0) + 0.5 * z2.get(d, 0) for d in "abcde"}
    fused = fuse_runs([r1, r2])["q"]
    assert [d for d, _ in fused] == ["c", "a", "b", "e", "d"]  # b and e both 0: by id
    assert dict(fused) == pytest.approx(hand)
    hand = dict.fromkeys("abcde", 0.0)
    for w, run in zip((1, 3), (r1, r2)):
        for i, (d, _) in enumerate(run["q"], start=1):
            hand[d] += w / (2 + i)
    fused = fuse_runs([r1, r2], weights=[1, 3], fusion="rrf", rrf_k=2)["q"]
    assert dict(fused) == pytest.approx(hand)
    assert [d for d, _ in fused] == sorted(hand, key=lambda d: (-hand[d], d))


# ---- fixes ---------------------------------------------------------------------------------------------------------

def test_fuse_scores_and_fuse_runs_refuse_fewer_names_than_runs():
    """`zip(names[1:], runs[1:])` stopped at the names: with one name for two runs, fuse_scores fused runs over
    different candidates without a word, and fuse_runs checked no query set and failed on "3 fusion weights for 1
    lists"."""
    from aspire.evaluate.fuse import fuse_runs, fuse_scores

    with pytest.raises(ValueError, match=r"1 run names for 2 runs"):
        fuse_scores([{"q": {"a": 1.0}}, {"q": {"b": 1.0}}], names=["x"])
    with pytest.raises(ValueError, match=r"1 run names for 3 runs"):
        fuse_runs([{"q": [("a", 1.0)]}, {"p": [("a", 1.0)]}, {"q": [("a", 1.0)]}], names=["x"])
    with pytest.raises(ValueError, match=r"runs x and y rank different queries"):
        fuse_runs([{"q": [("a", 1.0)]}, {"p": [("a", 1.0)]}], names=["x", "y"])


RUN_1 = "q1 Q0 d1 1 0.9 r\nq1 Q0 d2 2 0.5 r\nq2 Q0 d1 1 0.9 r\nq2 Q0 d2 2 0.5 r\n"
RUN_2 = "q1 Q0 d2 1 0.9 r\nq1 Q0 d1 2 0.5 r\nq2 Q0 d2 1 0.9 r\nq2 Q0 d1 2 0.5 r\n"


def _trec_folder(root: pathlib.Path, name: str, run: str, qrels: str, doc: dict | None = None) -> pathlib.Path:
    folder = root / name
    folder.mkdir()
    (folder / "run.trec").write_text(run)
    (folder / "qrels.trec").write_text(qrels)
    (folder / "results.json").write_text(json.dumps(doc or {}))
    return folder


def test_fuse_run_files_refuses_input_folders_judged_by_different_qrels(tmp_path):
    """Scored on the first folder's qrels alone: folders a and b (other judgments) fused to MAP 1.0 in the order a, b
    and 0.5 in the order b, a. Now refused naming both, before anything is written; --qrels picks the judgments."""
    from aspire.evaluate.fuse import fuse_run_files

    a = _trec_folder(tmp_path, "a", RUN_1, "q1 0 d1 1\nq1 0 d2 0\nq2 0 d1 1\n")
    b = _trec_folder(tmp_path, "b", RUN_2, "q1 0 d1 0\nq1 0 d2 1\nq2 0 d2 1\n")
    for inputs in ([a, b], [b, a]):
        with pytest.raises(ValueError, match=rf"{inputs[0]} and {inputs[1]} are judged by different qrels"):
            fuse_run_files(inputs, tmp_path / "out", metrics=["MAP"])
    assert not (tmp_path / "out").exists()
    out = fuse_run_files([a, b], tmp_path / "out", metrics=["MAP"], qrels=a / "qrels.trec")
    assert out["metrics"] == {"MAP": 1.0}  # z of two ties per query: fused by id, d1 first, a's relevant one
    c = _trec_folder(tmp_path, "c", RUN_2, "q1 0 d1 1\nq1 0 d2 0\nq2 0 d1 1\n")  # a's judgments: fused as before
    assert fuse_run_files([a, c], tmp_path / "out2", metrics=["MAP"])["metrics"] == {"MAP": 1.0}


def test_fuse_run_files_scores_on_the_first_input_folder_after_a_run_file(tmp_path):
    """"default: the first folder's" qrels: with a run file first and a folder second, nothing was scored (no
    metrics, no word). Now the folder's qrels score it."""
    from aspire.evaluate.fuse import fuse_run_files

    a = _trec_folder(tmp_path, "a", RUN_1, "q1 0 d1 1\nq1 0 d2 0\nq2 0 d2 1\n")
    (tmp_path / "b.trec").write_text(RUN_2)
    out = fuse_run_files([tmp_path / "b.trec", a], tmp_path / "out", fusion="rrf", metrics=["MRR"])
    # rrf of positions: d1 and d2 tie at 1/61 + 1/62 each query, so d1 first: q1 MRR 1, q2 MRR 1/2
    assert out["metrics"] == {"MRR": pytest.approx(0.75)}
    assert (tmp_path / "out" / "qrels.trec").read_text() == (a / "qrels.trec").read_text()


def test_fuse_run_files_refuses_metrics_with_no_qrels_to_score_them(tmp_path):
    """Run files alone with --metric and no --qrels: the metrics were dropped without a word (no figure)."""
    from aspire.evaluate.fuse import fuse_run_files

    (tmp_path / "a.trec").write_text(RUN_1)
    (tmp_path / "b.trec").write_text(RUN_2)
    with pytest.raises(ValueError, match=r"run files hold no judgments to score --metric on: give --qrels"):
        fuse_run_files([tmp_path / "a.trec", tmp_path / "b.trec"], tmp_path / "out", metrics=["MAP"])
    assert not (tmp_path / "out").exists()
    assert "metrics" not in fuse_run_files([tmp_path / "a.trec", tmp_path / "b.trec"], tmp_path / "out")


@pytest.mark.parametrize("record", [{"benchmark": ["pools"]}, {"dataset": {"name": "x"}, "relevance_threshold": 2}])
def test_a_results_json_whose_benchmark_is_no_name_is_refused_naming_it(tmp_path, record):
    """fuse-runs failed on a bare TypeError (unhashable type: 'list') naming no file; compare read the folder's
    threshold without a word on the benchmark. Both name the file now."""
    from aspire.evaluate.compare import compare
    from aspire.evaluate.fuse import fuse_run_files

    qrels = "q1 0 d1 2\nq1 0 d2 0\nq2 0 d1 2\n"
    a = _trec_folder(tmp_path, "a", RUN_1, qrels)
    bad = _trec_folder(tmp_path, "bad", RUN_2, qrels, record)
    match = r"bad/results\.json: the benchmark it records \(benchmark / dataset\) must be a name"
    with pytest.raises(ValueError, match=match):
        fuse_run_files([a, bad], tmp_path / "out")
    with pytest.raises(ValueError, match=match):
        compare(str(a), str(bad), n_perm=5)


def test_the_recorded_threshold_reads_a_metric_as_ranx_name_does(tmp_path):
    """ranx_name reads `MAP@10-L2` as MAP@10 at level 2 and ` MAP` as MAP; at_threshold gave `MAP@10-L2-l2` (refused:
    unknown metric) and left ` MAP` at level 1 in folders recording threshold 2."""
    from aspire.evaluate.compare import compare
    from aspire.evaluate.fuse import at_threshold

    assert at_threshold("MAP@10-L2", 2) == "MAP@10-L2"
    assert at_threshold("MAP@10-L3", 2) == "MAP@10-L3"
    assert at_threshold(" MAP", 2) == " MAP-l2"
    assert at_threshold("nDCG@10", 2) == "nDCG@10"
    assert at_threshold("MAP", 1) == "MAP"
    doc = {"relevance_threshold": 2}
    a = _folder(tmp_path, "a", _random_run(QRELS, 1), QRELS, doc)
    b = _folder(tmp_path, "b", _random_run(QRELS, 2), QRELS, doc)
    out = compare(a, b, metrics=["MAP@10-L2", " MAP"], n_perm=5)
    assert list(out) == ["MAP@10-L2", " MAP-l2"]
    assert out[" MAP-l2"]["delta"] == pytest.approx(out["MAP@10-L2"]["delta"])  # six documents a query: @10 is all
