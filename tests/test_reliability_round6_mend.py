"""What the round-4/5 sweep saw and left, mended: one shared type name for messages, S2ORC ids under the papers
files' rule, and the rest named in each test."""
from __future__ import annotations

import copy

import pytest
from test_reliability_round4_data import ABSTRACTS, PAPERS, _mine, _set

from aspire.io import DataError, type_name, unique_id


def test_type_name_says_null_for_none_as_json_does():
    assert type_name(None) == "null" and type_name([1]) == "list" and type_name("a") == "str"
    with pytest.raises(DataError, match=r"f:1: set_id must be a non-empty string, got null None"):
        unique_id(None, "set_id", "f:1", {})


@pytest.mark.parametrize("pid, message", [
    (" C1", r"pp\.jsonl:1: paper_id ' C1' holds whitespace"),
    ("C 1", r"pp\.jsonl:1: paper_id 'C 1' holds whitespace"),
    ("  ", r"pp\.jsonl:1: paper_id is empty"),
])
def test_s2orc_citing_ids_follow_the_papers_files_rule(tmp_path, pid, message):
    # ' C1' was taken as a paper distinct from 'C1'; 'C 1' split a TREC run's columns downstream
    with pytest.raises(DataError, match=message):
        _mine(tmp_path, papers=_set((0, "paper_id"), pid))


def test_s2orc_abstract_ids_follow_the_papers_files_rule(tmp_path):
    abstracts = copy.deepcopy(ABSTRACTS)
    abstracts[0]["paper_id"] = "P1\t"
    with pytest.raises(DataError, match=r"ab\.jsonl:1: paper_id 'P1\\t' holds whitespace"):
        _mine(tmp_path, papers=PAPERS, abstracts=abstracts)
