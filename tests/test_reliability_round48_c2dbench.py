"""Round 48: TREC run / qrels round trips and refusals (aspire.benchmarks.runs), context2doc split checks."""

import json

import numpy as np
import pytest

from aspire.benchmarks import context2doc as c2d
from aspire.benchmarks.runs import per_query, read_qrels, read_run, write_qrels, write_run
from aspire.paths import DATA

COCITE = DATA / "cocite-acl"
needs_data = pytest.mark.skipif(not (COCITE / "cocitations.jsonl").is_file(), reason="no shared co-citation data")


def test_write_run_refuses_a_query_with_no_ranked_document(tmp_path):
    # was: q2 silently left out of the file, so read_run gave back a run without it
    with pytest.raises(ValueError, match="query q2 ranks no document"):
        write_run(tmp_path / "run", {"q1": [("a", 1.0)], "q2": []}, "t")
    assert not (tmp_path / "run").exists()


def test_write_qrels_refuses_a_query_with_no_judgement(tmp_path):
    # was: q2 silently left out of the file, so read_qrels gave back qrels without it
    with pytest.raises(ValueError, match="query q2 judges no document"):
        write_qrels(tmp_path / "qrels", {"q1": {"a": 1}, "q2": {}})
    assert not (tmp_path / "qrels").exists()


def test_run_round_trip_unicode_ties_and_float32(tmp_path):
    run = {"q\u00e9": [("d\u00e9\u200b", 0.5), ("b", 0.5), ("a", np.float32(0.1))], "q2": [("z", -1e-300)]}
    write_run(tmp_path / "run", run, "tag")
    back = read_run(tmp_path / "run")
    assert back == {q: [(d, float(s)) for d, s in r] for q, r in run.items()}
    lines = (tmp_path / "run").read_text(encoding="utf-8").splitlines()
    assert [ln.split()[3] for ln in lines] == ["1", "2", "3", "1"]
    for bad in ("a b", "", "a\u2028b"):
        with pytest.raises(ValueError, match="whitespace"):
            write_run(tmp_path / "bad", {"q": [(bad, 1.0)]}, "t")


def test_read_run_orders_by_rank_then_score_then_id(tmp_path):
    (tmp_path / "run").write_text("q Q0 c 2 0.9 t\nq Q0 b 1 0.1 t\nq Q0 a 2 0.9 t\nq Q0 e 2 0.95 t\n")
    assert read_run(tmp_path / "run") == {"q": [("b", 0.1), ("e", 0.95), ("a", 0.9), ("c", 0.9)]}


@pytest.mark.parametrize("reader, text, match", [
    (read_qrels, "q 0 d 1\nq 0 d 2\n", r":2: query q judges d twice \(first on line 1\)"),
    (read_qrels, "q 0 d\n", ":1: expected"),
    (read_qrels, "q 0 d 1\nq 0 e -1\n", ":2: query q document e has grade -1"),
    (read_qrels, "q 0 d 1.0\n", ":1: expected"),
    (read_qrels, "q 0 d \u0661\n", ":1: expected"),
    (read_run, "q Q0 d 1 1 t\nq Q0 d 2 0.5 t\n", ":2: query q ranks d twice"),
    (read_run, "q Q0 d 1 nan t\n", ":1: ranks count from 1"),
    (read_run, "q Q0 d 0 1 t\n", ":1: ranks count from 1"),
    (read_run, "q Q0 d 1 1\n", ":1: expected"),
    (read_run, "q Q0 d 1_0 1 t\n", ":1: rank and score must be numbers"),
])
def test_reading_qrels_and_runs_refuses_naming_the_line(tmp_path, reader, text, match):
    (tmp_path / "file").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        reader(tmp_path / "file")


def test_per_query_refuses_run_over_unjudged_queries():
    with pytest.raises(ValueError, match=r"1 ranked queries not judged \(e.g. \['x'\]\)"):
        per_query({"q": {"a": 1}}, {"q": [("a", 1.0)], "x": [("a", 1.0)]}, ["mrr"])


def test_bpref_matches_brute_force_trec_eval_rule():
    rng = np.random.default_rng(0)
    for _ in range(50):
        docs = [f"d{i}" for i in range(8)]
        judged = {d: int(rng.integers(0, 3)) for d in docs if rng.random() < 0.7}
        if not any(g >= 1 for g in judged.values()):
            judged["d0"] = 1
        ranked = list(rng.permutation(docs))
        got = per_query({"q": judged}, {"q": [(d, -i) for i, d in enumerate(ranked)]}, ["bpref"])["bpref"]["q"]
        rel = [d for d in judged if judged[d] >= 1]
        nonrel = [d for d in judged if judged[d] < 1]
        total = 0.0
        for i, d in enumerate(ranked):
            if d in rel:
                above = sum(x in nonrel for x in ranked[:i])
                total += 1.0 if not nonrel else 1 - min(above, len(rel)) / min(len(rel), len(nonrel))
        assert got == pytest.approx(total / len(rel))


def test_load_split_refuses_checksum_mismatch_naming_the_file(tmp_path):
    data = json.loads(c2d.SPLIT_FILE.read_text())
    data["splits"]["test"]["queries"] = data["splits"]["test"]["queries"][1:]
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"edited\.json: checksum mismatch"):
        c2d.load_split(bad)


@needs_data
def test_real_split_query_texts_and_held_out_disjoint():
    source = COCITE / "cocitations.jsonl"
    meta = c2d.load_split(c2d.SPLIT_FILE, source)
    records = dict(c2d.read_records(source))
    test = c2d.load_context2doc(COCITE, "test")
    assert set(test.queries) == set(meta["splits"]["test"]["queries"])
    assert all(test.queries[q] == c2d.query_text(records[q]["context"]) for q in test.queries)
    assert all(test.qrels[q] == {c["paper_id"]: 1 for c in records[q]["cited"]} for q in test.queries)
    assert len(test.candidates) == 768
    held = c2d.held_out_sentences(COCITE)
    for split in ("train", "dev"):
        part = c2d.load_context2doc(COCITE, split)
        assert not any(records[q]["context"].strip() in held for q in part.queries)
        assert not set(part.citing.values()) & set(test.citing.values())
        assert not set(part.queries.values()) & set(test.queries.values())
