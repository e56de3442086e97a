"""One Markdown line per fusion sweep: its runs, its two-fold choice, and how many of its rows clear a bar.

Reads the `sweep.json` that `experiments/fusion_sweep.py` writes. `--baseline DIR` counts the rows above that
run's test MAP and NDCG%20 on every facet and `all`; `--goal` counts the rows meeting every condition given.
Counting rows is for reading how robust a family is to its weights; the figure to report is the two-fold choice.

    python experiments/sweep_summary.py --sweep 'runs/csfcube/sweep3-minilm-*' --baseline runs/csfcube/minilm-abstract \
        --goal 'all:MAP>43,all:NDCG%20>64,method:MAP>32'
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

from training_table import cells

from aspire.benchmarks.csfcube import GROUPS


def parse_goal(spec: str) -> list[tuple[str, str, float]]:
    """`GROUP:METRIC>VALUE,...` -> [(group, metric, value)]."""
    out = []
    for part in filter(None, spec.split(",")):
        target, sep, value = part.partition(">")
        group, _, metric = target.partition(":")
        if not sep or group not in GROUPS or not metric:
            raise ValueError(f"goal parts look like all:MAP>43, got {part!r}")
        out.append((group, metric, float(value)))
    return out


def above(test: dict, baseline: dict) -> bool:
    return all(test[g][m] > baseline[g][m] for g in GROUPS for m in ("MAP", "NDCG%20"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", action="append", required=True, help="a sweep folder (sweep.json inside) or a glob")
    ap.add_argument("--baseline", type=Path, help="a run folder (results.json inside) to count rows above")
    ap.add_argument("--goal", default="", help="conditions GROUP:METRIC>VALUE, comma-separated, to count rows meeting")
    args = ap.parse_args()
    try:
        goal = parse_goal(args.goal)
    except ValueError as err:
        ap.error(str(err))
    folders = sorted({f for spec in args.sweep for f in (glob.glob(spec) or [spec])})
    missing = [f for f in folders if not (Path(f) / "sweep.json").is_file()]
    if missing:
        ap.error(f"no sweep.json in {', '.join(missing)}")
    baseline = json.loads((args.baseline / "results.json").read_text(encoding="utf-8"))["test"] if args.baseline else None

    head = ["sweep", "runs fused", "rows", *(f"two-fold choice: {g}" for g in GROUPS)]
    head += ["rows above baseline"] * bool(baseline) + ["rows meeting goal"] * bool(goal)
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for folder in folders:
        sweep = json.loads((Path(folder) / "sweep.json").read_text(encoding="utf-8"))
        rows = [row["test"] for row in sweep["rows"]]
        line = [f"`{Path(folder).name}`", " + ".join(spec.rpartition(":")[2] for spec in sweep["runs"]),
                str(len(rows)), *cells(sweep["two_fold"], "test")]
        if baseline:
            line.append(str(sum(above(t, baseline) for t in rows)))
        if goal:
            line.append(str(sum(all(t[g][m] > v for g, m, v in goal) for t in rows)))
        lines.append("| " + " | ".join(line) + " |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
