"""Where the whole OT scorer's time goes on `bench_sinkhorn.py`'s case (a): 1,000 pairs of 10 x 10 sentences.

Times, alternated and on one thread, the kernel alone (on the precomputed cost), the cost and weights
(`gathered_l2_weights`), the same right after a read of the whole pool (timed from the pass's start: does the
pool's place in the caches matter?) and the whole scorer (`gathered_ot_match`), and inside the scorer its cost
pass and its solve (`_ot_from_cost`, the kernel's work on the pass's cost); then the cost pass's parts: the compiled
pass (`_distance_cpu.gathered_l2`), the pass on the same pairs with each side's rows in reverse order (not runs of
the store: the compiled loop of dot products instead of BLAS), the dot products alone both ways, and the pass with
every pair reading the same rows (all in L1). Last, what lower precision would buy: the same products as one
batched `torch.bmm` over copies gathered beforehand (outside the clock), in float32 and in bfloat16 (oneDNN; on
AVX512-BF16 / AMX), with the bf16 products' largest error against float32. Prints a table of medians and writes
them as JSON.

    python experiments/profile_ot_scorer.py --pool-cache POOL --out runs/profile_ot_scorer.json

POOL: the sentence pool `bench_sinkhorn.py --pool-cache POOL` saved (CSFCube abstracts, contextual minilm).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch


def read_pool(path: Path) -> torch.Tensor:
    """The (P, D) sentence pool of a `bench_sinkhorn.py --pool-cache` file: `{"pool": tensor, "made_by": {...}}` as
    `bench_sinkhorn.cached_pool` writes it (the record was once passed on whole, and `make_case` failed on a dict), or
    a bare tensor as it wrote them before; ValueError naming the file for anything else."""
    cached = torch.load(path)
    pool = cached.get("pool") if isinstance(cached, dict) else cached
    if not isinstance(pool, torch.Tensor) or pool.dim() != 2:
        raise ValueError(f"{path}: not a sentence pool of bench_sinkhorn.py --pool-cache (a (P, D) tensor, or a record "
                         f"with one under 'pool'), got {type(pool).__name__}")
    return pool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pool-cache", type=Path, required=True, help="the pool bench_sinkhorn.py --pool-cache saved")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import numba

    torch.set_num_threads(1)
    numba.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_sinkhorn import EPS, TARGET, TAU, make_case, run_ours, time_alternated

    from aspire.scoring import scorers
    from aspire.scoring._distance_cpu import _pair_dots, _run, _run_dots, gathered_l2
    from aspire.scoring._jit import njit
    from aspire.scoring.distance import gathered_l2_weights

    pool = read_pool(args.pool_cache)
    idx, _, _, cost, a, b = make_case(pool, 1000, 10, seed=1)
    cpu = torch.device("cpu")
    inner = {"scorer_cost_pass": [], "scorer_solve": [], "cost_and_weights_after_pool_read": []}

    def clocked(fn, name):
        def run(*args, **kw):
            start = time.perf_counter()
            out = fn(*args, **kw)
            inner[name].append(time.perf_counter() - start)
            return out
        return run

    def after_pool_read():
        pool.sum()
        clocked(gathered_l2_weights, "cost_and_weights_after_pool_read")(pool, idx[0], pool, idx[1], TAU)

    # the scorer's own calls clocked where it makes them (its module's names), put back afterwards
    real = scorers.gathered_l2_weights, scorers._ot_from_cost
    scorers.gathered_l2_weights = clocked(real[0], "scorer_cost_pass")
    scorers._ot_from_cost = clocked(real[1], "scorer_solve")
    try:
        whole = time_alternated({
            "kernel": lambda: run_ours(cost, a, b, max_iter=100_000),
            "cost_and_weights": lambda: gathered_l2_weights(pool, idx[0], pool, idx[1], TAU),
            "cost_and_weights_after_pool_read": after_pool_read,
            "scorer": lambda: scorers.gathered_ot_match(pool, idx[0], pool, idx[1], tau=TAU, eps=EPS, tol=TARGET,
                                                        max_iter=100_000),
        }, args.repeats, cpu)
    finally:
        scorers.gathered_l2_weights, scorers._ot_from_cost = real
    whole.update({name: statistics.median(times[1:]) for name, times in inner.items()})  # [0]: the warm-up call

    @njit
    def loop_dots(vectors, q_rows, c_rows, out):
        for p in range(q_rows.shape[0]):
            _pair_dots(vectors, q_rows[p], vectors, c_rows[p], out[p])

    @njit
    def blas_dots(vectors, q_rows, c_rows, out):
        q_pos, c_pos = np.empty(q_rows.shape[1], np.int64), np.empty(c_rows.shape[1], np.int64)
        scratch = np.empty(out.shape[1] * out.shape[2], out.dtype)
        for p in range(q_rows.shape[0]):
            qs, nq = _run(q_rows[p], q_pos)
            cs, nc = _run(c_rows[p], c_pos)
            _run_dots(vectors, qs, nq, q_pos, vectors, cs, nc, c_pos, out[p], scratch)

    store = pool.numpy()
    q_rows, c_rows = idx[0].numpy(), idx[1].numpy()
    q_back, c_back = np.ascontiguousarray(q_rows[:, ::-1]), np.ascontiguousarray(c_rows[:, ::-1])
    same_q, same_c = np.repeat(q_rows[:1], len(q_rows), 0), np.repeat(c_rows[:1], len(c_rows), 0)
    out, rmin, cmin = (np.empty(s, np.float32) for s in ((1000, 10, 10), (1000, 10), (1000, 10)))

    def compiled(qr, cr):
        norms = np.full(len(store), np.nan, np.float32)
        gathered_l2(store, qr, store, cr, norms, norms, out, rmin, cmin, TAU, 1)

    xq, yc = pool[idx[0]], pool[idx[1]].transpose(1, 2).contiguous()  # (B, N, D), (B, D, M), gathered once
    xq_bf, yc_bf = xq.bfloat16(), yc.bfloat16()
    exact = torch.bmm(xq, yc)
    bf16_error = float((torch.bmm(xq_bf, yc_bf).float() - exact).abs().max() / exact.abs().max())
    parts = time_alternated({
        "cost_and_weights_alone": lambda: gathered_l2_weights(pool, idx[0], pool, idx[1], TAU),
        "compiled_pass": lambda: compiled(q_rows, c_rows),
        "compiled_pass_rows_reversed": lambda: compiled(q_back, c_back),
        "dot_products_blas": lambda: blas_dots(store, q_rows, c_rows, out),
        "dot_products_loop": lambda: loop_dots(store, q_rows, c_rows, out),
        "compiled_pass_same_rows": lambda: compiled(same_q, same_c),
        "dot_products_torch_bmm_fp32_gathered": lambda: torch.bmm(xq, yc),
        "dot_products_torch_bmm_bf16_gathered": lambda: torch.bmm(xq_bf, yc_bf),
    }, args.repeats, cpu)
    result = {name: 1e3 * t for name, t in {**whole, **parts}.items()}
    result["scorer_x_kernel"] = whole["scorer"] / whole["kernel"]
    result["bf16_dot_max_error_relative"] = bf16_error
    for name, value in result.items():
        unit = "" if name in ("scorer_x_kernel", "bf16_dot_max_error_relative") else " ms"
        print(f"{name:38s} {value:8.4g}{unit}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"pairs": 1000, "N": 10, "threads": 1, "repeats": args.repeats,
                                        "torch": torch.__version__, "ms": result}, indent=1))


if __name__ == "__main__":
    main()
