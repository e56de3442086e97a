"""The command layer and the alignment plots, round 16: a `--device` torch parses but nothing runs on here (`meta`,
`xpu` without one) passed the parser and failed with a traceback after the model loaded; `compare --out A/results.json`
replaced run A's results; `pools --metrics ,` ran and wrote results of no metric, and `--metrics MAP,MAP` two identical
columns; `reviewers --scorer minl2,minl2` fused one scorer with itself; the plots read a boolean mask passed as `rows`
as positions 1/0, cut non-integer rows and pairs to integers, read `max_pairs=-1` as "all but the last pair" and drew
a grade above `max_grade` in `max_grade`'s colour."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import matplotlib
import numpy as np
import pytest

from aspire import cliutil
from aspire.cli import evaluate as evaluate_cli
from aspire.paths import DATA

matplotlib.use("Agg")

REV = DATA / "reviewer-matching"


class Reached(Exception):
    """Raised by a stand-in for a runner: the command got past its checks and would have run."""


def _status(argv) -> int:
    try:
        return evaluate_cli.main(argv)
    except SystemExit as exc:  # a parser error
        return exc.code


# ---- --device --------------------------------------------------------------------------------------------------

def test_device_name_refuses_a_device_type_nothing_runs_on_here():
    import torch

    with pytest.raises(argparse.ArgumentTypeError, match="'meta'"):
        cliutil.device_name("meta")
    if not torch.xpu.is_available():
        with pytest.raises(argparse.ArgumentTypeError, match="no xpu device is available here"):
            cliutil.device_name("xpu")
    assert cliutil.device_name("cpu:0") == "cpu"  # what works still works


def test_encode_with_a_meta_device_is_a_usage_error_before_any_file_is_read(tmp_path, capsys):
    from aspire.cli import encode

    with pytest.raises(SystemExit) as exc:  # the corpus does not exist: the parser stops first
        encode.main(["--model", "minilm", "--corpus", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o"),
                     "--device", "meta"])
    assert exc.value.code == 2
    assert "device 'meta'" in capsys.readouterr().err


# ---- compare --out ---------------------------------------------------------------------------------------------

def _ranked_folder(path, scores):
    path.mkdir()
    (path / "run.trec").write_text("".join(f"q1 Q0 d{i} {r + 1} {s} x\n" for r, (i, s) in enumerate(scores)))
    (path / "qrels.trec").write_text("q1 0 d0 1\nq1 0 d1 0\nq1 0 d2 1\n")
    (path / "results.json").write_text(json.dumps({"experiment": path.name}))
    return path


def stand_in_compare(monkeypatch, metric: str) -> None:
    """The comparison itself stands in (ranx's first call compiles for a minute): a test of `compare --out` checks
    where the comparison is written, not its figures."""
    monkeypatch.setattr("aspire.evaluate.compare.compare", lambda a, b, *args, **kwargs: {
        metric: {"a": 1.0, "b": 0.5, "delta": 0.5, "per_unit_delta": {"q1": 0.5}}})
    monkeypatch.setattr("aspire.evaluate.compare.format_comparison", lambda result: [f"{metric} 1.0 0.5"])


def test_compare_out_may_not_replace_a_file_of_a_compared_run_folder(tmp_path, capsys, monkeypatch):
    stand_in_compare(monkeypatch, "MRR")
    a = _ranked_folder(tmp_path / "a", [(0, 3.0), (1, 2.0), (2, 1.0)])
    b = _ranked_folder(tmp_path / "b", [(1, 3.0), (0, 2.0), (2, 1.0)])
    before = (a / "results.json").read_text()
    assert _status(["compare", str(a), str(b), "--out", str(a / "results.json")]) == 2
    assert "is a file of" in capsys.readouterr().err
    assert (a / "results.json").read_text() == before  # once: the comparison, and run a no longer a results folder
    # a new file inside a run folder, and a re-run replacing that earlier comparison, still write
    for _ in range(2):
        assert _status(["compare", str(a), str(b), "--out", str(a / "vs-b.json")]) == 0
        assert "per_unit_delta" in json.loads((a / "vs-b.json").read_text())["MRR"]
    assert (a / "results.json").read_text() == before


# ---- pools --metrics, reviewers --scorer -----------------------------------------------------------------------

def _toy_pools(root):
    from tests.test_evaluate_pools import write_toy

    write_toy(root)
    ranked = {"p1": [["p4", 0.9], ["p2", 0.8], ["p3", 0.7], ["p5", 0.1]],
              "p6": [["p2", -1.0], ["p7", -2.0], ["p3", -3.0], ["p8", -4.0]]}
    (root / "test-pid2pool-toy-manual-ranked.json").write_text(json.dumps(ranked))
    return root


@pytest.mark.parametrize("metrics, message", [(",", "names no metric"), ("", "names no metric"),
                                              ("MAP,P@5,MAP", "names MAP more than once")])
def test_pools_metrics_naming_no_metric_or_one_twice_are_refused(tmp_path, capsys, monkeypatch, metrics, message):
    data = _toy_pools(tmp_path / "toy")
    seen = []

    def reached(*args, **kwargs):  # the scoring itself (ranx's first call compiles for a minute) stands in
        seen.append(kwargs["metrics"])
        raise Reached("run_pools")

    monkeypatch.setattr("aspire.evaluate.pool_run.run_pools", reached)
    argv = ["pools", "--data", str(data), "--name", "toy", "--ranked", str(data), "--exp", "manual",
            "--out", str(tmp_path / "out")]
    assert _status([*argv, "--metrics", metrics]) == 2  # once: run, and results of no metric (or one twice) written
    assert message in capsys.readouterr().err
    assert seen == []
    with pytest.raises(Reached):  # what works still works
        evaluate_cli.main([*argv, "--metrics", "MAP,P@5"])
    assert seen == [["MAP", "P@5"]]


@pytest.mark.skipif(not REV.is_dir(), reason="no shared reviewer-matching data")
def test_reviewers_scorer_named_twice_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    def reached(*args, **kwargs):
        raise Reached("run_reviewers")

    monkeypatch.setattr("aspire.evaluate.reviewer_run.run_reviewers", reached)
    status = _status(["reviewers", "--model", "minilm", "--scorer", "minl2,ot,minl2", "--out", str(tmp_path / "o")])
    assert status == 2
    assert "--scorer names minl2 more than once" in capsys.readouterr().err
    with pytest.raises(Reached):  # two different scorers still reach the runner
        evaluate_cli.main(["reviewers", "--model", "minilm", "--scorer", "minl2,ot", "--out", str(tmp_path / "o")])


# ---- the plots -------------------------------------------------------------------------------------------------

TEXTS = ["first sentence", "second sentence", "third sentence"]


def test_plot_plan_refuses_a_boolean_mask_or_fractions_as_rows():
    from aspire.viz import plot_plan

    plan = np.full((3, 3), 1 / 9)
    mask = np.array([False, True, True])
    with pytest.raises(ValueError, match="boolean mask; np.flatnonzero"):  # once drawn as rows [0, 1, 1]
        plot_plan(plan, TEXTS, TEXTS, query_mask=mask, rows=mask)
    with pytest.raises(ValueError, match="integer positions"):  # once row 0
        plot_plan(plan, TEXTS, TEXTS, rows=[0.7])
    fig = plot_plan(plan, TEXTS, TEXTS, query_mask=mask, rows=np.flatnonzero(mask))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert [label.split()[0] for label in labels] == ["q1", "q2"]
    plot_plan(plan, TEXTS, TEXTS, rows=[1.0, 2])  # whole numbers given as floats are positions


def test_plot_distances_refuses_a_pair_that_is_not_integers():
    from aspire.viz import plot_distances

    cost = np.arange(9.0).reshape(3, 3)
    with pytest.raises(ValueError, match="integer positions"):  # once outlined between cells
        plot_distances(cost, TEXTS, TEXTS, pair=(0.5, 1))
    fig = plot_distances(cost, TEXTS, TEXTS, pair=(np.int64(2), np.int64(1)))
    outlined = [p for p in fig.axes[0].patches if p.get_label() == "single match (min L2)"]
    assert [tuple(p.get_xy()) for p in outlined] == [(0.5, 1.5)]


def test_plot_ranked_list_refuses_a_negative_max_pairs():
    from aspire.viz import plot_ranked_list

    pair = SimpleNamespace(query_sentence=0, hit_sentence=1, dist=0.5, weight=1.0, query_text="q", hit_text="s")
    hit = SimpleNamespace(rank=1, score=0.5, paper_id="p", title="a title", pairs=[pair, pair])
    with pytest.raises(ValueError, match="max_pairs must be an integer >= 0"):  # -1 once drew all but the last pair
        plot_ranked_list([hit], max_pairs=-1)
    texts = [t.get_text() for t in plot_ranked_list([hit], max_pairs=0).axes[0].texts]
    assert not any(t.startswith("q0 ->") for t in texts)


def test_plot_grades_by_rank_refuses_a_grade_off_the_scale():
    from aspire.viz import plot_grades_by_rank

    with pytest.raises(ValueError, match="ranking 'method': the grade at rank 2 is 5"):  # once drawn as a 3
        plot_grades_by_rank({"method": [3, 5, 0]}, max_grade=3)
    with pytest.raises(ValueError, match="rank 1 is -1"):
        plot_grades_by_rank({"method": [-1]})
    fig = plot_grades_by_rank({"method": [3, None, float("nan"), 0]})  # None and NaN: not graded, drawn blank
    grid = fig.axes[0].images[0].get_array()
    assert grid.mask.tolist() == [[False, True, True, False]]
