"""Round 20: the context2doc training task leaves out a train or dev citing sentence that is a reworded copy of a
test sentence (word 5-gram containment >= 0.5) citing one of its papers (experiments/results/heldout_reworded.md:
L877 ~ L875 / L874 / L959, L235 ~ L236, L82 ~ L2405 in train; L2448 ~ L1574, L844 ~ L843 in dev)."""

from __future__ import annotations

import functools
import json
import random
import re

import pytest

import aspire.benchmarks.context2doc as c2d
from aspire.checksum import file_sha256
from aspire.train.config import Config, TaskConfig
from aspire.train.tasks import context2doc_task, reworded_test_twins

TEST = "We train the dependency parser with an averaged perceptron on sections 2 to 21 of the treebank (Collins, 2002)."
REWORDED = "The dependency parser is trained with an averaged perceptron on sections 2 to 21 of the treebank [3]."
UNRELATED = "Word alignments are computed with GIZA++ in both directions and symmetrised (Och and Ney, 2003)."
MARKERS = "We train the dependency parser with an averaged perceptron on sections 2 to 21 of the treebank [7]."


def _brute_containment(a: str, b: str, n: int = 5) -> float:
    """|G(a) & G(b)| / |G(a)| by a window loop over both texts' lower-cased \\w+ words."""
    wa, wb = re.findall(r"\w+", a.lower()), re.findall(r"\w+", b.lower())
    ga = {tuple(wa[i : i + n]) for i in range(len(wa) - n + 1)}
    gb = {tuple(wb[i : i + n]) for i in range(len(wb) - n + 1)}
    return len(ga & gb) / len(ga)


def _paper(pid: str) -> dict:
    return {"paper_id": pid, "title": f"Paper {pid}", "abstract": [f"The abstract of {pid}.", "A second sentence."]}


def _bench(tmp_path, rows: list[tuple[str, str, str, list[str]]], monkeypatch):
    """A co-citation file of `rows` (split, citing id, sentence, cited ids) and its split file, the task's readers
    pointed at it; returns the data dir."""
    path = tmp_path / "cocitations.jsonl"
    path.write_text("".join(json.dumps({"citing_paper_id": cp, "context": text, "cited": [_paper(p) for p in cited]})
                            + "\n" for _, cp, text, cited in rows), encoding="utf-8")
    splits = {name: {"queries": [f"L{i}" for i, r in enumerate(rows, 1) if r[0] == name]} for name in c2d.SPLIT_NAMES}
    split_file = tmp_path / "split.json"
    split_file.write_text(json.dumps({"splits": splits, "checksum": c2d._checksum(splits),
                                      "source_sha256": file_sha256(path)}), encoding="utf-8")
    monkeypatch.setattr(c2d, "load_context2doc", functools.partial(c2d.load_context2doc, split_file=split_file))
    monkeypatch.setattr(c2d, "held_out_queries", functools.partial(c2d.held_out_queries, split_file=split_file))
    return tmp_path


def _run(data_dir, split: str):
    task = TaskConfig(name="context2doc", data_dir=str(data_dir), benchmarks_dir=None)
    return context2doc_task(Config(), task, split, 0)


def test_the_hand_made_texts_are_what_the_tests_say():
    assert _brute_containment(TEST, REWORDED) >= 0.5 and _brute_containment(TEST, UNRELATED) == 0.0
    assert c2d.query_text(MARKERS) == c2d.query_text(TEST)  # the reader's own (marker) twin


def test_a_reworded_copy_of_a_test_sentence_citing_its_paper_is_no_anchor(tmp_path, monkeypatch):
    """The train copy was an anchor (its 2 pairs trained on); an unrelated query and a copy of the test sentence's
    words citing none of its papers are kept; the reader's marker twin is counted once, as before."""
    data = _bench(tmp_path, [
        ("test", "T1", TEST, ["A", "B"]),
        ("train", "R1", REWORDED, ["A", "C"]),      # reworded copy, shares A: left out
        ("train", "R2", UNRELATED, ["A"]),          # shares A, not the words: kept
        ("train", "R3", REWORDED, ["D"]),           # shares the words, no cited paper: kept
        ("train", "R4", MARKERS, ["A", "B"]),       # the test sentence with other markers: the reader leaves it out
        ("dev", "V1", REWORDED, ["B"]),             # dev copy sharing B: left out of the dev pairs
        ("dev", "V2", UNRELATED, ["C"]),
    ], monkeypatch)
    train = _run(data, "train")
    assert sorted((e.query_id, e.positive_id) for e in train.examples) == [("ctx:L3", "A"), ("ctx:L4", "D")]
    assert "ctx:L2" not in train.papers
    assert train.stats["reworded_test_twins"] == {"L2": ["L1"]} and train.stats["reworded_test_twin_pairs"] == 2
    assert train.stats["left_out_test_twins"] == 1 and train.stats["queries"] == 2
    dev = _run(data, "dev")
    assert [(e.query_id, e.positive_id) for e in dev.examples] == [("ctx:L7", "C")]
    assert dev.stats["reworded_test_twins"] == {"L6": ["L1"]} and dev.stats["reworded_test_twin_pairs"] == 1


def test_no_twin_keeps_the_stats_as_they_were(tmp_path, monkeypatch):
    data = _bench(tmp_path, [("test", "T1", TEST, ["A"]), ("train", "R2", UNRELATED, ["A"])], monkeypatch)
    train = _run(data, "train")
    assert train.stats == {"queries": 1, "left_out_test_twins": 0, "queries_repeating_a_text": 0}


def test_reworded_test_twins_against_a_brute_force_rule():
    """Every (query, test query) pair: containment of the test text in the query >= 0.5 and a shared cited paper."""
    words = "the a parser model we use train tagger on data with features of corpus from".split()
    rng = random.Random(0)
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(40)]
    cited = [frozenset(rng.sample("ABCDE", rng.randint(1, 2))) for _ in texts]
    tests = {f"T{i}": (texts[i], cited[i]) for i in range(15)}
    queries = {f"Q{i}": texts[i] for i in range(10, 40)}  # 10-14 are both: a copy of itself
    qrels = {f"Q{i}": dict.fromkeys(cited[i], 1) for i in range(10, 40)}
    got = reworded_test_twins(queries, qrels, tests)
    want = {}
    for q, text in queries.items():
        hits = sorted(t for t, (tt, tc) in tests.items() if len(re.findall(r"\w+", tt)) >= 5
                      and _brute_containment(tt, text) >= 0.5 and not tc.isdisjoint(qrels[q]))
        if hits:
            want[q] = hits
    assert got == want and len(want) >= 5


def test_real_data_leaves_out_the_reworded_twins_the_md_lists(shared_data):
    """heldout_reworded.md: 6 test queries with a train copy (L1652 ~ L1838 is the reader's marker twin) and 3
    with a dev copy (L1318 ~ L1317 likewise)."""
    data_dir = shared_data / "cocite-acl"
    train, dev = _run(data_dir, "train"), _run(data_dir, "dev")
    assert train.stats["reworded_test_twins"] == {"L82": ["L2405"], "L235": ["L236"],
                                                  "L877": ["L874", "L875", "L959"]}
    assert dev.stats["reworded_test_twins"] == {"L844": ["L843"], "L2448": ["L1574"]}
    assert (train.stats["reworded_test_twin_pairs"], dev.stats["reworded_test_twin_pairs"]) == (11, 4)
    anchors = {e.query_id for e in train.examples} | {e.query_id for e in dev.examples}
    assert anchors.isdisjoint({"ctx:L82", "ctx:L235", "ctx:L877", "ctx:L844", "ctx:L2448", "ctx:L1838", "ctx:L1317"})
    # the reader's pairs (4,247 / 587 with benchmarks_dir null, as the md counts them) less the twins'
    assert (len(train.examples), len(dev.examples)) == (4247 - 11, 587 - 4)


def test_held_out_queries_name_a_missing_file(tmp_path):
    with pytest.raises(ValueError, match="co-citation file not found"):
        c2d.held_out_queries(tmp_path / "nowhere")
