"""Paired comparison of two runs of one benchmark: per-query deltas, a p-value, a bootstrap interval.

A run is a TREC run file (with `--qrels`) or a results folder holding `run.trec` and `qrels.trec` (what the
ranking benchmarks write), compared here on per-query metrics. A results folder whose `results.json` names a
registered benchmark (by its name or data folder) whose runner has a `compare` hook
(`aspire.evaluate.suite.RUNNERS`) is compared by that hook: CSFCube on its own two-fold figures, overall and
per facet; reviewer matching on its loss, which also takes published predictions as `FOLDER:EXP` (files
`EXP_d_20_N_ta.json`); they are judged by the benchmark's own data, so `--qrels` is refused beside them. Both runs
must cover the same queries.

Ranked runs are compared at the relevance threshold their results folders record (`relevance_threshold`, as the
pools evaluator writes it; `aspire.evaluate.fuse.recorded_protocol`), as `fuse-runs` scores them: the binary metrics
at it (`MAP` read as `MAP-l2` at threshold 2), over the queries with a document at or above it. Folders recording
different thresholds are refused; a run file or a folder recording none takes the other's, else 1.
"""

from __future__ import annotations

import json
from pathlib import Path

from aspire.benchmarks import BENCHMARKS
from aspire.benchmarks.metrics import queries_without_relevant
from aspire.benchmarks.runs import DEFAULT_METRICS, per_query, read_qrels, read_run
from aspire.benchmarks.stats import UnitScores, paired_test
from aspire.evaluate.fuse import at_threshold, protocol_of, recorded_protocol

PREDICTIONS_BENCHMARK = "reviewers"  # `FOLDER:EXP` (no results folder) names this benchmark's predictions


def _trec(spec: str, qrels_path: str | None):
    path = Path(spec)
    if path.is_dir():
        run_file, qrels_file = path / "run.trec", path / "qrels.trec"
        return read_run(run_file), read_qrels(qrels_path or qrels_file)
    if not qrels_path:
        raise ValueError(f"{spec} is a run file: give --qrels")
    return read_run(path), read_qrels(qrels_path)


def _scored(spec: str, qrels, run, metrics) -> dict[str, dict[str, float]]:
    """`per_query` of one run; its ValueError (a judged query the run leaves out, ...) names the run."""
    try:
        return per_query(qrels, run, metrics)
    except ValueError as err:
        raise ValueError(f"{spec}: {err}") from None


def recorded_threshold(a: str, b: str, docs: dict | None = None) -> int:
    """The relevance threshold the results folders `a` and `b` record (`recorded_protocol`): the one they record, 1
    when neither does; ValueError naming both when they record different ones. `docs`: `{spec: results_file(spec)}`
    where the caller has read them (the others are read here)."""
    docs = docs or {}
    found = {spec: protocol_of(docs[spec])[1] if spec in docs else recorded_protocol(Path(spec))[1]
             for spec in (a, b) if Path(spec).is_dir()}
    values = {t for t in found.values() if t is not None}
    if len(values) > 1:
        raise ValueError(f"{a} and {b} are scored at different relevance thresholds "
                         f"({', '.join(f'{s}: {t}' for s, t in found.items())}): not runs of one protocol")
    return values.pop() if values else 1


def results_file(spec: str) -> dict | None:
    """The `results.json` of the results folder `spec` (a JSON object; ValueError naming it otherwise), None when
    `spec` holds none (a run file, `FOLDER:EXP` predictions, a folder without one)."""
    path = Path(spec) / "results.json"
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:  # invalid JSON or text
        raise ValueError(f"{path}: not a results file ({err})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a results file (a JSON {type(doc).__name__}, not an object)")
    return doc


def benchmark_of(spec: str, doc: dict | None = None) -> str | None:
    """The registered benchmark a run belongs to: its results folder's `results.json` names it (by name or data
    folder), or it is `FOLDER:EXP` predictions (`PREDICTIONS_BENCHMARK`); None for a run file or a folder
    without one. `doc`: that `results.json` where the caller has read it (`results_file`; else read here)."""
    doc = results_file(spec) if doc is None else doc
    if doc is None:
        folder, sep, _ = spec.rpartition(":")
        return PREDICTIONS_BENCHMARK if sep and Path(folder).is_dir() else None
    named = doc.get("benchmark")
    return next((b.name for b in BENCHMARKS.values() if named in (b.name, b.folder)), None)


def compare(a: str, b: str, qrels: str | None = None, metrics=None, data: str | None = None,
            n_perm: int = 10000, seed: int = 0) -> dict:
    """`{figure: paired_test(...) + per_unit_delta}` for two runs of the same benchmark; `metrics` None takes
    the benchmark's defaults (its runner's comparison; else `DEFAULT_METRICS`)."""
    from aspire.evaluate.suite import RUNNERS

    hooks, docs = [], {}  # each results.json read once, for benchmark_of and recorded_threshold
    for spec in (a, b):
        docs[spec] = results_file(spec)
        name = benchmark_of(spec, docs[spec])
        if name is None and not Path(spec).exists():
            raise FileNotFoundError(2, "no such run file, results folder or predictions folder (DIR:EXP)", spec)
        hooks.append((name, RUNNERS[name].compare if name in RUNNERS else None))
    (name_a, hook_a), (name_b, hook_b) = hooks
    if (hook_a is None) != (hook_b is None) or (hook_a is not None and name_a != name_b):
        raise ValueError(f"{a} ({name_a or 'a ranked run'}) and {b} ({name_b or 'a ranked run'}) are not runs of one "
                         "benchmark")
    if hook_a is not None:
        if qrels:  # once dropped without a word: the hook judges by the benchmark's own data
            raise ValueError(f"{a} and {b} are {name_a} runs, judged by the benchmark's own data: --qrels does not "
                             "apply to them")
        return hook_a(a, b, metrics, data, n_perm, seed)
    threshold = recorded_threshold(a, b, docs)
    metrics = [at_threshold(m, threshold) for m in (metrics or DEFAULT_METRICS)]
    (run_a, qrels_a), (run_b, qrels_b) = _trec(a, qrels), _trec(b, qrels)
    if qrels_a != qrels_b:
        raise ValueError(f"{a} and {b} are judged by different qrels: not runs of one benchmark")
    if threshold > 1:  # left out as the pools evaluator and fuse-runs leave them out
        skipped = set(queries_without_relevant(qrels_a, threshold))
        qrels_a = {q: g for q, g in qrels_a.items() if q not in skipped}
        run_a, run_b = ({q: r for q, r in run.items() if q not in skipped} for run in (run_a, run_b))
    out = {}
    values_a, values_b = (_scored(spec, qrels_a, run, metrics) for spec, run in ((a, run_a), (b, run_b)))
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
