"""Round 32: the context2doc benchmark (`aspire.benchmarks.context2doc`, `aspire.evaluate.context2doc_run`,
`aspire.evaluate.context2doc_rerank`) against hand computations, brute-force loops and the real co-citation file."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

from aspire.benchmarks import context2doc as c2d
from aspire.benchmarks.context2doc import Context2Doc
from aspire.data.papers import Paper
from aspire.evaluate.context2doc_rerank import cross_scores, metrics_of, sweep
from aspire.evaluate.context2doc_run import METRICS, dense_scores, fuse_dense_bm25, to_run
from aspire.retrieval.crossencoder import rerank_run
from tests.conftest import SHARED_DATA

COCITE = SHARED_DATA / "cocite-acl"


@pytest.fixture
def cocite():
    if not (COCITE / "cocitations.jsonl").is_file():
        pytest.skip(f"shared co-citation data not found at {COCITE}")
    return COCITE


def fake_bench(n_cands: int = 150, n_queries: int = 12, seed: int = 0) -> tuple[Context2Doc, np.ndarray]:
    """A bench of `n_queries` queries with 1-3 relevant papers each among `n_cands`, and (Q, N) scores with ties."""
    rng = np.random.default_rng(seed)
    cands = [Paper(f"P{i:03d}", "t", ["s"]) for i in range(n_cands)]
    queries = {f"L{i}": f"query {i}" for i in range(n_queries)}
    qrels = {q: {f"P{j:03d}": 1 for j in rng.choice(n_cands, rng.integers(1, 4), replace=False)} for q in queries}
    scores = rng.normal(size=(n_queries, n_cands)).round(1)  # rounded: many ties
    return Context2Doc("test", queries, qrels, cands, {q: "C" for q in queries}), scores


def brute_metrics(relevant: set[str], ranked: list[str]) -> dict[str, float]:
    """MRR, nDCG@10 (binary gains), R@100, MAP and MAP@20 (both over all R relevant) of one ranking, by hand."""
    n_rel = len(relevant)
    rr = next((1 / (i + 1) for i, d in enumerate(ranked) if d in relevant), 0.0)
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if d in relevant)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(n_rel, 10)))

    def ap(k):
        hits, total = 0, 0.0
        for i, d in enumerate(ranked[:k]):
            if d in relevant:
                hits += 1
                total += hits / (i + 1)
        return total / n_rel

    return {"MRR": rr, "nDCG@10": dcg / idcg, "R@100": len(relevant & set(ranked[:100])) / n_rel,
            "MAP": ap(len(ranked)), "MAP@20": ap(20)}


# ---- fixes ----

def test_held_out_for_reads_a_renamed_copy_of_the_benchmark_file(cocite, tmp_path):
    """A co-citation pipeline reading the benchmark file under another name held out nothing (it looked for
    `cocitations.jsonl` beside the copy); beside a different `cocitations.jsonl` it raised a checksum error."""
    expected = c2d.held_out_sentences(cocite)
    assert len(expected) >= 463  # every test sentence at least
    copy = tmp_path / "acl_records.jsonl"
    shutil.copyfile(cocite / "cocitations.jsonl", copy)
    assert c2d.held_out_for(copy, data=tmp_path / "no-shared-data") == expected  # was set(): all 463 test queries leak
    (tmp_path / "cocitations.jsonl").write_text('{"citing_paper_id": "X", "context": "c", "cited": []}\n')
    assert c2d.held_out_for(copy, data=tmp_path / "no-shared-data") == expected  # was a source_sha256 ValueError
    assert c2d.held_out_for(cocite / "cocitations.jsonl") == expected


def test_to_run_refuses_a_depth_below_one():
    """`to_run(..., -1)` kept all but the last candidate (a slice), `0` an empty ranking, without a word."""
    bench, scores = fake_bench(n_cands=5, n_queries=2)
    for depth in (-1, 0, 2.5, True):
        with pytest.raises(ValueError, match="depth must be a whole number >= 1"):
            to_run(bench, scores, depth)
    assert all(len(r) == 5 for r in to_run(bench, scores, 5).values())
    assert all(len(r) == 3 for r in to_run(bench, scores, np.int64(3)).values())


# ---- checks of what was found correct ----

def test_run_order_and_metrics_match_a_brute_force_loop():
    bench, scores = fake_bench()
    run = to_run(bench, scores, 100)
    values = metrics_of(bench, run)
    by_hand = {m: [] for m in METRICS}
    for i, q in enumerate(bench.queries):
        order = sorted(range(len(bench.candidates)), key=lambda j: (-scores[i, j], j))[:100]  # ties: candidate order
        ranked = [f"P{j:03d}" for j in order]
        assert [d for d, _ in run[q]] == ranked
        for m, v in brute_metrics(set(bench.qrels[q]), ranked).items():
            by_hand[m].append(v)
    for m in METRICS:
        assert values[m] == pytest.approx(float(np.mean(by_hand[m])), abs=1e-12), m


def test_fusion_is_per_query_population_z_scores():
    bench, dense = fake_bench()
    lexical = np.random.default_rng(3).poisson(1.0, size=dense.shape).astype(float)
    lexical[4] = 0.0  # a query sharing no word with any candidate: its BM25 row is constant, z = 0

    def z(x):
        return (x - x.mean()) / x.std() if x.std() > 0 else np.zeros_like(x)

    for alpha in (0.0, 0.815, 1.0):
        expected = np.stack([alpha * z(d) + (1 - alpha) * z(lex) for d, lex in zip(dense, lexical)])
        np.testing.assert_allclose(fuse_dense_bm25(bench, dense, lexical, alpha), expected, atol=1e-12)
    with pytest.raises(ValueError, match="different candidates"):
        fuse_dense_bm25(bench, dense, lexical[:, :-3], 0.5)


class LengthReranker:
    """A stand-in cross-encoder: the logit of a pair is a fixed function of its two texts."""

    def score_pairs(self, pairs):
        return np.array([(len(q) * 7 + sum(map(ord, d))) % 13 for q, d in pairs], dtype=np.float32)


def test_rerank_equals_scoring_the_shortlist_then_sorting():
    bench, scores = fake_bench(n_cands=30, n_queries=6)
    bench.candidates = [Paper(p.paper_id, f"title {p.paper_id}", [f"abstract of {p.paper_id}"])
                        for p in bench.candidates]
    first = to_run(bench, scores, 30)
    cross = cross_scores(bench, first, LengthReranker(), 8)
    texts = {p.paper_id: f"title {p.paper_id} abstract of {p.paper_id}" for p in bench.candidates}
    for q, ranked in first.items():
        head = [d for d, _ in ranked[:8]]
        direct = LengthReranker().score_pairs([(bench.queries[q], texts[d]) for d in head])
        assert cross[q] == dict(zip(head, direct.tolist()))
    reranked = rerank_run(first, cross, 8, 1.0)
    for q, ranked in first.items():
        head = sorted(ranked[:8], key=lambda x: (-cross[q][x[0]], x[0]))  # weight 1: the cross-encoder, ties by id
        assert [d for d, _ in reranked[q][:8]] == [d for d, _ in head]
        assert [d for d, _ in reranked[q][8:]] == [d for d, _ in ranked[8:]]
    res = sweep(bench, first, cross, [4, 8], [0.0, 1.0])
    for key, value in res["table"].items():
        n, w = key.split(":")
        assert value == metrics_of(bench, rerank_run(first, cross, int(n), float(w)))["MRR"]
    assert res["table"]["8:0"] == metrics_of(bench, first)["MRR"]  # weight 0 keeps the first stage


def test_dense_scores_match_min_l2_by_hand_across_chunks(tiny_model_dir):
    from aspire.encoders import load_encoder
    from aspire.evaluate.options import EvalOptions

    words = "the model method result paper task data learning neural network language text".split()
    rng = np.random.default_rng(1)

    def sent():
        return " ".join(rng.choice(words, 6))

    cands = [Paper(f"P{i}", sent(), [sent() for _ in range(rng.integers(1, 4))]) for i in range(5)]
    queries = {f"L{i}": sent() for i in range(18)}  # more than one chunk of 16
    bench = Context2Doc("test", queries, {q: {"P0": 1} for q in queries}, cands, {})
    got, _ = dense_scores(bench, str(tiny_model_dir), "minl2", EvalOptions(cache_dir=None))
    enc = load_encoder(str(tiny_model_dir))
    qb = enc.encode([Paper(q, "", [t]) for q, t in queries.items()])
    cb = enc.encode(cands)
    for i in range(len(queries)):
        qv = qb.emb[i][qb.mask[i]].numpy()
        for j in range(len(cands)):
            cv = cb.emb[j][cb.mask[j]].numpy()
            assert got[i, j] == pytest.approx(-np.sqrt(((qv[:, None] - cv[None]) ** 2).sum(-1)).min(), abs=1e-5)


def test_real_split_is_the_committed_one_and_nothing_leaks(cocite):
    source = cocite / "cocitations.jsonl"
    committed = c2d.load_split(c2d.SPLIT_FILE, source)
    rebuilt = c2d.make_split(source)
    assert rebuilt["checksum"] == committed["checksum"] and rebuilt["splits"] == committed["splits"]
    records = dict(c2d.read_records(source))
    benches = {s: c2d.load_context2doc(cocite, s) for s in c2d.SPLIT_NAMES}
    test = benches["test"]
    assert len(test.queries) == committed["splits"]["test"]["n_queries"] == 463
    assert len(test.candidates) == 768 and test.left_out == []
    cand_ids = {p.paper_id for p in test.candidates}
    test_texts = set(test.queries.values())
    for split, bench in benches.items():
        assert [p.paper_id for p in bench.candidates] == sorted(cand_ids)
        for q, text in bench.queries.items():  # the citing sentence's own cited papers are relevant, all in the pool
            rec = records[q]
            assert text == c2d.query_text(rec["context"]) and bench.citing[q] == rec["citing_paper_id"]
            assert bench.qrels[q] == {c["paper_id"]: 1 for c in rec["cited"]} and set(bench.qrels[q]) <= cand_ids
        if split != "test":
            assert not test_texts & set(bench.queries.values())
            assert not set(bench.citing.values()) & set(test.citing.values())
            assert not {records[q]["context"].strip() for q in bench.queries} & \
                {records[q]["context"].strip() for q in test.queries}
    assert benches["train"].left_out == ["L1623", "L1838"] and benches["dev"].left_out == ["L1317"]
