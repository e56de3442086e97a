"""Round 49, reviewer matching (aspire/benchmarks/reviewers.py): a title or abstract of 0 / false / [] / {} was read
as empty text unseen (only a missing field or null is empty); an archive naming one paper on two lines is refused
(the paper weighed twice in a mean or top-k aggregate). Checked beside: the published SPECTER / ELMo predictions give
the data README's 0.2689 / 0.3447, the loss equals a brute-force reading of its definition, missing predictions and
bad prediction files are refused, and draws are read in numeric order."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from aspire.benchmarks.reviewers import (
    load_draw,
    load_reviewer_set,
    read_prediction_set,
    read_predictions,
    reviewer_loss,
    reviewer_units,
)

DATA = Path("/work/shared/data/reviewer-matching")


def _record(pid, title="t", abstract="a"):
    return {"id": pid, "content": {"title": title, "abstract": abstract}}


def _draw(folder: Path, subs: dict, archives: dict) -> Path:
    (folder / "archives").mkdir(parents=True)
    (folder / "submissions.json").write_text(json.dumps(subs))
    for reviewer, lines in archives.items():
        (folder / "archives" / f"~{reviewer}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.parametrize("bad", [0, False, [], {}])
def test_a_falsy_non_string_title_is_refused_not_read_as_empty(tmp_path, bad):
    subs = {"p1": _record("p1", title=bad)}
    folder = _draw(tmp_path / "d_20_1", subs, {"R": [json.dumps(_record("a1"))]})
    with pytest.raises(ValueError, match=r"submissions\.json.*paper p1: title and abstract must be strings"):
        load_draw(folder, ["R"])


def test_a_null_or_missing_abstract_still_reads_as_empty(tmp_path):
    subs = {"p1": _record("p1", abstract=None), "p2": {"id": "p2", "content": {"title": "x"}}}
    draw = load_draw(_draw(tmp_path / "d_20_1", subs, {"R": [json.dumps(_record("a1"))]}), ["R"])
    assert draw.submissions == {"p1": ("t", ""), "p2": ("x", "")}


def test_an_archive_naming_one_paper_twice_is_refused_naming_file_line_and_paper(tmp_path):
    lines = [json.dumps(_record("a1")), json.dumps(_record("a2")), json.dumps(_record("a1", title="other"))]
    folder = _draw(tmp_path / "d_20_1", {"p1": _record("p1")}, {"R": lines})
    with pytest.raises(ValueError, match=r"~R\.jsonl:3: paper a1 is in the archive twice \(first on line 1\)"):
        load_draw(folder, ["R"])


@pytest.mark.skipif(not DATA.is_dir(), reason="shared reviewer-matching data not present")
@pytest.mark.parametrize("exp, known", [("specter", 0.2689), ("elmo", 0.3447)])
def test_published_predictions_reproduce_the_readme_scores(exp, known):
    rset = load_reviewer_set(DATA)
    assert [d.name for d in rset.draws] == [f"d_20_{i}" for i in range(1, 11)]
    scores, counts = reviewer_units(rset, read_prediction_set(DATA / "predictions", exp, rset))
    assert round(scores.value(), 4) == known
    assert counts["skipped_pairs"] == 0 and all(not a for a in counts["reviewers_not_predicted"])


def _brute(rated, pred):
    num = den = 0.0
    for (p1, e1), (p2, e2) in itertools.combinations(rated, 2):
        if e1 == e2:
            continue
        den += abs(e1 - e2)
        s1, s2 = pred[p1], pred[p2]
        if s1 == s2:
            num += abs(e1 - e2) / 2
        elif (s1 > s2) != (e1 > e2):
            num += abs(e1 - e2)
    return num, den


def test_reviewer_loss_matches_a_brute_force_reading_of_the_definition():
    rng = random.Random(49)
    for _ in range(200):
        n = rng.randint(2, 7)
        rated = [(f"p{i}", rng.choice([1, 1.5, 2, 3, 4, 4.5, 5])) for i in range(n)]
        pred = {p: float(rng.randint(0, 3)) for p, _ in rated}  # many ties
        loss, top, skipped = reviewer_loss(rated, pred, {p: ("t", "a") for p, _ in rated})
        assert (loss, top, skipped) == (*_brute(rated, pred), 0)


def test_a_missing_rated_prediction_is_refused_and_an_absent_reviewer_scores_nothing():
    rated = [("p1", 5.0), ("p2", 1.0)]
    subs = {"p1": ("t", "a"), "p2": ("t", "a")}
    with pytest.raises(ValueError, match="reviewer R: no prediction for rated submission p2"):
        reviewer_loss(rated, {"p1": 0.3}, subs, "R")
    assert reviewer_loss(rated, None, subs, "R") == (0.0, 0.0, 0)


@pytest.mark.parametrize("text, match", [
    ('{"R": {"p1": 0.1, "p1": 0.2}}', r"pred\.json: the prediction file has the key 'p1' twice"),
    ('{"R": {"p1": NaN}}', r"pred\.json: reviewer R paper p1: similarity nan is not a finite number"),
    ('{"R": {"p1": 1}, "~R": {"p1": 2}}', r"pred\.json: reviewer R is in the file twice"),
])
def test_bad_prediction_files_are_refused_naming_file_and_key(tmp_path, text, match):
    path = tmp_path / "pred.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_predictions(path)


def test_draws_are_read_in_numeric_order(tmp_path):
    (tmp_path / "evaluations.csv").write_text("ParticipantID\tPaper1\tExpertise1\nR\tp1\t3\n")
    for i in (10, 2, 1):
        _draw(tmp_path / f"d_20_{i}", {"p1": _record("p1")}, {"R": [json.dumps(_record("a1"))]})
    assert [d.name for d in load_reviewer_set(tmp_path).draws] == ["d_20_1", "d_20_2", "d_20_10"]
