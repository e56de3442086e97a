"""CSFCube evaluation and benchmark pools, round 30: malformed pool records and splits refused by query and split,
metric names checked before a model ranks, the suite's runner lookup listing its runners; and the pools, splits
and per-facet aggregation checked against the real files and a hand computation."""

from __future__ import annotations

import json
import math

import pytest

from aspire.benchmarks import csfcube
from aspire.benchmarks.pools import evaluate_pool_set, load_pool_set, summarize
from aspire.evaluate import pool_run, suite


def _anns(root, anns, facet="a", splits=None):
    (root / f"test-pid2anns-x-{facet}.json").write_text(json.dumps(anns))
    if splits is None:
        return None
    (root / "splits.json").write_text(json.dumps(splits))
    return root / "splits.json"


@pytest.mark.parametrize("bad", [None, 1.5, ["b"], True])
def test_a_candidate_id_that_is_no_string_or_integer_is_refused_by_query(tmp_path, bad):
    # once: null, 1.5, ["b"] and true were kept as the candidates 'None', '1.5', "['b']" and 'True'
    _anns(tmp_path, {"q1": {"cands": [bad, "c"], "relevance_adju": [2, 0]}})
    with pytest.raises(ValueError, match=r"query q1: candidate ids must be strings or integers"):
        load_pool_set(tmp_path, "x", ["a"])


def test_integer_candidate_ids_are_still_read(tmp_path):
    _anns(tmp_path, {"7": {"cands": [7, 8, 9], "relevance_adju": [3, 1, 0]}})
    pool_set = load_pool_set(tmp_path, "x", ["a"])
    assert pool_set.pools == {"a": {"7": {"8": 1, "9": 0}}} and pool_set.self_in_pool == ["7_a"]


def test_the_query_own_entry_grade_is_checked_too(tmp_path):
    # once: the grade beside the query's own id went unread (the entry is dropped), so "bad" passed
    _anns(tmp_path, {"q1": {"cands": ["q1", "c"], "relevance_adju": ["bad", 2]}})
    with pytest.raises(ValueError, match=r"query q1 candidate q1: relevance grade 'bad' is not a number"):
        load_pool_set(tmp_path, "x", ["a"])


def test_an_annotation_file_with_no_query_is_refused(tmp_path):
    # once: a facet of no queries, left out of every mean (and of summarize's groups) without a word
    _anns(tmp_path, {"q1": {"cands": ["b", "c"], "relevance_adju": [2, 0]}}, facet="a")
    _anns(tmp_path, {}, facet="b")
    with pytest.raises(ValueError, match=r"test-pid2anns-x-b\.json: the annotation file holds no query"):
        load_pool_set(tmp_path, "x", ["a", "b"])


@pytest.mark.parametrize("splits, name", [({"s1": [], "s2": ["q1_a"]}, "split 's1' names no query"),
                                          ({"all": {"fold1_test": []}}, "split 'all/fold1_test' names no query"),
                                          ({"all": {}}, "split group 'all' holds no splits")])
def test_an_empty_split_or_split_group_is_refused_by_name(tmp_path, splits, name):
    # once: an empty split was dropped from summarize's groups (CSFCube: "mean over an empty query list", no split
    # named), and a group of no splits flattened to a splits file of none
    path = _anns(tmp_path, {"q1": {"cands": ["b", "c"], "relevance_adju": [2, 0]}}, splits=splits)
    with pytest.raises(ValueError, match=name):
        load_pool_set(tmp_path, "x", ["a"], path)


def test_get_runner_lists_the_benchmarks_that_have_runners():
    with pytest.raises(ValueError, match=r"'typo' has no runner .*valid: csfcube, reviewers, context2doc"):
        suite.get_runner("typo")
    assert suite.get_runner("csfcube").compare is not None


def test_run_pools_refuses_a_bad_metric_before_any_pool_is_ranked(tmp_path, monkeypatch):
    import aspire.evaluate.rank as rank

    ranked = []
    monkeypatch.setattr(rank, "rank_pool_set", lambda *a, **k: ranked.append(a) or ({}, {}))
    _anns(tmp_path, {"q1": {"cands": ["b", "c"], "relevance_adju": [2, 0]}})
    (tmp_path / "abstracts-x.jsonl").write_text("".join(
        json.dumps({"paper_id": p, "title": p, "abstract": ["s."]}) + "\n" for p in ("q1", "b", "c")))
    # once: the model encoded and ranked every pool first, and the typo was refused by the scoring after it
    with pytest.raises(ValueError, match=r"unknown metric 'MAPP'"):
        pool_run.run_pools(tmp_path, "x", tmp_path / "out", facets=["a"], metrics=["MAPP"], model="m", scorer="minl2")
    assert ranked == []


# ---- references --------------------------------------------------------------------------------------------------

def test_real_csfcube_pools_and_folds_match_the_files(shared_data):
    """The data README: 50 facet-queries (background 16, method 17, result 17), pools of 88-253 candidates, 4,205
    distinct papers; the folds read from evaluation_splits.json as written there; a query in its own pool dropped."""
    root = shared_data / "csfcube"
    pool_set = csfcube.load_csfcube(root)
    assert {f: len(pool_set.pools[f]) for f in csfcube.FACETS} == {"background": 16, "method": 17, "result": 17}
    assert len(pool_set.paper_ids()) == 4205
    raw_splits = json.loads((root / "evaluation_splits.json").read_text())
    for facet in csfcube.FACETS:
        raw = json.loads((root / f"test-pid2anns-csfcube-{facet}.json").read_text())
        assert set(raw) == set(pool_set.pools[facet])
        for qid, ann in raw.items():
            grades = dict(zip(ann["cands"], ann["relevance_adju"]))
            grades.pop(qid, None)
            assert pool_set.pools[facet][qid] == grades  # pool order and grades as in the file, less the query
            assert (qid in ann["cands"]) == (f"{qid}_{facet}" in pool_set.self_in_pool)
        sizes = [len(a["cands"]) for a in raw.values()]
        assert 88 <= min(sizes) and max(sizes) <= 253
    assert min(len(a["cands"]) for f in csfcube.FACETS
               for a in json.loads((root / f"test-pid2anns-csfcube-{f}.json").read_text()).values()) == 88
    for group, inner in raw_splits.items():
        for fold, keys in inner.items():
            assert pool_set.splits[f"{group}/{fold}"] == keys
    for fold in ("fold1_test", "fold2_test"):  # every facet fold is the `all` fold's queries of that facet
        for facet in csfcube.FACETS:
            assert set(pool_set.splits[f"{facet}/{fold}"]) == {
                k for k in pool_set.splits[f"all/{fold}"] if k.endswith("_" + facet)}
    assert sorted(pool_set.splits["all/fold1_test"] + pool_set.splits["all/fold2_test"]) == sorted(
        pool_set.query_keys())


def _brute_ap(grades, threshold):
    hits, total = 0, 0.0
    for i, g in enumerate(grades, 1):
        if g >= threshold:
            hits += 1
            total += hits / i
    return total / sum(g >= threshold for g in grades)


def _brute_ndcg(grades, k):
    disc = [1.0 if i == 1 else math.log2(i) for i in range(1, len(grades) + 1)]
    dcg = sum(g / d for g, d in zip(grades[:k], disc))
    ideal = sum(g / d for g, d in zip(sorted(grades, reverse=True)[:k], disc))
    return dcg / ideal


def test_per_facet_and_overall_means_by_hand(tmp_path):
    """A tiny two-facet pool: each query's MAP and NDCG%20 by a loop, `summarize`'s groups their plain means."""
    pools = {"a": {"q1": {"cands": ["q1", *"bcdefghij"], "relevance_adju": [3, 0, 2, 0, 0, 3, 1, 0, 0, 2]},
                   "q2": {"cands": list("bcdefghijk"), "relevance_adju": [1, 2, 0, 0, 0, 0, 3, 0, 0, 0]}},
              "b": {"q1": {"cands": list("bcdefghijk"), "relevance_adju": [0, 0, 0, 2, 0, 0, 0, 0, 0, 2]}}}
    for facet, anns in pools.items():
        _anns(tmp_path, anns, facet=facet)
    (tmp_path / "s.json").write_text(json.dumps({"g": {"one": ["q1_a", "q1_b"], "two": ["q2_a"]}}))
    pool_set = load_pool_set(tmp_path, "x", ["a", "b"], tmp_path / "s.json")
    rankings = {f: {q: sorted(p, reverse=True) for q, p in pool_set.pools[f].items()} for f in pool_set.facets}
    per_query, skipped = evaluate_pool_set(pool_set, rankings, ["MAP", "NDCG%20"], threshold=2)
    assert skipped == []
    want = {}
    for f, anns in pools.items():
        for q, ann in anns.items():
            grade = {c: g for c, g in zip(ann["cands"], ann["relevance_adju"]) if c != q}
            ranked = [grade[c] for c in sorted(grade, reverse=True)]
            want[f"{q}_{f}"] = {"MAP": _brute_ap(ranked, 2), "NDCG%20": _brute_ndcg(ranked, max(1, len(ranked) // 5))}
    assert per_query.keys() == want.keys()
    for key in want:
        for m in ("MAP", "NDCG%20"):
            assert per_query[key][m] == pytest.approx(want[key][m], abs=1e-9)
    # q1_a's pool is 9 long: NDCG%20 at k = 1 (floor of 1.8), the others (10) at k = 2
    assert want["q1_a"]["NDCG%20"] == pytest.approx(2 / 3)  # j (grade 2) ranks first; the ideal's first is f (3)
    summary = summarize(pool_set, per_query)
    mean = lambda keys, m: sum(want[k][m] for k in keys) / len(keys)  # noqa: E731
    for group, keys in {"all": list(want), "facet:a": ["q1_a", "q2_a"], "facet:b": ["q1_b"],
                        "split:g/one": ["q1_a", "q1_b"], "split:g/two": ["q2_a"]}.items():
        assert summary[group]["n_queries"] == len(keys)
        for m in ("MAP", "NDCG%20"):
            assert summary[group][m] == pytest.approx(mean(keys, m), abs=1e-9)
