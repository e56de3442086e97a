"""Round 25: reviewer matching's loss and prediction reader (`aspire.benchmarks.reviewers`) and its runner
(`aspire.evaluate.reviewer_run`): a subnormal difference of two predictions orders its pair (the product with the
rating difference underflowed to a tie), an integer past float's range is refused naming reviewer and paper, fused
scorers each take the scorer options their class reads (`minl2,ot` with `eps` failed with a TypeError after the
model loaded), an unknown encoding is refused before any model loads; the aggregates (max / mean / topk) and the
loss checked against a brute-force reimplementation on a tiny gold set in OpenReview expertise format."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from aspire.benchmarks.reviewers import load_reviewer_set, read_predictions, reviewer_loss
from tests.test_reliability_round24_reviewerrun import _brute_ratings

# ---- a brute-force loss (OpenReview expertise format, read from the files alone) ---------------------------------


def _brute_pair_cost(e1, e2, s1, s2) -> float:
    if e1 == e2:
        return 0.0
    if s1 == s2:
        return abs(e1 - e2) / 2
    return abs(e1 - e2) if (e1 > e2) != (s1 > s2) else 0.0


def _brute_loss(root: Path, preds: list[dict], skip: list[set]) -> float:
    """Mean over draws of sum(cost) / sum(|e1 - e2|) over predicted reviewers' rated pairs in the draw's
    submissions (pairs with a paper in `skip[draw]`, the blank submissions, left out)."""
    ratings = _brute_ratings(root / "evaluations.csv")
    per_draw = []
    for d, pred in enumerate(preds, start=1):
        subs = set(json.loads((root / f"d_20_{d}" / "submissions.json").read_text()))
        num = den = 0.0
        for reviewer, rated in ratings.items():
            if reviewer not in pred:
                continue
            for (p1, e1), (p2, e2) in combinations(rated, 2):
                if not {p1, p2} <= subs or {p1, p2} & skip[d - 1]:
                    continue
                den += abs(e1 - e2)
                num += _brute_pair_cost(e1, e2, pred[reviewer][p1], pred[reviewer][p2])
        per_draw.append(num / den)
    return float(np.mean(per_draw))


WORDS = "the model of text learning neural data task method result paper sentence document citation".split()


def _gold_set(root: Path, draws: int = 2) -> Path:
    """Three reviewers; archives of 3-4 papers (so that max, mean and topk:2 differ); a rated paper outside the
    draws (s9), one outside draw 2 (s4) and a submission without text (s6, rated by r1): their pairs are skipped."""
    root.mkdir(parents=True)
    rows = {"r1": (["s1", "s2", "s3", "s4", "s6"], ["5", "3", "1", "4.5", "2"]),
            "r2": (["s1", "s4", "s5", "s2"], ["2", "4.5", "3", "1"]),
            "r3": (["s2", "s3", "s9", "s5"], ["1", "4", "5", "2.5"])}
    header = ["ParticipantID"] + [f"Paper{i}" for i in range(1, 11)] + [f"Expertise{i}" for i in range(1, 11)]
    lines = ["\t".join(header)]
    for r, (papers, exp) in rows.items():
        lines.append("\t".join([r, *(papers + [""] * (10 - len(papers))), *(exp + [""] * (10 - len(exp)))]))
    (root / "evaluations.csv").write_text("\n".join(lines) + "\n")
    rng = np.random.default_rng(7)
    every = {}
    for i in range(1, 7):
        w = rng.choice(WORDS, size=6)
        text = {"title": f"{w[0]} {w[1]}", "abstract": f"the {w[2]} {w[3]}. a {w[4]} {w[5]} task."}
        every[f"s{i}"] = {"id": f"s{i}", "content": text if i != 6 else {"title": "", "abstract": ""}}
    for d in range(1, draws + 1):
        draw = root / f"d_20_{d}"
        (draw / "archives").mkdir(parents=True)
        subs = {k: v for k, v in every.items() if d == 1 or k != "s4"}  # draw 2 lacks s4: its pairs are skipped
        (draw / "submissions.json").write_text(json.dumps(subs))
        for j, r in enumerate(rows):
            recs = []
            for k in range(3 + j % 2):
                w = rng.choice(WORDS, size=4)
                recs.append({"id": f"{r}-a{k}", "content": {"title": f"{r} {w[0]}", "abstract": f"{w[1]} {w[2]} {w[3]}."}})
            if d > 1:  # one id, one text across draws
                recs = [json.loads(x) for x in (root / "d_20_1" / "archives" / f"~{r}.jsonl").read_text().splitlines()]
            (draw / "archives" / f"~{r}.jsonl").write_text("\n".join(json.dumps(x) for x in recs) + "\n")
    return root


# ---- the loss: signs, not their product --------------------------------------------------------------------------

def test_a_subnormal_difference_orders_its_pair_not_a_tie():
    """5e-324 - 0 is a positive difference; times the rating difference 0.5 it underflowed to 0 and the pair cost
    half (0.25) as a tie, though the prediction orders it as the ratings do."""
    subs = {"a": ("t", ""), "b": ("t", "")}
    rated = [("a", 5.0), ("b", 4.5)]
    assert reviewer_loss(rated, {"a": 5e-324, "b": 0.0}, subs) == (0.0, 0.5, 0)
    assert reviewer_loss(rated, {"a": 0.0, "b": 5e-324}, subs) == (0.5, 0.5, 0)
    assert reviewer_loss(rated, {"a": 1e-310, "b": 1e-310}, subs) == (0.25, 0.5, 0)  # a real tie still halves


def test_the_loss_matches_a_brute_force_loop_on_tiny_differences():
    rng = np.random.default_rng(0)
    subs = {f"p{i}": ("t", "") for i in range(6)}
    for _ in range(200):
        rated = [(f"p{i}", float(rng.choice([1, 1.5, 2, 3, 4, 4.5, 5]))) for i in range(6)]
        scale = float(rng.choice([1.0, 1e-300, 1e-320, 5e-324]))
        pred = {p: float(rng.integers(-2, 3)) * scale for p, _ in rated}
        want_num = sum(_brute_pair_cost(e1, e2, pred[p1], pred[p2]) for (p1, e1), (p2, e2) in combinations(rated, 2))
        want_den = sum(abs(e1 - e2) for (_, e1), (_, e2) in combinations(rated, 2))
        assert reviewer_loss(rated, pred, subs) == (pytest.approx(want_num), pytest.approx(want_den), 0)


# ---- the prediction reader -----------------------------------------------------------------------------------------

def test_an_integer_past_float_range_is_refused_naming_reviewer_and_paper(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"~r1": {"s1": 0.5, "s2": 1' + "0" * 400 + "}}")
    with pytest.raises(ValueError, match=r"reviewer ~r1 paper s2: similarity 1000.* is not a finite number"):
        read_predictions(path)


# ---- the runner's option checks -------------------------------------------------------------------------------------

def test_fused_scorers_take_only_the_options_their_class_reads():
    from aspire.evaluate.options import EvalOptions
    from aspire.evaluate.reviewer_run import check_reviewer_options, scorer_kwargs

    assert scorer_kwargs(["minl2", "ot"], {"eps": 0.1, "tau": 2.0}) == {"minl2": {}, "ot": {"eps": 0.1, "tau": 2.0}}
    assert scorer_kwargs(["abstract", "maxpassage"], {"window": 2}) == {"abstract": {}, "maxpassage": {"window": 2}}
    check_reviewer_options(["minl2", "ot"], EvalOptions(scorer_options={"eps": 0.1}))
    with pytest.raises(ValueError, match=r"scorer options \{'tau': 1.0\} are read by no scorer of \['minl2'\]"):
        check_reviewer_options(["minl2"], EvalOptions(scorer_options={"tau": 1.0}))
    with pytest.raises(ValueError, match=r"\{'window': 2\} are read by no scorer of \['minl2', 'ot'\]"):
        check_reviewer_options(["minl2", "ot"], EvalOptions(scorer_options={"window": 2}))
    with pytest.raises(ValueError, match="eps"):  # a bad value of an option one scorer reads
        check_reviewer_options(["minl2", "ot"], EvalOptions(scorer_options={"eps": -1.0}))


def test_an_unknown_encoding_is_refused_before_any_model_loads():
    from aspire.evaluate.options import EvalOptions
    from aspire.evaluate.reviewer_run import check_reviewer_options

    with pytest.raises(ValueError, match=r"unknown encoding 'contextal'"):
        check_reviewer_options(["minl2"], EvalOptions(encoding="contextal"))


# ---- end to end on a tiny gold set: aggregates and the loss against brute force ------------------------------------

def _cosines(model_dir, rset) -> dict[tuple[str, str], float]:
    """Whole-abstract cosine of every (submission, archive paper), from vectors encoded here."""
    from aspire.encoders import load_encoder
    from aspire.evaluate.encode import encode_papers
    from aspire.evaluate.reviewer_run import reviewer_papers

    papers, _ = reviewer_papers(rset)
    batch, _ = encode_papers(load_encoder(str(model_dir)), papers, "abstract", None, 8, {}, [])
    vec = batch.emb[:, 0].double().numpy()
    vec = vec / np.linalg.norm(vec, axis=1, keepdims=True)
    row = {pid: i for i, pid in enumerate(batch.paper_ids)}
    return {(a, b): float(vec[row[a]] @ vec[row[b]]) for a in row for b in row}


@pytest.mark.parametrize("agg", ["max", "mean", "topk:2", "topk:9"])
def test_run_reviewers_aggregates_and_loss_match_brute_force(tmp_path, tiny_model_dir, agg):
    from aspire.evaluate.options import EvalOptions
    from aspire.evaluate.reviewer_run import run_reviewers

    root = _gold_set(tmp_path / "set")
    rset = load_reviewer_set(root)
    res = run_reviewers(rset, str(tiny_model_dir), ["abstract"], tmp_path / "out", "x", agg,
                        options=EvalOptions(), n_boot=10)
    cos = _cosines(tiny_model_dir, rset)
    ratings = _brute_ratings(root / "evaluations.csv")
    preds = []
    for d in (1, 2):
        written = json.loads((tmp_path / "out" / "predictions" / f"x_d_20_{d}_ta.json").read_text())
        subs = set(json.loads((root / f"d_20_{d}" / "submissions.json").read_text())) - {"s6"}
        for r, rated in ratings.items():
            lines = (root / f"d_20_{d}" / "archives" / f"~{r}.jsonl").read_text().splitlines()
            arch = [json.loads(x)["id"] for x in lines if x.strip()]
            for s in (p for p, _ in rated if p in subs):
                vals = sorted((cos[s, a] for a in arch), reverse=True)
                want = {"max": vals[0], "mean": float(np.mean(vals)), "topk:2": float(np.mean(vals[:2])),
                        "topk:9": float(np.mean(vals))}[agg]
                assert written[r][s] == pytest.approx(want, abs=1e-5), (d, r, s)
            assert set(written[r]) == {p for p, _ in rated if p in subs}  # s6 (no text) and s9 (no draw) left out
        preds.append(written)
    assert res["loss"] == pytest.approx(_brute_loss(root, preds, [{"s6"}, {"s6"}]), abs=1e-12)
    # draw 1: r1's four pairs with s6, r3's three with s9; draw 2 also r1's three other pairs with s4, r2's three
    assert res["skipped_pairs"] == (4 + 3) + (4 + 3 + 3 + 3)


def test_fused_scorers_with_an_option_of_one_run_and_match_the_fusion_of_single_runs(tmp_path, tiny_model_dir):
    """`minl2,ot` with `eps`: ran (a TypeError once, building minl2 with eps), each scorer as it runs alone, fused by
    per-reviewer z-scores with equal weights."""
    from aspire.evaluate.options import EvalOptions
    from aspire.evaluate.reviewer_run import run_reviewers

    rset = load_reviewer_set(_gold_set(tmp_path / "set", draws=1))
    opts = EvalOptions(scorer_options={"eps": 0.5})
    run_reviewers(rset, str(tiny_model_dir), ["minl2", "ot"], tmp_path / "both", "both", "mean", options=opts, n_boot=5)
    run_reviewers(rset, str(tiny_model_dir), ["minl2"], tmp_path / "m", "m", "mean", n_boot=5)
    run_reviewers(rset, str(tiny_model_dir), ["ot"], tmp_path / "o", "o", "mean", options=opts, n_boot=5)
    read = {name: json.loads((tmp_path / name / "predictions" / f"{name}_d_20_1_ta.json").read_text())
            for name in ("both", "m", "o")}
    for r, scores in read["both"].items():
        subs = list(scores)
        z = np.zeros(len(subs))
        for name in ("m", "o"):
            v = np.array([read[name][r][s] for s in subs])
            z += (v - v.mean()) / v.std() if v.max() > v.min() else 0.0
        assert np.array([scores[s] for s in subs]) == pytest.approx(z, abs=1e-5), r
