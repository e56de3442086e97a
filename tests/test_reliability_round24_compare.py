"""Round 24: `aspire evaluate compare` and the results readers (`aspire.evaluate.compare`, `aspire.evaluate.fuse`):
each results.json read once, probe results folders compared, one reader of results.json, runs scored on other
judgments refused."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from tests.test_reliability_round22_evalaux import _count_results_reads

HEADER = "query,paper_id,facet,test_fold,pool_size,title,MAP,NDCG%20,P@20,R@20,R-precision,NDCG@20"


def _csfcube_folder(folder: pathlib.Path, judged_set: str, values) -> str:
    """A CSFCube results folder: its results.json (benchmark, judged set) and a per-query CSV of four queries."""
    folder.mkdir(parents=True)
    facets, folds = ("background", "method", "result", "method"), ("fold1_test", "fold2_test", "fold1_test",
                                                                  "fold2_test")
    rows = [HEADER] + [f"q{i}_{f},q{i},{f},{fold},5,t,{v},{v + 5},0,0,0,0"
                       for i, (f, fold, v) in enumerate(zip(facets, folds, values))]
    (folder / "test-pid2pool-csfcube-x-perq.csv").write_text("\n".join(rows) + "\n")
    (folder / "results.json").write_text(json.dumps({"benchmark": "csfcube", "judged_set": judged_set}))
    return str(folder)


# ---- 1. the compare command reads each results.json once ----------------------------------------------------------

def test_compare_command_with_data_reads_each_results_json_once(tmp_path, monkeypatch, capsys):
    """`compare --data` read a results folder's results.json in `_compare` (benchmark_of) and again in `compare`: 2
    reads for one folder; once now. The reviewers hook is a stub here, so only the command's own reads count."""
    from aspire.cli.evaluate import main
    from aspire.evaluate import suite

    calls = []

    def hook(a, b, metrics, data, n_perm, seed, docs=None):
        calls.append((a, b, data, n_perm))
        return {"loss": {"a": 0.3, "b": 0.2, "delta": 0.1, "ci95": [0.0, 0.2], "p_value": 0.5}}

    monkeypatch.setitem(suite.RUNNERS, "reviewers", suite.Runner(lambda *a: ([], None), lambda *a: [], hook))
    run = tmp_path / "rev"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"benchmark": "reviewer-matching", "experiment": "x"}))
    (tmp_path / "published").mkdir()
    (tmp_path / "data").mkdir()
    reads = _count_results_reads(monkeypatch)
    status = main(["compare", str(run), f"{tmp_path / 'published'}:specter", "--data", str(tmp_path / "data"),
                   "--permutations", "7"])
    assert status == 0
    assert calls == [(str(run), f"{tmp_path / 'published'}:specter", str(tmp_path / "data"), 7)]
    assert reads == [str(run / "results.json")]
    assert "loss" in capsys.readouterr().out


# ---- 2. probe results folders --------------------------------------------------------------------------------------

def _venue_folder(folder: pathlib.Path, y, preds: dict) -> str:
    folder.mkdir(parents=True)
    reps = {rep: {"metrics": {}, "ci95": {}, "test_ids": [f"p{i}" for i in range(len(y))], "y": list(y),
                  "pred": list(pred)} for rep, pred in preds.items()}
    (folder / "results.json").write_text(json.dumps({"format": "venue", "representations": reps}))
    return str(folder)


def _same_author_folder(folder: pathlib.Path, per_query: dict) -> str:
    folder.mkdir(parents=True)
    reps = {"abstract": {"metrics": {}, "ci95": {}, "per_query": per_query}}
    (folder / "results.json").write_text(json.dumps({"format": "same-author", "representations": reps}))
    return str(folder)


Y = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]
PRED_A = [0, 1, 2, 0, 1, 2, 0, 1, 0, 0, 2, 2]
PRED_B = [0, 2, 2, 1, 1, 0, 0, 1, 0, 2, 2, 2]


def test_compare_two_venue_probe_folders_matches_sklearn(tmp_path):
    """Two venue results folders were "run file not found" (read as TREC runs); now compared per representation
    and metric: A and B are sklearn's macro F1 of each run's test predictions, the delta their difference."""
    from sklearn.metrics import f1_score

    from aspire.evaluate.compare import compare

    a = _venue_folder(tmp_path / "a", Y, {"abstract": PRED_A, "sentences": PRED_B})
    b = _venue_folder(tmp_path / "b", Y, {"abstract": PRED_B, "sentences": PRED_B})
    out = compare(a, b, n_perm=50)
    assert list(out) == ["abstract/macro-F1", "sentences/macro-F1"]
    fa, fb = f1_score(Y, PRED_A, average="macro"), f1_score(Y, PRED_B, average="macro")
    assert out["abstract/macro-F1"]["a"] == pytest.approx(fa) and out["abstract/macro-F1"]["b"] == pytest.approx(fb)
    assert out["abstract/macro-F1"]["delta"] == pytest.approx(fa - fb) and fa != fb
    assert out["sentences/macro-F1"]["delta"] == 0.0 and out["sentences/macro-F1"]["p_value"] == 1.0
    assert out["abstract/macro-F1"]["ci95"][0] <= fa - fb <= out["abstract/macro-F1"]["ci95"][1]


def test_compare_same_author_probe_folders_by_metric(tmp_path):
    """Same-author folders, `metrics` picking one of the format's metrics: A and B are the mean per-query MAP."""
    from aspire.evaluate.compare import compare

    rng = np.random.default_rng(0)
    qa = {f"q{i}": {"MAP": float(rng.random()), "nDCG@10": float(rng.random())} for i in range(8)}
    qb = {f"q{i}": {"MAP": float(rng.random()), "nDCG@10": float(rng.random())} for i in range(8)}
    a, b = _same_author_folder(tmp_path / "a", qa), _same_author_folder(tmp_path / "b", qb)
    out = compare(a, b, metrics=["MAP"], n_perm=50)
    assert list(out) == ["abstract/MAP"]
    assert out["abstract/MAP"]["a"] == pytest.approx(np.mean([v["MAP"] for v in qa.values()]))
    assert out["abstract/MAP"]["b"] == pytest.approx(np.mean([v["MAP"] for v in qb.values()]))
    with pytest.raises(ValueError, match=r"same-author results are compared on MAP, nDCG@10, not 'MRR'"):
        compare(a, b, metrics=["MRR"], n_perm=5)


def test_compare_refuses_a_probe_folder_beside_another_kind(tmp_path):
    """A probe folder beside a ranked run or another format is no pair; --qrels does not apply to probes."""
    from aspire.evaluate.compare import compare

    a = _venue_folder(tmp_path / "a", Y, {"abstract": PRED_A})
    qrels = tmp_path / "q.trec"
    qrels.write_text("q1 0 d1 1\n")
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 d1 1 0.9 r\n")
    with pytest.raises(ValueError, match=r"a \(venue\) and .*r\.trec \(a ranked run\) are not runs of one benchmark"):
        compare(a, str(run), str(qrels), n_perm=5)
    sa = _same_author_folder(tmp_path / "sa", {"q1": {"MAP": 0.5, "nDCG@10": 0.5}})
    with pytest.raises(ValueError, match=r"\(venue\) and .*sa \(same-author\) are not runs of one benchmark"):
        compare(a, sa, n_perm=5)
    b = _venue_folder(tmp_path / "b", Y, {"abstract": PRED_B})
    with pytest.raises(ValueError, match=r"venue runs, judged by the benchmark's own data: --qrels does not apply"):
        compare(a, b, str(qrels), n_perm=5)


def test_compare_command_prints_probe_folders(tmp_path, capsys):
    from aspire.cli.evaluate import main

    a = _venue_folder(tmp_path / "a", Y, {"abstract": PRED_A})
    b = _venue_folder(tmp_path / "b", Y, {"abstract": PRED_B})
    assert main(["compare", a, b, "--permutations", "20", "--out", str(tmp_path / "c.json")]) == 0
    assert "abstract/macro-F1" in capsys.readouterr().out
    assert list(json.loads((tmp_path / "c.json").read_text())) == ["abstract/macro-F1"]


# ---- 3. one reader of results.json ---------------------------------------------------------------------------------

def _ranked_folders(tmp_path, qrels: str, threshold) -> list:
    """Results folders a and b of one ranked run (q1: d1, d2), judged by `qrels`, recording `threshold`."""
    folders = []
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "run.trec").write_text("q1 Q0 d1 1 0.9 r\nq1 Q0 d2 2 0.5 r\n")
        (folder / "qrels.trec").write_text(qrels)
        (folder / "results.json").write_text(json.dumps({"relevance_threshold": threshold}))
        folders.append(folder)
    return folders


def test_fuse_runs_refuses_a_results_json_that_is_not_an_object(tmp_path):
    """fuse-runs read a results.json holding a JSON list as recording nothing (scored at threshold 1, no word);
    compare refused it. One reader now (`results_doc`), which refuses it for both."""
    from aspire.evaluate.fuse import fuse_run_files

    folders = _ranked_folders(tmp_path, "q1 0 d1 2\nq1 0 d2 0\n", 2)
    (tmp_path / "b" / "results.json").write_text("[2]")
    with pytest.raises(ValueError, match=r"b/results\.json: the results file holds a JSON list, not an object"):
        fuse_run_files(folders, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_compare_names_a_results_json_that_is_no_json(tmp_path):
    """compare's own reader said "not a results file"; the shared one says what is wrong with it: not JSON."""
    from aspire.evaluate.compare import compare

    a = _csfcube_folder(tmp_path / "a", "s1", (40, 50, 60, 70))
    b = _csfcube_folder(tmp_path / "b", "s1", (40, 50, 60, 70))
    (tmp_path / "b" / "results.json").write_text("{oops")
    with pytest.raises(ValueError, match=r"b/results\.json: not JSON: the results file cannot be read"):
        compare(a, b, n_perm=5)


# ---- sweep: runs scored on other judgments --------------------------------------------------------------------------

def test_compare_refuses_csfcube_folders_of_other_judged_sets(tmp_path):
    """Two CSFCube folders scored on different judged sets (other judgments, same query keys and folds) were compared
    query by query as if alike; their results.json record it, and now they are refused, naming both."""
    from aspire.evaluate.compare import compare

    a = _csfcube_folder(tmp_path / "a", "set-one", (40, 50, 60, 70))
    b = _csfcube_folder(tmp_path / "b", "set-two", (45, 40, 65, 60))
    with pytest.raises(ValueError, match=r"a and .*b were scored on different queries, judgments or folds \(judged "
                                         r"set set-one and set-two\)"):
        compare(a, b, n_perm=5)
    c = _csfcube_folder(tmp_path / "c", "set-one", (45, 40, 65, 60))
    out = compare(a, c, n_perm=5)
    assert out["MAP"]["a"] == pytest.approx(np.mean([40, 50, 60, 70]))  # the mean of the two folds' means (equal here)


@pytest.mark.parametrize("threshold", ["2", 2.0, 0, True])
def test_a_bad_recorded_relevance_threshold_is_an_error(tmp_path, threshold):
    """A results.json recording `relevance_threshold` "2" (or 2.0, 0, true) was read as recording none: compare and
    fuse-runs scored at threshold 1 while the file said 2. Now a ValueError naming the file."""
    from aspire.evaluate.compare import compare
    from aspire.evaluate.fuse import fuse_run_files

    folders = _ranked_folders(tmp_path, "q1 0 d1 2\nq1 0 d2 1\n", threshold)
    match = rf"a/results\.json: relevance_threshold must be a whole number >= 1, got {threshold!r}"
    with pytest.raises(ValueError, match=match):
        compare(str(folders[0]), str(folders[1]), n_perm=5)
    with pytest.raises(ValueError, match=match):
        fuse_run_files(folders, tmp_path / "out")
    (folders[0] / "results.json").write_text(json.dumps({"relevance_threshold": 2}))
    (folders[1] / "results.json").write_text(json.dumps({"relevance_threshold": None}))  # null: records none
    assert list(compare(str(folders[0]), str(folders[1]), metrics=["MAP"], n_perm=5)) == ["MAP-l2"]


def test_compare_reads_each_probe_results_json_once_through_the_hook(tmp_path, monkeypatch):
    """The hooks take the command's reads (`docs`): two probe folders' results.json are read once each in all, the
    comparison included (the probe hook read them again)."""
    from aspire.evaluate.compare import compare

    for name, preds in (("a", [0, 1, 1, 0, 1, 0]), ("b", [0, 1, 0, 0, 1, 1])):
        folder = tmp_path / name
        folder.mkdir()
        doc = {"format": "venue", "model": "m", "representations": {"abstract": {
            "test_ids": [f"p{i}" for i in range(6)], "y": [0, 1, 1, 0, 1, 0], "pred": preds}}}
        (folder / "results.json").write_text(json.dumps(doc))
    reads = _count_results_reads(monkeypatch)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    out = compare(a, b, n_perm=200)
    assert out and all("delta" in v for v in out.values())
    assert sorted(reads) == sorted([str(tmp_path / "a" / "results.json"), str(tmp_path / "b" / "results.json")])


def test_compare_names_the_queries_it_leaves_out_at_the_threshold(tmp_path, caplog):
    """At a threshold above a query's best grade compare left the query out with only `n_units` to show it (36 of
    CSFCube's 50 pools at threshold 3), where pools and fuse-runs list them: now a warning and `skipped_no_relevant`."""
    import logging

    from aspire.evaluate.compare import compare

    folders = _ranked_folders(tmp_path, "q1 0 d1 3\nq1 0 d2 1\nq2 0 d1 2\n", 3)
    for folder in folders:
        with open(folder / "run.trec", "a") as fh:
            fh.write("q2 Q0 d1 1 0.9 r\nq2 Q0 d2 2 0.5 r\n")
    with caplog.at_level(logging.WARNING, logger="aspire.evaluate.compare"):
        out = compare(str(folders[0]), str(folders[1]), metrics=["MAP"], n_perm=5)
    assert out["MAP-l3"]["n_units"] == 1 and out["MAP-l3"]["skipped_no_relevant"] == ["q2"]
    assert "1 query with no document at grade >= 3 left out (q2)" in caplog.text
    caplog.clear()
    (tmp_path / "judged").mkdir()
    folders = _ranked_folders(tmp_path / "judged", "q1 0 d1 2\n", 1)  # every query has a relevant document
    assert "skipped_no_relevant" not in compare(str(folders[0]), str(folders[1]), metrics=["MAP"], n_perm=5)["MAP"]
    assert "left out" not in caplog.text
