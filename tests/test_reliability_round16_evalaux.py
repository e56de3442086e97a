"""Round 16, evaluation helpers: fusion's refusal of a non-finite score names the run and the query (and the score as
given, not negated), a ranked file's boolean score is refused, a fused CSFCube folder keeps its fused scores in
its ranked files and run.trec (checked against `fuse_runs` on the real data), and the suite's settings are
checked before the first benchmark runs."""

from __future__ import annotations

import json
import shutil

import pytest

from aspire.benchmarks.runs import read_run
from aspire.evaluate import ensemble, fuse, suite
from aspire.paths import DATA

CSF = DATA / "csfcube"


# ---- fusion: a non-finite score ---------------------------------------------------------------------------------

def test_fuse_scores_names_the_run_and_query_of_a_nan_score():
    """context2doc's dense + BM25 fusion (`fuse_dense_bm25` -> `fuse_scores`) with a NaN from the encoder was refused
    as 'list 0 scores document ...': neither the run ('dense') nor the query was named."""
    dense = {"q1": {"a": 0.5, "b": 0.25}, "q7": {"a": 0.5, "b": float("nan")}}
    bm25 = {"q1": {"a": 1.0, "b": 2.0}, "q7": {"a": 1.0, "b": 2.0}}
    with pytest.raises(ValueError) as err:
        fuse.fuse_scores([dense, bm25], [0.5, 0.5], "z", ["dense", "bm25"])
    assert "run dense" in str(err.value) and "query q7" in str(err.value) and "document b" in str(err.value)


@pytest.mark.parametrize("fusion", ["z", "minmax"])
def test_fuse_runs_names_the_run_and_query_and_gives_the_score_as_written(fusion):
    """A distance run (scores rising) with an infinite score was refused as 'list 0 ... -inf': the position, not the
    run's name, and the score negated, as the run never held it."""
    a = {"q1": [("x", 1.0), ("y", 2.0)], "q2": [("x", 1.0), ("y", float("inf"))]}  # distances, best first
    b = {"q1": [("x", 3.0), ("y", 2.0)], "q2": [("x", 3.0), ("y", 2.0)]}
    with pytest.raises(ValueError) as err:
        fuse.fuse_runs([a, b], fusion=fusion, names=["runA", "runB"])
    msg = str(err.value)
    assert "runA" in msg and "q2" in msg and "inf" in msg and "-inf" not in msg


def test_fuse_runs_keeps_finite_runs_and_rrf_reads_no_score():
    """The check refuses nothing finite, and rrf (which fuses positions) still takes any score."""
    a = {"q1": [("x", 3.0), ("y", 2.0), ("z", 1.0)]}
    b = {"q1": [("y", 0.9), ("x", 0.5), ("z", 0.1)]}
    fused = fuse.fuse_runs([a, b], fusion="z")
    assert [d for d, _ in fused["q1"]][-1] == "z"
    odd = {"q1": [("x", float("nan")), ("y", 0.0), ("z", 0.0)]}
    assert [d for d, _ in fuse.fuse_runs([odd, b], fusion="rrf")["q1"]] == ["x", "y", "z"]  # x, y tie: by id


# ---- read_scored: a ranked file's shape --------------------------------------------------------------------------

def test_read_scored_refuses_a_boolean_score(tmp_path):
    """`[cand, true]` was read as a score of 1.0 (bool is an int in Python); the pools' run writer refuses it."""
    path = tmp_path / "ranked.json"
    path.write_text(json.dumps({"q1": [["a", 0.9], ["b", True]]}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"query q1.*\['b', True\]"):
        fuse.read_scored(path)


def test_read_scored_refuses_a_file_that_is_no_object_naming_it(tmp_path):
    """A JSON list was an AttributeError ('list' object has no attribute 'items') naming no file."""
    path = tmp_path / "ranked.json"
    path.write_text(json.dumps([["a", 0.9]]), encoding="utf-8")
    with pytest.raises(ValueError, match="ranked.json"):
        fuse.read_scored(path)
    path.write_text(json.dumps({"q1": {"a": 0.9}}), encoding="utf-8")  # {query: {cand: score}}: another format
    with pytest.raises(ValueError, match="query q1"):
        fuse.read_scored(path)


def test_read_scored_reads_numbers_as_before(tmp_path):
    path = tmp_path / "ranked.json"
    path.write_text(json.dumps({"q1": [["a", 1], ["b", 2.5]]}), encoding="utf-8")  # distances: negated
    assert fuse.read_scored(path) == {"q1": {"a": -1.0, "b": -2.5}}


# ---- a fused CSFCube folder ----------------------------------------------------------------------------------------

@pytest.mark.skipif(not (CSF / "sample_ranked_pools").is_dir(), reason="the CSFCube data is not in ../shared/data")
def test_fused_csfcube_folder_keeps_its_fused_scores(tmp_path):
    """`fuse-runs` of CSFCube folders wrote no fused ranked files, so its run.trec got rank scores (pool size - rank
    + 1) from `write_trec`'s fallback, and a second z / minmax fusion of the fused folder fused its ranks, not its
    fused scores. Reference: `fuse_runs` of the two inputs' run.trec."""
    from aspire.evaluate.csfcube import fuse_csfcube

    sample = CSF / "sample_ranked_pools"
    copy = shutil.copytree(sample, tmp_path / "copy")  # the same files twice are refused (round 58); a copy is not
    folders = []
    for name, fusion in (("a", "z"), ("b", "rrf")):  # two CSFCube folders with ranked files and run.trec
        fuse_csfcube(CSF, [(sample, "specter"), (copy, "specter")], tmp_path / name, name, fusion=fusion)
        folders.append(tmp_path / name)
    out = tmp_path / "fused"
    results = fuse.fuse_run_files(folders, out, fusion="minmax")
    assert results["benchmark"] == "csfcube"
    want = fuse.fuse_runs([read_run(f / "run.trec") for f in folders], fusion="minmax")
    got = read_run(out / "run.trec")
    assert set(got) == set(want)
    for q in want:
        assert [d for d, _ in got[q]] == [d for d, _ in want[q]]
        assert [s for _, s in got[q]] == pytest.approx([s for _, s in want[q]], abs=1e-12), q
    for facet in ("background", "method", "result"):  # the fused ranked files, as the evaluator's folders hold
        ranked = json.loads((out / f"test-pid2pool-csfcube-fused-{facet}-ranked.json").read_text(encoding="utf-8"))
        for pid, entries in ranked.items():
            assert entries == [[d, s] for d, s in want[f"{pid}_{facet}"]]


# ---- the suite's settings, before the first benchmark runs ---------------------------------------------------------

def _stub_runners(monkeypatch) -> list[str]:
    ran: list[str] = []

    def rows(bench, *a, **k):
        ran.append(bench.name)
        return [], None

    def ens(bench, *a, **k):
        ran.append(bench.name)
        return []

    for name, runner in list(suite.RUNNERS.items()):
        monkeypatch.setitem(suite.RUNNERS, name, suite.Runner(rows, ens, runner.compare, runner.lexical))
    return ran


@pytest.mark.parametrize("extra", [{"bm25_alpha": 1.5}, {"bm25_alpha": float("nan")}, {"aggregate": "median"}])
def test_run_suite_refuses_bad_settings_before_any_benchmark_runs(tmp_path, monkeypatch, extra):
    """`bm25_alpha` (read by context2doc) and `aggregate` (read by reviewer matching) were refused only by the
    benchmark that reads them, after CSFCube (first in the registry) had encoded and written its folder."""
    ran = _stub_runners(monkeypatch)
    with pytest.raises(ValueError, match="alpha|aggregate"):
        suite.run_suite("some-model", "abstract", tmp_path / "s", data=tmp_path,
                        benchmarks=["csfcube", "reviewers", "context2doc"], **extra)
    assert ran == []
    assert not (tmp_path / "s" / "suite.json").exists()


def test_run_suite_settings_checked_only_where_read(tmp_path, monkeypatch):
    """An aggregate is not checked when reviewer matching does not run (as the CLI's check), and good settings run."""
    ran = _stub_runners(monkeypatch)
    suite.run_suite("some-model", "abstract", tmp_path / "s", data=tmp_path, aggregate="median",
                    benchmarks=["csfcube"])
    suite.run_suite("some-model", "abstract", tmp_path / "t", data=tmp_path, aggregate="topk:3", bm25_alpha=0.5,
                    benchmarks=["csfcube", "reviewers", "context2doc"])
    assert ran == ["csfcube", "csfcube", "reviewers", "context2doc"]


def test_run_ensemble_suite_refuses_a_bad_aggregate_before_any_member_runs(tmp_path, monkeypatch):
    ran = _stub_runners(monkeypatch)
    monkeypatch.setattr(ensemble, "RUNNERS", suite.RUNNERS)
    config = tmp_path / "ens.yaml"
    config.write_text("fusion: z\nmembers:\n  - {name: a, model: m1, scorer: abstract}\n"
                      "  - {name: b, model: m2, scorer: minl2}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="aggregate"):
        ensemble.run_ensemble_suite(config, tmp_path / "e", data=tmp_path, aggregate="topk:0")
    assert ran == []
    ensemble.run_ensemble_suite(config, tmp_path / "e", data=tmp_path, aggregate="mean", benchmarks=["csfcube"])
    assert ran == ["csfcube"]
