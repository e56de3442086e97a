"""Round 13, run fusion, ensembles, the suite and the context2doc runners: checked against ranx's fusion, a
fusion written out by hand, and each other (an ensemble of a model and BM25 is the model fused with BM25)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_benchmarks import tiny_context2doc

from aspire.benchmarks.context2doc import Context2Doc
from aspire.benchmarks.runs import read_run
from aspire.evaluate.context2doc_run import run_context2doc
from aspire.evaluate.fuse import fuse_runs
from aspire.evaluate.options import EvalOptions, Stages


def _by_hand(runs, weights, method):
    """Weighted sum of each run's per-query normalised scores (population std; constant lists 0); a document a run
    does not rank adds nothing from it (ranx's `fuse(norm=zmuv|min-max, method=wsum)`, which ranks as this)."""
    out = {}
    for q in runs[0]:
        fused = {}
        for run, w in zip(runs, weights):
            v = np.array([s for _, s in run[q]])
            if method == "z":
                norm = (v - v.mean()) / v.std(ddof=0) if v.std(ddof=0) > 0 else np.zeros_like(v)
            else:
                norm = (v - v.min()) / (v.max() - v.min()) if v.max() > v.min() else np.zeros_like(v)
            for (d, _), x in zip(run[q], norm):
                fused[d] = fused.get(d, 0.0) + w * x
        out[q] = fused
    return out


def test_fuse_runs_of_different_lengths_equals_the_weighted_sum_by_hand():
    """Runs of different lengths and scales, one with a constant list: every document once, scored by definition
    (checked against ranx's wsum too while this round ran; its import alone takes the time of this whole file)."""
    rng = np.random.default_rng(3)
    docs = [f"d{i}" for i in range(25)]
    runs = []
    for scale in (1.0, 40.0, 0.01):
        run = {}
        for q in ("q1", "q2", "q3"):
            chosen = rng.choice(docs, int(rng.integers(2, 25)), replace=False)
            scores = np.sort(rng.normal(size=len(chosen)) * scale)[::-1]
            run[q] = [(str(d), float(s)) for d, s in zip(chosen, scores)]
        runs.append(run)
    runs[2]["q2"] = [(d, 7.0) for d, _ in runs[2]["q2"]]  # a constant list: 0 for each of its documents
    weights = [0.5, 0.3, 0.2]
    for method in ("z", "minmax"):
        want = _by_hand(runs, weights, method)
        got = fuse_runs(runs, weights, method)
        for q in want:
            assert dict(got[q]) == pytest.approx(want[q], abs=1e-12) and len(got[q]) == len(want[q])
            assert got[q] == sorted(got[q], key=lambda kv: (-kv[1], kv[0]))


def test_fuse_runs_refuses_a_run_that_ranks_a_document_twice():
    """`{doc: score}` built from the run once kept the document's last rank and score unsaid."""
    good = {"q": [("a", 2.0), ("b", 1.0)]}
    twice = {"q": [("a", 2.0), ("b", 1.0), ("a", 0.5)]}
    for fusion in ("z", "minmax", "rrf"):
        with pytest.raises(ValueError, match=r"run second: query q ranks document\(s\) \['a'\] twice"):
            fuse_runs([good, twice], fusion=fusion, names=["first", "second"])


def test_context2doc_abstract_scorer_refuses_scorer_options(tmp_path):
    """`--scorer abstract` with scorer options once ran without them and recorded them in results.json as applied;
    the other runners refuse them (`aspire.evaluate.rank.get_eval_scorer`). Refused before any model loads."""
    bench = tiny_context2doc(tmp_path)
    with pytest.raises(ValueError, match="scorer 'abstract' takes no options"):
        run_context2doc(bench, tmp_path / "o", "x", str(tmp_path / "no-model"), "abstract",
                        EvalOptions(scorer_options={"tau": 5.0}))


def test_context2doc_results_record_the_depth_that_made_them(tmp_path):
    """MAP and MRR have no cutoff, so the run's depth decides them: results.json once left it out."""
    bench = tiny_context2doc(tmp_path)
    for depth in (10, 12):
        res = run_context2doc(bench, tmp_path / f"d{depth}", "bm25", stages=Stages(bm25=True), depth=depth)
        assert res["depth"] == depth
        assert json.loads((tmp_path / f"d{depth}" / "results.json").read_text())["depth"] == depth


def test_context2doc_ensemble_of_a_model_and_bm25_is_the_model_fused_with_bm25(tmp_path, tiny_model_dir, monkeypatch):
    """A `z` ensemble with weights (a, 1 - a) on a model member (its encode options applied) and a bm25 member ranks
    as `run_context2doc` with `Stages(bm25=True, alpha=a)`: same order, same fused scores, top 100."""
    import aspire.benchmarks.context2doc as c2d
    from aspire.evaluate.ensemble import EnsembleConfig, EnsembleMember, fused_rows

    bench = tiny_context2doc(tmp_path)
    monkeypatch.setattr(c2d, "load_context2doc", lambda data, split: bench)
    encode = {"max_length": 16, "normalize": True}
    direct = run_context2doc(bench, tmp_path / "d", "d", str(tiny_model_dir), "abstract",
                             EvalOptions(encode_options=encode), Stages(bm25=True, alpha=0.7))
    config = EnsembleConfig("z", 60.0, [EnsembleMember("m", str(tiny_model_dir), "abstract", 0.7, encode_options=encode),
                                        EnsembleMember("b", "bm25", None, 0.3)])
    rows, why = fused_rows("context2doc", config, tmp_path / "cc", tmp_path / "e", {"aggregate": "max"}, batch_size=4)
    assert why is None
    a, b = read_run(tmp_path / "d/run.trec"), read_run(tmp_path / "e/context2doc/run.trec")
    assert set(a) == set(b) == set(bench.queries)
    for q in a:
        assert [d for d, _ in a[q]] == [d for d, _ in b[q]]
        assert [s for _, s in a[q]] == pytest.approx([s for _, s in b[q]], abs=1e-9)
    assert rows[0]["metric"] == "MRR" and rows[0]["value"] == pytest.approx(direct["metrics"]["MRR"])
    member = json.loads((tmp_path / "e/members/m/context2doc/results.json").read_text())
    assert member["encode_options"] == encode and member["encoding"] == "abstract"


def test_bm25_suite_records_no_model_options_and_refuses_unread_settings(tmp_path, monkeypatch):
    """BM25 alone once recorded `encoding: contextual`, the aggregate and any bm25_alpha or options it was given in
    suite.json, none of which it reads; bm25_alpha beside benchmarks without BM25 was recorded and never read."""
    import aspire.benchmarks.context2doc as c2d
    from aspire.evaluate.suite import run_suite

    bench = tiny_context2doc(tmp_path)
    monkeypatch.setattr(c2d, "load_context2doc", lambda data, split: bench)
    suite = run_suite("bm25", None, tmp_path / "out", tmp_path, benchmarks=["context2doc"])
    written = json.loads((tmp_path / "out" / "suite.json").read_text())
    assert [r["metric"] for r in written["rows"]] == ["MRR", "nDCG@10", "R@100", "MAP"] and written == suite
    assert "encoding" not in written and "scorer_options" not in written and written["aggregate"] is None
    for kwargs in ({"bm25_alpha": 0.5}, {"options": EvalOptions(encoding="independent")}):
        with pytest.raises(ValueError, match="model bm25 ranks by BM25 alone"):
            run_suite("bm25", None, tmp_path / "x", tmp_path, benchmarks=["context2doc"], **kwargs)
    with pytest.raises(ValueError, match="bm25_alpha fuses the model with BM25 on context2doc, which this suite does "
                                         r"not run \(csfcube\)"):
        run_suite("some-model", "minl2", tmp_path / "y", tmp_path, bm25_alpha=0.5, benchmarks=["csfcube"])
    assert not (tmp_path / "y").exists()


def test_an_ensemble_suite_refuses_an_unknown_benchmark(tmp_path):
    """A misspelt benchmark once ran nothing and wrote an empty suite.json without a word."""
    from aspire.evaluate.ensemble import run_ensemble_suite

    path = tmp_path / "ens.yaml"
    path.write_text("members: [{name: a, model: bm25}, {name: b, model: m, scorer: minl2}]")
    with pytest.raises(ValueError, match="unknown benchmark 'csfcub'"):
        run_ensemble_suite(path, tmp_path / "out", tmp_path / "no-data", benchmarks=["csfcub"])
    assert not (tmp_path / "out" / "suite.json").exists()


def test_rerank_sweep_keeps_weights_that_differ_past_six_digits():
    """Keys `N:{w:g}` once merged 0.1234567 and 0.1234568 into one entry `0.123457`, and `best` named that weight,
    which the grid does not hold."""
    from aspire.evaluate.context2doc_rerank import sweep

    bench = Context2Doc("dev", {"q": "text"}, {"q": {"b": 1}}, [], {"q": "c"})
    first = {"q": [("a", 3.0), ("b", 2.0), ("c", 1.0)]}
    cross = {"q": {"a": 0.0, "b": 5.0, "c": 1.0}}
    weights = [0.1234567, 0.1234568, 1.0]
    result = sweep(bench, first, cross, [1, 2], weights)
    assert len(result["table"]) == 6
    assert result["best"] == {"top_n": 2, "weight": 1.0, "MRR": 1.0}
    low = sweep(bench, first, cross, [2], weights[:2])  # both leave b second: a tie, the smaller weight wins
    assert low["best"]["weight"] == 0.1234567 and set(low["table"]) == {"2:0.1234567", "2:0.1234568"}
