"""Benchmark: what a search re-rank costs, stage by stage, and the cost matrices old vs new.

A query of 10 sentence vectors is re-ranked against a shortlist of 1,000 candidate papers of 10
sentences each (1,000 10x10 blocks), D = 384 (MiniLM's width), float32, vectors drawn at random on
the unit sphere (the cost timings do not depend on their values; Sinkhorn's do, through its
iteration count, which is reported).

1. Cost matrices, the three ways in one run, interleaved, on the same tensors:
   - `cdist, expanded`: `torch.cdist(q.expand(C, -1, -1), c)`, the search re-rank's call before
     `aspire.scoring.distance` was the one routine;
   - `l2_cost, expanded`: the batched aligned expansion (`l2_cost`, one bmm over C query copies);
   - `cross_l2_cost`: the one routine now used by search, scorers and page (one GEMM, no copies).
   Ratios are old / new.
2. The re-rank per stage, as `Searcher.search` runs it (`rerank="ot"` and `rerank="minl2"`):
   gather the shortlist's stored vectors from the index arrays, cost matrix, OT weights,
   Sinkhorn, top-k; min-L2: gather, cost, minimum.

    nice python experiments/bench_rerank.py [--threads 1,2] [--repeat 300] [--out experiments/results/bench_rerank.md]

Each thread count gets its own section; the functions of a table run interleaved, round by round,
so a busy machine slows them alike (the minimum is the figure least disturbed by other work).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aspire.batch import DocBatch  # noqa: E402
from aspire.index.corpus import gather_docbatch  # noqa: E402
from aspire.scoring import cross_l2_cost, l2_cost, ot_weights, sinkhorn  # noqa: E402


def timed(fns: dict, repeat: int, warmup: int = 5) -> dict[str, dict[str, float]]:
    """Median, p90 and minimum milliseconds of each function, the functions interleaved round by round
    (on a shared machine the minimum is the figure least disturbed by other work)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(1e3 * (time.perf_counter() - t0))
    return {name: {"median_ms": statistics.median(t), "p90_ms": float(np.percentile(t, 90)), "min_ms": min(t)}
            for name, t in times.items()}


def cost_matrices(q: torch.Tensor, c: torch.Tensor, repeat: int) -> dict:
    C = len(c)
    old = torch.cdist(q.expand(C, -1, -1), c)
    new = cross_l2_cost(q, c)[0]
    aligned = l2_cost(q.expand(C, -1, -1), c)
    agree = max(float((old - new).abs().max()), float((aligned - new).abs().max()))
    results = timed({
        "cdist, expanded (old search)": lambda: torch.cdist(q.expand(C, -1, -1), c),
        "l2_cost, expanded (aligned bmm)": lambda: l2_cost(q.expand(C, -1, -1), c),
        "cross_l2_cost (the one routine)": lambda: cross_l2_cost(q, c)[0],
    }, repeat)
    return {"timings": results, "max_abs_difference": agree}


def rerank_stages(vectors: np.ndarray, offsets: np.ndarray, shortlist: np.ndarray, query: DocBatch, k: int,
                  repeat: int, eps: float = 0.05, tau: float = 1.0) -> dict:
    """Each stage timed on its own inputs (computed once), then the whole chain."""
    pool = gather_docbatch(vectors, offsets, shortlist)
    cost = cross_l2_cost(query.emb, pool.emb)[0]  # (C, S, T)
    q_mask = query.mask.expand(len(pool), -1)  # (C, S)
    x, y = ot_weights(cost, q_mask, pool.mask, tau)
    dist = sinkhorn(cost, x, y, eps).value
    iters = sinkhorn(cost, x, y, eps).n_iter

    def ot_chain():
        p = gather_docbatch(vectors, offsets, shortlist)
        cst = cross_l2_cost(query.emb, p.emb)[0]
        a, b = ot_weights(cst, q_mask, p.mask, tau)
        return torch.topk(-sinkhorn(cst, a, b, eps).value, k)

    def minl2_chain():
        p = gather_docbatch(vectors, offsets, shortlist)
        cst = cross_l2_cost(query.emb, p.emb)[0].masked_fill(~p.mask[:, None, :], torch.finfo(torch.float32).max)
        return torch.topk(-cst.amin(dim=(1, 2)), k)

    stages = timed({
        "gather shortlist vectors": lambda: gather_docbatch(vectors, offsets, shortlist),
        "cost matrix (cross_l2_cost)": lambda: cross_l2_cost(query.emb, pool.emb)[0],
        "OT weights": lambda: ot_weights(cost, q_mask, pool.mask, tau),
        "Sinkhorn": lambda: sinkhorn(cost, x, y, eps),
        "top-k": lambda: torch.topk(-dist, k),
        "min-L2 minimum": lambda: cost.masked_fill(~pool.mask[:, None, :], torch.finfo(torch.float32).max).amin(dim=(1, 2)),
        "whole OT re-rank": ot_chain,
        "whole min-L2 re-rank": minl2_chain,
    }, repeat)
    return {"stages": stages, "sinkhorn_iterations": {"median": float(iters.float().median()), "max": int(iters.max())}}


def table(rows: dict[str, dict[str, float]], ref: str | None = None) -> list[str]:
    """Markdown rows; with `ref`, each row's median and minimum as multiples of `ref`'s."""
    head = "| | median ms | p90 ms | min ms |" + (" / new (median) | / new (min) |" if ref else "")
    lines = [head, "|---|---:|---:|---:|" + ("---:|---:|" if ref else "")]
    for name, t in rows.items():
        ratio = (f" {t['median_ms'] / rows[ref]['median_ms']:.2f}x | {t['min_ms'] / rows[ref]['min_ms']:.2f}x |"
                 if ref else "")
        lines.append(f"| {name} | {t['median_ms']:.2f} | {t['p90_ms']:.2f} | {t['min_ms']:.2f} |{ratio}")
    return lines


def section(threads: int, args) -> list[str]:
    """Both measurements with `threads` torch threads, as markdown."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    C, S, D = args.candidates, args.sentences, args.dim
    q = torch.nn.functional.normalize(torch.randn(1, S, D, generator=g), dim=-1)
    c = torch.nn.functional.normalize(torch.randn(C, S, D, generator=g), dim=-1)
    load = os.getloadavg()
    costs = cost_matrices(q, c, args.repeat)

    # an index-like store: 20 x the shortlist's papers, the shortlist spread over it
    n_papers = 20 * C
    offsets = np.arange(0, (n_papers + 1) * S, S, dtype=np.int64)
    vectors = torch.nn.functional.normalize(torch.randn(n_papers * S, D, generator=g), dim=-1).numpy()
    shortlist = np.sort(np.random.default_rng(0).choice(n_papers, C, replace=False))
    query = DocBatch(q, torch.ones(1, S, dtype=torch.bool))
    stages = rerank_stages(vectors, offsets, shortlist, query, args.k, max(20, args.repeat // 4))
    new = "cross_l2_cost (the one routine)"
    return [
        f"## {threads} torch thread{'s' if threads > 1 else ''} (load average {load[0]:.1f} / {load[1]:.1f} "
        "over 1 / 5 min at the start)",
        "",
        f"Cost matrices on {C:,} {S}x{S} blocks (D = {D}), the three interleaved round by round:",
        "",
        *table(costs["timings"], new),
        "",
        f"The three agree to {costs['max_abs_difference']:.1e} (max absolute difference).",
        "",
        f"The re-rank per stage ({C:,} candidates, {S} sentences each, top {args.k}):",
        "",
        *table(stages["stages"]),
        "",
        f"Sinkhorn iterations per problem: median {stages['sinkhorn_iterations']['median']:.0f}, "
        f"max {stages['sinkhorn_iterations']['max']}.",
        "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2", help="torch thread counts, one section each")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--candidates", type=int, default=1000)
    ap.add_argument("--sentences", type=int, default=10)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--out", type=Path, help="also write the tables here (markdown)")
    args = ap.parse_args()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    command = "nice python experiments/bench_rerank.py " + " ".join(sys.argv[1:])
    lines = [
        "# Re-rank cost: cost matrices old vs new, and the re-rank per stage",
        "",
        f"Command: `{command}` · {when} · {machine}.",
        "",
    ]
    for threads in (int(t) for t in args.threads.split(",")):
        lines += section(threads, args)
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
