"""The benchmark suite: CSFCube (two-fold test), reviewer matching and context2doc test in one table.

`run_suite` runs every benchmark of the registry (`aspire.benchmarks.BENCHMARKS`) that has a runner in
`RUNNERS` for one model and scorer (each writing its own folder under `out`), and returns one row per benchmark figure with its bootstrap 95% interval; `out/suite.json`
keeps the rows, the model's fingerprint and the command. `model="bm25"` runs the lexical baseline
where the benchmark has text queries (context2doc). Encodings are cached by fingerprint, so a second
scorer on the same model re-uses them. `encoder_options` choose the inference backend of every
benchmark's encoder (`{"backend": "onnx", "quantize": "int8"}`; default the exact torch model); the
fast encoder's fingerprint differs from the exact one's, so their cached vectors never mix.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aspire.benchmarks import BENCHMARKS, Benchmark, get_benchmark
from aspire.benchmarks.runs import invocation
from aspire.io import write_json
from aspire.paths import DATA


def probe_rows(*args, **options) -> tuple[list[dict], str]:
    from aspire.evaluate.probes import probe_rows as rows

    return rows(*args, **options)


def _row(bench: str, metric: str, value: float, ci, n: int, note: str = "") -> dict:
    return {"benchmark": bench, "metric": metric, "value": value, "ci95": list(ci), "n": n, "note": note}


def csfcube_rows(bench: Benchmark, data: Path, model: str, scorer: str, out: Path, settings: dict,
                 **options) -> tuple[list[dict], str]:
    from aspire.benchmarks.csfcube import evaluate_csfcube_rankings, load_csfcube, test_units
    from aspire.benchmarks.pools import read_ranked_pool_set
    from aspire.evaluate.csfcube import run_csfcube

    results = run_csfcube(data, model, scorer, out, **options)
    pool_set = load_csfcube(data)
    _, per_query = evaluate_csfcube_rankings(data, read_ranked_pool_set(pool_set, out, results["experiment"]))
    rows = []
    for metric in bench.metrics:
        units = test_units(pool_set, per_query, metric)
        rows.append(_row(bench.title, metric, units.value(), units.bootstrap(), len(units.units)))
    return rows, results["encoder_fingerprint"]


def reviewer_rows(bench: Benchmark, data: Path, model: str, scorer: str, out: Path, settings: dict,
                  **options) -> tuple[list[dict], None]:
    from aspire.benchmarks.reviewers import load_reviewer_set
    from aspire.evaluate.reviewer_run import run_reviewers

    aggregate = settings["aggregate"]
    exp = f"{Path(model).name}-{scorer}-{aggregate.replace(':', '')}"
    res = run_reviewers(load_reviewer_set(data), model, [scorer], out, exp, aggregate, **options)
    note = f"aggregate {aggregate}; {res['texts']['empty_abstract']} empty abstracts (title only)"
    return [_row(bench.title, bench.metrics[0], res["loss"], res["ci95"], res["n_reviewers"], note)], None


def context2doc_rows(bench: Benchmark, data: Path, model: str | None, scorer: str | None, out: Path, settings: dict,
                     **options) -> tuple[list[dict], None]:
    from aspire.benchmarks.context2doc import load_context2doc
    from aspire.evaluate.context2doc_run import run_context2doc

    alpha = settings.get("bm25_alpha")
    queries = load_context2doc(data, "test")
    exp = "bm25" if model is None else f"{Path(model).name}-{scorer}" + ("" if alpha is None else f"-bm25-a{alpha:g}")
    res = run_context2doc(queries, out, exp, model, scorer, bm25=model is None or alpha is not None, alpha=alpha,
                          **options)
    name = bench.title + (" (fused with BM25)" if alpha is not None and model else "")
    return [_row(name, m, res["metrics"][m], res["ci95"][m], res["n_queries"]) for m in bench.metrics], None


@dataclass(frozen=True)
class Runner:
    """How the suite runs a model on one registered benchmark: `rows(benchmark, data_dir, model, scorer, out,
    settings, **options) -> (rows, encoder fingerprint or None)`; `lexical`: it also ranks with no model
    (`model="bm25"`, the model and scorer passed as None)."""

    rows: Callable[..., tuple[list[dict], str | None]]
    lexical: bool = False


# benchmark name (aspire.benchmarks.BENCHMARKS) -> its runner
RUNNERS: dict[str, Runner] = {
    "csfcube": Runner(csfcube_rows),
    "reviewers": Runner(reviewer_rows),
    "context2doc": Runner(context2doc_rows, lexical=True),
    "venue": Runner(probe_rows),
    "year": Runner(probe_rows),
    "same-author": Runner(probe_rows),
}


def run_suite(model: str, scorer: str | None, out, data: str | Path = DATA, aggregate: str = "max",
              bm25_alpha: float | None = None, encoding: str = "contextual", scorer_options: dict | None = None,
              cache_dir=None, batch_size: int = 32, device: str | None = None,
              encode_options: dict | None = None, encoder_options: dict | None = None,
              benchmarks: Sequence[str] | None = None) -> dict:
    """Run every registered benchmark (or those named in `benchmarks`) that applies to `model` (`bm25`: the
    lexical ones) and write `out/suite.json`; each benchmark writes its own folder `out/NAME`."""
    data, out = Path(data), Path(out)
    names = list(BENCHMARKS) if benchmarks is None else [get_benchmark(n).name for n in benchmarks]
    missing = [n for n in names if n not in RUNNERS]
    if missing:
        raise ValueError(f"benchmark(s) {missing} have no suite runner (aspire.evaluate.suite.RUNNERS)")
    if model != "bm25" and scorer is None:
        raise ValueError("a model needs a scorer")
    settings = {"aggregate": aggregate, "bm25_alpha": bm25_alpha}
    common = dict(encoding=encoding, scorer_options=scorer_options, cache_dir=cache_dir, batch_size=batch_size,
                  device=device, encode_options=encode_options, encoder_options=dict(encoder_options or {}))
    rows: list[dict] = []
    fingerprint = None
    timings = {}
    for name in names:
        bench, runner = BENCHMARKS[name], RUNNERS[name]
        t0 = time.perf_counter()
        if model == "bm25":
            if not runner.lexical:
                continue
            found, _ = runner.rows(bench, data / bench.folder, None, None, out / name, {})
        else:
            found, printed = runner.rows(bench, data / bench.folder, model, scorer, out / name, settings,
                                         **common)
            fingerprint = fingerprint or printed
        rows += found
        timings[name] = time.perf_counter() - t0
    suite = {"model": str(model), "scorer": scorer, "encoder_fingerprint": fingerprint, "aggregate": aggregate,
             "bm25_alpha": bm25_alpha, "encoding": encoding, "scorer_options": dict(scorer_options or {}),
             "encode_options": dict(encode_options or {}), "encoder_options": dict(encoder_options or {}),
             "rows": rows, "seconds": timings,
             "command": invocation()}
    write_json(out / "suite.json", suite, indent=None)
    return suite


def format_rows(rows: list[dict]) -> list[str]:
    """The suite's table, one line a figure."""
    lines = [f"{'benchmark':<34} {'metric':<20} {'value':>8}  95% interval        n"]
    for r in rows:
        lo, hi = r["ci95"]
        lines.append(f"{r['benchmark']:<34} {r['metric']:<20} {r['value']:8.4f}  [{lo:7.4f}, {hi:7.4f}]  "
                     f"{r['n']}" + (f"  {r['note']}" if r["note"] else ""))
    return lines
