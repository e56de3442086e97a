"""Round 44: `aspire.evaluate.compare` (paired comparison of two TREC runs) and `aspire.retrieval.rerank` against
independent references: per-query AP / nDCG / RR by hand, the p-value against an exact enumeration of every swap,
mismatched query sets refused naming the run; rerank's k best by a stable sort of the stage's scores (ties:
shortlist order), each stage's scores equal to the scorer applied directly, hybrid shares summing to the score,
an unknown stage refused listing the valid ones."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from aspire.evaluate.compare import compare
from aspire.index.config import checked_search_config
from aspire.retrieval.rerank import RERANK_STAGES, hybrid_shares, rerank
from tests.test_reliability_round23_retrieval import _random_searcher

QRELS = {"q1": {"d1": 2, "d3": 1, "d9": 1}, "q2": {"d2": 1}, "q3": {"d4": 1, "d5": 3}, "q4": {"d6": 1}}
RUN_A = {"q1": ["d1", "d2", "d3", "d4"], "q2": ["d5", "d2", "d1"], "q3": ["d5", "d4", "d1"], "q4": ["d1", "d6"]}
RUN_B = {"q1": ["d2", "d3", "d1", "d4"], "q2": ["d2", "d5", "d1"], "q3": ["d1", "d4", "d5"], "q4": ["d2", "d1"]}


def _write(path, run):
    path.write_text("".join(f"{q} Q0 {d} {r + 1} {len(ds) - r} t\n" for q, ds in run.items() for r, d in enumerate(ds)))
    return str(path)


def _qrels(path, qrels=QRELS):
    path.write_text("".join(f"{q} 0 {d} {g}\n" for q, j in qrels.items() for d, g in j.items()))
    return str(path)


def _ap(ranked, judged):
    rel = {d for d, g in judged.items() if g > 0}
    hits, total = 0, 0.0
    for i, d in enumerate(ranked, 1):
        if d in rel:
            hits += 1
            total += hits / i
    return total / len(rel)


def _rr(ranked, judged):
    return next((1 / i for i, d in enumerate(ranked, 1) if judged.get(d, 0) > 0), 0.0)


def _ndcg(ranked, judged, k):
    dcg = sum(judged.get(d, 0) / math.log2(i + 1) for i, d in enumerate(ranked[:k], 1))
    ideal = sorted(judged.values(), reverse=True)[:k]
    return dcg / sum(g / math.log2(i + 1) for i, g in enumerate(ideal, 1))


def _exact_p(a, b):
    """Exact paired randomisation p over every one of the 2^n swaps (|mean delta| reaching the observed)."""
    d = np.array(a) - np.array(b)
    obs = abs(d.mean())
    signs = list(itertools.product((1, -1), repeat=len(d)))
    return sum(abs((np.array(s) * d).mean()) >= obs - 1e-12 for s in signs) / len(signs)


def test_compare_per_query_metrics_equal_hand_computed_and_p_value_the_exact_test(tmp_path):
    a, b, qrels = _write(tmp_path / "a.run", RUN_A), _write(tmp_path / "b.run", RUN_B), _qrels(tmp_path / "q.txt")
    out = compare(a, b, qrels, ["MAP", "MRR", "nDCG@3"], n_perm=20000)
    for m, fn in (("MAP", _ap), ("MRR", _rr), ("nDCG@3", lambda r, j: _ndcg(r, j, 3))):
        va = {q: fn(RUN_A[q], QRELS[q]) for q in QRELS}
        vb = {q: fn(RUN_B[q], QRELS[q]) for q in QRELS}
        assert out[m]["per_unit_delta"] == pytest.approx({q: va[q] - vb[q] for q in QRELS}, abs=1e-9)
        assert out[m]["a"] == pytest.approx(np.mean(list(va.values())))
        assert out[m]["b"] == pytest.approx(np.mean(list(vb.values())))
        qs = sorted(QRELS)
        exact = _exact_p([va[q] for q in qs], [vb[q] for q in qs])
        assert out[m]["p_value"] == pytest.approx(exact, abs=0.02)  # 20000 random swaps of an exact 2^4 test


def test_compare_identical_runs_give_p_one_and_zero_deltas(tmp_path):
    a, qrels = _write(tmp_path / "a.run", RUN_A), _qrels(tmp_path / "q.txt")
    out = compare(a, a, qrels, ["MAP"], n_perm=50)
    assert out["MAP"]["p_value"] == 1.0 and set(out["MAP"]["per_unit_delta"].values()) == {0.0}


def test_compare_refuses_runs_over_other_queries_naming_the_run(tmp_path):
    a, qrels = _write(tmp_path / "a.run", RUN_A), _qrels(tmp_path / "q.txt")
    b = _write(tmp_path / "b.run", {q: r for q, r in RUN_B.items() if q != "q3"})
    with pytest.raises(ValueError, match=r"b\.run.*q3"):
        compare(a, b, qrels, ["MAP"], n_perm=5)


def test_compare_refuses_results_folders_with_other_qrels(tmp_path):
    folders = []
    for name, run, qrels in (("a", RUN_A, QRELS), ("b", RUN_A, {**QRELS, "q4": {"d6": 1, "d1": 1}})):
        (tmp_path / name).mkdir()
        _write(tmp_path / name / "run.trec", run)
        _qrels(tmp_path / name / "qrels.trec", qrels)
        folders.append(str(tmp_path / name))
    with pytest.raises(ValueError, match="different qrels"):
        compare(*folders, n_perm=5)


def test_compare_ties_in_scores_ordered_by_rank_then_score_then_document(tmp_path):
    """read_run's order: a run whose ranks tie (all rank 1, equal score) reads by document id; d1 before d3."""
    a = tmp_path / "a.run"
    a.write_text("q1 Q0 d3 1 1.0 t\nq1 Q0 d1 1 1.0 t\n")
    b = _write(tmp_path / "b.run", {"q1": ["d1", "d3"]})
    q = _qrels(tmp_path / "q.txt", {"q1": {"d1": 1}})
    out = compare(str(a), b, q, ["MRR"], n_perm=5)
    assert out["MRR"]["per_unit_delta"] == {"q1": 0.0}


# ---- rerank ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def searcher():
    return _random_searcher(P=14, seed=3)


@pytest.mark.parametrize("stage", ["minl2", "hybrid"])
def test_rerank_keeps_the_k_best_by_a_stable_sort_and_scores_equal_the_scorer(searcher, stage):
    from aspire.scoring.chunked import score_chunked

    query = searcher.query_from_index("p2")
    papers = np.array([p for p in range(searcher.index.n_papers) if searcher.index.paper_ids[p] != "p2"])[::-1].copy()
    cfg = checked_search_config(searcher.config, k=4, rerank=stage, shortlist=len(papers))
    pool = searcher.index.gather(papers, device=query.device, dtype=query.emb.dtype, texts=False)
    direct = score_chunked(searcher.scorer(stage, cfg), query, pool)[0].float().numpy()
    direct2 = searcher.scorer(stage, cfg).score(query, pool)[0].float().numpy()
    np.testing.assert_allclose(direct, direct2, atol=1e-5)
    chosen, final, stages, alignment = rerank(searcher, query, papers, np.zeros(len(papers)), cfg)
    order = sorted(range(len(papers)), key=lambda i: (-direct[i], i))[:4]
    assert chosen.tolist() == papers[order].tolist()
    np.testing.assert_allclose(final, direct[order], atol=1e-5)
    assert [s[stage] for s in stages] == pytest.approx(final.tolist(), abs=1e-6)
    assert alignment is None
    if stage == "hybrid":
        for s in stages:
            assert s["hybrid/whole"] + s["hybrid/facet"] == pytest.approx(s["hybrid"], abs=1e-5)
        shares = hybrid_shares(searcher, query, papers[order], cfg)
        assert [sum(x.values()) for x in shares] == pytest.approx(direct[order].tolist(), abs=1e-5)


def test_rerank_ties_keep_the_shortlist_order(searcher, monkeypatch):
    query = searcher.query_from_index("p2")
    papers = np.array([9, 4, 7, 1, 3])
    monkeypatch.setitem(RERANK_STAGES, "minl2", lambda s, q, p, c: (np.array([1.0, 2.0, 2.0, 1.0, 2.0]), None))
    cfg = checked_search_config(searcher.config, k=4, rerank="minl2", shortlist=5)
    chosen, final, _, _ = rerank(searcher, query, papers, np.zeros(5), cfg)
    assert chosen.tolist() == [4, 7, 3, 9] and final.tolist() == [2.0, 2.0, 2.0, 1.0]


def test_rerank_refuses_an_unknown_stage_listing_the_valid_ones(searcher):
    from types import SimpleNamespace

    query = searcher.query_from_index("p2")
    with pytest.raises(ValueError, match="unknown re-ranker 'bogus'.*minl2, ot, maxpassage, hybrid"):
        rerank(searcher, query, np.array([0, 1]), np.zeros(2), SimpleNamespace(rerank="bogus", k=1))
