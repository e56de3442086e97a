"""Paired comparison of two runs of one benchmark: per-query deltas, a p-value, a bootstrap interval.

A run is a TREC run file (with `--qrels`), a results folder holding `run.trec` and `qrels.trec`
(what every benchmark of `aspire.evaluate` writes), or reviewer-matching predictions: a results
folder of `reviewers` (its `results.json` names the experiment) or `FOLDER:EXP` for files named
`EXP_d_20_N_ta.json` (the published predictions). Both runs must cover the same queries.

Two CSFCube results folders are compared on CSFCube's own figures, read from their per-query CSVs:
MAP and NDCG%20 (percent) of every test query and of each facet, each the mean of the two folds' test
means as the benchmark reports it (the bootstrap resamples queries within each fold).
"""

from __future__ import annotations

import json
from pathlib import Path

from aspire.benchmarks.runs import per_query, read_qrels, read_run
from aspire.benchmarks.stats import UnitScores, paired_test

DEFAULT_METRICS = ("MRR", "nDCG@10", "MAP")
CSFCUBE_METRICS = ("MAP", "NDCG%20")


def _trec(spec: str, qrels_path: str | None):
    path = Path(spec)
    if path.is_dir():
        run_file, qrels_file = path / "run.trec", path / "qrels.trec"
        return read_run(run_file), read_qrels(qrels_path or qrels_file)
    if not qrels_path:
        raise ValueError(f"{spec} is a run file: give --qrels")
    return read_run(path), read_qrels(qrels_path)


def _results(spec: str) -> dict | None:
    """The `results.json` of a results folder; None for a run file, `FOLDER:EXP` or a folder without one."""
    path = Path(spec) / "results.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _reviewer_spec(spec: str, meta: dict | None) -> tuple[Path, str] | None:
    """(predictions folder, exp) when `spec` (its `_results`: `meta`) names reviewer predictions, else None."""
    if meta is not None:
        if meta.get("benchmark") == "reviewer-matching":
            return Path(spec) / "predictions", meta["experiment"]
        return None
    folder, sep, exp = spec.rpartition(":")
    if sep and Path(folder).is_dir():
        return Path(folder), exp
    return None


def compare_reviewers(a: tuple[Path, str], b: tuple[Path, str], data: str, n_perm: int, seed: int) -> dict:
    from aspire.benchmarks.reviewers import load_reviewer_set, prediction_files, read_predictions, reviewer_units

    rset = load_reviewer_set(data)
    units = []
    for folder, exp in (a, b):
        preds = [read_predictions(p) for p in prediction_files(folder, exp, rset)]
        units.append(reviewer_units(rset, preds)[0])
    test = paired_test(units[0], units[1], n_perm=n_perm, seed=seed)
    deltas = (units[0].num - units[1].num).sum(axis=0) / units[0].den.sum(axis=0).clip(min=1e-12)
    return {"loss": {**test, "per_unit_delta": dict(zip(units[0].units, deltas.tolist()))}}


def compare_csfcube(a: str, b: str, metrics=CSFCUBE_METRICS, n_perm: int = 10000, seed: int = 0) -> dict:
    """`{"MAP": ..., "MAP background": ..., ...}`: paired tests of two CSFCube results folders, over
    every test query and per facet."""
    from aspire.benchmarks.csfcube import FACETS
    from aspire.evaluate.two_fold import REPORTED, load_per_query

    odd = [m for m in metrics if m not in REPORTED]
    if odd:
        raise ValueError(f"CSFCube runs are compared on {', '.join(REPORTED)}, not {odd[0]!r}")
    qa, qb = load_per_query(a), load_per_query(b)
    if set(qa) != set(qb):
        raise ValueError(f"{a} and {b} score different CSFCube queries, e.g. {sorted(set(qa) ^ set(qb))[:3]}")
    out = {}
    for m in metrics:
        for group in ("all", *FACETS):
            keys = sorted(q for q in qa if group in ("all", qa[q]["facet"]))
            folds = {}
            for q in keys:
                folds.setdefault(qa[q]["test_fold"], []).append(q)
            ua, ub = (UnitScores.means({q: run[q][m] for q in keys}, folds) for run in (qa, qb))
            test = paired_test(ua, ub, n_perm=n_perm, seed=seed)
            out[m if group == "all" else f"{m} {group}"] = {
                **test, "per_unit_delta": {q: qa[q][m] - qb[q][m] for q in keys}}
    return out


def compare(a: str, b: str, qrels: str | None = None, metrics=None, data: str | None = None,
            n_perm: int = 10000, seed: int = 0) -> dict:
    """`{metric: paired_test(...) + per_unit_delta}` for two runs of the same benchmark; `metrics`
    None takes the benchmark's defaults (CSFCube: `CSFCUBE_METRICS`, every group; else `DEFAULT_METRICS`)."""
    meta_a, meta_b = _results(a), _results(b)
    ca, cb = ((meta or {}).get("benchmark") == "csfcube" for meta in (meta_a, meta_b))
    if ca != cb:
        csfcube, other = (a, b) if ca else (b, a)
        raise ValueError(f"{csfcube} is a CSFCube results folder and {other} is not: not runs of one benchmark")
    if ca:
        return compare_csfcube(a, b, metrics or CSFCUBE_METRICS, n_perm, seed)
    metrics = metrics or DEFAULT_METRICS
    ra, rb = _reviewer_spec(a, meta_a), _reviewer_spec(b, meta_b)
    if (ra is None) != (rb is None):
        raise ValueError("cannot compare reviewer predictions with a ranked run")
    if ra is not None:
        if not data:
            raise ValueError("reviewer predictions need the reviewer-matching folder (--data)")
        return compare_reviewers(ra, rb, data, n_perm, seed)
    (run_a, qrels_a), (run_b, qrels_b) = _trec(a, qrels), _trec(b, qrels)
    if qrels_a != qrels_b:
        raise ValueError(f"{a} and {b} are judged by different qrels: not runs of one benchmark")
    out = {}
    values_a, values_b = per_query(qrels_a, run_a, metrics), per_query(qrels_a, run_b, metrics)
    for m in metrics:
        ua, ub = UnitScores.means(values_a[m]), UnitScores.means(values_b[m])
        test = paired_test(ua, ub, n_perm=n_perm, seed=seed)
        out[m] = {**test, "per_unit_delta": {q: values_a[m][q] - values_b[m][q] for q in sorted(values_a[m])}}
    return out


def format_comparison(result: dict) -> list[str]:
    """One line per metric: A, B, delta, its interval and the p-value."""
    width = max(10, *map(len, result))
    lines = [f"{'metric':<{width}} {'A':>8} {'B':>8} {'A-B':>8}  95% interval        p"]
    for m, r in result.items():
        lo, hi = r["ci95"]
        lines.append(f"{m:<{width}} {r['a']:8.4f} {r['b']:8.4f} {r['delta']:8.4f}  [{lo:7.4f}, {hi:7.4f}]  {r['p_value']:.4f}")
    return lines
