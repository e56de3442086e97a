"""Round 24: the comparison hooks of reviewer matching (`aspire.evaluate.reviewer_run.compare_runs`,
`prediction_spec`) and of the SciRepEval probes (`aspire.evaluate.probes.compare_probe_results`,
`check_probe_results`): `--metric` honoured, results.json read through `aspire.io.read_json` (and not again where
the caller has read it), per-reviewer deltas only of scored reviewers, probe test papers paired by id; the loss
checked against a brute-force reimplementation, the same-author metrics against sklearn."""

from __future__ import annotations

import csv
import json
import math
import pathlib
from itertools import combinations

import numpy as np
import pytest
from test_benchmarks import make_reviewer_set

from tests.test_reliability_round22_evalaux import _count_results_reads

SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "reviewer-matching"


# ---- a brute-force reviewer loss, from the files alone (OpenReview expertise format) -------------------------------

def _brute_ratings(path: pathlib.Path) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            for i in range(1, 11):
                paper = (row.get(f"Paper{i}") or "").strip()
                if paper:
                    out.setdefault(row["ParticipantID"].strip(), []).append((paper, float(row[f"Expertise{i}"])))
    return out


def _brute_draw(ratings, submissions: set, pred: dict) -> tuple[dict, dict]:
    """Per reviewer of `pred`: (sum of costs, sum of |e1 - e2|) over their rated pairs in `submissions`."""
    num, den = {}, {}
    for reviewer, rated in ratings.items():
        if reviewer not in pred:
            continue
        scores = pred[reviewer]
        n = d = 0.0
        for (p1, e1), (p2, e2) in combinations(rated, 2):
            if p1 not in submissions or p2 not in submissions:
                continue
            d += abs(e1 - e2)
            s1, s2 = scores[p1], scores[p2]
            if e1 != e2 and s1 == s2:
                n += abs(e1 - e2) / 2
            elif (e1 > e2 and s1 < s2) or (e1 < e2 and s1 > s2):
                n += abs(e1 - e2)
        num[reviewer], den[reviewer] = n, d
    return num, den


def _brute(root: pathlib.Path, folder: pathlib.Path, exp: str, draws: list[str]):
    """(loss: mean over draws of the per-draw ratio, {reviewer: pooled loss a draw-sum ratio})."""
    ratings = _brute_ratings(root / "evaluations.csv")
    per_draw, num, den = [], {}, {}
    for name in draws:
        subs = set(json.loads((root / name / "submissions.json").read_text()))
        raw = json.loads((folder / f"{exp}_{name}_ta.json").read_text())
        pred = {r.lstrip("~"): s for r, s in raw.items()}
        n, d = _brute_draw(ratings, subs, pred)
        if sum(d.values()) > 0:
            per_draw.append(sum(n.values()) / sum(d.values()))
        for r in n:
            num[r], den[r] = num.get(r, 0.0) + n[r], den.get(r, 0.0) + d[r]
    return float(np.mean(per_draw)), {r: num[r] / den[r] for r in num if den[r] > 0}, den


def _tiny_runs(tmp_path, draws: int = 2):
    """The three-reviewer set of test_benchmarks (r3's only scorable pair is rated 1 and 1: it has no scored pair)
    and two runs of predictions, ints and floats, with ties, in a `FOLDER:EXP` folder."""
    root = make_reviewer_set(tmp_path / "set", draws=draws)
    folder = tmp_path / "preds"
    folder.mkdir()
    rng = np.random.default_rng(3)
    for d in range(1, draws + 1):
        for exp in ("a", "b"):
            pred = {r: {s: (int(rng.integers(0, 3)) if exp == "a" else float(rng.normal()))
                        for s in ("s1", "s2", "s3", "s4")} for r in ("r1", "r2", "r3")}
            pred["~zz"] = {"s1": 1.0}  # a reviewer nobody rated: no unit
            (folder / f"{exp}_d_20_{d}_ta.json").write_text(json.dumps(pred))
    return root, folder


# ---- 1. --metric on reviewer runs ----------------------------------------------------------------------------------

def test_compare_reviewer_runs_honours_metrics(tmp_path):
    """`compare A B --metric MRR` on two reviewer runs printed the loss: `metrics` was never read. Now the figures
    are picked by name and another name is a ValueError listing the valid ones."""
    from aspire.evaluate.compare import compare
    from aspire.evaluate.reviewer_run import compare_runs

    root, folder = _tiny_runs(tmp_path)
    a, b = f"{folder}:a", f"{folder}:b"
    with pytest.raises(ValueError, match="reviewer-matching runs are compared on loss, not 'MRR'"):
        compare(a, b, metrics=["MRR"], data=str(root), n_perm=20)
    with pytest.raises(ValueError, match="compared on loss, not 'nDCG@10'"):
        compare_runs(a, b, ["loss", "nDCG@10"], str(root), n_perm=20)
    assert list(compare(a, b, metrics=["loss"], data=str(root), n_perm=20)) == ["loss"]
    assert list(compare(a, b, data=str(root), n_perm=20)) == ["loss"]


# ---- 2. the loss and per-reviewer deltas against a brute force ------------------------------------------------------

def test_compare_reviewer_runs_matches_brute_force_and_lists_scored_reviewers_only(tmp_path):
    """A and B are the brute-force losses (mean over draws of the per-draw ratio; ties half), the deltas each
    scored reviewer's pooled loss difference. r3 has no scored pair in any draw: it was listed with delta 0.0 (as if
    the runs agreed on it) beside `n_units` 2; now only the reviewers the test counts have a delta."""
    from aspire.evaluate.reviewer_run import compare_runs

    root, folder = _tiny_runs(tmp_path, draws=3)
    draws = ["d_20_1", "d_20_2", "d_20_3"]
    loss_a, per_a, den = _brute(root, folder, "a", draws)
    loss_b, per_b, _ = _brute(root, folder, "b", draws)
    got = compare_runs(f"{folder}:a", f"{folder}:b", data=str(root), n_perm=50)["loss"]
    assert got["a"] == pytest.approx(loss_a) and got["b"] == pytest.approx(loss_b)
    assert got["delta"] == pytest.approx(loss_a - loss_b)
    assert den["r3"] == 0.0 and set(per_a) == {"r1", "r2"}
    assert got["per_unit_delta"] == pytest.approx({r: per_a[r] - per_b[r] for r in per_a})
    assert got["n_units"] == len(got["per_unit_delta"]) == 2


@pytest.mark.skipif(not (SHARED / "predictions").is_dir(), reason="no shared reviewer-matching data")
def test_compare_published_predictions_matches_brute_force_and_known_answers():
    """SPECTER against ELMo on the gold set: the README's known answers (0.2689, 0.3447), equal to the brute force
    from the raw files, and per-reviewer deltas for exactly the reviewers with a scored pair."""
    from aspire.evaluate.reviewer_run import compare_runs

    draws = [f"d_20_{i}" for i in range(1, 11)]
    loss_s, per_s, den = _brute(SHARED, SHARED / "predictions", "specter", draws)
    loss_e, per_e, _ = _brute(SHARED, SHARED / "predictions", "elmo", draws)
    assert round(loss_s, 4) == 0.2689 and round(loss_e, 4) == 0.3447
    got = compare_runs(f"{SHARED / 'predictions'}:specter", f"{SHARED / 'predictions'}:elmo", data=str(SHARED),
                       n_perm=5)["loss"]
    assert got["a"] == pytest.approx(loss_s) and got["b"] == pytest.approx(loss_e)
    assert got["per_unit_delta"] == pytest.approx({r: per_s[r] - per_e[r] for r in per_s})
    assert got["n_units"] == len(per_s) == sum(d > 0 for d in den.values())


# ---- 3. prediction_spec reads results.json through read_json, and not again when given --------------------------

def _reviewer_results(folder: pathlib.Path, text: str) -> str:
    (folder / "predictions").mkdir(parents=True)
    (folder / "results.json").write_text(text)
    return str(folder)


def test_prediction_spec_refuses_a_repeated_key_naming_the_file(tmp_path):
    """`prediction_spec` read results.json with plain json.loads: a repeated `experiment` kept its last value unseen
    and the run was scored on the other experiment's files. Now read by `results_doc`, naming the file and key."""
    from aspire.evaluate.reviewer_run import prediction_spec

    spec = _reviewer_results(tmp_path / "run", '{"benchmark": "reviewer-matching", "experiment": "a", '
                                               '"experiment": "b"}')
    with pytest.raises(ValueError, match=r"results.json: the results file has the key 'experiment' twice"):
        prediction_spec(spec)


def test_prediction_spec_names_the_file_without_an_experiment(tmp_path):
    """A reviewer-matching results.json without `experiment` was a KeyError 'experiment', naming no file."""
    from aspire.evaluate.reviewer_run import prediction_spec

    spec = _reviewer_results(tmp_path / "run", json.dumps({"benchmark": "reviewer-matching"}))
    with pytest.raises(ValueError, match=r"run/results.json: a reviewer-matching results file names its experiment"):
        prediction_spec(spec)
    ok = _reviewer_results(tmp_path / "ok", json.dumps({"benchmark": "reviewer-matching", "experiment": "x"}))
    assert prediction_spec(ok) == (pathlib.Path(ok) / "predictions", "x")
    assert prediction_spec(f"{tmp_path}:x") == (tmp_path, "x")
    assert prediction_spec(str(tmp_path / "nothing")) is None


def test_compare_runs_reuses_the_callers_results_docs(tmp_path, monkeypatch):
    """`compare_runs(..., docs=...)` takes the results.json its caller (`compare`) read: no second read."""
    from aspire.evaluate.fuse import results_doc
    from aspire.evaluate.reviewer_run import compare_runs

    root, folder = _tiny_runs(tmp_path)
    run = tmp_path / "run"
    (run / "predictions").mkdir(parents=True)
    for d in (1, 2):
        (run / "predictions" / f"mine_d_20_{d}_ta.json").write_text((folder / f"a_d_20_{d}_ta.json").read_text())
    (run / "results.json").write_text(json.dumps({"benchmark": "reviewer-matching", "experiment": "mine"}))
    docs = {str(run): results_doc(run), f"{folder}:b": None}
    reads = _count_results_reads(monkeypatch)
    got = compare_runs(str(run), f"{folder}:b", data=str(root), n_perm=20, docs=docs)
    assert reads == []
    assert got == compare_runs(f"{folder}:a", f"{folder}:b", data=str(root), n_perm=20)


# ---- 4. probes: results.json reads, test papers paired by id ------------------------------------------------------

Y = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]
PRED_A = [0, 1, 2, 0, 1, 2, 0, 1, 0, 0, 2, 2]
PRED_B = [0, 2, 2, 1, 1, 0, 0, 1, 0, 2, 2, 2]


def _venue(folder: pathlib.Path, ids, y, pred) -> str:
    folder.mkdir(parents=True)
    reps = {"abstract": {"metrics": {}, "ci95": {}, "test_ids": list(ids), "y": list(y), "pred": list(pred)}}
    (folder / "results.json").write_text(json.dumps({"format": "venue", "representations": reps}))
    return str(folder)


def test_compare_probe_results_pairs_the_same_test_papers_in_another_order(tmp_path):
    """Two venue runs over the same test papers listed in another order were refused as "different test papers";
    now B is paired with A paper by paper: the result is that of B listed in A's order, A and B sklearn's macro F1."""
    from sklearn.metrics import f1_score

    from aspire.evaluate.probes import compare_probe_results

    ids = [f"p{i}" for i in range(len(Y))]
    perm = np.random.default_rng(0).permutation(len(Y))
    a = _venue(tmp_path / "a", ids, Y, PRED_A)
    b_same = _venue(tmp_path / "b", ids, Y, PRED_B)
    b_perm = _venue(tmp_path / "c", [ids[i] for i in perm], [Y[i] for i in perm], [PRED_B[i] for i in perm])
    want = compare_probe_results(a, b_same, n_perm=200)
    got = compare_probe_results(a, b_perm, n_perm=200)
    assert got == want
    assert got["abstract/macro-F1"]["b"] == pytest.approx(f1_score(Y, PRED_B, average="macro"))
    assert got["abstract/macro-F1"]["a"] == pytest.approx(f1_score(Y, PRED_A, average="macro"))
    other = _venue(tmp_path / "d", ids[:-1] + ["p99"], Y, PRED_B)
    with pytest.raises(ValueError, match="hold different test papers"):
        compare_probe_results(a, other, n_perm=5)
    twice = _venue(tmp_path / "e", [ids[1]] + ids[1:], Y, PRED_B)
    with pytest.raises(ValueError, match="hold different test papers"):
        compare_probe_results(a, twice, n_perm=5)
    short = _venue(tmp_path / "f", ids, Y, PRED_B[:-1])
    with pytest.raises(ValueError, match="holds 12 test papers, 12 labels and 11 predictions"):
        compare_probe_results(a, short, n_perm=5)


def test_compare_probe_results_reuses_the_callers_results_docs(tmp_path, monkeypatch):
    from aspire.evaluate.fuse import results_doc
    from aspire.evaluate.probes import compare_probe_results

    ids = [f"p{i}" for i in range(len(Y))]
    a, b = _venue(tmp_path / "a", ids, Y, PRED_A), _venue(tmp_path / "b", ids, Y, PRED_B)
    docs = {a: results_doc(a), b: results_doc(b)}
    want = compare_probe_results(a, b, n_perm=20)
    reads = _count_results_reads(monkeypatch)
    assert compare_probe_results(a, b, n_perm=20, docs=docs) == want
    assert reads == []


def test_check_probe_results_refuses_a_repeated_key_before_the_run(tmp_path):
    """`--compare DIR` was checked with plain json.loads, so a results.json holding a key twice passed the check, the
    run ran, and `compare_probe_results` (read_json) refused it only after the run. Now refused at the check."""
    from aspire.evaluate.probes import check_probe_results, compare_probe_results

    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "results.json").write_text('{"format": "venue", "representations": {}, "format": "venue"}')
    with pytest.raises(ValueError, match=r"--compare .*old: .*results.json: the results file has the key 'format' "
                                         "twice"):
        check_probe_results(folder, "venue")
    with pytest.raises(ValueError, match="key 'format' twice"):  # what the run met after its work
        compare_probe_results(folder, folder, n_perm=5)
    with pytest.raises(ValueError, match="no readable results.json"):
        check_probe_results(tmp_path / "none", "venue")


# ---- 5. the probes' same-author metrics against sklearn -----------------------------------------------------------

def test_proximity_scores_match_sklearn():
    from sklearn.metrics import average_precision_score, ndcg_score

    from aspire.evaluate.probes import proximity_scores

    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 8))
    pool = [f"p{i}" for i in range(30)]
    qrels = {}
    for q in range(0, 30, 3):
        rel = rng.random(30) < 0.2
        rel[(q + 1) % 30] = True
        qrels[pool[q]] = {p: int(r) for p, r in zip(pool, rel) if p != pool[q]}
    got = proximity_scores(X, pool, qrels)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    for q, judged in qrels.items():
        i = pool.index(q)
        others = [j for j in range(30) if j != i]
        sims = np.array([unit[i] @ unit[j] for j in others])
        rel = np.array([judged[pool[j]] for j in others])
        assert got[q]["MAP"] == pytest.approx(average_precision_score(rel, sims))
        assert got[q]["nDCG@10"] == pytest.approx(ndcg_score(rel[None], sims[None], k=10))
    assert not math.isnan(np.mean([v["MAP"] for v in got.values()]))
