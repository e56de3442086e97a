"""Round 44: reviewer matching with a model (`aspire.evaluate.reviewer_run`): aggregates against numpy, papers
without text left out (not scored 0), predictions written as `aspire.benchmarks.reviewers` reads them back, fused
predictions against the z-score formula by hand, runs of different draws refused, `compare_runs` naming reviewers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_benchmarks import make_reviewer_set

from aspire.benchmarks.reviewers import load_reviewer_set, read_prediction_set
from aspire.evaluate.reviewer_run import (
    aggregate,
    compare_runs,
    fuse_predictions,
    predict,
    reviewer_papers,
    write_reviewer_results,
)


@pytest.mark.parametrize("spec", ["max", "mean", "topk:1", "topk:2", "topk:5"])
def test_aggregate_equals_numpy(spec):
    rng = np.random.default_rng(0)
    sims = rng.normal(size=(4, 3))
    got = aggregate(torch.from_numpy(sims), spec).numpy()
    if spec == "max":
        want = sims.max(axis=1)
    elif spec == "mean":
        want = sims.mean(axis=1)
    else:
        k = min(int(spec.split(":")[1]), 3)
        want = np.sort(sims, axis=1)[:, ::-1][:, :k].mean(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_predict_leaves_out_papers_without_text_not_scored_zero(tmp_path):
    root = make_reviewer_set(tmp_path / "rm")
    draw = root / "d_20_1"
    subs = json.loads((draw / "submissions.json").read_text())
    subs["s2"]["content"] = {"title": "", "abstract": ""}
    (draw / "submissions.json").write_text(json.dumps(subs))
    # r2's whole archive without text: r2 gets no prediction at all
    recs = [{"id": f"r2-a{j}", "content": {"title": "", "abstract": ""}} for j in range(2)]
    (draw / "archives" / "~r2.jsonl").write_text("\n".join(json.dumps(x) for x in recs) + "\n")
    rset = load_reviewer_set(root)
    papers, counts = reviewer_papers(rset)
    assert counts["no_text_ids"] == ["r2-a0", "r2-a1", "s2"]
    known = {p.paper_id for p in papers}
    calls = []

    def sims(s, a):
        calls.append((list(s), list(a)))
        return torch.arange(len(s) * len(a), dtype=torch.float32).reshape(len(s), len(a)) + 1.0

    pred = predict(rset, known, sims, "max")[0]
    assert set(pred) == {"r1", "r3"}
    assert pred["r1"] == {"s1": 2.0, "s3": 4.0}  # s2 left out, not 0
    assert pred["r3"] == {"s3": 2.0}
    assert all("s2" not in s and not {"r2-a0", "r2-a1"} & set(a) for s, a in calls)


def test_written_predictions_read_back_identically(tmp_path):
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm", draws=2))
    preds = [{"r1": {"s1": 0.1 + g, "s2": 1 / 3, "s3": -2.5e-7}, "r2": {"s1": 0.5, "s4": 0.25}} for g in range(2)]
    res = write_reviewer_results(rset, tmp_path / "out", "exp", preds, {"model": None}, {}, 0.0, n_boot=10)
    assert read_prediction_set(tmp_path / "out" / "predictions", "exp", rset) == preds
    assert res["n_draws"] == 2 and res["experiment"] == "exp"


def test_fused_predictions_equal_the_weighted_z_scores_by_hand():
    a = [{"r1": {"s1": 1.0, "s2": 2.0, "s3": 6.0}, "r2": {"s1": 3.0, "s4": 1.0}}]
    b = [{"r1": {"s1": 0.5, "s2": 0.1, "s3": 0.3}, "r2": {"s1": 2.0, "s4": 2.0}}]
    w = [0.3, 0.7]
    fused = fuse_predictions([a, b], w)[0]

    def z(d):
        v = np.array(list(d.values()))
        return dict(zip(d, (v - v.mean()) / v.std() if v.std() > 0 else np.zeros_like(v)))

    for r in ("r1", "r2"):
        za, zb = z(a[0][r]), z(b[0][r])
        assert fused[r] == pytest.approx({p: w[0] * za[p] + w[1] * zb[p] for p in za})


def test_fusing_runs_of_different_draws_is_refused():
    two = [{"r1": {"s1": 1.0, "s2": 2.0}}, {"r1": {"s1": 1.0, "s2": 2.0}}]
    one = [{"r1": {"s1": 3.0, "s2": 1.0}}]
    with pytest.raises(ValueError, match=r"\[2, 1\] draws"):  # was cut silently to one fused draw
        fuse_predictions([two, one], [1.0, 1.0])


def test_compare_runs_refuses_runs_of_other_reviewers_naming_them(tmp_path):
    root = make_reviewer_set(tmp_path / "rm")
    rset = load_reviewer_set(root)
    full = [{"r1": {"s1": 0.3, "s2": 0.2, "s3": 0.1}, "r2": {"s1": 0.1, "s4": 0.2}, "r3": {"s2": 1.0, "s3": 0.0}}]
    part = [{"r1": {"s1": 0.1, "s2": 0.2, "s3": 0.3}, "r3": {"s2": 1.0, "s3": 0.0}}]
    for name, preds in (("a", full), ("b", part)):
        write_reviewer_results(rset, tmp_path / name, name, preds, {"model": None}, {}, 0.0, n_boot=10)
    with pytest.raises(ValueError, match=r"r2 in d_20_1 \(not predicted by .*b\)"):
        compare_runs(str(tmp_path / "a"), str(tmp_path / "b"), data=root, n_perm=10)
    write_reviewer_results(rset, tmp_path / "c", "c", [dict(full[0], r1=part[0]["r1"])], {"model": None}, {}, 0.0,
                           n_boot=10)
    got = compare_runs(str(tmp_path / "a"), str(tmp_path / "c"), data=root, n_perm=10)["loss"]
    # r1: a ranks s1 > s2 > s3 (right, loss 0), c the reverse (all wrong: 8 of 8); r2, r3 agree
    assert got["per_unit_delta"]["r1"] == pytest.approx(-1.0)
    assert got["per_unit_delta"]["r2"] == 0.0
