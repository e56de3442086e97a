"""Reliability round 7: context2doc's split and the SciRepEval formats' protocols."""

from __future__ import annotations

import json
from pathlib import Path

from aspire.benchmarks import context2doc as c2d


def _twin_file(tmp_path: Path) -> tuple[Path, Path]:
    """A co-citation file where citing paper c10 (hashed to test) and c0 (to train) write one sentence with their
    citation markers written differently, citing the same papers; c17 (dev) and c1 (train) cite other things."""
    def rec(citing, context, cited):
        return {"citing_paper_id": citing, "context": context, "source": "x",
                "cited": [{"paper_id": p, "title": f"paper {p}", "abstract": [f"about {p}."]} for p in cited]}

    recs = [rec("c10", "Coherence models (Lapata 2003; Barzilay and Lee 2004) are evaluated on ordering.", ["a", "b"]),
            rec("c0", "Coherence models (Lapata, 2003; Barzilay and Lee, 2004) are evaluated on ordering.", ["a", "b"]),
            rec("c1", "Parsers (Collins, 1997) are fast.", ["c", "d"]),
            rec("c17", "Taggers (Brants, 2000) are accurate.", ["d", "e"])]
    source = tmp_path / "cc" / "cocitations.jsonl"
    source.parent.mkdir(parents=True)
    source.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    split = tmp_path / "split.json"
    split.write_text(json.dumps(c2d.make_split(source)))
    return source, split


def test_train_twin_of_a_test_sentence_is_left_out_and_held_out(tmp_path):
    source, split = _twin_file(tmp_path)
    meta = c2d.load_split(split, source)
    assert meta["splits"]["test"]["queries"] == ["L1"] and meta["splits"]["train"]["queries"] == ["L2", "L3"]
    test = c2d.load_context2doc(source.parent, "test", split)
    train = c2d.load_context2doc(source.parent, "train", split)
    assert c2d.query_text(c2d.read_records(source)[1][1]["context"]) == test.queries["L1"]  # the twin
    # the test query with its answer is not a training query; the split's other queries stay
    assert set(train.queries) == {"L3"} and train.left_out == ["L2"]
    assert set(train.qrels) == set(train.citing) == {"L3"}
    assert set(test.queries) == {"L1"} and test.left_out == []
    dev = c2d.load_context2doc(source.parent, "dev", split)
    assert set(dev.queries) == {"L4"} and dev.left_out == []
    # and the co-citation training pipeline drops both raw sentences, not only the test one
    raw = {rec["context"].strip() for _, rec in c2d.read_records(source)}
    assert c2d.held_out_sentences(source.parent, split) == {r for r in raw if "Coherence" in r}


def test_real_split_gives_training_no_test_query_text(shared_data):
    """On the shared file, L1838 (train, P05-1018) is test query L1652 (J08-1001, its journal version) with the
    citation markers written otherwise and the same two cited papers; L1317 (dev) is test L1318's text."""
    data = shared_data / "cocite-acl"
    test = c2d.load_context2doc(data, "test")
    assert len(test.queries) == 463 and test.left_out == []  # the test split, and its figures, are unchanged
    for split, twins in (("train", ["L1623", "L1838"]), ("dev", ["L1317"])):
        bench = c2d.load_context2doc(data, split)
        assert bench.left_out == twins
        assert not set(bench.queries.values()) & set(test.queries.values())
