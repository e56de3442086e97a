"""Round 40: pool sets (`aspire.benchmarks.pools`) and facet-conditional queries (`aspire.evaluate.facets`),
checked against hand-made pool sets, brute-force references and the real CSFCube files."""

import json
from pathlib import Path

import pytest
import torch

from aspire.batch import DocBatch
from aspire.benchmarks.pools import (
    evaluate_pool_set,
    load_pool_set,
    read_ranked,
    read_ranked_pool_set,
    summarize,
    write_ranked,
)
from aspire.data.papers import Paper
from aspire.evaluate.facets import facet_candidates, facet_queries

CSFCUBE = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "csfcube"
L2F = {"background_label": "background", "objective_label": "background", "method_label": "method",
       "result_label": "result"}


def _write(path: Path, obj) -> None:
    path.write_text(json.dumps(obj))


def test_hand_made_pool_set_read_exactly(tmp_path):
    _write(tmp_path / "test-pid2anns-toy-method.json",
           {"q1": {"cands": ["a", 7, "q1", "b"], "relevance_adju": [0, 3, 2, 1.0]},
            "q2": {"cands": [], "relevance_adju": []}})
    _write(tmp_path / "test-pid2anns-toy-result.json", {"q1": {"cands": ["c"], "relevance_adju": [2]}})
    _write(tmp_path / "splits.json", {"g": {"s": ["q1_method", "q1_result"]}})
    ps = load_pool_set(tmp_path, "toy", ["method", "result"], tmp_path / "splits.json")
    assert ps.pools == {"method": {"q1": {"a": 0, "7": 3, "b": 1}, "q2": {}}, "result": {"q1": {"c": 2}}}
    assert list(ps.pools["method"]["q1"]) == ["a", "7", "b"]  # pool order kept
    assert ps.self_in_pool == ["q1_method"]
    assert ps.splits == {"g/s": ["q1_method", "q1_result"]}
    assert ps.query_keys() == ["q1_method", "q2_method", "q1_result"]
    # a query with an empty pool is neither dropped silently: refused, or counted as skipped
    rankings = {"method": {"q1": ["7", "b", "a"], "q2": []}, "result": {"q1": ["c"]}}
    with pytest.raises(ValueError, match="q2_method"):
        evaluate_pool_set(ps, rankings, ["MAP"])
    per_query, skipped = evaluate_pool_set(ps, rankings, ["MAP"], skip_no_relevant=True)
    assert skipped == ["q2_method"] and set(per_query) == {"q1_method", "q1_result"}
    assert per_query["q1_method"]["MAP"] == pytest.approx(1.0)
    # a ranked query that has no pool is refused, not dropped
    with pytest.raises(ValueError, match="without judgements"):
        evaluate_pool_set(ps, {**rankings, "result": {"q1": ["c"], "q9": ["c"]}}, ["MAP"], skip_no_relevant=True)


def test_ranked_file_round_trip(tmp_path):
    ranked = {"q1": [("b", 0.5), ("a", 0.25), ("c", -1e-300)], "q2": [("x", 1 / 3)]}
    path = tmp_path / "test-pid2pool-toy-e-ranked.json"
    write_ranked(path, ranked)
    assert json.loads(path.read_text()) == {q: [[c, s] for c, s in r] for q, r in ranked.items()}
    assert read_ranked(path) == {"q1": ["b", "a", "c"], "q2": ["x"]}


def _batch(papers, include_title):
    sents = [([p.title] if include_title else []) + p.sentences for p in papers]
    s = max(map(len, sents))
    mask = torch.tensor([[j < len(x) for j in range(s)] for x in sents])
    return DocBatch(torch.randn(len(papers), s, 4), mask, [p.paper_id for p in papers], sents)


@pytest.mark.parametrize("include_title", [False, True])
def test_facet_query_keeps_exactly_its_facet_sentences(include_title):
    labels = ["objective_label", "method_label", "other_label", "background_label", "method_label"]
    papers = [Paper("p", "T", [f"s{i}" for i in range(5)], labels),
              Paper("r", "U", ["a", "b"], ["result_label", "other_label"])]
    batch = _batch(papers, include_title)
    off = int(include_title)
    for facet in ("background", "method"):
        if facet == "method":
            with pytest.raises(ValueError, match=r"\['r'\]"):  # no method sentence: refused, never all sentences
                facet_queries(batch, {p.paper_id: p for p in papers}, facet, L2F)
            out = facet_queries(_batch(papers[:1], include_title), {"p": papers[0]}, facet, L2F)
        else:
            out = facet_queries(_batch(papers[:1], include_title), {"p": papers[0]}, facet, L2F)
        want = [j + off for j, lab in enumerate(labels) if L2F.get(lab) == facet]
        assert out.mask[0].nonzero().flatten().tolist() == want
    cands, whole = facet_candidates(batch, {p.paper_id: p for p in papers}, "method", L2F)
    assert whole == ["r"] and torch.equal(cands.mask[1], batch.mask[1])
    assert cands.mask[0].nonzero().flatten().tolist() == [1 + off, 4 + off]


@pytest.mark.skipif(not CSFCUBE.is_dir(), reason="real CSFCube data not present")
def test_real_csfcube_pools_and_sample_rankings():
    facets = ["background", "method", "result"]
    ps = load_pool_set(CSFCUBE, "csfcube", facets, CSFCUBE / "evaluation_splits.json")
    assert {f: len(p) for f, p in ps.pools.items()} == {"background": 16, "method": 17, "result": 17}
    for f in facets:
        raw = json.loads((CSFCUBE / f"test-pid2anns-csfcube-{f}.json").read_text())
        assert list(ps.pools[f]) == list(raw)
        for q, a in raw.items():
            assert ps.pools[f][q] == {str(c): int(g) for c, g in zip(a["cands"], a["relevance_adju"]) if str(c) != q}
    per_query, _ = evaluate_pool_set(ps, read_ranked_pool_set(ps, CSFCUBE / "sample_ranked_pools", "specter"),
                                     ["MAP", "NDCG%20"], threshold=2)
    s = summarize(ps, per_query)
    test_map = {g: 50 * (s[f"split:{g}/fold1_test"]["MAP"] + s[f"split:{g}/fold2_test"]["MAP"])
                for g in ["background", "method", "result", "all"]}
    assert test_map == pytest.approx({"background": 43.95, "method": 22.44, "result": 36.79, "all": 34.23}, abs=0.01)


def test_a_missing_unfaceted_ranked_file_lists_no_faceted_files_as_experiments(tmp_path):
    # the unfaceted pattern test-pid2pool-NAME-*-ranked.json also matches faceted files: the message said the folder
    # held experiments 'specter-background', 'specter-method' (another experiment's facets)
    from aspire.benchmarks.pools import existing_ranked_path, ranked_path

    for facet in ("background", "method"):
        ranked_path(tmp_path, "csfcube", "specter", facet).write_text("{}")
    ranked_path(tmp_path, "csfcube", "plain", "").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"no ranked file of experiment 'bm25'; the folder holds \['plain'\]"):
        existing_ranked_path(tmp_path, "csfcube", "bm25", "")
