"""Round 50: pool sets (`aspire.benchmarks.pools`) checked with hand-made pool folders."""

import json

import pytest

from aspire.benchmarks.pools import evaluate_pool_set, load_pool_set, read_ranked, write_ranked, write_trec
from aspire.benchmarks.runs import read_qrels, read_run


def _write(path, obj):
    path.write_text(json.dumps(obj))


def test_an_empty_pool_is_left_out_of_the_trec_files_with_a_warning(tmp_path, caplog):
    # q2's only candidate is itself: its pool is empty once that is removed; q3 has no candidate at all
    _write(tmp_path / "test-pid2anns-toy-method.json",
           {"q1": {"cands": ["a", "b"], "relevance_adju": [1, 0]},
            "q2": {"cands": ["q2"], "relevance_adju": [1]},
            "q3": {"cands": [], "relevance_adju": []}})
    ps = load_pool_set(tmp_path, "toy", ["method"])
    rankings = {"method": {"q1": ["a", "b"], "q2": [], "q3": []}}
    _, skipped = evaluate_pool_set(ps, rankings, ["MAP"], skip_no_relevant=True)
    assert skipped == ["q2_method", "q3_method"]
    out = tmp_path / "out"
    out.mkdir()
    with caplog.at_level("WARNING", logger="aspire.benchmarks.pools"):
        write_trec(out, ps, rankings, "e")  # write_run refused "q2_method ranks no document", after the results
    assert "queries ['q2_method', 'q3_method'] have an empty pool" in caplog.text
    assert set(read_run(out / "run.trec")) == set(read_qrels(out / "qrels.trec")) == {"q1_method"}


def test_bad_pool_lines_refused_naming_file_query_and_key(tmp_path):
    path = tmp_path / "test-pid2anns-toy.json"
    cases = [({"q": {"cands": ["a"]}}, r"query q has no 'relevance_adju'"),
             ({"q": {"cands": ["a", "a"], "relevance_adju": [1, 0]}}, r"query q repeats candidates \['a'\]"),
             ({"q": {"cands": ["a"], "relevance_adju": [0.5]}}, r"query q candidate a: .*not an integer"),
             ({"q": {"cands": ["a"], "relevance_adju": [-1]}}, r"query q candidate a: negative"),
             ({"q": {"cands": ["q"], "relevance_adju": [1.5]}}, r"query q candidate q: .*not an integer")]
    for obj, msg in cases:
        _write(path, obj)
        with pytest.raises(ValueError, match=msg) as err:
            load_pool_set(tmp_path, "toy")
        assert str(path) in str(err.value)
    _write(path, {"q": {"cands": ["a"], "relevance_adju": [1]}})
    _write(tmp_path / "s.json", {"s": ["q", "zz"]})
    with pytest.raises(ValueError, match=r"unknown queries: \['zz'\]"):
        load_pool_set(tmp_path, "toy", splits_file=tmp_path / "s.json")


def test_ranked_file_written_and_read_back(tmp_path):
    ranked = {"q1": [("b", 3.0), ("a", float("nan"))], "q2": [("x", -0.1), ("y", 2.5)]}  # distances in q2
    path = tmp_path / "r.json"
    write_ranked(path, ranked)
    assert json.loads(path.read_text()) == {"q1": [["b", 3.0], ["a", None]], "q2": [["x", -0.1], ["y", 2.5]]}
    assert read_ranked(path) == {"q1": ["b", "a"], "q2": ["x", "y"]}
