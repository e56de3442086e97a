"""The benchmark suite: CSFCube (two-fold test), reviewer matching and context2doc test in one table.

`run_suite` runs the three benchmarks for one model and scorer (each writing its own folder under
`out`), and returns one row per benchmark figure with its bootstrap 95% interval; `out/suite.json`
keeps the rows, the model's fingerprint and the command. `model="bm25"` runs the lexical baseline
where the benchmark has text queries (context2doc). Encodings are cached by fingerprint, so a second
scorer on the same model re-uses them. `encoder_options` choose the inference backend of every
benchmark's encoder (`{"backend": "onnx", "quantize": "int8"}`; default the exact torch model); the
fast encoder's fingerprint differs from the exact one's, so their cached vectors never mix.
"""

from __future__ import annotations

import time
from pathlib import Path

from aspire.evaluate.pools import write_json_atomic
from aspire.evaluate.runs import invocation

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _row(bench: str, metric: str, value: float, ci, n: int, note: str = "") -> dict:
    return {"benchmark": bench, "metric": metric, "value": value, "ci95": list(ci), "n": n, "note": note}


def csfcube_rows(data: Path, model: str, scorer: str, out: Path, **options) -> tuple[list[dict], str]:
    from aspire.evaluate.csfcube import evaluate_csfcube_rankings, load_csfcube, run_csfcube, test_units
    from aspire.evaluate.pools import read_ranked_pool_set

    results = run_csfcube(data, model, scorer, out, **options)
    pool_set = load_csfcube(data)
    _, per_query = evaluate_csfcube_rankings(data, read_ranked_pool_set(pool_set, out, results["experiment"]))
    rows = []
    for metric in ("MAP", "NDCG%20"):
        units = test_units(pool_set, per_query, metric)
        rows.append(_row("csfcube (two-fold test, all)", metric, units.value(), units.bootstrap(), len(units.units)))
    return rows, results["encoder_fingerprint"]


def reviewer_rows(data: Path, model: str, scorer: str, out: Path, aggregate: str, **options) -> list[dict]:
    from aspire.evaluate.reviewer_run import run_reviewers
    from aspire.evaluate.reviewers import load_reviewer_set

    exp = f"{Path(model).name}-{scorer}-{aggregate.replace(':', '')}"
    res = run_reviewers(load_reviewer_set(data), model, [scorer], out, exp, aggregate, **options)
    note = f"aggregate {aggregate}; {res['texts']['empty_abstract']} empty abstracts (title only)"
    return [_row("reviewer matching (10 draws)", "loss (lower better)", res["loss"], res["ci95"], res["n_reviewers"], note)]


def context2doc_rows(data: Path, model: str | None, scorer: str | None, out: Path, alpha: float | None,
                     **options) -> list[dict]:
    from aspire.evaluate.context2doc import load_context2doc
    from aspire.evaluate.context2doc_run import METRICS, run_context2doc

    bench = load_context2doc(data, "test")
    exp = "bm25" if model is None else f"{Path(model).name}-{scorer}" + ("" if alpha is None else f"-bm25-a{alpha:g}")
    res = run_context2doc(bench, out, exp, model, scorer, bm25=model is None or alpha is not None, alpha=alpha,
                          **options)
    name = "context2doc test" + (" (fused with BM25)" if alpha is not None and model else "")
    return [_row(name, m, res["metrics"][m], res["ci95"][m], res["n_queries"]) for m in METRICS[:4]]


def run_suite(model: str, scorer: str | None, out, data: str | Path = DATA, aggregate: str = "max",
              bm25_alpha: float | None = None, encoding: str = "contextual", scorer_options: dict | None = None,
              cache_dir=None, batch_size: int = 32, device: str | None = None,
              encode_options: dict | None = None, encoder_options: dict | None = None) -> dict:
    """Run every benchmark that applies to `model` (`bm25`: context2doc only) and write `out/suite.json`."""
    data, out = Path(data), Path(out)
    t0 = time.perf_counter()
    rows: list[dict] = []
    fingerprint = None
    timings = {}
    if model == "bm25":
        rows += context2doc_rows(data / "cocite-acl", None, None, out / "context2doc", None)
        timings["context2doc"] = time.perf_counter() - t0
    else:
        if scorer is None:
            raise ValueError("a model needs a scorer")
        common = dict(encoding=encoding, scorer_options=scorer_options, cache_dir=cache_dir, batch_size=batch_size,
                      device=device, encode_options=encode_options, encoder_options=dict(encoder_options or {}))
        csf_rows, fingerprint = csfcube_rows(data / "csfcube", model, scorer, out / "csfcube", **common)
        rows += csf_rows
        timings["csfcube"] = time.perf_counter() - t0
        rows += reviewer_rows(data / "reviewer-matching", model, scorer, out / "reviewers", aggregate, **common)
        timings["reviewers"] = time.perf_counter() - t0 - sum(timings.values())
        rows += context2doc_rows(data / "cocite-acl", model, scorer, out / "context2doc", bm25_alpha, **common)
        timings["context2doc"] = time.perf_counter() - t0 - sum(timings.values())
    suite = {"model": str(model), "scorer": scorer, "encoder_fingerprint": fingerprint, "aggregate": aggregate,
             "bm25_alpha": bm25_alpha, "encoding": encoding, "scorer_options": dict(scorer_options or {}),
             "encode_options": dict(encode_options or {}), "encoder_options": dict(encoder_options or {}),
             "rows": rows, "seconds": timings,
             "command": invocation()}
    write_json_atomic(out / "suite.json", suite)
    return suite


def format_rows(rows: list[dict]) -> list[str]:
    """The suite's table, one line a figure."""
    lines = [f"{'benchmark':<34} {'metric':<20} {'value':>8}  95% interval        n"]
    for r in rows:
        lo, hi = r["ci95"]
        lines.append(f"{r['benchmark']:<34} {r['metric']:<20} {r['value']:8.4f}  [{lo:7.4f}, {hi:7.4f}]  "
                     f"{r['n']}" + (f"  {r['note']}" if r["note"] else ""))
    return lines
