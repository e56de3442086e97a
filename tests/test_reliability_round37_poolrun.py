"""Round 37: `aspire.evaluate.pool_run.run_pools` (metric and facet arguments refused before any pool is read,
scores checked against a hand loop) and `aspire.data.cocite.config.FilterConfig` (contradictory bounds)."""

from __future__ import annotations

import csv
import json

import pytest

from aspire.config import ConfigError
from aspire.data.cocite.config import FilterConfig, load_cocite_config
from aspire.evaluate.pool_run import run_pools
from tests.test_evaluate_pools import POOLS, write_toy

RANKED = {"p1": [["p4", 0.9], ["p2", 0.8], ["p3", 0.7], ["p5", 0.1]],
          "p6": [["p2", -1.0], ["p7", -2.0], ["p3", -3.0], ["p8", -4.0]]}


@pytest.fixture()
def toy(tmp_path):
    root = write_toy(tmp_path / "toy")
    (root / "test-pid2pool-toy-manual-ranked.json").write_text(json.dumps(RANKED))
    return root


def _average_precision(ranking, grades, threshold):
    hits, total = 0, 0.0
    for i, cand in enumerate(ranking, 1):
        if grades[cand] >= threshold:
            hits += 1
            total += hits / i
    n_rel = sum(g >= threshold for g in grades.values())
    return total / n_rel


def test_ranked_files_score_every_candidate_once_as_a_hand_loop_does(toy, tmp_path):
    res = run_pools(toy, "toy", tmp_path / "o", metrics=("MAP", "P@5"), ranked_dir=toy, exp="manual")
    aps = {}
    for q, pool in POOLS.items():
        grades = {c: g for c, g in zip(pool["cands"], pool["relevance_adju"]) if c != q}  # the query leaves its pool
        ranking = [c for c, _ in RANKED[q]]
        assert sorted(ranking) == sorted(grades)  # every candidate once, none dropped
        aps[q] = _average_precision(ranking, grades, 1)
    assert res["summary"]["all"]["MAP"] == pytest.approx(100 * sum(aps.values()) / len(aps))
    with open(tmp_path / "o" / "perq.csv") as fh:
        rows = {r["query"]: float(r["MAP"]) for r in csv.DictReader(fh)}
    assert rows == pytest.approx({q: 100 * ap for q, ap in aps.items()}, abs=1e-4)


@pytest.mark.parametrize("kw, error, message", [
    ({"metrics": ()}, ValueError, "no metrics to score"),
    ({"metrics": ("MAP", "P@5", "MAP")}, ValueError, r"metrics named more than once: \['MAP'\]"),
    ({"metrics": "MAP"}, TypeError, "metrics must be a list of names, got the string 'MAP'"),
    ({"facets": "method"}, TypeError, "facets must be a list of names, got the string 'method'"),
])
def test_metrics_and_facets_that_cannot_be_meant_are_refused(toy, tmp_path, kw, error, message):
    with pytest.raises(error, match=message):
        run_pools(toy, "toy", tmp_path / "o", ranked_dir=toy, exp="manual", **kw)
    assert not (tmp_path / "o").exists()  # refused before anything was written


@pytest.mark.parametrize("overrides, message", [
    (["filter.min_context_tokens=10", "filter.max_context_tokens=5"],
     "filter.min_context_tokens=10 is above filter.max_context_tokens=5: no context could pass"),
    (["filter.min_abstract_sentences=30"],
     "filter.min_abstract_sentences=30 is above filter.max_abstract_sentences=20: no abstract could pass"),
])
def test_filter_bounds_that_cannot_both_hold_are_refused_at_load(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_cocite_config(None, overrides)
    with pytest.raises(ConfigError, match=message):  # built in code too
        FilterConfig(**{o.split("=")[0].split(".")[1]: int(o.split("=")[1]) for o in overrides})


@pytest.mark.parametrize("overrides", [
    ["filter.min_context_tokens=5", "filter.max_context_tokens=5"],  # equal bounds keep contexts of 5 tokens
    ["filter.min_context_tokens=100", "filter.max_context_tokens=null"],  # an upper bound switched off
    ["filter.min_abstract_sentences=null", "filter.max_abstract_sentences=0"],
])
def test_filter_bounds_that_can_hold_still_load(overrides):
    cfg = load_cocite_config(None, overrides).filter
    for o in overrides:
        key, value = o.split("=")
        assert getattr(cfg, key.split(".")[1]) == (None if value == "null" else int(value))


def test_unknown_filter_key_is_refused_listing_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['filter.max_cites'\]; valid keys under "
                                          r"filter: \['bad_abstract', 'confirmed_only'"):
        load_cocite_config(None, ["filter.max_cites=4"])
