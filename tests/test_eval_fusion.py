"""Fusion of TREC runs in rank order, fusion weights, qrels duplicates, recorded thresholds, context2doc depth."""

import json

import pytest

from aspire.benchmarks.runs import read_qrels, write_qrels, write_run
from aspire.evaluate.fuse import fuse_run_files, fuse_runs, fuse_scores
from aspire.scoring.fusion import check_weights, fuse_ranked

RUN = {"q1": [("a", 3.0), ("b", 2.0), ("c", 1.0)], "q2": [("c", 5.0), ("a", 4.0), ("b", 0.5)]}
DIST = {q: [(d, 1.0 / s) for d, s in ranked] for q, ranked in RUN.items()}  # same ranking, scores rising


@pytest.mark.parametrize("fusion", ["rrf", "z", "minmax"])
def test_fuse_runs_reads_a_distance_run_in_its_rank_order(fusion):
    want = {q: [d for d, _ in ranked] for q, ranked in RUN.items()}
    for runs in ([DIST, DIST], [DIST, RUN]):
        assert {q: [d for d, _ in r] for q, r in fuse_runs(runs, None, fusion).items()} == want


def test_fuse_runs_refuses_a_run_whose_scores_go_both_ways():
    mixed = {"q1": RUN["q1"], "q2": DIST["q2"]}
    with pytest.raises(ValueError, match=r"mixed\.run: .*query q1.*query q2"):
        fuse_runs([mixed, RUN], fusion="z", names=["mixed.run", "b.run"])
    bumpy = {"q1": [("a", 3.0), ("b", 4.0), ("c", 1.0)], "q2": RUN["q2"]}
    with pytest.raises(ValueError, match="bumpy: query q1: scores neither fall"):
        fuse_runs([RUN, bumpy], fusion="minmax", names=["a", "bumpy"])
    assert fuse_runs([RUN, bumpy], fusion="rrf")["q1"][0][0] == "a"  # rank fusion needs no score direction


@pytest.mark.parametrize("weights", [[0, 0], [-1, 0], [1, -0.5], [float("nan"), 1]])
def test_fusion_weights_must_be_non_negative_with_a_positive_sum(weights):
    with pytest.raises(ValueError, match="fusion weights must be finite, >= 0 and sum to more than 0"):
        check_weights(weights, 2)
    with pytest.raises(ValueError, match="fusion weights must be"):
        fuse_ranked([{"a": 1.0}, {"b": 2.0}], weights)
    with pytest.raises(ValueError, match="fusion weights must be"):
        fuse_runs([RUN, RUN], weights, "z")
    with pytest.raises(ValueError, match="fusion weights must be"):
        fuse_scores([{q: dict(r) for q, r in RUN.items()}] * 2, weights)
    assert check_weights([0, 2], 2) == [0.0, 2.0]


def test_an_ensemble_whose_weights_sum_to_zero_is_refused(tmp_path):
    from aspire.evaluate.ensemble import load_ensemble

    path = tmp_path / "e.yaml"
    path.write_text("members: [{name: a, model: m, scorer: minl2, weight: 0}, {name: b, model: bm25, weight: 0}]\n")
    with pytest.raises(ValueError, match=r"e\.yaml: the members' weights sum to 0"):
        load_ensemble(path)


def test_qrels_judging_a_document_twice_is_refused(tmp_path):
    path = tmp_path / "qdup.trec"
    path.write_text("q1 0 d1 1\nq1 0 d2 0\nq1 0 d1 0\n")
    with pytest.raises(ValueError, match=r"qdup\.trec:3: query q1 judges d1 twice \(first on line 1\)"):
        read_qrels(path)
    path.write_text("q1 0 d1 1\nq2 0 d1 0\n")
    assert read_qrels(path) == {"q1": {"d1": 1}, "q2": {"d1": 0}}


def _folder(path, run, results=None):
    write_run(path / "run.trec", run, "x")
    write_qrels(path / "qrels.trec", {"q1": {"a": 1, "b": 2}, "q2": {"c": 1, "b": 2}})
    if results is not None:
        (path / "results.json").write_text(json.dumps(results))
    return path


def test_fuse_run_files_scores_at_the_recorded_threshold_and_records_it(tmp_path):
    a = _folder(tmp_path / "a", RUN, {"dataset": "relish", "relevance_threshold": 2})
    b = _folder(tmp_path / "b", DIST, {"dataset": "relish", "relevance_threshold": 2})
    res = fuse_run_files([a, b], tmp_path / "f", metrics=["MAP", "nDCG@10"])
    assert res["relevance_threshold"] == 2 and res["benchmark"] == "relish"
    assert set(res["metrics"]) == {"MAP-l2", "nDCG@10"}
    assert res["metrics"]["MAP-l2"] == pytest.approx((1 / 2 + 1 / 3) / 2)  # b, the grade-2 paper, at 2 and 3
    assert json.loads((tmp_path / "f" / "results.json").read_text())["relevance_threshold"] == 2
    c = _folder(tmp_path / "c", RUN, {"dataset": "other", "relevance_threshold": 1})
    res = fuse_run_files([a, c], tmp_path / "g", metrics=["MAP"])
    assert res["relevance_threshold"] == 1 and "benchmark" not in res and "disagree" in res["threshold_from"]
    assert set(res["metrics"]) == {"MAP"}


def test_context2doc_refuses_a_depth_below_its_deepest_metric(tmp_path):
    from aspire.benchmarks.context2doc import Context2Doc
    from aspire.data.papers import Paper
    from aspire.evaluate.context2doc_run import DEEPEST, run_context2doc
    from aspire.evaluate.options import Stages

    papers = [Paper(f"p{i}", "", ["text"]) for i in range(120)]
    bench = Context2Doc("test", {"q": "text"}, {"q": {"p1": 1}}, papers, {"q": "c"})
    assert DEEPEST == 100
    with pytest.raises(ValueError, match="context2doc depth 5 is below 100, the depth R@100 is reported at"):
        run_context2doc(bench, tmp_path, "x", "no-such-model", "abstract", stages=Stages(), depth=5)
    assert not any(tmp_path.iterdir())  # refused before encoding or writing anything
