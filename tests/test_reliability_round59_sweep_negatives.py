"""Round 59: hard negatives never take another version of the anchor (its title or abstract under another id).

On the real ACL co-citation examples, P05-1018 and its journal version J08-1001 ("Modeling Local Coherence: An
Entity-Based Approach") are never co-cited, so `nearest` made each the other's first negative and `svd` mined them
too: a positive trained as a negative. `same_work_groups` names such papers and every miner treats them as partners.
"""

from __future__ import annotations

import json
import math

import pytest
from test_negatives import GROUPS, PAPERS

from aspire.data.negatives import HardNegativesConfig, cocitation_partners, mine_hard_negatives, same_work_groups
from aspire.data.papers import Paper


def _examples(tmp_path, titles=None, abstracts=None):
    """The examples directory of `test_negatives` (its groups and papers), some titles or abstracts replaced."""
    titles, abstracts = titles or {}, abstracts or {}
    root = tmp_path / "examples"
    root.mkdir()
    (root / "abstracts.jsonl").write_text("".join(
        json.dumps({"paper_id": p, "title": titles.get(p, f"title {p}"), "abstract": abstracts.get(p, [f"about {p}."])})
        + "\n" for p in PAPERS))
    for split, groups in GROUPS.items():
        (root / f"groups.{split}.jsonl").write_text("".join(json.dumps(g) + "\n" for g in groups))
    return root


def _encode_by_angle(angles):
    """An `encode` placing each paper on the unit circle at `angles[paper_id]`."""
    return lambda papers: [[math.cos(angles[p.paper_id]), math.sin(angles[p.paper_id])] for p in papers]


def _negatives(out):
    return {r["paper_id"]: r["negatives"] for r in map(json.loads, (out / "hard_negatives.jsonl").open())}


ANGLES = {pid: 0.5 * i for i, pid in enumerate(PAPERS)}  # D at 1.5, its partner C at 1.0


def test_nearest_never_mines_a_paper_of_the_anchors_title(tmp_path):
    # G, in no set, is D's journal version: its title, punctuated otherwise, and a vector beside D's
    examples = _examples(tmp_path, titles={"G": "Title: D"})
    angles = {**ANGLES, "G": 1.55}
    report = mine_hard_negatives(examples, tmp_path / "o", HardNegativesConfig(method="nearest", k=2),
                                 encode=_encode_by_angle(angles))
    negatives = _negatives(tmp_path / "o")
    assert negatives["D"] == ["E", "B"]  # before: [G, E]
    assert negatives["G"] == ["E", "F"]  # before: D first; C, D's partner at 1.0, is G's too now
    assert report["same_work"] == [["D", "G"]]


def test_nearest_never_mines_a_paper_of_the_anchors_abstract(tmp_path):
    # G holds D's abstract under another title: one vector, cosine 1
    examples = _examples(tmp_path, abstracts={"G": ["About D."]})
    report = mine_hard_negatives(examples, tmp_path / "o", HardNegativesConfig(method="nearest", k=1),
                                 encode=_encode_by_angle({**ANGLES, "G": ANGLES["D"]}))
    negatives = _negatives(tmp_path / "o")
    assert negatives["D"] == ["E"]  # before: ["G"]
    assert negatives["G"] == ["E"]  # before: ["D"]; C (as near as E, and earlier) is D's partner, so G's
    assert report["same_work"] == [["D", "G"]]


def test_citation_never_mines_a_paper_of_the_anchors_title(tmp_path):
    # X cites A, B, C, D, with B in one sentence and D (with C) in another: here B is D under another id, so
    # X's two sentences co-cite one work with A and with C, and X cites nothing else for them
    examples = _examples(tmp_path, titles={"B": "TITLE D"})
    report = mine_hard_negatives(examples, tmp_path / "o", HardNegativesConfig(method="citation"))
    negatives = _negatives(tmp_path / "o")
    assert negatives["D"] == [] and negatives["B"] == []  # before: D -> [A, B], B -> [C, D]
    assert negatives["A"] == ["C", "F"]  # before: [C, D, F]: D is B, A's partner
    assert report["same_work"] == [["B", "D"]]


@pytest.mark.parametrize("method", ["random", "svd"])
def test_sampled_and_svd_negatives_never_take_the_anchors_other_version(tmp_path, method):
    # with k = 6 of 7 papers, every non-partner is a negative: B and D lose each other
    examples = _examples(tmp_path, titles={"B": "title d"})
    mine_hard_negatives(examples, tmp_path / "o", HardNegativesConfig(method=method, k=6))
    negatives = _negatives(tmp_path / "o")
    assert "B" not in negatives["D"] and "D" not in negatives["B"]
    if method == "random":  # svd: B and D have co-citation vectors; G has none, so no neighbour
        assert sorted(negatives["D"]) == ["E", "F", "G"]  # A, B's partner, is D's too


def test_same_work_groups_leave_empty_titles_and_abstracts_apart():
    papers = {
        "P1": Paper("P1", "Modeling Local Coherence: An Entity-Based Approach", ["This paper considers."]),
        "J1": Paper("J1", "Modeling local coherence - an entity-based approach", ["This article proposes."]),
        "E1": Paper("E1", "", ["We present a study of confidence estimation."]),
        "E2": Paper("E2", "", ["The ability to answer complex questions."]),  # no title: no twin of E1
        "C1": Paper("C1", "?!", ["-"]),  # nothing left once normalised: no twin of anyone
        "C2": Paper("C2", "??", ["--"]),
        "R1": Paper("R1", "A renamed camera-ready", ["We present a study of confidence estimation."]),
    }
    assert same_work_groups(papers) == [["E1", "R1"], ["J1", "P1"]]
    assert same_work_groups({pid: papers[pid] for pid in ("E1", "E2", "C1", "C2")}) == []


def test_same_work_groups_join_title_and_abstract_twins_into_one_work():
    papers = {
        "A": Paper("A", "One title", ["One abstract."]),
        "B": Paper("B", "one title.", ["Another abstract."]),  # A's title
        "C": Paper("C", "Another title", ["Another abstract"]),  # B's abstract
        "D": Paper("D", "Unrelated", ["Unrelated."]),
    }
    assert same_work_groups(papers) == [["A", "B", "C"]]  # before round 59: no such function


def test_cocitation_partners_read_one_work_as_one_paper():
    groups = [{"set_id": "A|B", "paper_ids": ["A", "B"], "context_ids": ["X#1"]},
              {"set_id": "C|D", "paper_ids": ["C", "D"], "context_ids": ["X#2"]}]
    partners = cocitation_partners(groups, [["B", "G"]])
    assert partners["G"] == {"A", "B", "G"} and partners["A"] == {"A", "B", "G"}
    assert partners["C"] == {"C", "D"}
    assert cocitation_partners(groups)["A"] == {"A", "B"}  # without versions, as before
