"""Round 33: reviewer matching (`aspire.benchmarks.reviewers`, `aspire.evaluate.reviewer_run`) read and scored as
documented. Fixed: an archive line holding U+2028 or U+0085 inside a JSON string (valid JSON, written so by
`ensure_ascii=False`) was cut in two by `str.splitlines` and refused as "not JSON"; a ratings row naming no paper
was kept as a reviewer with no ratings (counted in no figure, listed as 'not predicted' in every draw); a ratings
error after a blank line named the line before the bad one. Checked: the published SPECTER / ELMo predictions
against the README's known answers and an independent loop over the raw files, `predict`'s max / mean / topk
aggregation and ties against a hand loop, and the bootstrap interval against a hand resampling of reviewers with
the same seed."""

from __future__ import annotations

import csv
import json
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.benchmarks.reviewers import (
    load_ratings,
    load_reviewer_set,
    read_prediction_set,
    reviewer_loss,
    reviewer_units,
    summarize,
)
from aspire.evaluate.reviewer_run import predict
from tests.test_benchmarks import make_reviewer_set


def _archive(root: Path, reviewer: str = "r1") -> Path:
    return root / "d_20_1" / "archives" / f"~{reviewer}.jsonl"


# ---- archives: one record a line, lines cut at "\n" only --------------------------------------------------------

@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85"])
def test_an_archive_line_with_a_unicode_line_separator_in_a_string_is_read_whole(tmp_path, char):
    root = make_reviewer_set(tmp_path / "rm")
    recs = [{"id": "r1-a0", "content": {"title": f"two{char}lines", "abstract": f"an abstract{char}cut here."}},
            {"id": "r1-a1", "content": {"title": "plain", "abstract": "the data."}}]
    text = "\n".join(json.dumps(r, ensure_ascii=False) for r in recs) + "\n"
    assert [json.loads(x) for x in text.split("\n") if x] == recs  # valid JSONL, one record a line
    _archive(root).write_text(text, encoding="utf-8")
    papers = load_reviewer_set(root).draws[0].archives["r1"]
    assert papers == [("r1-a0", f"two{char}lines", f"an abstract{char}cut here."), ("r1-a1", "plain", "the data.")]


def test_archive_errors_still_name_the_physical_line(tmp_path):
    root = make_reviewer_set(tmp_path / "rm")
    good = json.dumps({"id": "r1-a0", "content": {"title": "a", "abstract": "b"}})
    _archive(root).write_text(f"{good}\r\n\r\n{{broken\r\n")
    with pytest.raises(ValueError, match=r"~r1\.jsonl:3: not JSON"):
        load_reviewer_set(root)


def test_an_archive_record_naming_a_key_twice_is_refused_naming_line_and_key(tmp_path):
    # json.loads kept the last value: a record whose "content" (or "abstract") came twice was read with one of them
    # dropped unseen; the archive reader now refuses it as the project's other JSON readers do (`io.loads_unique`)
    root = make_reviewer_set(tmp_path / "rm")
    good = json.dumps({"id": "r1-a0", "content": {"title": "a", "abstract": "b"}})
    twice = '{"id": "r1-a1", "content": {"title": "t", "abstract": "first", "abstract": "second"}}'
    _archive(root).write_text(f"{good}\n{twice}\n")
    with pytest.raises(ValueError, match=r"~r1\.jsonl:2: the key 'abstract' twice in one record"):
        load_reviewer_set(root)


# ---- ratings -----------------------------------------------------------------------------------------------------

def _write_ratings(path: Path, rows: list[list[str]]) -> Path:
    header = ["ParticipantID"] + [f"Paper{i}" for i in range(1, 4)] + [f"Expertise{i}" for i in range(1, 4)]
    path.write_text("\n".join("\t".join(r) for r in [header, *rows]) + "\n")
    return path


def test_a_ratings_row_naming_no_paper_is_refused_naming_line_and_reviewer(tmp_path):
    path = _write_ratings(tmp_path / "evaluations.csv", [["r1", "s1", "s2", "", "5", "3", ""],
                                                        ["r2", "", "", "", "", "", ""]])
    with pytest.raises(ValueError, match=r"evaluations\.csv:3: reviewer r2 rates no paper"):
        load_ratings(path)


def test_a_ratings_error_after_a_blank_line_names_the_physical_line(tmp_path):
    path = tmp_path / "evaluations.csv"
    _write_ratings(path, [["r1", "s1", "s2", "", "5", "3", ""]])
    path.write_text(path.read_text() + "\n" + "\t".join(["r2", "s1", "s2", "", "5", "9", ""]) + "\n")
    assert path.read_text().splitlines()[3].startswith("r2")  # the bad row is the file's line 4
    with pytest.raises(ValueError, match=r"evaluations\.csv:4: reviewer r2 paper s2: expertise '9'"):
        load_ratings(path)


@pytest.mark.slow
def test_ratings_read_as_a_plain_csv_reader_reads_them(shared_data):
    path = shared_data / "reviewer-matching" / "evaluations.csv"
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    head, body = rows[0], rows[1:]
    brute: dict[str, list] = {}
    for row in body:
        cells = dict(zip(head, row))
        brute.setdefault(row[0], []).extend((cells[f"Paper{i}"], float(cells[f"Expertise{i}"]))
                                            for i in range(1, 11) if cells[f"Paper{i}"])
    ratings = load_ratings(path)
    assert ratings == brute
    assert (len(ratings), sum(map(len, ratings.values()))) == (58, 477)  # the README's 58 researchers, 477 ratings


# ---- known answers: the published predictions --------------------------------------------------------------------

def _raw_loss(root: Path, exp: str, draw: int) -> float:
    """The README's loss of one draw from the raw files: plain csv, json and a loop."""
    with open(root / "evaluations.csv", newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    subs = set(json.loads((root / f"d_20_{draw}" / "submissions.json").read_text()))
    pred = {k.lstrip("~"): v for k, v in json.loads((root / "predictions" / f"{exp}_d_20_{draw}_ta.json").read_text()).items()}
    num = den = 0.0
    for row in rows[1:]:
        rated = [(p, float(e)) for p, e in zip(row[1:11], row[11:21]) if p]
        for (p1, e1), (p2, e2) in combinations(rated, 2):
            if e1 == e2 or not {p1, p2} <= subs:
                continue
            s1, s2 = pred[row[0]][p1], pred[row[0]][p2]
            den += abs(e1 - e2)
            num += abs(e1 - e2) / 2 if s1 == s2 else abs(e1 - e2) * ((s1 > s2) != (e1 > e2))
    return num / den


@pytest.mark.slow
def test_published_predictions_reproduce_the_readme_and_a_raw_loop(shared_data):
    root = shared_data / "reviewer-matching"
    rset = load_reviewer_set(root)
    for exp, known in (("specter", 0.2689), ("elmo", 0.3447)):
        units, counts = reviewer_units(rset, read_prediction_set(root / "predictions", exp, rset))
        assert round(units.value(), 4) == known
        assert units.per_group() == pytest.approx([_raw_loss(root, exp, d) for d in range(1, 11)], abs=1e-12)
        assert counts["skipped_pairs"] == 0 and not any(counts["reviewers_not_predicted"])


# ---- aggregation over a reviewer's archive, ties, the bootstrap --------------------------------------------------

@pytest.mark.parametrize("agg", ["max", "mean", "topk:2", "topk:9"])
def test_predict_aggregates_each_reviewers_archive_as_a_hand_loop(tmp_path, agg):
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm"))
    draw = rset.draws[0]
    rng = np.random.default_rng(3)
    ids = sorted({*draw.submissions, *(p for a in draw.archives.values() for p, _, _ in a)})
    table = {(a, b): float(rng.normal()) for a in ids for b in ids}

    def sims(subs, arch):
        return torch.tensor([[table[s, a] for a in arch] for s in subs], dtype=torch.float64)

    pred = predict(rset, set(ids), sims, agg)[0]
    for reviewer, rated in rset.ratings.items():
        arch = [p for p, _, _ in draw.archives[reviewer]]
        for paper, _ in rated:
            if paper not in draw.submissions:
                assert paper not in pred[reviewer]  # s9: no submission, no prediction
                continue
            values = sorted((table[paper, a] for a in arch), reverse=True)
            k = {"max": 1, "mean": len(values)}.get(agg) or int(agg.split(":")[1])
            want = sum(values[:k]) / len(values[:k])
            assert pred[reviewer][paper] == pytest.approx(want, rel=1e-6)


def test_tied_predictions_cost_half_against_a_hand_count(tmp_path):
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm"))
    subs = rset.draws[0].submissions
    # r1 rated s1=5, s2=3, s3=1; all three tie: each pair costs half its rating gap, (2 + 4 + 2) / 2
    assert reviewer_loss(rset.ratings["r1"], {"s1": 0.5, "s2": 0.5, "s3": 0.5}, subs) == (4.0, 8.0, 0)
    # s1 and s2 tie, s3 lowest: only (s1, s2) costs, half of 2
    assert reviewer_loss(rset.ratings["r1"], {"s1": 0.5, "s2": 0.5, "s3": -1.0}, subs) == (1.0, 8.0, 0)


def test_the_bootstrap_resamples_reviewers_with_the_seed_as_a_hand_loop(tmp_path):
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm", draws=2))
    preds = [{"r1": {"s1": 0.5, "s2": 0.6, "s3": 0.1}, "r2": {"s1": 0.3, "s4": 0.3}, "r3": {"s2": 0.9, "s3": 0.1}},
             {"r1": {"s1": 0.9, "s2": 0.6, "s3": 0.1}, "r2": {"s1": 0.3, "s4": 0.5}, "r3": {"s2": 0.9, "s3": 0.1}}]
    units, counts = reviewer_units(rset, preds)
    res = summarize(units, counts, n_boot=300, seed=5)
    assert res == summarize(units, counts, n_boot=300, seed=5)  # seeded
    # r3's only scored pair ties in rating: no unit; r1 and r2 are resampled, each with its numbers in both draws
    assert res["n_reviewers"] == 2 and res["n_draws"] == 2
    active = [u for u in range(3) if units.den[:, u].sum() > 0]
    draws = np.random.default_rng(5).integers(0, len(active), size=(300, len(active)))
    stats = []
    for sample in draws:
        chosen = [active[i] for i in sample]
        per_draw = [units.num[g, chosen].sum() / units.den[g, chosen].sum() for g in range(2)
                    if units.den[g, chosen].sum() > 0]
        stats.append(np.mean(per_draw))
    assert res["ci95"] == pytest.approx([np.quantile(stats, 0.025), np.quantile(stats, 0.975)])
    assert res["loss"] == pytest.approx(np.mean([(2.0 + 1.25) / 10.5, (0.0 + 0.0) / 10.5]))
