"""CSFCube: faceted query-by-example benchmark (Mysore et al. 2021), evaluated as published.

Protocol (`../shared/data/README.md`): per query, MAP with relevance binarised at grade >= 2 and
NDCG%20 (NDCG at 20 % of the pool, linear gains, CSFCube discount); also P@20, R@20, R-precision
(binarised at 2) and NDCG@20 (ranx / trec_eval NDCG, graded). Note two names the published script
uses differently: its `r_precision` is the precision at the last relevant item (here: precision at
R, the usual definition) and its `ndcg@20` uses the CSFCube discount (here: trec_eval's). A query found in its own pool is left
out of it. Test figure = mean of the fold1_test mean and the fold2_test mean, per facet and for `all`
(every facet-query of the fold's `all` list). Dev figure = the fold1_dev mean, as in the published
script (fold2_dev is fold1_test). Results are written as percentages.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Mapping

from aspire.benchmarks.metrics import mean_metrics, undefined_metrics
from aspire.benchmarks.pools import (
    PoolSet,
    evaluate_pool_set,
    load_pool_set,
    query_key,
    read_ranked_files,
    read_ranked_pool_set,
    write_trec,
)
from aspire.benchmarks.runs import invocation
from aspire.benchmarks.stats import UnitScores
from aspire.io import atomic_write, write_json

log = logging.getLogger(__name__)

NAME = "csfcube"
FACETS = ("background", "method", "result")
GROUPS = FACETS + ("all",)
LABEL_TO_FACET = {
    "background_label": "background",
    "objective_label": "background",
    "method_label": "method",
    "result_label": "result",
}
METRICS = ("MAP", "NDCG%20", "P@20", "R@20", "R-precision", "NDCG@20")
THRESHOLD = 2
ABSTRACTS_FILE = "abstracts-csfcube-preds.jsonl"


FILES = (ABSTRACTS_FILE, "evaluation_splits.json", *(f"test-pid2anns-{NAME}-{facet}.json" for facet in FACETS))


def missing_files(root: str | Path) -> list[str]:
    """The files of `FILES` (what `load_csfcube` and the papers reader open) that the folder `root` lacks, in order;
    reads none of them, so a wrong `--data` is said before any model loads."""
    return [name for name in FILES if not (Path(root) / name).is_file()]


SPLITS = ("fold1_test", "fold2_test", "fold1_dev", "fold2_dev")


def load_csfcube(root: str | Path) -> PoolSet:
    """The three facets' judged pools and the two-fold splits (`group/fold1_test`, ...); ValueError naming the
    splits file and the splits it lacks when a group of `GROUPS` lacks one of `SPLITS` (the protocol reads each)."""
    root = Path(root)
    pool_set = load_pool_set(root, NAME, FACETS, splits_file=root / "evaluation_splits.json")
    absent = [f"{group}/{split}" for group in GROUPS for split in SPLITS if f"{group}/{split}" not in pool_set.splits]
    if absent:  # once a KeyError from `protocol_scores`, after every paper was encoded
        raise ValueError(f"{root / 'evaluation_splits.json'}: no split {', '.join(absent)}: CSFCube's protocol "
                         f"needs {list(SPLITS)} for each group of {list(GROUPS)}")
    return pool_set


def _percent(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def protocol_scores(pool_set: PoolSet, per_query: Mapping[str, Mapping[str, float]]) -> dict:
    """Test (two-fold mean) and dev (fold1_dev) figures in percent, and every fold's mean.

    Returns `{"test": {group: {metric: %}}, "dev": {...}, "folds": {group: {fold: {metric: %}}}}`.
    """
    folds: dict[str, dict[str, dict[str, float]]] = {}
    test: dict[str, dict[str, float]] = {}
    dev: dict[str, dict[str, float]] = {}
    for group in GROUPS:
        folds[group] = {
            fold: {m: _percent(v) for m, v in mean_metrics(per_query, pool_set.splits[f"{group}/{fold}"]).items()}
            for fold in SPLITS
        }
        f1, f2 = folds[group]["fold1_test"], folds[group]["fold2_test"]
        test[group] = {m: None if None in (f1[m], f2[m]) else (f1[m] + f2[m]) / 2.0 for m in f1}
        dev[group] = dict(folds[group]["fold1_dev"])
    return {"test": test, "dev": dev, "folds": folds}


def query_titles(root: str | Path) -> dict[str, str]:
    """`{pid_facet: title}` from `queries-release.csv` (empty when the file is absent)."""
    path = Path(root) / "queries-release.csv"
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return {query_key(r["pid"], r["facet"]): r["title"] for r in csv.DictReader(fh)}


def write_per_query_csv(path: Path, pool_set: PoolSet, per_query: Mapping[str, Mapping[str, float]], titles) -> None:
    """One row per facet-query: key, pid, facet, its test fold, title, metrics in percent."""
    test_fold = {k: fold for fold in ("fold1_test", "fold2_test") for k in pool_set.splits[f"all/{fold}"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as fh:
        writer = csv.writer(fh)
        writer.writerow(["query", "paper_id", "facet", "test_fold", "pool_size", "title", *METRICS])
        for facet in FACETS:
            for qid, pool in pool_set.pools[facet].items():
                key = query_key(qid, facet)
                row = ["" if per_query[key][m] is None else f"{100.0 * per_query[key][m]:.4f}" for m in METRICS]
                writer.writerow([key, qid, facet, test_fold.get(key, ""), len(pool), titles.get(key, ""), *row])


def evaluate_csfcube_rankings(root: str | Path, rankings: Mapping[str, Mapping[str, list[str]]],
                              pool_set: PoolSet | None = None) -> tuple[dict, dict]:
    """Score `{facet: {query_pid: [cand_pid, ...]}}` -> (results dict, per-query metrics as fractions).
    `pool_set`: `load_csfcube(root)` where the caller has it loaded (else loaded here)."""
    pool_set = load_csfcube(root) if pool_set is None else pool_set
    per_query, _ = evaluate_pool_set(pool_set, rankings, METRICS, threshold=THRESHOLD)
    results = {
        "benchmark": NAME,
        "scale": "percent",
        "relevance_threshold": THRESHOLD,
        "metrics": list(METRICS),
        "self_in_pool_removed": pool_set.self_in_pool,
        "judged_set": pool_set.fingerprint(),  # the queries, judgments and folds scored (`PoolSet.fingerprint`)
        "undefined_metrics": undefined_metrics(per_query),
        **protocol_scores(pool_set, per_query),
    }
    return results, per_query


def evaluate_ranked_dir(root: str | Path, ranked_dir: str | Path, exp: str) -> tuple[dict, dict]:
    """Score the files `ranked_dir/test-pid2pool-csfcube-EXP-{facet}-ranked.json`."""
    pool_set = load_csfcube(root)
    results, per_query = evaluate_csfcube_rankings(root, read_ranked_pool_set(pool_set, ranked_dir, exp), pool_set)
    results["experiment"] = exp
    return results, per_query


def write_ranked_dir_results(out: Path, root: str | Path, ranked_dir: str | Path, exp: str) -> dict:
    """`aspire evaluate csfcube --ranked DIR --exp EXP`: score the ranked files of `exp` in `ranked_dir`
    (`evaluate_ranked_dir`) and write what every CSFCube run writes (`write_results`; `run.trec` with the files'
    scores and `qrels.trec`, `aspire.benchmarks.pools.write_trec`, which `fuse-runs` reads), the pools loaded and
    each ranked file read once; returns the results."""
    pool_set = load_csfcube(root)
    files = read_ranked_files(pool_set, ranked_dir, exp)
    rankings = read_ranked_pool_set(pool_set, ranked_dir, exp, files)
    results, per_query = evaluate_csfcube_rankings(root, rankings, pool_set)
    results["experiment"] = exp
    write_results(out, root, exp, results, per_query, pool_set)
    write_trec(out, pool_set, rankings, exp, scores_from=ranked_dir, ranked_files=files)
    return results


def write_results(out: Path, root: str | Path, exp: str, results: dict, per_query,
                  pool_set: PoolSet | None = None) -> None:
    """`out/results.json` (`results` with the command that made it, `command`, added to it:
    `aspire.benchmarks.runs.invocation`) and `out/test-pid2pool-csfcube-EXP-perq.csv`. `pool_set`:
    `load_csfcube(root)` where the caller has it loaded (else loaded here)."""
    pool_set = load_csfcube(root) if pool_set is None else pool_set
    write_per_query_csv(out / f"test-pid2pool-{NAME}-{exp}-perq.csv", pool_set, per_query, query_titles(root))
    results["command"] = invocation()
    write_json(out / "results.json", results, indent=None)


def test_units(pool_set: PoolSet, per_query: Mapping[str, Mapping[str, float]], metric: str,
               group: str = "all") -> UnitScores:
    """A metric's two-fold test figure (percent) as `UnitScores`: groups = the two test folds
    (a query for which the metric is undefined, None, is left out). An unknown `metric` or `group` is a ValueError
    listing the valid ones."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; valid: {list(METRICS)}")
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; valid: {list(GROUPS)}")
    folds = {f: pool_set.splits[f"{group}/{f}"] for f in ("fold1_test", "fold2_test")}
    keys = {k for ks in folds.values() for k in ks}
    values = {k: 100.0 * v for k in keys if (v := per_query[k][metric]) is not None}
    return UnitScores.means(values, {f: [k for k in ks if k in values] for f, ks in folds.items()})


def format_table(results: dict, split: str = "test") -> str:
    """MAP / NDCG%20 per facet and aggregated, one line."""
    return "  ".join(
        f"{g}: {results[split][g]['MAP']:.2f} / {results[split][g]['NDCG%20']:.2f}" for g in GROUPS
    )
