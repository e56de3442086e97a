"""Choose a fusion's weights on CSFCube's dev protocol, then report that choice on test.

Every weight vector of the grid fuses the same ranked runs (`aspire.evaluate.csfcube.fuse_csfcube`,
per-query z-scores, weighted sum); the one with the highest dev metric (default: aggregated MAP) is
marked. Test numbers of the other rows are printed for reading only: choosing among them would
tune on test. With `--per-facet`, each facet also gets its own weights (the highest dev MAP of
that facet; the facet is known at query time in aspect-conditional retrieval), and the rankings
so assembled are scored as one more row.

    python experiments/fusion_sweep.py --run runs/csfcube/A:expA --run runs/csfcube/B:expB \
        --grid 0.3,0.7 --grid 0.5,0.5 --grid 0.7,0.3 --out runs/csfcube/sweep-A-B \
        --table experiments/results/fusion_sweep_A_B.md
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from aspire.evaluate.__main__ import DEFAULT_DATA
from aspire.evaluate.csfcube import FACETS, GROUPS, evaluate_ranked_dir, fuse_csfcube, write_results


def cells(results: dict, split: str) -> list[str]:
    return [f"{results[split][g]['MAP']:.2f} / {results[split][g]['NDCG%20']:.2f}" for g in GROUPS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA / "csfcube"))
    ap.add_argument("--run", action="append", required=True, help="DIR:EXP of a ranked run (two or more)")
    ap.add_argument("--grid", action="append", required=True, help="comma-separated weights, one per --run")
    ap.add_argument("--select", default="all:MAP", help="GROUP:METRIC of the dev protocol to maximise")
    ap.add_argument("--out", type=Path, required=True, help="folder; each weight vector gets a subfolder")
    ap.add_argument("--per-facet", action="store_true", help="also choose weights per facet on dev")
    ap.add_argument("--table", type=Path, help="also write the Markdown table here")
    args = ap.parse_args()

    inputs = []
    for spec in args.run:
        folder, sep, exp = spec.rpartition(":")
        if not sep or not folder or not exp:
            ap.error(f"--run takes DIR:EXP, got {spec!r}")
        inputs.append((folder, exp))
    grids = []
    for spec in args.grid:
        weights = [float(w) for w in spec.split(",")]
        if len(weights) != len(inputs):
            ap.error(f"--grid {spec!r} has {len(weights)} weights for {len(inputs)} runs")
        grids.append(weights)
    group, _, metric = args.select.partition(":")

    rows = []
    for weights in grids:
        name = "w" + "-".join(f"{w:g}" for w in weights)
        results = fuse_csfcube(args.data, inputs, args.out / name, "fused", weights)
        rows.append((weights, results, results["dev"][group][metric]))
    best = max(range(len(rows)), key=lambda i: rows[i][2])
    if args.per_facet:
        rows.append(per_facet_row(args, rows))

    lines = ["runs: " + ", ".join(f"`{folder}` ({exp})" for folder, exp in inputs), "",
             f"chosen by dev {group} {metric}; test rows for reading only", "",
             "| weights | dev all | test background | test method | test result | test all |",
             "|---|---|---|---|---|---|"]
    for i, (weights, results, _) in enumerate(rows):
        mark = " (chosen on dev)" if i == best else ""
        label = (", ".join(f"{w:g}" for w in weights) if isinstance(weights[0], float)
                 else "per facet: " + "; ".join(f"{f} {', '.join(f'{w:g}' for w in ws)}" for f, ws in weights))
        lines.append(f"| {label}{mark} | {cells(results, 'dev')[-1]} | " + " | ".join(cells(results, "test")) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    (args.out / "sweep.json").write_text(json.dumps(
        {"runs": args.run, "select": args.select, "chosen": rows[best][0],
         "rows": [{"weights": w, "dev": r["dev"], "test": r["test"]} for w, r, _ in rows]}, indent=1),
        encoding="utf-8")
    if args.table:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(text, encoding="utf-8")


def per_facet_row(args, rows: list) -> tuple:
    """Each facet's rankings from the weights with that facet's highest dev MAP, scored together."""
    chosen, folder = [], args.out / "per-facet"
    folder.mkdir(parents=True, exist_ok=True)
    for facet in FACETS:
        weights = max(rows, key=lambda row: row[1]["dev"][facet]["MAP"])[0]
        chosen.append((facet, weights))
        name = "w" + "-".join(f"{w:g}" for w in weights)
        ranked = f"test-pid2pool-csfcube-fused-{facet}-ranked.json"
        shutil.copyfile(args.out / name / ranked, folder / ranked)
    results, per_query = evaluate_ranked_dir(args.data, folder, "fused")
    results["per_facet_weights"] = {facet: weights for facet, weights in chosen}
    write_results(folder, args.data, "fused", results, per_query)
    return chosen, results, results["dev"]["all"]["MAP"]


if __name__ == "__main__":
    main()
