"""Round 10, reranking and fusion against independent references: fusion by its published definitions, the
cross-encoder mix and pair scoring one at a time, BM25 by Lucene's formula, compare's options and thresholds.

Each test either pins one defect (an option accepted and then not used, a figure at another protocol than the
runs' own, a late or bare error) or checks a part against a brute-force re-implementation on random input.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import numpy as np
import pytest

from aspire.benchmarks.runs import write_qrels, write_run
from aspire.scoring.fusion import fuse_ranked

# ------------------------------------------------------------------ references, brute force


def _normalised(values: list[float], method: str) -> list[float]:
    if method == "z":
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        return [(v - mean) / sd if sd > 0 else 0.0 for v in values]
    lo, hi = min(values), max(values)
    return [(v - lo) / (hi - lo) if hi > lo else 0.0 for v in values]


def _fused_by_definition(lists, weights, method, k) -> dict[str, float]:
    """CombSUM of min-max / z-scores (a document a list lacks adds 0) or RRF: sum of w / (k + rank), rank from 1
    by score, ties in the list's order."""
    out: dict[str, float] = {}
    for scores, w in zip(lists, weights):
        docs = list(scores)
        if method == "rrf":
            order = sorted(range(len(docs)), key=lambda i: (-scores[docs[i]], i))
            parts = {docs[i]: 1.0 / (k + rank) for rank, i in enumerate(order, 1)}
        else:
            parts = dict(zip(docs, _normalised([scores[d] for d in docs], method))) if docs else {}
        for d, x in parts.items():
            out[d] = out.get(d, 0.0) + w * x
    return out


def test_fuse_ranked_equals_the_published_definitions_on_random_lists():
    # ties, documents missing from a list, empty and single-document lists, constant scores
    rng = random.Random(0)
    for _ in range(600):
        pool = [f"d{i}" for i in range(rng.randint(1, 9))]
        lists = []
        for _ in range(rng.randint(1, 3)):
            docs = rng.sample(pool, rng.randint(0, len(pool)))
            kind = rng.random()
            lists.append({d: 2.0 if kind < 0.2 else float(rng.randint(0, 2)) if kind < 0.5 else rng.gauss(0, 3)
                          for d in docs})
        weights = [rng.choice([0.0, 0.4, 1.0, 3.0]) for _ in lists]
        weights[0] = weights[0] or 1.0
        method, k = rng.choice(["z", "minmax", "rrf"]), rng.choice([0.5, 1.0, 60.0])
        got = fuse_ranked(lists, weights, method, k)
        want = _fused_by_definition(lists, weights, method, k)
        assert len(got) == len(want) and dict(got) == pytest.approx(want, abs=1e-12)
        assert got == sorted(got, key=lambda kv: (-kv[1], kv[0]))


def test_mix_rerank_equals_its_definition_and_keeps_every_document_once():
    from aspire.scoring.crossencoder import mix_rerank

    rng = random.Random(1)
    for _ in range(500):
        docs = [f"d{i}" for i in rng.sample(range(20), rng.randint(1, 8))]
        first = list(zip(docs, sorted((float(rng.randint(0, 3)) for _ in docs), reverse=True)))
        cross = {d: float(rng.randint(-2, 2)) for d in docs}
        top_n, weight = rng.randint(1, 10), rng.choice([0.0, 0.3, 0.5, 1.0])
        head = first[:top_n]
        mixed = {d: weight * c + (1 - weight) * f for (d, _), c, f in
                 zip(head, _normalised([cross[d] for d, _ in head], "z"), _normalised([s for _, s in head], "z"))}
        want = [d for d, _ in head] if weight == 0 else sorted(mixed, key=lambda d: (-mixed[d], d))
        got = mix_rerank(first, cross, top_n, weight)
        rest = first[top_n:] if weight == 0 else sorted(first[top_n:], key=lambda kv: (-kv[1], kv[0]))
        assert [d for d, _ in got] == want + [d for d, _ in rest]  # the rest below, its ties by id (round 55)
        assert [s for _, s in got[: len(head)]] == pytest.approx([mixed[d] for d in want])
        scores = [s for _, s in got]
        assert scores == sorted(scores, reverse=True)


def test_bm25_equals_lucenes_formula():
    from aspire.scoring.lexical import BM25Index

    rng = random.Random(2)
    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    docs = [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in range(25)]
    k1, b = 1.25, 0.75
    tokens = [d.split() for d in docs]
    n, avg = len(docs), sum(map(len, tokens)) / len(docs)
    df = {w: sum(w in t for t in tokens) for w in words}

    def lucene(query: str) -> list[float]:
        return [sum(math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) * t.count(w)
                    / (t.count(w) + k1 * (1 - b + b * len(t) / avg)) for w in query.split() if df.get(w))
                for t in tokens]

    queries = ["alpha beta", "gamma gamma", "theta unknown", "nothing here"]
    got = BM25Index(docs, [str(i) for i in range(len(docs))], k1, b).scores(queries)
    for query, row in zip(queries, got):
        np.testing.assert_allclose(row, lucene(query), rtol=1e-5, atol=1e-6)


def test_lexical_top_equals_a_sort_by_score_then_position():
    from aspire.retrieval.lexical import LexicalStage

    class Fixed:
        def __init__(self, scores):
            self.scores_, self.ids = scores, [str(i) for i in range(len(scores))]

        def scores(self, texts):
            return self.scores_[None]

    rng = random.Random(3)
    for _ in range(500):
        scores = np.array([rng.choice([0.0, 0.0, 1.0, 2.0, 2.5]) for _ in range(rng.randint(1, 10))], dtype=np.float32)
        exclude = rng.sample(range(len(scores)), rng.randint(0, len(scores)))
        n, fill = rng.randint(1, 12), rng.random() < 0.5
        kept = [p for p in range(len(scores)) if p not in exclude]
        want = sorted((p for p in kept if scores[p] > 0), key=lambda p: (-scores[p], p))[:n]
        if fill:
            want += [p for p in kept if scores[p] <= 0][: n - len(want)]
        top, got = LexicalStage(Fixed(scores)).top("q", n, exclude, fill)
        assert top.tolist() == want and got.tolist() == scores[want].tolist()


def test_cross_encoder_scores_do_not_depend_on_batching_or_padding(tiny_cross_encoder_dir):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from aspire.retrieval.crossencoder import pair_scores
    from aspire.scoring.crossencoder import CrossEncoderReranker

    rng = random.Random(4)
    words = "the model of text neural network language citation similarity data".split()
    queries = {f"q{i}": " ".join(rng.choices(words, k=rng.randint(1, 5))) for i in range(3)}
    texts = {f"d{i}": " ".join(rng.choices(words, k=rng.randint(1, 40))) for i in range(6)}
    first = {q: [(f"d{i}", 6.0 - i) for i in rng.sample(range(6), 6)] for q in queries}
    model = AutoModelForSequenceClassification.from_pretrained(tiny_cross_encoder_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_cross_encoder_dir)
    for max_length in (16, None):
        one = {}
        for q, ranked in first.items():  # one pair at a time, no padding
            for d, _ in ranked[:4]:
                enc = tokenizer(queries[q], texts[d], truncation=True, max_length=max_length, return_tensors="pt")
                with torch.no_grad():
                    one[q, d] = model(**enc).logits[0, 0].item()
        reranker = CrossEncoderReranker(str(tiny_cross_encoder_dir), max_length)
        for batch_size in (1, 5):
            reranker.batch_size = batch_size
            got = pair_scores(queries, texts, first, reranker, top_n=4)
            assert {(q, d): s for q, row in got.items() for d, s in row.items()} == pytest.approx(one, abs=1e-5)


# ------------------------------------------------------------------ defects


def test_pair_scores_and_rerank_run_name_a_query_without_a_ranking_or_scores():
    # once a bare KeyError('q2')
    from aspire.retrieval.crossencoder import pair_scores, rerank_run

    class Never:
        def score_pairs(self, pairs):
            raise AssertionError("scored before the queries were checked")

    first = {"q1": [("a", 1.0)]}
    with pytest.raises(ValueError, match=r"1 queries have no first-stage ranking to re-rank \(e\.g\. \['q2'\]\)"):
        pair_scores({"q1": "x", "q2": "y"}, {"a": "text"}, first, Never(), 5)
    with pytest.raises(ValueError, match=r"1 queries have no cross-encoder scores \(e\.g\. \['q2'\]\)"):
        rerank_run({**first, "q2": [("a", 1.0)]}, {"q1": {"a": 0.5}}, 5, 0.5)


@pytest.mark.parametrize("field, value", [("weight", ".inf"), ("rrf_k", ".inf")])
def test_an_ensemble_with_an_infinite_weight_or_rrf_k_is_refused_before_any_member_runs(tmp_path, field, value):
    # both were refused only by the fusion, after every member had run
    from aspire.evaluate.ensemble import load_ensemble

    path = tmp_path / "e.yaml"
    member = f", weight: {value}" if field == "weight" else ""
    top = f"rrf_k: {value}\n" if field == "rrf_k" else ""
    path.write_text(f"{top}members: [{{name: a, model: m, scorer: minl2{member}}}, {{name: b, model: bm25}}]\n")
    with pytest.raises(ValueError, match=rf"{field} must be .*finite, got inf"):
        load_ensemble(path)


RUN_A = {"q1": [("a", 3.0), ("b", 2.0), ("c", 1.0)], "q2": [("c", 3.0), ("a", 2.0), ("b", 1.0)],
         "q3": [("b", 3.0), ("a", 2.0), ("c", 1.0)]}
RUN_B = {"q1": [("b", 3.0), ("a", 2.0), ("c", 1.0)], "q2": [("b", 3.0), ("c", 2.0), ("a", 1.0)],
         "q3": [("a", 3.0), ("b", 2.0), ("c", 1.0)]}
GRADED = {"q1": {"a": 2, "b": 1, "c": 0}, "q2": {"a": 1, "b": 2, "c": 0}, "q3": {"a": 1, "b": 1, "c": 0}}


def _pools_folder(path, run, threshold):
    write_run(path / "run.trec", run, "x")
    write_qrels(path / "qrels.trec", GRADED)
    (path / "results.json").write_text(json.dumps({"dataset": "relish", "relevance_threshold": threshold}))
    return str(path)


def test_compare_scores_pools_folders_at_their_recorded_threshold(tmp_path):
    # once at threshold 1 whatever the folders recorded: a RELISH run scored at 2 was compared on other figures
    from aspire.benchmarks.metrics import evaluate_rankings
    from aspire.evaluate.compare import compare

    a, b = _pools_folder(tmp_path / "a", RUN_A, 2), _pools_folder(tmp_path / "b", RUN_B, 2)
    got = compare(a, b, metrics=["MAP", "nDCG@10"], n_perm=50)
    assert set(got) == {"MAP-l2", "nDCG@10"}
    for run, side in ((RUN_A, "a"), (RUN_B, "b")):  # the pools evaluator's figure at 2, q3 (nothing at 2) left out
        per_query = evaluate_rankings(GRADED, {q: [d for d, _ in r] for q, r in run.items()}, ["MAP"], 2, True)
        assert set(per_query) == {"q1", "q2"}
        assert got["MAP-l2"][side] == pytest.approx(np.mean([v["MAP"] for v in per_query.values()]))
    assert set(got["MAP-l2"]["per_unit_delta"]) == {"q1", "q2"}
    c = _pools_folder(tmp_path / "c", RUN_B, 1)
    with pytest.raises(ValueError, match=r"scored at different relevance thresholds .*: 2, .*: 1"):
        compare(a, c, n_perm=10)
    plain = compare(_pools_folder(tmp_path / "d", RUN_A, 1), c, metrics=["MAP"], n_perm=10)
    assert set(plain) == {"MAP"} and set(plain["MAP"]["per_unit_delta"]) == {"q1", "q2", "q3"}


def test_compare_refuses_qrels_beside_a_benchmarks_own_comparison(tmp_path, monkeypatch):
    # once dropped without a word: two CSFCube folders were compared on CSFCube's judgements, not the --qrels given
    from aspire.evaluate import suite
    from aspire.evaluate.compare import compare

    monkeypatch.setitem(suite.RUNNERS, "csfcube", replace(suite.RUNNERS["csfcube"], compare=lambda *a, **k: {"MAP": "compared"}))
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"benchmark": "csfcube"}))
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert compare(a, b, n_perm=10) == {"MAP": "compared"}
    with pytest.raises(ValueError, match=r"csfcube runs, judged by the benchmark's own data: --qrels does not apply"):
        compare(a, b, qrels=str(tmp_path / "other.qrels"), n_perm=10)


@pytest.mark.parametrize("extra", [{"qrels": "other.qrels"}, {"metrics": ["MRR"]}])
def test_fuse_runs_on_csfcube_folders_refuses_qrels_and_metrics(tmp_path, monkeypatch, extra):
    # once dropped without a word: the CSFCube evaluator scored the fused run on its own qrels and figures
    from aspire.evaluate import fuse

    monkeypatch.setattr(fuse, "_csfcube_fused", lambda fused, out, info, pool_set=None: {"benchmark": "csfcube"})
    folders = []
    for name, run in (("a", RUN_A), ("b", RUN_B)):
        write_run(tmp_path / name / "run.trec", run, "x")
        (tmp_path / name / "results.json").write_text(json.dumps({"benchmark": "csfcube", "relevance_threshold": 2}))
        folders.append(tmp_path / name)
    assert fuse.fuse_run_files(folders, tmp_path / "ok") == {"benchmark": "csfcube"}
    with pytest.raises(ValueError, match=r"scored by the CSFCube evaluator .*--qrels and --metric do not apply"):
        fuse.fuse_run_files(folders, tmp_path / "fused", **extra)
    assert not (tmp_path / "fused").exists()  # refused before anything was written
