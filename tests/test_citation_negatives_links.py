"""Citation negatives (`aspire.data.negatives.citation_negatives`, `hard-negatives method=citation`) never list a
paper that cites the anchor or that the anchor cites. A citing paper can be one of the papers (207 of the 602 of the
real ACL co-citation examples are); a paper citing the anchor is its citation neighbour, SPECTER's positive, and was
listed as its hard negative (118 of the 1,813 negatives of the real examples)."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from aspire.data.negatives import HardNegativesConfig, citation_negatives, mine_hard_negatives, read_groups

# X cites A, B, C, D (A with B in one sentence, C with D in another); C cites A and E together.
GROUPS = [
    {"set_id": "A|B", "paper_ids": ["A", "B"], "context_ids": ["X#1"]},
    {"set_id": "C|D", "paper_ids": ["C", "D"], "context_ids": ["X#2"]},
    {"set_id": "A|E", "paper_ids": ["A", "E"], "context_ids": ["C#L7"]},
]


def _links(groups) -> dict[str, set[str]]:
    """Paper -> the papers it cites or is cited by, from the citing paper of each context."""
    links: dict[str, set[str]] = defaultdict(set)
    for g in groups:
        for ctx in g["context_ids"]:
            citing = ctx.rpartition("#")[0]
            for pid in g["paper_ids"]:
                links[citing].add(pid)
                links[pid].add(citing)
    return links


def test_a_paper_citing_the_anchor_is_not_its_negative():
    mined = citation_negatives(GROUPS, list("ABCDE"), 10)
    # before: A's negatives were C and D, and C cites A; C's were A and B, and C cites A
    assert mined.negatives == {"A": ["D"], "B": ["C", "D"], "C": ["B"], "D": ["A", "B"], "E": []}
    assert mined.dropped == {"partner": 6, "citation": 2}  # C for A, A for C


def test_links_through_a_version_of_the_anchor_or_of_the_candidate():
    """C cites A; A2 is A's other version (same work), so C is linked to A2 too, and A to C2."""
    groups = [*GROUPS, {"set_id": "A2|F", "paper_ids": ["A2", "F"], "context_ids": ["X#3"]}]
    mined = citation_negatives(groups, ["A", "A2", "B", "C", "D", "E", "F"], 10, same_work=[["A", "A2"]])
    assert "C" not in mined.negatives["A2"] and "A2" not in mined.negatives["C"]
    assert mined.negatives["A2"] == ["D"] and mined.negatives["C"] == ["B", "F"]
    alone = citation_negatives(groups, ["A", "A2", "B", "C", "D", "E", "F"], 10)  # versions not given
    assert "C" in alone.negatives["A2"]


@pytest.mark.slow
def test_real_examples_list_no_citation_neighbour(shared_data, tmp_path):
    from aspire.cli.data import main

    records = shared_data / "cocite-acl" / "cocitations.jsonl"
    assert main(["run-all", "--in", str(records), "--out", str(tmp_path / "run"), "-q"]) == 0
    examples = tmp_path / "run" / "5_examples"
    report = mine_hard_negatives(examples, tmp_path / "neg", HardNegativesConfig(method="citation", k=10))
    rows = [json.loads(line) for line in (tmp_path / "neg" / "hard_negatives.jsonl").read_text().splitlines()]
    links = _links(read_groups(examples))
    linked = [(r["paper_id"], n) for r in rows for n in r["negatives"] if n in links[r["paper_id"]]]
    assert linked == []  # 118 pairs before, such as W98-1119's negative P04-1018, which cites it
    assert sum(len(r["negatives"]) for r in rows) == 1736  # 1,813 before
    assert report["dropped"] == {"partner": 2296, "citation": 136}
