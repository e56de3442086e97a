"""Round 44: aspire/evaluate/fuse.py checked against hand computations (numpy z-score / min-max, 1 / (k + rank));
a ranked file holding a query twice, a score past the float range and string scores are refused by name."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from aspire.evaluate.fuse import check_finite, fuse_runs, fuse_scores, read_scored


def _write(path, obj_or_text):
    path.write_text(obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text), encoding="utf-8")
    return path


def test_fused_scores_equal_a_hand_z_minmax_and_rrf_over_a_similarity_and_a_distance_file(tmp_path):
    sims = _write(tmp_path / "sims.json", {"q": [["c1", 3.0], ["c3", 2.0], ["c2", 1.0]]})
    dists = _write(tmp_path / "dists.json", {"q": [["c2", 10.0], ["c3", 20.0], ["c1", 30.0]]})  # rising: distances
    a, b = read_scored(sims), read_scored(dists)
    assert b == {"q": {"c2": -10.0, "c3": -20.0, "c1": -30.0}}
    docs = ["c1", "c2", "c3"]
    va, vb = np.array([3.0, 1.0, 2.0]), np.array([-30.0, -10.0, -20.0])
    for norm, f in (("z", lambda v: (v - v.mean()) / v.std()),
                    ("minmax", lambda v: (v - v.min()) / (v.max() - v.min()))):
        want = dict(zip(docs, 0.7 * f(va) + 0.3 * f(vb)))
        got = dict(fuse_scores([a, b], [0.7, 0.3], norm)["q"])
        assert got.keys() == want.keys() and all(got[d] == pytest.approx(want[d], abs=1e-12) for d in docs)
    ranks_a, ranks_b = {"c1": 1, "c3": 2, "c2": 3}, {"c2": 1, "c3": 2, "c1": 3}
    want = {d: 0.5 / (60 + ranks_a[d]) + 0.5 / (60 + ranks_b[d]) for d in docs}
    got = fuse_scores([a, b], norm="rrf")["q"]
    assert [d for d, _ in got] == ["c1", "c2", "c3"]  # c1 and c2 tie: by document id
    assert all(s == pytest.approx(want[d], abs=1e-15) for d, s in got)


def test_a_run_fused_with_itself_keeps_its_ranking_and_ties_go_by_document_id():
    run = {"q": [("d", 0.9), ("b", 0.5), ("a", 0.5), ("c", 0.1)]}
    for fusion in ("z", "minmax"):
        assert [d for d, _ in fuse_runs([run, run], fusion=fusion)["q"]] == ["d", "a", "b", "c"]
    assert [d for d, _ in fuse_runs([run, run], fusion="rrf")["q"]] == ["d", "b", "a", "c"]  # the run's positions
    scored = {"q": dict(run["q"])}
    assert [d for d, _ in fuse_scores([scored, scored, scored])["q"]] == ["d", "a", "b", "c"]


def test_read_scored_refuses_a_query_twice_and_names_an_unreadable_file(tmp_path):
    # Python's json kept the second ranking of q (rising: read as distances) and dropped the first unsaid
    path = _write(tmp_path / "r.json", '{"q": [["c1", 1.0], ["c2", 0.5]], "q": [["c1", 0.1], ["c2", 0.9]]}')
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*'q' twice"):
        read_scored(path)
    path = _write(tmp_path / "bad.json", '{"q": [["c1", 1.0]')
    with pytest.raises(ValueError, match=re.escape(str(path))):
        read_scored(path)
    with pytest.raises(ValueError, match="not found.*missing.json"):
        read_scored(tmp_path / "missing.json")


def test_read_scored_refuses_an_integer_score_past_the_float_range_naming_it(tmp_path):
    path = _write(tmp_path / "r.json", '{"q": [["c1", 1' + "0" * 400 + '], ["c2", 0.5]]}')
    with pytest.raises(ValueError, match=re.escape(str(path)) + ": query q: candidate c1 has a score past the float"):
        read_scored(path)


def test_check_finite_refuses_strings_and_integers_past_the_float_range_naming_the_run():
    with pytest.raises(ValueError, match="run A: query q: document a has the score '2'"):
        check_finite("A", "q", [("a", "2")])
    with pytest.raises(ValueError, match="run run1: query q: document b has the score 1000"):
        fuse_scores([{"q": {"a": 1.0, "b": 0.0}}, {"q": {"a": 1.0, "b": 10 ** 400}}])
    check_finite("A", "q", [("a", np.float32(1.5)), ("b", np.int64(2)), ("c", 3)])  # numbers pass
    # strings were fused: their direction read by comparing strings ("10" < "9": rising, so read as distances)
    with pytest.raises(ValueError, match="run B: query q: document a has the score '10'"):
        fuse_runs([{"q": [("a", 1.0), ("b", 0.0)]}, {"q": [("a", "10"), ("b", "9")]}], names=["A", "B"])
