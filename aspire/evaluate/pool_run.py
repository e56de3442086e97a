"""Evaluate any ASPIRE-style pool re-ranking set: rank it with a model (or read ranked files), score it.

Writes `out/results.json` (`summary`: mean per group — `all`, `facet:F`, `split:S` — in percent,
with `n_queries`; `undefined_metrics` lists, per metric, the queries it is undefined for and why,
and groups count them in `n_undefined`; `command`: the command line that made it), `out/perq.csv`
(one row per query, metrics in percent, an empty cell where undefined) and, when a model ran,
the ranked files `out/test-pid2pool-NAME-EXP[-FACET]-ranked.json`.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

from aspire.benchmarks.metrics import check_metrics, undefined_metrics
from aspire.benchmarks.pools import (
    evaluate_pool_set,
    load_pool_set,
    read_ranked_files,
    read_ranked_pool_set,
    summarize,
    write_trec,
)
from aspire.benchmarks.runs import invocation
from aspire.data.papers import read_paper_map
from aspire.evaluate.options import EvalOptions
from aspire.io import atomic_write, write_json


def facet_label_map(facets: Sequence[str]) -> dict[str, str]:
    """`FACET_label` -> FACET for each facet; `objective_label` counts as background (CSFCube rule)."""
    mapping = {f"{f}_label": f for f in facets}
    if "background" in facets:
        mapping["objective_label"] = "background"
    return mapping


def run_pools(
    data: str | Path,
    name: str,
    out: str | Path,
    facets: Sequence[str] = (),
    splits_file: str | Path | None = None,
    abstracts_file: str | Path | None = None,
    threshold: int = 1,
    metrics: Sequence[str] = ("MAP", "NDCG%20", "nDCG@10", "P@5", "P@10", "MRR", "bpref"),
    skip_no_relevant: bool = False,
    ranked_dir: str | Path | None = None,
    exp: str | None = None,
    model: str | None = None,
    scorer: str | None = None,
    options: EvalOptions | None = None,
) -> dict:
    """Score ranked files from `ranked_dir` (with `exp`), or rank with `model` + `scorer` first
    (`options`: `aspire.evaluate.options.EvalOptions`, as `aspire.evaluate.rank.rank_pool_set` reads them).
    ValueError when both are given: the ranked files would be scored and the model not run. A metric name or a
    `threshold` that `aspire.benchmarks.metrics.check_metrics` refuses is a ValueError before any pool is ranked, as
    are no metrics or a metric named twice; `metrics` or `facets` given as one string is a TypeError."""
    for arg, value in (("metrics", metrics), ("facets", facets)):
        if isinstance(value, (str, bytes)):  # read a character a name: "MAP" -> M, A, P; "method" -> m, e, ...
            raise TypeError(f"{arg} must be a list of names, got the string {value!r:.60}")
    if not metrics:  # once ran and wrote results with no metric in them
        raise ValueError("no metrics to score; give at least one (e.g. MAP)")
    repeated = sorted({m for m in metrics if list(metrics).count(m) > 1})
    if repeated:  # once a repeated column in perq.csv, one entry in the summary
        raise ValueError(f"metrics named more than once: {repeated}")
    check_metrics(metrics, threshold)  # once refused only after the model had encoded and ranked every pool
    data, out = Path(data), Path(out)
    if ranked_dir is not None:
        given = [k for k, v in (("model", model), ("scorer", scorer), ("options", options),
                                ("abstracts_file", abstracts_file)) if v is not None]
        if given:  # once dropped without a word: the files were scored as if the model had ranked them
            raise ValueError(f"scoring ranked files ({ranked_dir}) runs no model; leave out {', '.join(given)}")
    pool_set = load_pool_set(data, name, facets, splits_file)
    info: dict = {}
    files = None  # the ranked files as read, which `write_trec` takes the scores from (each file read once)
    if ranked_dir is not None:
        if exp is None:
            raise ValueError("scoring ranked files needs the experiment name (exp)")
        files = read_ranked_files(pool_set, ranked_dir, exp)
        rankings = read_ranked_pool_set(pool_set, ranked_dir, exp, files)
        info = {"experiment": exp, "ranked_dir": str(ranked_dir)}
    else:
        if not (model and scorer):
            raise ValueError("give a model and a scorer, or a folder of ranked files")
        from aspire.evaluate.options import options_exp
        from aspire.evaluate.rank import rank_pool_set

        papers = read_paper_map(abstracts_file or data / f"abstracts-{name}.jsonl", ids=pool_set.paper_ids(), needed_by="pooled")
        options = options or EvalOptions()
        exp = exp or options_exp(model, scorer, options)
        rankings, info = rank_pool_set(pool_set, papers, model, scorer, out, exp, options, facet_label_map(facets))
    per_query, skipped = evaluate_pool_set(pool_set, rankings, metrics, threshold, skip_no_relevant)
    summary = {
        g: {k: (v if k in ("n_queries", "n_undefined") or v is None else 100.0 * v) for k, v in vals.items()}
        for g, vals in summarize(pool_set, per_query).items()
    }
    results = {
        "dataset": name,
        "scale": "percent",
        "relevance_threshold": threshold,
        "metrics": list(metrics),
        "summary": summary,
        "skipped_no_relevant": skipped,
        "undefined_metrics": undefined_metrics(per_query),
        "self_in_pool_removed": pool_set.self_in_pool,
        **info,
        "command": invocation(),
    }
    out.mkdir(parents=True, exist_ok=True)
    with atomic_write(out / "perq.csv") as fh:
        writer = csv.writer(fh)
        writer.writerow(["query", *metrics])
        for key, vals in per_query.items():
            writer.writerow([key, *("" if vals[m] is None else f"{100.0 * vals[m]:.4f}" for m in metrics)])
    write_json(out / "results.json", results, indent=None)
    write_trec(out, pool_set, rankings, exp, scores_from=ranked_dir, ranked_files=files)  # the ranked files' scores
    return results
