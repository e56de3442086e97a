"""Round 60, reviewer matching (aspire/benchmarks/reviewers.py): folders `d_20_1` and `d_20_01` name one draw and sorted
as equal, in the filesystem's order (now refused, naming both); a header column that is not ParticipantID / PaperN /
ExpertiseN (`Paper01`, `Paper1 `, `Paper١`) was dropped unread (now refused, naming file and column); a prediction's
reviewer id lost every leading `~`, not just the one of the archives' `~REVIEWER.jsonl` names (`~~Name1` read as
`Name1`, not the OpenReview profile id `~Name1`)."""

from __future__ import annotations

import json

import pytest

from aspire.benchmarks.reviewers import draw_dirs, load_ratings, load_reviewer_set, read_predictions, reviewer_units
from tests.test_reliability_round49_reviewers import _draw, _record


def _archive(reviewer: str = "R") -> dict:
    return {reviewer: [json.dumps(_record("a1"))]}


# ---- draws -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("names", [("d_20_1", "d_20_01"), ("d_20_01", "d_20_1"), ("d_20_2", "d_020_2")])
def test_two_folders_naming_one_draw_are_refused_naming_both(tmp_path, names):
    (tmp_path / "evaluations.csv").write_text("ParticipantID\tPaper1\tExpertise1\nR\tp1\t3\n")
    for name in names:
        _draw(tmp_path / name, {"p1": _record("p1")}, _archive())
    first, second = sorted(names)
    with pytest.raises(ValueError, match=rf"the folders {first} and {second} name one draw"):
        load_reviewer_set(tmp_path)


def test_distinct_draws_still_come_in_numeric_order(tmp_path):
    for name in ("d_20_10", "d_20_02", "d_5_3", "d_20_1", "e_20_4"):
        (tmp_path / name).mkdir()
    (tmp_path / "d_20_7").write_text("a file, not a draw")
    assert [p.name for p in draw_dirs(tmp_path)] == ["d_5_3", "d_20_1", "d_20_02", "d_20_10"]


# ---- ratings header ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("column", ["Paper01", "Expertise02", "paper2", "Paper2 ", "Notes", "Paper\u0661"])
def test_a_header_column_the_reader_cannot_read_is_refused_naming_file_and_column(tmp_path, column):
    path = tmp_path / "evaluations.csv"
    path.write_text(f"ParticipantID\tPaper1\tExpertise1\t{column}\nR\tp1\t3\tp2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"evaluations\.csv:1: the header names column\(s\) \[" + repr(column)):
        load_ratings(path)


def test_a_header_of_participant_and_numbered_pairs_in_any_order_still_reads(tmp_path):
    path = tmp_path / "evaluations.csv"
    path.write_text("Expertise2\tParticipantID\tPaper2\tPaper1\tExpertise1\n4\tR\tp2\tp1\t3\n", encoding="utf-8")
    assert load_ratings(path) == {"R": [("p1", 3.0), ("p2", 4.0)]}


# ---- prediction reviewer ids -------------------------------------------------------------------------------------

def test_only_the_one_leading_tilde_of_the_archive_names_is_removed(tmp_path):
    path = tmp_path / "pred.json"
    path.write_text(json.dumps({"~~Ann1": {"p1": 0.5}, "~123": {"p1": 0.2}, "456": {"p1": 0.1}}))
    assert read_predictions(path) == {"~Ann1": {"p1": 0.5}, "123": {"p1": 0.2}, "456": {"p1": 0.1}}


def test_an_openreview_profile_id_is_scored_from_its_archive_named_prediction(tmp_path):
    """A rated reviewer `~Ann1` (an OpenReview profile id) has the archive `~~Ann1.jsonl`; a prediction keyed by the
    archive's name is that reviewer's, not a reviewer `Ann1` whom nobody rated."""
    (tmp_path / "evaluations.csv").write_text("ParticipantID\tPaper1\tPaper2\tExpertise1\tExpertise2\n"
                                              "~Ann1\tp1\tp2\t5\t1\n")
    _draw(tmp_path / "d_20_1", {"p1": _record("p1"), "p2": _record("p2")}, _archive("~Ann1"))
    rset = load_reviewer_set(tmp_path)
    path = tmp_path / "pred.json"
    path.write_text(json.dumps({"~~Ann1": {"p1": 0.1, "p2": 0.9}}))  # ordered against the ratings: loss 1
    units, counts = reviewer_units(rset, [read_predictions(path)])
    assert counts["reviewers_not_predicted"] == [[]]
    assert units.value() == 1.0


def test_one_reviewer_with_and_without_its_tilde_is_still_refused(tmp_path):
    path = tmp_path / "pred.json"
    path.write_text(json.dumps({"~~Ann1": {"p1": 0.5}, "~Ann1": {"p1": 0.2}}))
    assert set(read_predictions(path)) == {"~Ann1", "Ann1"}  # two reviewers, not one spelt twice
    path.write_text(json.dumps({"~Ann1": {"p1": 0.5}, "Ann1": {"p1": 0.2}}))
    with pytest.raises(ValueError, match=r"pred\.json: reviewer Ann1 is in the file twice"):
        read_predictions(path)


# ---- the published predictions ----------------------------------------------------------------------------------

def test_the_shared_data_reads_whole_under_the_stricter_reader(shared_data):
    root = shared_data / "reviewer-matching"
    assert [p.name for p in draw_dirs(root)] == [f"d_20_{i}" for i in range(1, 11)]
    ratings = load_ratings(root / "evaluations.csv")
    assert (len(ratings), sum(map(len, ratings.values()))) == (58, 477)
    pred = read_predictions(root / "predictions" / "specter_d_20_1_ta.json")
    assert set(pred) <= set(ratings) and len(pred) == 58
