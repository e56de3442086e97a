"""The ranked hard negatives (`hard-negatives method=citation|nearest|svd`) never list a paper that cites the anchor
or that the anchor cites. A citing paper can be one of the papers (207 of the 602 of the real ACL co-citation examples
are); a paper citing the anchor is its citation neighbour, SPECTER's positive, and the ranked methods rank it near the
anchor: it was listed as a hard negative (118 of the 1,813 citation negatives of the real examples; the first svd
negative of 48 of 550 anchors)."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from aspire.data.negatives import (
    HardNegativesConfig,
    citation_negatives,
    mine_hard_negatives,
    nearest_negatives,
    read_groups,
)

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


def test_nearest_leaves_citation_neighbours_out_but_takes_no_margin_reference_from_them():
    """B cites A and E (one sentence): A's partner is E, B its citation neighbour and nearest paper."""
    from aspire.data.negatives import citation_links

    groups = [{"set_id": "A|E", "paper_ids": ["A", "E"], "context_ids": ["B#L1"]}]
    ids = list("ABCDE")
    angles = np.array([0.0, 0.1, 0.2, 0.3, 1.5])
    vecs = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    partners = {"A": {"A", "E"}, "E": {"A", "E"}}
    links = citation_links(groups)
    assert links["A"] == {"B"} and links["B"] == {"A", "E"}
    assert nearest_negatives(vecs, partners, ids, 3).negatives["A"] == ["B", "C", "D"]  # without the guard
    mined = nearest_negatives(vecs, partners, ids, 3, linked=links)
    assert mined.negatives["A"] == ["C", "D"] and mined.negatives["B"] == ["C", "D"]
    assert mined.negatives["C"] == ["B", "D", "A"]  # a paper with no link is ranked as before
    assert mined.dropped == {"partner": 2, "citation": 4}  # E for A, A for E; B for A and E, A and E for B
    # the margin's reference is A's partner E (cos 1.5), not B: every candidate lies above it, so none is kept
    guarded = nearest_negatives(vecs, partners, ids, 3, margin=0.0, linked=links)
    assert guarded.negatives["A"] == []


def _mine(examples, out, method):
    report = mine_hard_negatives(examples, out, HardNegativesConfig(method=method, k=10))
    rows = [json.loads(line) for line in (out / "hard_negatives.jsonl").read_text().splitlines()]
    links = _links(read_groups(examples))
    return report, rows, [(r["paper_id"], n) for r in rows for n in r["negatives"] if n in links[r["paper_id"]]]


@pytest.mark.slow
def test_real_citation_negatives_list_no_citation_neighbour(real_cocite_examples, tmp_path):
    report, rows, linked = _mine(real_cocite_examples, tmp_path / "neg", "citation")
    assert linked == []  # 118 pairs before, such as W98-1119's negative P04-1018, which cites it
    assert sum(len(r["negatives"]) for r in rows) == 1736  # 1,813 before
    assert report["dropped"] == {"partner": 2294, "citation": 136}


@pytest.mark.slow
def test_real_svd_negatives_list_no_citation_neighbour(real_cocite_examples, tmp_path):
    report, rows, linked = _mine(real_cocite_examples, tmp_path / "neg", "svd")
    assert linked == []  # 220 pairs before; the first negative of 48 of the 550 anchors with a vector
    assert report["papers_with_negatives"] == 550 and report["dropped"] == {"partner": 806, "citation": 241}
