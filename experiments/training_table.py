"""Before/after table of the co-citation training runs on CSFCube (test and dev protocol).

Reads `results.json` of CSFCube evaluations (written by `python -m aspire.evaluate csfcube|fuse`)
and writes a Markdown table of MAP / NDCG%20 per facet and aggregated.

    python experiments/training_table.py --row "label=runs/csfcube/DIR" ... --out experiments/results/training_runs.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

GROUPS = ("background", "method", "result", "all")


def cells(results: dict, split: str) -> list[str]:
    return [f"{results[split][g]['MAP']:.2f} / {results[split][g]['NDCG%20']:.2f}" for g in GROUPS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--row", action="append", required=True, help="LABEL=RESULT_DIR (results.json inside)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--title", default="CSFCube before and after co-citation training")
    args = ap.parse_args()
    lines = [f"# {args.title}", ""]
    for split in ("test", "dev"):
        lines += [f"## {split} protocol (MAP / NDCG%20, percent)", "",
                  "| model | " + " | ".join(GROUPS) + " |", "|---|" + "---|" * len(GROUPS)]
        for spec in args.row:
            label, _, folder = spec.partition("=")
            results = json.loads((Path(folder) / "results.json").read_text(encoding="utf-8"))
            lines.append(f"| {label} | " + " | ".join(cells(results, split)) + " |")
        lines.append("")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
