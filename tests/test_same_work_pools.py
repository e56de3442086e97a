"""experiments/same_work_pools.py's counting: one work under two ids in a query's judged pool."""

from __future__ import annotations

from tests.test_reliability_round10_experiments import _script

OTHERS = {"a1": {"a2"}, "a2": {"a1"}, "b1": {"b2"}, "b2": {"b1"}}  # two works, each under two ids


def test_each_kind_is_counted_for_the_queries_it_holds_for():
    counts = _script("same_work_pools").pool_counts({
        "a1": {"a2": 1, "x": 0},  # its own other version is a candidate
        "q1": {"b1": 1, "b2": 0, "x": 0},  # one work relevant and not
        "q2": {"b1": 1, "b2": 1},  # one work counted as two relevant papers
        "q3": {"b1": 0, "b2": 0, "x": 1},  # both versions non-relevant: nothing wrong
        "q4": {"a1": 1, "x": 0},  # a1's version a2 is outside the pool: nothing wrong
    }, OTHERS)
    assert counts["own version a candidate"] == ["a1"]
    assert counts["one work relevant and not"] == ["q1"]
    assert counts["one work relevant twice"] == ["q2"]


def test_a_query_s_own_version_is_not_read_as_one_work_among_its_candidates():
    counts = _script("same_work_pools").pool_counts({"a1": {"a2": 1, "b1": 1, "b2": 1}}, OTHERS)
    assert counts["own version a candidate"] == ["a1"] and counts["one work relevant twice"] == ["a1"]
    assert counts["one work relevant and not"] == []
