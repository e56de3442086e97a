"""Round 4 of the reliability work on the benchmark readers and metrics: relevance grades, pool and ranked files,
splits, NaN similarities, reviewer ratings and predictions, paired probe comparisons and the SciRepEval-format
table script. Each bad input is refused with a message naming its record, never dropped or truncated silently."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_scirepeval_formats import _Features

from aspire.batch import DocBatch
from aspire.benchmarks.acl_formats import checksum
from aspire.benchmarks.metrics import evaluate_rankings
from aspire.benchmarks.pools import load_pool_set, read_ranked
from aspire.benchmarks.reviewers import load_ratings, read_predictions
from aspire.evaluate.probes import compare_probe_results, run_format
from aspire.evaluate.rank import rank_pools

REPO = Path(__file__).resolve().parents[1]


def _anns(root: Path, name: str, pools) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"test-pid2anns-{name}.json").write_text(json.dumps(pools))
    return root


# ---- relevance grades --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grade, message", [
    (2.5, "relevance grade 2.5 is not an integer"),
    ("high", "relevance grade 'high' is not a number"),
    (None, "relevance grade None is not a number"),
    (-1, "negative relevance grade -1"),
])
def test_pool_grade_that_is_not_an_integer_is_refused_naming_query_and_candidate(tmp_path, grade, message):
    root = _anns(tmp_path, "toy", {"q1": {"cands": ["a", "b"], "relevance_adju": [grade, 0]}})
    with pytest.raises(ValueError, match=f"test-pid2anns-toy.json: query q1 candidate a: {message}"):
        load_pool_set(root, "toy")


def test_pool_grade_written_as_a_whole_float_is_read_as_that_integer(tmp_path):
    root = _anns(tmp_path, "toy", {"q1": {"cands": ["a", "b"], "relevance_adju": [2.0, 0]}})
    assert load_pool_set(root, "toy").pools[""]["q1"] == {"a": 2, "b": 0}


def test_fractional_grades_are_refused_by_the_metrics_not_truncated_for_some_metrics_only():
    qrels = {"q": {"a": 1.5, "b": 0.5, "c": 0}}
    with pytest.raises(ValueError, match="query q candidate a: relevance grade 1.5 is not an integer"):
        evaluate_rankings(qrels, {"q": ["b", "a", "c"]}, ["nDCG@3", "NDCG%100"])
    with pytest.raises(ValueError, match="query q candidate a: relevance grade nan is not an integer"):
        evaluate_rankings({"q": {"a": float("nan"), "b": 1}}, {"q": ["a", "b"]}, ["MAP"])
    with pytest.raises(ValueError, match="threshold must be an integer >= 1"):
        evaluate_rankings({"q": {"a": 2, "b": 1}}, {"q": ["a", "b"]}, ["MAP"], threshold=1.5)


# ---- pool, ranked and splits files -------------------------------------------------------------------------------


def test_pool_and_ranked_files_of_the_wrong_shape_are_refused_naming_the_file(tmp_path):
    root = _anns(tmp_path, "toy", [["q1", "a"]])
    with pytest.raises(ValueError, match="test-pid2anns-toy.json: expected .*got a JSON list"):
        load_pool_set(root, "toy")
    _anns(tmp_path, "str", {"q1": {"cands": "ab", "relevance_adju": [1, 0]}})
    with pytest.raises(ValueError, match="query q1: 'cands' must be a list"):
        load_pool_set(root, "str")
    (root / "test-pid2anns-cut.json").write_text('{"q1": ')
    with pytest.raises(ValueError, match="test-pid2anns-cut.json: not JSON"):
        load_pool_set(root, "cut")
    (root / "ranked.json").write_text(json.dumps([["a", 1.0]]))
    with pytest.raises(ValueError, match="ranked.json: expected .*got a JSON list"):
        read_ranked(root / "ranked.json")


def test_a_query_in_its_own_pool_is_removed_when_the_ids_are_json_numbers(tmp_path):
    root = _anns(tmp_path, "toy", {"7": {"cands": [7, 8, 9], "relevance_adju": [3, 1, 0]}})
    ps = load_pool_set(root, "toy")
    assert ps.self_in_pool == ["7"] and ps.pools[""]["7"] == {"8": 1, "9": 0}


def test_a_split_naming_a_query_twice_is_refused(tmp_path):
    root = _anns(tmp_path, "toy", {"q1": {"cands": ["a", "b"], "relevance_adju": [1, 0]},
                                   "q2": {"cands": ["a", "b"], "relevance_adju": [0, 1]}})
    (root / "splits.json").write_text(json.dumps({"test": ["q1", "q1", "q2"]}))
    with pytest.raises(ValueError, match=r"split 'test' names queries more than once: \['q1'\]"):
        load_pool_set(root, "toy", splits_file=root / "splits.json")


# ---- NaN similarities --------------------------------------------------------------------------------------------


class _NanScorer:
    def score(self, queries, cands):
        return torch.tensor([[0.5, float("nan"), 0.9]])[:, : len(cands)]


def test_rank_pools_refuses_nan_similarities_naming_query_and_candidate():
    batch = DocBatch(torch.randn(4, 2, 3), torch.ones(4, 2, dtype=torch.bool), ["q", "a", "b", "c"], [["x", "y"]] * 4)
    with pytest.raises(ValueError, match=r"query q: the scorer gave NaN similarities for 1 of 3 candidates: \['b'\]"):
        rank_pools(batch.index([0]), batch.index([1, 2, 3]), {"q": ["a", "b", "c"]}, _NanScorer())


# ---- reviewer matching -------------------------------------------------------------------------------------------


def _ratings(path: Path, rows) -> Path:
    header = ["ParticipantID"] + [f"Paper{i}" for i in range(1, 11)] + [f"Expertise{i}" for i in range(1, 11)]
    lines = ["\t".join(header)]
    for reviewer, papers, grades in rows:
        lines.append("\t".join([reviewer, *(papers + [""] * (10 - len(papers))), *(grades + [""] * (10 - len(grades)))]))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_expertise_without_its_paper_is_refused_not_dropped(tmp_path):
    path = _ratings(tmp_path / "evaluations.csv", [("r1", ["s1", "", "s3"], ["5", "3", "1"])])
    with pytest.raises(ValueError, match=r"evaluations.csv:2: reviewer r1: Expertise2 is '3' but Paper2 is empty"):
        load_ratings(path)


def test_a_paper_rated_twice_by_one_reviewer_is_refused(tmp_path):
    # the pair (s1, s1) would cost half its weight whatever the prediction
    path = _ratings(tmp_path / "evaluations.csv", [("r1", ["s1", "s2", "s1"], ["5", "3", "1"])])
    with pytest.raises(ValueError, match="evaluations.csv:2: reviewer r1 rates paper s1 twice"):
        load_ratings(path)
    path = _ratings(tmp_path / "two-rows.csv", [("r1", ["s1", "s2"], ["5", "3"]), ("r1", ["s1"], ["2"])])
    with pytest.raises(ValueError, match="two-rows.csv:3: reviewer r1 rates paper s1 twice"):
        load_ratings(path)


def test_predictions_naming_a_reviewer_with_and_without_tilde_are_refused(tmp_path):
    path = tmp_path / "pred.json"
    path.write_text(json.dumps({"~r1": {"s1": 0.2}, "r1": {"s1": 0.9}}))
    with pytest.raises(ValueError, match="reviewer r1 is in the file twice"):
        read_predictions(path)


# ---- paired probe comparisons ------------------------------------------------------------------------------------


def test_compare_probe_results_refuses_runs_with_other_test_labels(tmp_path):
    ids = [f"p{i}" for i in range(24)]
    body = {"venue_year": {"train": ids[:12], "dev": ids[12:18], "test": ids[18:]}, "same_author": {"test": []}}
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"splits": body, "checksum": checksum(body)}))
    venues = ["wmt", "bea", "sigdial"]
    records = {p: {"paper_id": p, "venues": [venues[i % 3]], "year": str(2000 + i), "title": p, "authors": []}
               for i, p in enumerate(ids)}
    feats = _Features({p: np.array([10.0 * (i % 3 == k) for k in range(3)] + [float(i)]) for i, p in enumerate(ids)})
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"paper_id": p, "label": "xy"[i % 2]}) + "\n" for i, p in enumerate(ids)))
    run_format("venue", tmp_path, "toy", tmp_path / "a", features=feats, context=({}, records), split_file=split)
    run_format("venue", tmp_path, "toy", tmp_path / "b", features=feats, context=({}, records), split_file=split,
               label_file=labels)
    with pytest.raises(ValueError, match="label the test papers differently .*e.g. paper p18"):
        compare_probe_results(tmp_path / "a", tmp_path / "b", n_perm=5)


# ---- experiments/scirepeval_formats.py ---------------------------------------------------------------------------


def _script():
    spec = importlib.util.spec_from_file_location("scirepeval_formats", REPO / "experiments" / "scirepeval_formats.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("args, message", [
    (["--run", "a", "--base", "a"], "--run 'a': expected TAG=DIR"),
    (["--run", "a=x", "--run", "a=y", "--base", "a"], "tag 'a' given twice"),
    (["--run", "a=x", "--base", "b"], "--base 'b' names no --run"),
])
def test_scirepeval_formats_script_refuses_bad_runs(tmp_path, monkeypatch, capsys, args, message):
    (tmp_path / "x" / "venue").mkdir(parents=True)
    (tmp_path / "x" / "venue" / "results.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["scirepeval_formats.py", *args, "--out", str(tmp_path / "out.json")])
    with pytest.raises(SystemExit) as exc:
        _script().main()
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_ratings_header_is_checked_before_its_rows(tmp_path):
    """A comma-separated evaluations file, or one without the Paper/Expertise columns: named at the header (once
    "line 2: no ParticipantID", or every rating skipped)."""
    path = tmp_path / "evaluations.csv"
    path.write_text("ParticipantID,Paper1,Expertise1\nr1,s1,5\n")
    with pytest.raises(ValueError, match=r"evaluations\.csv:1: the header lacks column\(s\) \['ParticipantID', "
                                         r"'Paper1', 'Expertise1'\]"):
        load_ratings(path)
    path.write_text("ParticipantID\tPaper\tExpertise\nr1\ts1\t5\n")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['Paper1', 'Expertise1'\]"):
        load_ratings(path)


def test_a_submission_whose_key_is_not_its_id_is_refused(tmp_path):
    """`submissions.json` keyed by one id and holding another: refused naming both (once the key was used and the
    record's id ignored, so ratings naming the id matched nothing)."""
    from test_benchmarks import make_reviewer_set

    from aspire.benchmarks.reviewers import load_reviewer_set

    root = make_reviewer_set(tmp_path / "rm")
    subs_path = root / "d_20_1" / "submissions.json"
    subs = json.loads(subs_path.read_text())
    subs["s2"]["id"] = "s7"
    subs_path.write_text(json.dumps(subs))
    with pytest.raises(ValueError, match=r"submissions\.json \['s2'\]: the record's id is 's7'; a submission's key "
                                         "and id must agree"):
        load_reviewer_set(root)
