"""Reviewer matching names what of the gold set a prediction leaves unscored: a rated reviewer absent from every
draw's predictions is named on the printed line, not only counted in `over N reviewers`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aspire.benchmarks.reviewers import Draw, ReviewerSet, left_out, reviewer_units
from aspire.cli.evaluate import main
from aspire.paths import DATA

REV = DATA / "reviewer-matching"
needs_data = pytest.mark.skipif(not (REV / "predictions").is_dir(), reason="no shared reviewer-matching data")


def _rset() -> ReviewerSet:
    subs = {"p1": ("t", "a"), "p2": ("t", "a"), "p3": ("t", "a")}
    ratings = {"r1": [("p1", 5.0), ("p2", 3.0), ("p3", 1.0)], "r2": [("p1", 1.0), ("p2", 4.0)],
               "r3": [("p2", 2.0), ("p3", 5.0)]}
    return ReviewerSet(Path("."), ratings, [Draw("d_20_1", subs, {}), Draw("d_20_2", subs, {})])


def test_a_reviewer_left_out_of_every_draw_is_named():
    r1 = {"p1": 3.0, "p2": 2.0, "p3": 1.0}
    r3 = {"p2": 0.0, "p3": 1.0}
    _, counts = reviewer_units(_rset(), [{"r1": r1, "r3": r3}, {"r1": r1}])
    # was: "1 reviewer left out of draw d_20_2 (r3)", r2 (in no draw) unsaid
    assert left_out(counts) == "1 rated reviewer left out of every draw (r2); 1 reviewer left out of draw d_20_2 (r3)"
    _, counts = reviewer_units(_rset(), [{"r1": r1}, {"r1": r1}])
    assert left_out(counts) == "2 rated reviewers left out of every draw (r2, r3)"  # was: ''


@needs_data
def test_published_predictions_without_one_reviewer_name_it(tmp_path, capsys):
    for i in range(1, 11):
        pred = json.loads((REV / "predictions" / f"specter_d_20_{i}_ta.json").read_text())
        pred.pop("1737249")
        (tmp_path / f"cut_d_20_{i}_ta.json").write_text(json.dumps(pred))
    assert main(["reviewers", "--predictions", f"{tmp_path}:cut"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    # was: "cut: loss 0.2781 [0.2225, 0.3412] over 57 reviewers, 10 draws", the reviewer not named
    assert line.endswith("over 57 reviewers, 10 draws; 1 rated reviewer left out of every draw (1737249)"), line


def test_pairs_of_a_rated_paper_missing_from_a_draw_are_named_where_the_figure_is_printed():
    from aspire.benchmarks.reviewers import summarize
    from aspire.evaluate.reviewer_run import format_result

    rset = _rset()
    rset.draws[1] = Draw("d_20_2", {"p1": ("t", "a"), "p2": ("t", "a")}, {})  # lacks rated p3: r1's, r3's pairs
    model = {"r1": {"p1": 3.0, "p2": 2.0, "p3": 1.0}, "r2": {"p1": 0.0, "p2": 1.0}, "r3": {"p2": 0.0, "p3": 1.0}}
    run = [model, {r: {p: v for p, v in s.items() if p != "p3"} for r, s in model.items()}]  # as a model run writes
    units, counts = reviewer_units(rset, run)
    assert counts["skipped_pairs"] == 3 and counts["skipped_papers"] == ["p3"]
    line = format_result(summarize(units, counts, n_boot=10))
    # was: "loss 0.0000 [0.0000, 0.0000] over 3 reviewers, 2 draws", the three pairs left out unsaid
    assert line.endswith("over 3 reviewers, 2 draws; 3 rated pairs skipped: 1 rated paper not in its draw's "
                         "submissions or without text (p3)"), line
