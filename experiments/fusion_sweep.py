"""Fuse CSFCube runs over a grid of weights, and choose the weights by the two-fold protocol.

Every weight vector of the grid fuses the same ranked runs (`aspire.evaluate.csfcube.fuse_csfcube`,
per-query z-scores, weighted sum) into its own subfolder. The choice follows CSFCube's folds
(`aspire.evaluate.two_fold`): weights chosen on fold1_dev are scored on fold1_test and those chosen on
fold2_dev on fold2_test. The table's per-row figures are for reading only: the evaluator's "dev"
(fold1_dev) is fold2_test, so choosing a row by either column tunes on test.

    python experiments/fusion_sweep.py --run runs/csfcube/A:expA --run runs/csfcube/B:expB \
        --grid 0.3,0.7 --grid 0.5,0.5 --grid 0.7,0.3 --out runs/csfcube/sweep-A-B
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from training_table import cells

from aspire.benchmarks.csfcube import GROUPS, format_table
from aspire.cli.evaluate import parse_run
from aspire.evaluate.csfcube import fuse_csfcube
from aspire.evaluate.two_fold import REPORTED, select_two_fold
from aspire.paths import DATA


def label(weights: list[float]) -> str:
    return ", ".join(f"{w:g}" for w in weights)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DATA / "csfcube"))
    ap.add_argument("--run", action="append", required=True, help="DIR:EXP of a ranked run (two or more)")
    ap.add_argument("--grid", action="append", required=True, help="comma-separated weights, one per --run")
    ap.add_argument("--select", default="all:MAP", help="GROUP:METRIC of each dev fold to maximise")
    ap.add_argument("--out", type=Path, required=True, help="folder; each weight vector gets a subfolder")
    ap.add_argument("--table", type=Path, help="also write the Markdown table here")
    args = ap.parse_args()

    try:
        inputs = [parse_run(spec) for spec in args.run]
    except ValueError as err:
        ap.error(str(err))
    grids = []
    for spec in args.grid:
        weights = [float(w) for w in spec.split(",")]
        if len(weights) != len(inputs):
            ap.error(f"--grid {spec!r} has {len(weights)} weights for {len(inputs)} runs")
        grids.append(weights)
    group, _, metric = args.select.partition(":")
    if group not in GROUPS or metric not in REPORTED:  # before any fusion: it was found only after the whole grid
        ap.error(f"--select must be GROUP:METRIC with GROUP in {list(GROUPS)} and METRIC in {list(REPORTED)}, "
                 f"got {args.select!r}")

    rows = []
    for weights in grids:
        name = "w" + "-".join(f"{w:g}" for w in weights)
        rows.append((weights, fuse_csfcube(args.data, inputs, args.out / name, "fused", weights)))
    choice = select_two_fold({label(weights): results for weights, results in rows}, group, metric)

    lines = ["runs: " + ", ".join(f"`{folder}` ({exp})" for folder, exp in inputs), "",
             "| weights | dev all | test background | test method | test result | test all |",
             "|---|---|---|---|---|---|"]
    for weights, results in rows:
        lines.append(f"| {label(weights)} | {cells(results, 'dev')[-1]} | " + " | ".join(cells(results, "test")) + " |")
    lines += ["", f"chosen by {group} {metric}: weights {choice['chosen']['fold1']} on fold1_dev, "
              f"{choice['chosen']['fold2']} on fold2_dev; test (each fold's test half with its own choice): "
              + format_table(choice, "test")]
    text = "\n".join(lines) + "\n"
    print(text)
    (args.out / "sweep.json").write_text(json.dumps(
        {"runs": args.run, "select": args.select, "two_fold": choice,
         "rows": [{"weights": w, "dev": r["dev"], "test": r["test"]} for w, r in rows]}, indent=1),
        encoding="utf-8")
    if args.table:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
