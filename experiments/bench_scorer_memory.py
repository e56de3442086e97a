"""Peak memory of all-pairs OT scoring, unchunked vs `score_chunked` (issue 29, item 11).

Each case runs in a fresh child process: Q queries against N candidates (random sentence vectors,
5-15 sentences a paper, D = 384), optionally with one candidate of `long` sentences. The child
reports its peak resident memory (`VmHWM`: `bench_worst_paper.PEAK_RSS`), the time, and the largest difference between its
scores and the unchunked scores of the same case (computed in the same child, after the peak was
read, for the chunked mode).

    python experiments/bench_scorer_memory.py [--queries 46] [--pairs 100,400,800] [--long 50,200,400]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))
from bench_worst_paper import PEAK_RSS, save  # noqa: E402  (the same peak reading and table writer)

RESULTS = REPO / "experiments" / "results"

CHILD = PEAK_RSS + r"""
import json, sys, time, warnings
import torch
from aspire.batch import DocBatch
from aspire.scoring import get_scorer
from aspire.scoring.chunked import score_chunked
warnings.simplefilter("ignore")
q_n, c_n, long, mode, budget = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
g = torch.Generator().manual_seed(0)
def batch(n, extra):
    lengths = torch.randint(5, 16, (n,), generator=g).tolist() + ([extra] if extra else [])
    return DocBatch.from_list([torch.randn(k, 384, generator=g) for k in lengths])
q, c = batch(q_n, 0), batch(c_n - (1 if long else 0), long)
scorer = get_scorer("ot")
start = time.perf_counter()
with torch.no_grad():
    sims = scorer.score(q, c) if mode == "unchunked" else score_chunked(scorer, q, c, budget_bytes=budget)
seconds = time.perf_counter() - start
peak = peak_rss_mb()
diff = None
if mode == "chunked" and len(sys.argv) > 6:
    with torch.no_grad():
        diff = float((sims - scorer.score(q, c)).abs().max())
print(json.dumps({"peak_rss_mb": peak, "seconds": seconds, "max_abs_diff": diff}))
"""


def run(q: int, n: int, long: int, mode: str, budget: int, compare: bool, threads: int) -> dict:
    env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    argv = [sys.executable, "-c", CHILD, str(q), str(n), str(long), mode, str(budget)] + (["compare"] if compare else [])
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=46)
    parser.add_argument("--pairs", default="100,400,800", help="candidate counts (no long paper)")
    parser.add_argument("--long", default="50,200,400", help="sentences of one long candidate (with 100 candidates)")
    parser.add_argument("--budget-mb", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_scorer_memory.md")
    args = parser.parse_args()
    budget = args.budget_mb << 20
    cases = [(n, 0) for n in map(int, args.pairs.split(","))] + [(100, s) for s in map(int, args.long.split(","))]
    rows = []
    for n, long in cases:
        for mode in ("unchunked", "chunked"):
            r = run(args.queries, n, long, mode, budget, compare=mode == "chunked", threads=args.threads)
            rows.append({"queries": args.queries, "candidates": n, "long": long, "mode": mode, **r})
            print(json.dumps(rows[-1]), flush=True)
    lines = ["# Peak memory of all-pairs OT scoring, unchunked vs chunked", "",
             f"Command: `python experiments/bench_scorer_memory.py --queries {args.queries} --pairs {args.pairs} "
             f"--long {args.long} --budget-mb {args.budget_mb} --threads {args.threads}`",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; OT scorer (eps 0.05, tau 1), random "
             "sentence vectors (D = 384, 5-15 sentences a paper); peak RSS of a fresh child process; "
             "max |diff| = largest score difference from the unchunked call of the same case.", "",
             "| queries | candidates | one long candidate (sentences) | mode | peak RSS (MB) | time (s) | max abs diff |",
             "|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['queries']} | {r['candidates']} | {r['long'] or '-'} | {r['mode']} | error: {r['error'][:50]} | | |")
            continue
        diff = "-" if r["max_abs_diff"] is None else f"{r['max_abs_diff']:.1e}"
        lines.append(f"| {r['queries']} | {r['candidates']} | {r['long'] or '-'} | {r['mode']} | {r['peak_rss_mb']:.0f} "
                     f"| {r['seconds']:.1f} | {diff} |")
    save(args.out, lines, rows)


if __name__ == "__main__":
    main()
