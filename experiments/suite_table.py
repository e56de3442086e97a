"""Collect `suite.json` files of `python -m aspire.evaluate suite` runs into one markdown table.

    python experiments/suite_table.py runs/suite/minilm-minl2 runs/suite/bm25 ... \
        --copy-to experiments/results/suite --out experiments/results/suite_table.md

One row per run; columns: CSFCube two-fold test MAP and NDCG%20 (percent), reviewer-matching loss
(lower is better), context2doc test MRR and nDCG@10, each with its bootstrap 95% interval.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

COLUMNS = [("csfcube", "MAP", "CSFCube MAP"), ("csfcube", "NDCG%20", "CSFCube NDCG%20"),
           ("reviewer", "loss (lower better)", "reviewer loss ↓"), ("context2doc", "MRR", "context2doc MRR"),
           ("context2doc", "nDCG@10", "context2doc nDCG@10"), ("context2doc", "R@100", "context2doc R@100")]


def cell(rows: list[dict], bench: str, metric: str) -> str:
    for r in rows:
        if r["benchmark"].startswith(bench) and r["metric"] == metric:
            digits = 2 if bench == "csfcube" else 3
            lo, hi = r["ci95"]
            return f"{r['value']:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
    return "–"


def label(suite: dict) -> str:
    if suite["model"] == "bm25":
        return "BM25 (k1 1.25, b 0.75)"
    opts = "".join(f" {k} {v:g}" for k, v in suite["scorer_options"].items())
    return f"{Path(suite['model']).name} · {suite['scorer']}{opts}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="suite output folders")
    ap.add_argument("--copy-to", help="copy each suite.json here as NAME.json")
    ap.add_argument("--out", help="write the table here")
    args = ap.parse_args()
    lines = ["| model · scorer | " + " | ".join(c[2] for c in COLUMNS) + " |",
             "|---" * (len(COLUMNS) + 1) + "|"]
    for folder in args.runs:
        suite = json.loads((Path(folder) / "suite.json").read_text())
        lines.append(f"| {label(suite)} | " + " | ".join(cell(suite["rows"], b, m) for b, m, _ in COLUMNS) + " |")
        if args.copy_to:
            Path(args.copy_to).mkdir(parents=True, exist_ok=True)
            shutil.copy(Path(folder) / "suite.json", Path(args.copy_to) / f"{Path(folder).name}.json")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
