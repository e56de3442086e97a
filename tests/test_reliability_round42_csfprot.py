"""Round 42: CSFCube as published (aspire.benchmarks.csfcube) and the two-fold choice (aspire.evaluate.two_fold),
checked against hand computations on tiny pools and adversarial test figures."""

import json
import logging
import math

import pytest

from aspire.benchmarks import csfcube
from aspire.benchmarks.csfcube import FACETS, GROUPS
from aspire.evaluate import two_fold

# Per facet, two queries (one per fold); 10 candidates each (NDCG%20 cut-off int(0.2 * 10) = 2).
GRADES = [3, 0, 2, 1, 0, 2, 0, 0, 1, 0]


def _write_set(root, self_in_pool=True):
    splits = {g: {"fold1_test": [], "fold2_test": [], "fold1_dev": [], "fold2_dev": []} for g in GROUPS}
    for facet in FACETS:
        ann = {}
        for half in (1, 2):
            qid = f"q{facet[0]}{half}"
            cands = [f"{qid}c{i}" for i in range(10)]
            grades = list(GRADES)
            if self_in_pool and facet == "background" and half == 1:
                cands, grades = [qid] + cands, [3] + grades  # the query in its own pool, graded 3
            ann[qid] = {"cands": cands, "relevance_adju": grades}
            key = f"{qid}_{facet}"
            for g in (facet, "all"):
                splits[g][f"fold{half}_test"].append(key)
                splits[g][f"fold{3 - half}_dev"].append(key)
        (root / f"test-pid2anns-csfcube-{facet}.json").write_text(json.dumps(ann))
    (root / "evaluation_splits.json").write_text(json.dumps(splits))
    (root / csfcube.ABSTRACTS_FILE).write_text("")
    return csfcube.load_csfcube(root)


def _hand_ap(grades):
    hits, total = 0, 0.0
    for i, g in enumerate(grades, 1):
        if g >= 2:
            hits += 1
            total += hits / i
    return total / sum(g >= 2 for g in grades)


def _hand_ndcg(grades, k):
    def dcg(gs):
        return sum(g / (1.0 if i == 1 else math.log2(i)) for i, g in enumerate(gs[:k], 1))
    return dcg(grades) / dcg(sorted(grades, reverse=True))


def _rankings(pool_set, orders):
    return {f: {q: [f"{q}c{i}" for i in orders[(f, q)]] for q in pool_set.pools[f]} for f in FACETS}


def test_map_and_ndcg20_match_a_hand_computation_and_the_two_fold_mean(tmp_path):
    pool_set = _write_set(tmp_path)
    orders = {(f, q): list(range(10)) if q.endswith("1") else list(reversed(range(10)))
              for f in FACETS for q in pool_set.pools[f]}
    results, per_query = csfcube.evaluate_csfcube_rankings(tmp_path, _rankings(pool_set, orders), pool_set)
    fwd, rev = GRADES, list(reversed(GRADES))
    for facet in FACETS:
        for half, grades in ((1, fwd), (2, rev)):
            key = f"q{facet[0]}{half}_{facet}"
            assert per_query[key]["MAP"] == pytest.approx(_hand_ap(grades))
            assert per_query[key]["NDCG%20"] == pytest.approx(_hand_ndcg(grades, 2))
    # the hand figures: forward AP = (1 + 2/3 + 3/6) / 3, reverse NDCG%20 = 0 + 1/log2(2)... over ideal 3 + 2
    assert _hand_ap(fwd) == pytest.approx((1 + 2 / 3 + 3 / 6) / 3)
    assert _hand_ndcg(rev, 2) == pytest.approx((0 + 1 / 1.0) / (3 + 2 / 1.0))
    for g in GROUPS:
        assert results["test"][g]["MAP"] == pytest.approx(100 * (_hand_ap(fwd) + _hand_ap(rev)) / 2)
        assert results["dev"][g]["MAP"] == pytest.approx(100 * _hand_ap(rev))  # fold1_dev = the fold2_test queries
    assert results["self_in_pool_removed"] == ["qb1_background"]


def test_a_query_in_its_own_pool_is_left_out_and_a_ranking_holding_it_is_refused(tmp_path):
    pool_set = _write_set(tmp_path)
    assert "qb1" not in pool_set.pools["background"]["qb1"] and len(pool_set.pools["background"]["qb1"]) == 10
    orders = {(f, q): list(range(10)) for f in FACETS for q in pool_set.pools[f]}
    rankings = _rankings(pool_set, orders)
    rankings["background"]["qb1"] = ["qb1"] + rankings["background"]["qb1"]
    with pytest.raises(ValueError, match="qb1"):
        csfcube.evaluate_csfcube_rankings(tmp_path, rankings, pool_set)


@pytest.mark.parametrize("change", ["missing", "extra", "repeated"])
def test_missing_extra_or_repeated_candidates_are_refused_naming_the_query(tmp_path, change):
    pool_set = _write_set(tmp_path)
    rankings = _rankings(pool_set, {(f, q): list(range(10)) for f in FACETS for q in pool_set.pools[f]})
    ranked = rankings["method"]["qm2"]
    if change == "missing":
        ranked.pop()
    elif change == "extra":
        ranked.append("stranger")
    else:
        ranked[-1] = ranked[0]
    with pytest.raises(ValueError, match="qm2"):
        csfcube.evaluate_csfcube_rankings(tmp_path, rankings, pool_set)


def test_ranked_dir_and_missing_files_name_what_is_missing(tmp_path):
    pool_set = _write_set(tmp_path)
    assert csfcube.missing_files(tmp_path) == []
    (tmp_path / "test-pid2anns-csfcube-result.json").unlink()
    assert csfcube.missing_files(tmp_path) == ["test-pid2anns-csfcube-result.json"]
    with pytest.raises((FileNotFoundError, ValueError), match="result"):
        csfcube.load_csfcube(tmp_path)
    _write_set(tmp_path)
    with pytest.raises(FileNotFoundError, match="nope"):
        csfcube.evaluate_ranked_dir(tmp_path, tmp_path, "nope")
    assert pool_set.fingerprint() == csfcube.load_csfcube(tmp_path).fingerprint()


def test_per_query_csv_and_test_units_agree_with_the_protocol(tmp_path):
    pool_set = _write_set(tmp_path)
    orders = {(f, q): list(range(10)) if q.endswith("1") else list(reversed(range(10)))
              for f in FACETS for q in pool_set.pools[f]}
    results, per_query = csfcube.evaluate_csfcube_rankings(tmp_path, _rankings(pool_set, orders), pool_set)
    out = tmp_path / "run"
    csfcube.write_results(out, tmp_path, "x", results, per_query, pool_set)
    rows = two_fold.load_per_query(out)
    assert len(rows) == 6 and rows["qb1_background"]["test_fold"] == "fold1_test"
    assert rows["qb2_background"]["MAP"] == pytest.approx(100 * _hand_ap(list(reversed(GRADES))), abs=1e-4)
    units = csfcube.test_units(pool_set, per_query, "MAP")
    assert units.value() == pytest.approx(results["test"]["all"]["MAP"])
    assert csfcube.format_table(results).startswith(
        f"background: {results['test']['background']['MAP']:.2f} / {results['test']['background']['NDCG%20']:.2f}")


def _doc(dev: dict, test: dict) -> dict:
    """results.json with `dev[fold]` on each group's foldK_dev and `test[fold]` on foldK_test."""
    return {"judged_set": "abc", "folds": {g: {**{f"{k}_dev": {"MAP": v, "NDCG%20": v} for k, v in dev.items()},
                                              **{f"{k}_test": {"MAP": v, "NDCG%20": v} for k, v in test.items()}}
                                          for g in GROUPS}}


def test_two_fold_choice_never_reads_a_test_figure():
    # `cheat` has the best test halves by far but the worst dev halves; it must never be chosen.
    candidates = {"cheat": _doc({"fold1": 1, "fold2": 1}, {"fold1": 99, "fold2": 99}),
                  "a": _doc({"fold1": 50, "fold2": 10}, {"fold1": 30, "fold2": 7}),
                  "b": _doc({"fold1": 10, "fold2": 50}, {"fold1": 5, "fold2": 40})}
    result = two_fold.select_two_fold(candidates)
    assert result["chosen"] == {"fold1": "a", "fold2": "b"}
    assert result["test"]["all"]["MAP"] == pytest.approx((30 + 40) / 2)


def test_two_fold_ties_go_to_the_first_candidate_with_a_warning(caplog):
    candidates = {"z": _doc({"fold1": 20, "fold2": 20}, {"fold1": 1, "fold2": 2}),
                  "a": _doc({"fold1": 20, "fold2": 20}, {"fold1": 90, "fold2": 90})}
    with caplog.at_level(logging.WARNING):
        result = two_fold.select_two_fold(candidates)
    assert result["chosen"] == {"fold1": "z", "fold2": "z"}
    assert result["test"]["all"]["MAP"] == pytest.approx(1.5)
    assert "tie" in caplog.text and "z" in caplog.text and "a" in caplog.text


def test_two_fold_refuses_a_missing_or_infinite_dev_figure_naming_the_candidate():
    bad = _doc({"fold1": 20, "fold2": 20}, {"fold1": 1, "fold2": 2})
    bad["folds"]["all"]["fold2_dev"]["MAP"] = float("inf")
    with pytest.raises(ValueError, match="bad.*fold2_dev"):
        two_fold.select_two_fold({"ok": _doc({"fold1": 1, "fold2": 1}, {"fold1": 1, "fold2": 1}), "bad": bad})


def test_choose_names_a_bad_or_missing_results_file(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(FileNotFoundError, match="a"):
        two_fold.choose([tmp_path / "a"])
    (tmp_path / "a" / "results.json").write_text("{not json")
    with pytest.raises(ValueError, match="results.json"):
        two_fold.choose([tmp_path / "a"])


def test_a_splits_file_lacking_a_protocol_split_is_refused_at_load_naming_it(tmp_path):
    _write_set(tmp_path)
    splits = json.loads((tmp_path / "evaluation_splits.json").read_text())
    del splits["method"]["fold2_dev"]
    (tmp_path / "evaluation_splits.json").write_text(json.dumps(splits))
    with pytest.raises(ValueError, match="evaluation_splits.json.*method/fold2_dev"):
        csfcube.load_csfcube(tmp_path)


def test_test_units_refuses_an_unknown_metric_or_group_listing_the_valid_ones(tmp_path):
    pool_set = _write_set(tmp_path)
    rankings = _rankings(pool_set, {(f, q): list(range(10)) for f in FACETS for q in pool_set.pools[f]})
    _, per_query = csfcube.evaluate_csfcube_rankings(tmp_path, rankings, pool_set)
    with pytest.raises(ValueError, match="unknown metric 'map'.*NDCG%20"):
        csfcube.test_units(pool_set, per_query, "map")
    with pytest.raises(ValueError, match="unknown group 'Method'.*background"):
        csfcube.test_units(pool_set, per_query, "MAP", "Method")
    assert csfcube.test_units(pool_set, per_query, "MAP", "method").value() == pytest.approx(100 * _hand_ap(GRADES))
