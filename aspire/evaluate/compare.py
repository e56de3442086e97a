"""Paired comparison of two runs of one benchmark: per-query deltas, a p-value, a bootstrap interval.

A run is a TREC run file (with `--qrels`) or a results folder holding `run.trec` and `qrels.trec` (what the
ranking benchmarks write), compared here on per-query metrics. A results folder whose `results.json` names a
registered benchmark (by its name or data folder) whose runner has a `compare` hook
(`aspire.evaluate.suite.RUNNERS`) is compared by that hook: CSFCube on its own two-fold figures, overall and
per facet; reviewer matching on its loss, which also takes published predictions as `FOLDER:EXP` (files
`EXP_d_20_N_ta.json`); they are judged by the benchmark's own data, so `--qrels` is refused beside them. Both runs
must cover the same queries. Results folders that record the queries, judgments and folds they were scored on
(`judged_set`, as CSFCube's do) must record the same ones.

A results folder of a SciRepEval probe (`aspire evaluate venue|year|same-author`: a `results.json` with `format` and
`representations`) is compared with another of the same format by `aspire.evaluate.probes.compare_probe_results`,
per representation and metric (`abstract/macro-F1`, ...; `metrics` picks metrics by name); the two must hold the
same test papers and labels (venue, year) or queries (same-author). Its tests are seeded 0 and carry no per-unit
deltas.

Ranked runs are compared at the relevance threshold their results folders record (`relevance_threshold`, as the
pools evaluator writes it; `aspire.evaluate.fuse.recorded_protocol`), as `fuse-runs` scores them: the binary metrics
at it (`MAP` read as `MAP-l2` at threshold 2), over the queries with a document at or above it (those without one
are named in a warning and each test's `skipped_no_relevant`). Folders recording
different thresholds are refused; a run file or a folder recording none takes the other's, else 1.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from aspire.benchmarks import BENCHMARKS
from aspire.benchmarks.metrics import without_unscorable
from aspire.benchmarks.runs import DEFAULT_METRICS, per_query, read_qrels, read_run
from aspire.benchmarks.stats import UnitScores, paired_test
from aspire.evaluate.fuse import at_threshold, protocol_of, recorded_protocol, results_doc

log = logging.getLogger(__name__)

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
    when neither does; ValueError naming both when they record different ones. `docs`: `{spec: results_doc(spec)}`
    where the caller has read them (the others are read here)."""
    docs = docs or {}
    found = {spec: protocol_of(docs[spec], spec)[1] if spec in docs else recorded_protocol(Path(spec))[1]
             for spec in (a, b) if Path(spec).is_dir()}
    values = {t for t in found.values() if t is not None}
    if len(values) > 1:
        raise ValueError(f"{a} and {b} are scored at different relevance thresholds "
                         f"({', '.join(f'{s}: {t}' for s, t in found.items())}): not runs of one protocol")
    return values.pop() if values else 1


def benchmark_of(spec: str, doc: dict | None = None) -> str | None:
    """The registered benchmark a run belongs to: its results folder's `results.json` names it (`benchmark`, by
    name or data folder; a probe's `format`), or it is `FOLDER:EXP` predictions (`PREDICTIONS_BENCHMARK`); None for
    a run file or a folder without one. `doc`: that `results.json` where the caller has read it
    (`aspire.evaluate.fuse.results_doc`; else read here)."""
    doc = results_doc(spec) if doc is None else doc
    if doc is None:
        folder, sep, _ = spec.rpartition(":")
        return PREDICTIONS_BENCHMARK if sep and Path(folder).is_dir() else None
    named = doc["benchmark"] if "benchmark" in doc else doc.get("format")
    return next((b.name for b in BENCHMARKS.values() if named in (b.name, b.folder)), None)


def _check_judged_sets(a: str, b: str, docs: dict) -> None:
    """ValueError naming both runs when their `results.json` record different judged sets (`judged_set`: the
    queries, judgments and folds they were scored on): per-query figures of other judgments do not pair."""
    seen = [doc.get("judged_set") if isinstance(doc, dict) else None for doc in (docs[a], docs[b])]
    if None not in seen and seen[0] != seen[1]:
        raise ValueError(f"{a} and {b} were scored on different queries, judgments or folds (judged set {seen[0]} "
                         f"and {seen[1]}): not runs of one benchmark")


def _compare_probes(name: str, a: str, b: str, metrics, data, n_perm: int, seed: int, docs: dict | None = None) -> dict:
    """`compare` of two results folders of the probe format `name` (`compare_probe_results`), the figures of
    `metrics` (metric names of the format; None: all); `docs` the folders' results.json as already read. With `name`
    bound, the benchmark runners' compare hook (`aspire.evaluate.suite.Runner.compare`); `data` is not read."""
    from aspire.evaluate.probes import METRICS, compare_probe_results

    odd = [m for m in metrics or () if m not in METRICS[name]]
    if odd:
        raise ValueError(f"{name} results are compared on {', '.join(METRICS[name])}, not {odd[0]!r}")
    if seed != 0:  # compare_probe_results takes no seed
        raise ValueError(f"{name} results are compared with seed 0 (aspire.evaluate.probes.compare_probe_results), "
                         f"not {seed}")
    tests = compare_probe_results(a, b, n_perm=n_perm, docs=docs)
    return {figure: test for figure, test in tests.items() if not metrics or figure.partition("/")[2] in metrics}


def compare(a: str, b: str, qrels: str | None = None, metrics=None, data: str | None = None,
            n_perm: int = 10000, seed: int = 0, docs: dict | None = None) -> dict:
    """`{figure: paired_test(...) + per_unit_delta}` for two runs of the same benchmark; `metrics` None takes
    the benchmark's defaults (its runner's comparison; a probe format's metrics; else `DEFAULT_METRICS`).
    `docs`: `{spec: results_doc(spec)}` where the caller has read them (the others are read here), so each
    `results.json` is read once."""
    from aspire.evaluate.probes import FORMATS as PROBE_FORMATS
    from aspire.evaluate.suite import RUNNERS

    hooks, docs = [], dict(docs or {})  # each results.json read once, for benchmark_of and recorded_threshold
    for spec in (a, b):
        if spec not in docs:
            docs[spec] = results_doc(spec)
        name = benchmark_of(spec, docs[spec])
        if name is None and not Path(spec).exists():
            raise FileNotFoundError(2, "no such run file, results folder or predictions folder (DIR:EXP)", spec)
        # a probe's results hold its predictions, not a TREC run: once read as one ("run file not found")
        hook = (functools.partial(_compare_probes, name) if name in PROBE_FORMATS
                else RUNNERS[name].compare if name in RUNNERS else None)
        hooks.append((name, hook))
    (name_a, hook_a), (name_b, hook_b) = hooks
    if (hook_a is None) != (hook_b is None) or (hook_a is not None and name_a != name_b):
        raise ValueError(f"{a} ({name_a or 'a ranked run'}) and {b} ({name_b or 'a ranked run'}) are not runs of one "
                         "benchmark")
    _check_judged_sets(a, b, docs)
    if hook_a is not None:
        if qrels:  # once dropped without a word: the hook judges by the benchmark's own data
            raise ValueError(f"{a} and {b} are {name_a} runs, judged by the benchmark's own data: --qrels does not "
                             "apply to them")
        return hook_a(a, b, metrics, data, n_perm, seed, docs=docs)
    threshold = recorded_threshold(a, b, docs)
    metrics = [at_threshold(m, threshold) for m in (metrics or DEFAULT_METRICS)]
    (run_a, qrels_a), (run_b, qrels_b) = _trec(a, qrels), _trec(b, qrels)
    if qrels_a != qrels_b:
        raise ValueError(f"{a} and {b} are judged by different qrels: not runs of one benchmark")
    left, qrels_a, (run_a, run_b) = without_unscorable(qrels_a, (run_a, run_b), threshold)
    if left:  # once left out with only n_units to show it, where pools and fuse-runs list them
        log.warning("compare: %d quer%s with no document at grade >= %d left out (%s%s), as the pools evaluator leaves "
                    "them out; each test's skipped_no_relevant lists them", len(left), "y" if len(left) == 1 else "ies",
                    threshold, ", ".join(left[:5]), ", ..." if len(left) > 5 else "")
    out = {}
    values_a, values_b = (_scored(spec, qrels_a, run, metrics) for spec, run in ((a, run_a), (b, run_b)))
    for m in metrics:
        ua, ub = UnitScores.means(values_a[m]), UnitScores.means(values_b[m])
        test = paired_test(ua, ub, n_perm=n_perm, seed=seed)
        out[m] = {**test, "per_unit_delta": {q: values_a[m][q] - values_b[m][q] for q in sorted(values_a[m])},
                  **({"skipped_no_relevant": list(left)} if left else {})}
    return out


def format_p(p: float) -> str:
    """A p-value as the table prints it: four decimals, or two significant digits below 0.0001 (`5.0e-05`), so that a
    p-value, never below 1 / (permutations + 1), is never printed as 0.0000 (`--permutations 20000` printed 0.0000 for
    the 1 / 20001 written); NaN (no evidence either way) as `nan`."""
    return f"{p:.4f}" if not p < 1e-4 else f"{p:.1e}"


def format_comparison(result: dict) -> list[str]:
    """One line per metric: A, B, delta, its interval and the p-value (`format_p`)."""
    width = max(10, *map(len, result))
    lines = [f"{'metric':<{width}} {'A':>8} {'B':>8} {'A-B':>8}  95% interval        p"]
    for m, r in result.items():
        lo, hi = r["ci95"]
        lines.append(f"{m:<{width}} {r['a']:8.4f} {r['b']:8.4f} {r['delta']:8.4f}  [{lo:7.4f}, {hi:7.4f}]  "
                     f"{format_p(r['p_value'])}")
    return lines
