"""Round 41: `aspire.evaluate.context2doc_run` / `context2doc_rerank` against hand computations and the written run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aspire.benchmarks.context2doc import Context2Doc
from aspire.benchmarks.runs import read_run
from aspire.data.papers import Paper
from aspire.evaluate.context2doc_rerank import sweep
from aspire.evaluate.context2doc_run import METRICS, fuse_dense_bm25, run_context2doc, to_run
from aspire.evaluate.options import Stages
from aspire.retrieval.crossencoder import rerank_run
from tests.test_reliability_round32_context2doc import brute_metrics, fake_bench


def test_fusion_refuses_a_lexical_matrix_of_another_shape():
    bench, dense = fake_bench(20, 3)
    lexical = np.random.default_rng(1).normal(size=(4, 21))  # one query and one candidate too many
    with pytest.raises(ValueError, match=r"bm25 scores are \(4, 21\)"):
        fuse_dense_bm25(bench, dense, lexical, 0.5)
    with pytest.raises(ValueError, match=r"dense scores are \(3, 19\)"):
        fuse_dense_bm25(bench, dense[:, :19], lexical[:3, :19], 0.5)


def test_fusion_with_a_constant_bm25_row_is_the_dense_z_alone():
    bench, dense = fake_bench(30, 4, seed=3)
    lexical = np.random.default_rng(2).normal(size=dense.shape)
    lexical[1] = 0.0  # a query sharing no term with any candidate
    fused = fuse_dense_bm25(bench, dense, lexical, 0.7)
    z = (dense - dense.mean(1, keepdims=True)) / dense.std(1, keepdims=True)
    zl = (lexical - lexical.mean(1, keepdims=True)) / np.where(lexical.std(1) > 0, lexical.std(1), 1)[:, None]
    assert np.allclose(fused, 0.7 * z + 0.3 * zl, atol=1e-9)
    assert np.allclose(fused[1], 0.7 * z[1], atol=1e-9)


def tiny_text_bench() -> Context2Doc:
    words = ["graph neural", "machine translation", "parsing trees", "speech audio", "topic models", "word vectors"]
    cands = [Paper(f"P{i}", f"{w} paper {i}", [f"we study {w} in depth {i}."]) for i, w in enumerate(words * 2)]
    queries = {f"Q{i}": f"prior work on {w} [CIT]" for i, w in enumerate(words)}
    qrels = {f"Q{i}": {f"P{i}": 1, f"P{i + 6}": 1} if i % 2 else {f"P{i}": 1} for i in range(len(words))}
    return Context2Doc("test", queries, qrels, cands, {q: "C" for q in queries})


def test_bm25_run_answers_every_query_once_and_metrics_match_the_written_run(tmp_path):
    bench = tiny_text_bench()
    res = run_context2doc(bench, tmp_path, "bm25", stages=Stages(bm25=True), depth=len(bench.candidates))
    run = read_run(tmp_path / "run.trec")
    assert sorted(run) == sorted(bench.queries) and res["n_queries"] == len(bench.queries)
    lines = (tmp_path / "run.trec").read_text().split("\n")
    assert len([ln for ln in lines if ln]) == len(bench.queries) * len(bench.candidates)
    qrels = {}
    for ln in (tmp_path / "qrels.trec").read_text().splitlines():
        q, _, d, g = ln.split()
        qrels.setdefault(q, {})[d] = int(g)
    assert qrels == bench.qrels
    saved = json.loads((tmp_path / "results.json").read_text())
    for q, ranked in run.items():
        hand = brute_metrics(set(bench.qrels[q]), [d for d, _ in ranked])
        for m in METRICS:
            assert saved["per_query"][m][q] == pytest.approx(hand[m], abs=1e-12), (q, m)
    for m in METRICS:
        assert saved["metrics"][m] == pytest.approx(np.mean([saved["per_query"][m][q] for q in bench.queries]))
    assert saved["metrics"]["MRR"] == pytest.approx(1.0)  # each query names its own paper's words


def test_rerank_head_rescored_tail_kept_in_first_stage_order():
    bench, scores = fake_bench(40, 5, seed=4)
    first = to_run(bench, scores, 40)
    rng = np.random.default_rng(5)
    cross = {q: {d: float(rng.normal()) for d, _ in ranked[:8]} for q, ranked in first.items()}
    out = rerank_run(first, cross, 8, 1.0)
    for q, ranked in first.items():
        head = sorted(cross[q], key=lambda d: (-cross[q][d], d))
        assert [d for d, _ in out[q][:8]] == head
        assert [d for d, _ in out[q][8:]] == [d for d, _ in ranked[8:]]
    res = sweep(bench, first, cross, [4, 8], [0.0, 1.0])
    assert set(res["table"]) == {"4:0", "4:1", "8:0", "8:1"}
    assert res["table"]["4:0"] == pytest.approx(res["table"]["8:0"])  # weight 0 keeps the first stage
