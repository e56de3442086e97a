"""Round 65: training reads one work under several ids (`aspire.data.acl.same_work_groups`: the same normalised
title or abstract key, such as P05-1018 and its journal version J08-1001) as one paper, as `build_examples` and the
hard-negative miners do: an anchor's `members` (never its negative, in batch or hard) hold its co-cited papers'
other versions, so such a version is never a (false) negative of the anchor."""

from __future__ import annotations

import json

from aspire.data.papers import Paper
from aspire.train.config import DataConfig
from aspire.train.data import TripletCollator, load_split, read_examples
from tests.test_reliability_round50_traindata import write_lines
from tests.test_train import write_examples_dir


def _paper(pid: str, title: str) -> Paper:
    return Paper(pid, title, [f"Sentence {k} of {pid}." for k in range(2)])


def test_a_version_of_the_anchors_cocited_paper_is_a_member_and_never_its_negative(tmp_path):
    """J08-1001 is P05-1018's journal version (same title); X is co-cited with P05-1018, C with J08-1001. Old code
    left J08-1001 out of X's members (an in-batch negative of X, as the positive of C's example) and took it as
    X's hard negative."""
    papers = {pid: _paper(pid, f"Title {pid}") for pid in ("P05-1018", "X", "C", "N")}
    papers["J08-1001"] = _paper("J08-1001", "Title P05-1018.")  # normalises to P05-1018's title
    path = write_lines(tmp_path / "examples.train.jsonl", [
        {"query_id": "P05-1018", "positive_id": "X", "set_ids": ["P05-1018|X"]},
        {"query_id": "C", "positive_id": "J08-1001", "set_ids": ["C|J08-1001"]},
    ])
    hard = {"X": ["J08-1001", "N"], "C": ["P05-1018", "N"]}
    by = {(e.query_id, e.positive_id): e for e in read_examples(path, DataConfig(), papers, hard)}
    assert by["X", "P05-1018"].members == ("J08-1001", "P05-1018", "X")
    # its own version too, and C, co-cited with that version: the one work is co-cited with X and with C
    assert by["P05-1018", "X"].members == ("C", "J08-1001", "P05-1018", "X")
    assert by["C", "J08-1001"].members == ("C", "J08-1001", "P05-1018")
    assert by["X", "P05-1018"].negative == "N" and by["C", "J08-1001"].negative == "N"


def test_load_split_masks_a_version_in_the_batch(tmp_path):
    """Through `load_split` and the collator: p3_0 given p0_1's title is one work with it, so it is in the group
    (the in-batch negative mask) of every anchor co-cited with p0_1, and p0_1 in those of p3_0's partners; a paper
    of no shared work keeps the members it had."""
    root = write_examples_dir(tmp_path / "ex")
    rows = [json.loads(line) for line in (root / "abstracts.jsonl").read_text().splitlines()]
    title = next(r["title"] for r in rows if r["paper_id"] == "p0_1")
    for r in rows:
        r["title"] = title if r["paper_id"] == "p3_0" else r["title"]
    (root / "abstracts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = load_split(DataConfig(examples_dir=str(root)), "train")
    members = {(e.query_id, e.positive_id): set(e.members) for e in data.examples}
    assert members["p0_0", "p0_2"] == {"p0_0", "p0_1", "p0_2", "p3_0"}
    assert members["p3_1", "p3_0"] == {"p3_0", "p3_1", "p3_2", "p0_1"}
    assert members["p1_0", "p1_1"] == {"p1_0", "p1_1"}
    collate = TripletCollator(lambda papers, tasks: None, data.papers)
    examples = [e for e in data.examples if (e.query_id, e.positive_id) in {("p0_0", "p0_2"), ("p3_1", "p3_0")}]
    batch = collate(examples)
    assert collate.index["p3_0"] in batch.group_ids[0].tolist()  # p3_0, the positive in row 1, is no negative of row 0
    assert collate.index["p0_1"] in batch.group_ids[1].tolist()
