"""Round 50: training data (aspire.train.data) checked against hand readings of tiny examples files."""

from __future__ import annotations

import json
import logging

from aspire.data.papers import Paper
from aspire.train.config import DataConfig
from aspire.train.data import EpochBatchSampler, read_examples

PAPERS = {f"p{i}": Paper(f"p{i}", f"title {i}", [f"sentence {k} of {i}." for k in range(3)]) for i in range(6)}


def write_lines(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_a_pair_whose_sets_do_not_hold_it_still_keeps_its_positive_out_of_the_anchors_negatives(tmp_path):
    # p2 is p0's positive on line 2, but line 1's set_ids are empty: p2 was not a member of p0's line-1 example,
    # so it was p0's hard negative there (and an in-batch negative), a false negative
    path = write_lines(tmp_path / "examples.train.jsonl", [
        {"query_id": "p0", "positive_id": "p1", "set_ids": []},
        {"query_id": "p0", "positive_id": "p2", "set_ids": []},
    ])
    examples = read_examples(path, DataConfig(), PAPERS, {"p0": ["p2", "p3"]})
    by = {(e.query_id, e.positive_id): e for e in examples}
    assert set(by) == {("p0", "p1"), ("p1", "p0"), ("p0", "p2"), ("p2", "p0")}
    for q, p in (("p0", "p1"), ("p0", "p2")):
        assert by[q, p].members == ("p0", "p1", "p2")
        assert by[q, p].negative == "p3"
    assert by["p1", "p0"].members == ("p0", "p1") and by["p2", "p0"].members == ("p0", "p2")
    for e in examples:  # never the anchor or any of its positives
        assert e.negative not in {e.query_id} | {p for q, p in by if q == e.query_id}


def test_hard_negatives_skip_every_partner_against_a_brute_force_reading(tmp_path):
    lines = [
        {"query_id": "p0", "positive_id": "p1", "set_ids": ["p0|p1|p4"]},
        {"query_id": "p2", "positive_id": "p3", "set_ids": ["p2|p3"]},
        {"query_id": "p4", "positive_id": "p5", "set_ids": ["p4|p5"]},
    ]
    path = write_lines(tmp_path / "examples.train.jsonl", lines)
    hard = {pid: [f"p{i}" for i in range(6)] for pid in PAPERS}
    examples = read_examples(path, DataConfig(), PAPERS, hard)
    for e in examples:
        partners = {e.query_id}
        for x in lines:
            pair = {x["query_id"], x["positive_id"]}
            in_sets = [set(s.split("|")) | pair for s in x["set_ids"]] + [pair]
            for s in in_sets:
                if e.query_id in s:
                    partners |= s
        assert set(e.members) == partners
        assert e.negative == next(n for n in hard[e.query_id] if n not in partners)


def test_lost_alignments_are_counted_and_warned(tmp_path, caplog):
    from aspire.train.data import _report_lost_alignments
    path = write_lines(tmp_path / "examples.train.jsonl", [
        {"query_id": "p0", "positive_id": "p1", "set_ids": [], "cc_align": [0, 3]},  # p1 has 3 sentences
        {"query_id": "p2", "positive_id": "p3", "set_ids": [], "cc_align": [2, 0]},  # cut by max_sentences=2
        {"query_id": "p4", "positive_id": "p5", "set_ids": [], "cc_align": [1, 1]},
    ])
    cfg = DataConfig(max_sentences=2)
    examples = read_examples(path, cfg, PAPERS)
    assert [e.align for e in examples] == [(0, 3), (3, 0), (2, 0), (0, 2), (1, 1), (1, 1)]
    with caplog.at_level(logging.WARNING, logger="aspire.train.data"):
        _report_lost_alignments(examples, PAPERS, cfg, "train")
    text = caplog.text
    assert "2 of the 6 train examples name in cc_align a sentence their abstract does not have" in text
    assert "2 of the 6 train examples align a sentence past data.max_sentences=2" in text


def test_sampler_covers_each_example_at_most_once_and_is_seeded():
    n, B = 23, 4
    batches = list(EpochBatchSampler(n, B, seed=3, epoch=1))
    flat = [i for b in batches for i in b]
    assert len(batches) == n // B and all(len(b) == B for b in batches)
    assert len(flat) == len(set(flat)) == (n // B) * B
    assert batches == list(EpochBatchSampler(n, B, seed=3, epoch=1))
    assert batches != list(EpochBatchSampler(n, B, seed=3, epoch=2))
