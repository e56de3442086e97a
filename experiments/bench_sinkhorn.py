"""Benchmark: `aspire.scoring.sinkhorn` against geomloss, POT's batched solver and POT's per-problem loop.

Problems are what the OT scorer solves: cost = L2 distances between the sentence vectors of two
"documents", weights = softmax(-min distance / tau) (tau = 1), eps = 0.05, float32. Cases:
(a) 1,000 pairs of 10 x 10 sentences, (b) 250 pairs of 20 x 20, (c) 64 pairs of 50 x 50.

Sentence vectors (D = 384) come from the project's contextual MiniLM encoder run on CSFCube
abstracts (`--source minilm`, needs ../shared/data and the model wheel), or from a synthetic
topic model (`--source synthetic`): unit vectors normalise(topic + noise). A document of N
sentences is N consecutive sentences of the encoded pool, so its sentences are related as in
an abstract (a 50-sentence document spans several abstracts).

Accuracy criterion, the same for every solver: the L1 marginal error of the returned plan,
|P 1 - a|_1 + |P^T 1 - b|_1, maximised over the batch, must be <= 1e-4. Each baseline's knob
(geomloss `scaling`, POT `tol` / `stopThr`) is swept and its fastest setting meeting the
criterion is timed (the sweep lists what it tried). |value - ref| compares <C, P> with a
float64 run of this kernel at tol 1e-11 (checked against POT's `sinkhorn_log` on a sample).

Floor (timed, issue 44): plain Sinkhorn that knows when to stop, the least work the fixed point needs at
this accuracy: the exp-domain kernel exp(-C / eps) once, then u = a / (K v), v = b / (K^T u) with each
problem doing exactly the iterations it needs to reach 1e-4 (counted by this kernel with `check_every=1`,
no Newton; problems sorted by that count, so the still-iterating ones are a prefix of the batch and each
half step is one batched mat-vec over a view), no convergence checks, then the plan diag(u) K diag(v). It
is timed as the kernel is: the same statistic (median) over the same number of runs, the two alternated (in a
new order each round: `time_alternated`), on as many threads (`--threads` sets numba's count too: until
2026-11-27 the compiled floor ran on numba's default, all cores, while the kernel ran on `--threads`).
It has no numerical safeguards (it can overflow at smaller eps) and no Newton tail, so a kernel that
beats it on a shape does so through the Newton tail. "Whole scorer" times what scoring stored sentence
vectors costs for case (a): reading the pairs' vectors from the pool, the cost matrix, the weights and the
kernel, alternated with the kernel alone and the floor on the same problems: `gathered_ot_match` (the rows
read where they are stored, one compiled pass for the cost and the weights' minima). Then, in an alternation of
their own with the kernel (since 2026-11-29: the copies slowed whatever ran next), `pairwise_ot_match` of padded
(B, N, D) batches made before the clock starts (the OT scorer's aligned pairs as an encoder gives them; on a CPU
without a tape the same compiled pass reads them as stores) and of copies gathered inside the clock (`pool[idx]`,
what the whole scorer measured before).

Run: python experiments/bench_sinkhorn.py [--source minilm|synthetic] [--threads 2] [--quick] [--no-baselines]
     [--device cuda]
Writes experiments/results/bench_sinkhorn.{json,md} (with --no-baselines: bench_sinkhorn_kernel.{json,md}).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aspire.scoring import SinkhornConvergenceWarning, l2_cost, ot_weights, pairwise_ot_match, sinkhorn  # noqa: E402

try:  # absent from checkouts before it (the "before" runs of experiments/results/first_minutes.md)
    from aspire.scoring import gathered_ot_match
except ImportError:
    gathered_ot_match = None

EPS = 0.05
TAU = 1.0
TARGET = 1e-4
CASES = [("a", 1000, 10), ("b", 250, 20), ("c", 64, 50)]


# ---- data ------------------------------------------------------------------------------------------
def cpu_name() -> str:
    """The CPU's model name (lscpu's), for every figure."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def sentence_pool(source: str, n_papers: int, seed: int, model: str = "minilm") -> torch.Tensor:
    """(P, 384) float32 sentence vectors in document order (`model`: the encoder of source 'minilm', a name or an
    HF directory of all-MiniLM-L6-v2)."""
    if source == "synthetic":
        g = torch.Generator().manual_seed(seed)
        topics = torch.randn(n_papers, 1, 384, generator=g)
        sents = topics + 1.2 * torch.randn(n_papers, 8, 384, generator=g)
        return torch.nn.functional.normalize(sents, dim=-1).reshape(-1, 384)
    from aspire.data.papers import Paper
    from aspire.encoders import load_encoder

    path = REPO.parent / "shared" / "data" / "csfcube" / "abstracts-csfcube-preds.jsonl"
    rows = [json.loads(line) for _, line in zip(range(n_papers), path.open())]
    papers = [Paper(r["paper_id"], r["title"], r["abstract"]) for r in rows]
    with torch.inference_mode():
        batch = load_encoder(model).encode(papers, batch_size=32)
    return batch.emb[batch.mask].float()  # (P, D)


def make_case(pool: torch.Tensor, B: int, N: int, seed: int):
    """Cost (B, N, N) and OT-scorer weights for B (query, candidate) documents of N sentences."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, pool.shape[0] - N, (2, B), generator=g)
    idx = starts[:, :, None] + torch.arange(N)  # (2, B, N)
    idx = idx.to(pool.device)
    x, y = pool[idx[0]], pool[idx[1]]  # (B, N, D)
    cost = l2_cost(x, y)
    mask = torch.ones(B, N, dtype=torch.bool, device=pool.device)
    a, b = ot_weights(cost, mask, mask, TAU)
    return idx, x, y, cost, a, b


def marginal_err(plan: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (plan.sum(2) - a).abs().sum(1) + (plan.sum(1) - b).abs().sum(1)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timeit(fn, repeats: int, min_time: float = 0.0, device: torch.device = torch.device("cpu")) -> float:
    """Median wall time (s) of fn() over `repeats` runs after one warm-up (more runs until min_time)."""
    fn()
    times = []
    while len(times) < repeats or sum(times) < min_time:
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
        if len(times) >= 200:
            break
    return statistics.median(times)


def time_alternated(fns: dict, repeats: int, device: torch.device) -> dict[str, float]:
    """Median wall time (s) of each function over `repeats` runs, the functions alternated run by run (one
    warm-up each first), so a shared machine's load falls on all of them alike. Each round runs them in a new
    order (seeded), so that no function always follows the same one: on a 2-core Zen 4 guest a compute-bound
    run right after a memory-bound one (the gathering copies) ran up to 1.5x slower than back to back."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    order, rng = list(fns.items()), random.Random(0)
    for _ in range(repeats):
        rng.shuffle(order)
        for name, fn in order:
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def plain_sinkhorn_floor(cost, a, b, iters):
    """The timed floor (module docstring): a function running plain exp-domain Sinkhorn on these problems,
    each for exactly `iters` (B,) iterations, returning the plan. On a CPU each problem runs its loop in
    compiled code, as the kernel's iterations do (`aspire.scoring._sinkhorn_cpu`), so the floor is the
    arithmetic, not the dispatch of batched operations; on a GPU it is batched tensor operations."""
    if cost.device.type == "cpu":
        C, A, Bw, n = (t.detach().double().numpy() for t in (cost, a, b, iters))
        return lambda: torch.from_numpy(_plain_sinkhorn_cpu(C, A, Bw, n.astype(np.int64), EPS))
    order = torch.argsort(iters, descending=True)
    C, A, Bw = cost[order].contiguous(), a[order].contiguous(), b[order].contiguous()
    active = [int((iters >= t).sum()) for t in range(1, int(iters.max()) + 1)]  # problems in iteration t
    back = torch.argsort(order)

    def run():
        K = torch.exp(-C / EPS)  # (B, N, M)
        u, v = A.clone(), Bw.clone()
        for n in active:
            Kn = K[:n]
            u[:n] = A[:n] / torch.bmm(Kn, v[:n, :, None])[:, :, 0]  # u = a / (K v)
            v[:n] = Bw[:n] / torch.bmm(u[:n, None, :], Kn)[:, 0, :]  # v = b / (K^T u)
        return (u[:, :, None] * K * v[:, None, :])[back]

    return run


def _compiled_floor():
    import numba

    @numba.njit(parallel=True, cache=False)
    def floor(C, a, b, iters, eps):
        L, N, M = C.shape
        plan = np.empty((L, N, M))
        for p in numba.prange(L):
            K = np.exp(-C[p] / eps)
            u, v = a[p].copy(), b[p].copy()
            for _ in range(iters[p]):
                for i in range(N):  # u = a / (K v)
                    s = 0.0
                    for j in range(M):
                        s += K[i, j] * v[j]
                    u[i] = a[p, i] / s
                for j in range(M):  # v = b / (K^T u)
                    s = 0.0
                    for i in range(N):
                        s += u[i] * K[i, j]
                    v[j] = b[p, j] / s
            for i in range(N):
                for j in range(M):
                    plan[p, i, j] = u[i] * K[i, j] * v[j]
        return plan

    return floor


_PLAIN = {}


def _plain_sinkhorn_cpu(C, a, b, iters, eps):
    if "cpu" not in _PLAIN:
        _PLAIN["cpu"] = _compiled_floor()
    return _PLAIN["cpu"](C, a, b, iters, eps)


# ---- solvers: each returns the plan (B, N, M) float32 and value (B,) -------------------------------
def run_ours(cost, a, b, **kw):
    res = sinkhorn(cost, a, b, EPS, tol=TARGET, **kw)
    return res.plan, res.value


def run_geomloss(x, y, cost, a, b, scaling):
    from geomloss import SamplesLoss

    loss = SamplesLoss("sinkhorn", p=1, blur=EPS, scaling=scaling, debias=False, potentials=True,
                       backend="tensorized")
    f, g = loss(a, x, b, y)
    plan = a[:, :, None] * b[:, None, :] * torch.exp((f[:, :, None] + g[:, None, :] - cost) / EPS)
    return plan, (plan * cost).sum((1, 2))


def run_pot_batch(cost, a, b, tol):
    from ot.batch import solve_batch

    res = solve_batch(cost, reg=EPS, a=a, b=b, max_iter=100_000, tol=tol, method="log_sinkhorn",
                      reg_type="kl", grad="detach")
    return res.plan, (res.plan * cost).sum((1, 2))


def run_pot_loop(cost, a, b, stop):
    import ot

    C, A, Bw = cost.numpy(), a.numpy(), b.numpy()
    plan = np.stack([ot.sinkhorn(A[i], Bw[i], C[i], EPS, method="sinkhorn_log", stopThr=stop,
                                 numItermax=100_000) for i in range(len(C))])
    plan = torch.from_numpy(plan)
    return plan, (plan * cost).sum((1, 2))


def sweep(case, name, settings, run, a, b, ref, log):
    """First setting (ordered fast -> slow) whose plan meets the target; returns (setting, err, dev)."""
    for s in settings:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plan, value = run(s)
        err = marginal_err(plan.double(), a.double(), b.double()).max().item()
        dev = (value.double() - ref).abs().max().item()
        log.append({"case": case, "solver": name, "setting": s, "max_err": err, "max_abs_value_dev": dev})
        if err <= TARGET:
            return s, err, dev
    return None, err, dev


def bench_case(case: str, B: int, N: int, pool: torch.Tensor, args, device: torch.device, rows: list, sweeps: list) -> None:
    """Case `case` (B problems of N x N): the kernel, the timed floor and (case a) the whole scorer alternated; then
    the baselines unless `--no-baselines`. Appends its rows and sweeps."""
    idx, x, y, cost, a, b = make_case(pool, B, N, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SinkhornConvergenceWarning)
        a64, b64 = a.double() / a.double().sum(1, keepdim=True), b.double() / b.double().sum(1, keepdim=True)
        ref = sinkhorn(cost.double(), a64, b64, EPS, tol=1e-11, max_iter=1_000_000)
        exact = sinkhorn(cost, a, b, EPS, tol=TARGET, max_iter=1_000_000, check_every=1, newton_after=None)
    # sanity: the float64 reference against POT on a few problems (None where POT is not installed: a lent GPU
    # machine's image has no POT; the reference is the same code the CPU runs check)
    try:
        import ot
    except ImportError:
        ot = None
    pot_dev = None if ot is None else max(
        abs((ot.sinkhorn(a64[i].cpu().numpy(), b64[i].cpu().numpy(), cost[i].double().cpu().numpy(), EPS,
                         method="sinkhorn_log", stopThr=1e-13, numItermax=1_000_000)
             * cost[i].double().cpu().numpy()).sum() - ref.value[i].item()) for i in range(3))
    iters = exact.n_iter
    floor = plain_sinkhorn_floor(cost, a, b, iters)
    kernel = lambda: run_ours(cost, a, b, max_iter=100_000)  # noqa: E731
    mask = torch.ones(B, N, dtype=torch.bool, device=device)
    scorer = lambda: gathered_ot_match(pool, idx[0], pool, idx[1], tau=TAU, eps=EPS, tol=TARGET,  # noqa: E731
                                       max_iter=100_000)
    scorer_copies = lambda: pairwise_ot_match(pool[idx[0]], mask, pool[idx[1]], mask, tau=TAU, eps=EPS,  # noqa: E731
                                              tol=TARGET, max_iter=100_000)
    batches = (pool[idx[0]], pool[idx[1]]) if case == "a" else None  # padded batches, as an encoder gives them
    scorer_batches = lambda: pairwise_ot_match(batches[0], mask, batches[1], mask, tau=TAU, eps=EPS,  # noqa: E731
                                               tol=TARGET, max_iter=100_000)
    scorers = {} if case != "a" else {"scorer": scorer if gathered_ot_match else scorer_copies}
    timed = time_alternated({"kernel": kernel, "floor": floor, **scorers}, args.repeats, device)
    # the two other ways of scoring these pairs, against the kernel in an alternation of their own: the copies
    # stream 2 x 15 MB a call, and whatever ran right after them ran up to 1.5x slower (`time_alternated`)
    others = time_alternated({"kernel": kernel, "scorer_batches": scorer_batches, "scorer_copies": scorer_copies},
                             args.repeats, device) if case == "a" and gathered_ot_match else None
    floor_err = marginal_err(floor().double(), a.double(), b.double())
    floor_bad = int((~torch.isfinite(floor_err)).sum())  # no safeguards: a scaling may overflow
    floor_err = floor_err[torch.isfinite(floor_err)].max().item()
    info = {"case": case, "pairs": B, "N": N, "iters_median": iters.double().median().item(),
            "iters_max": iters.max().item(), "floor_ms": 1e3 * timed["floor"], "floor_max_err": floor_err, "floor_nonfinite": floor_bad,
            "ref_vs_pot_dev": pot_dev, "repeats": args.repeats,
            "cost_range_median": (cost.amax((1, 2)) - cost.amin((1, 2))).median().item()}
    print(f"\n({case}) {B} pairs of {N}x{N}: exact iterations to 1e-4 median {info['iters_median']:.0f}, "
          f"max {info['iters_max']:.0f}; timed floor {info['floor_ms']:.2f} ms (max err {floor_err:.1e}, {floor_bad} problem(s) "
          f"overflowed); "
          f"kernel {1e3 * timed['kernel']:.2f} ms = {timed['kernel'] / timed['floor']:.2f} x floor; "
          f"ref vs POT {'not checked (POT not installed)' if pot_dev is None else f'{pot_dev:.1e}'}")
    if "scorer" in timed and not gathered_ot_match:  # a checkout without gathered_ot_match
        info["scorer_ms"], info["scorer_x_kernel"] = 1e3 * timed["scorer"], timed["scorer"] / timed["kernel"]
        info["scorer_copies_ms"], info["scorer_copies_x_kernel"] = info["scorer_ms"], info["scorer_x_kernel"]
        print(f"  whole OT scorer on gathered copies {info['scorer_ms']:.2f} ms = {info['scorer_x_kernel']:.2f} x "
              "the kernel alone")
    elif "scorer" in timed:
        match, copies = scorer(), scorer_copies()
        info["scorer_ms"], info["scorer_x_kernel"] = 1e3 * timed["scorer"], timed["scorer"] / timed["kernel"]
        info["scorer_max_err"] = match.err.max().item()
        info["scorer_copies_ms"] = 1e3 * others["scorer_copies"]
        info["scorer_copies_x_kernel"] = others["scorer_copies"] / others["kernel"]
        info["scorer_vs_copies_max_abs_dist_dev"] = (match.dist - copies.dist).abs().max().item()
        info["scorer_batches_ms"] = 1e3 * others["scorer_batches"]
        info["scorer_batches_x_kernel"] = others["scorer_batches"] / others["kernel"]
        print(f"  whole OT scorer (stored rows + cost + weights + kernel) {info['scorer_ms']:.2f} ms = "
              f"{info['scorer_x_kernel']:.2f} x the kernel alone (max err {info['scorer_max_err']:.1e}); "
              f"on padded batches (pairwise_ot_match) {info['scorer_batches_ms']:.2f} ms = "
              f"{info['scorer_batches_x_kernel']:.2f} x; "
              f"gathering copies first {info['scorer_copies_ms']:.2f} ms = {info['scorer_copies_x_kernel']:.2f} x; "
              f"distances apart by {info['scorer_vs_copies_max_abs_dist_dev']:.1e} at most")

    def record(solver, setting, fn, repeats, seconds=None):
        plan, value = fn()
        err = marginal_err(plan.double(), a.double(), b.double()).max().item()
        dev = (value.double() - ref.value).abs().max().item()
        t = seconds if seconds is not None else timeit(fn, repeats, device=device)
        rows.append({**info, "solver": solver, "setting": setting, "median_ms": 1e3 * t, "max_err": err,
                     "max_abs_value_dev": dev})
        print(f"  {solver:<34} {setting:<22} {1e3 * t:10.2f} ms  err {err:.1e}  |dv| {dev:.1e}")

    record("aspire sinkhorn", "tol=1e-4", kernel, args.repeats, seconds=timed["kernel"])
    if args.no_baselines:
        return
    # forward + backward (gradient of sum(value) w.r.t. cost and weights)
    for mode in ("implicit", "autograd"):
        def fwd_bwd(mode=mode):
            c, wa, wb = (t.clone().requires_grad_() for t in (cost, a, b))
            res = sinkhorn(c, wa, wb, EPS, tol=TARGET, max_iter=100_000, grad=mode)
            torch.autograd.grad(res.value.sum(), (c, wa, wb))
            return res.plan.detach(), res.value.detach()
        record("aspire sinkhorn fwd+bwd", f"grad={mode}", fwd_bwd, max(3, args.repeats // 2))

    scalings = [0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.998, 0.999]
    s, _, _ = sweep(case, "geomloss", scalings, lambda s: run_geomloss(x, y, cost, a, b, s), a, b, ref.value, sweeps)
    if s is not None:
        record("geomloss SamplesLoss tensorized", f"scaling={s}",
               lambda: run_geomloss(x, y, cost, a, b, s), 3)
        def geo_bwd(s=s):
            from geomloss import SamplesLoss
            xx, yy = x.clone().requires_grad_(), y.clone().requires_grad_()
            loss = SamplesLoss("sinkhorn", p=1, blur=EPS, scaling=s, debias=False, backend="tensorized")
            torch.autograd.grad(loss(a, xx, b, yy).sum(), (xx, yy))
            return run_geomloss(x, y, cost, a, b, s)
        rows.append({**info, "solver": "geomloss fwd+bwd (loss, w.r.t. points)", "setting": f"scaling={s}",
                     "median_ms": 1e3 * timeit(geo_bwd, 3), "max_err": None, "max_abs_value_dev": None})
    else:  # time its most accurate setting anyway: what it costs to get that far
        last = scalings[-1]
        record("geomloss SamplesLoss tensorized", f"scaling={last} (none met 1e-4)",
               lambda: run_geomloss(x, y, cost, a, b, last), 3)
    tols = [1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7]
    s, _, _ = sweep(case, "POT ot.batch log_sinkhorn", tols, lambda t: run_pot_batch(cost, a, b, t), a, b,
                    ref.value, sweeps)
    if s is not None:
        record("POT ot.batch (log_sinkhorn)", f"tol={s:g}", lambda: run_pot_batch(cost, a, b, s), 3)
    if not args.quick:
        stops = [1e-4, 1e-5, 1e-6, 1e-7]
        s, _, _ = sweep(case, "POT ot.sinkhorn loop", stops, lambda t: run_pot_loop(cost, a, b, t), a, b,
                        ref.value, sweeps)
        if s is not None:
            record("POT ot.sinkhorn loop (sinkhorn_log)", f"stopThr={s:g}", lambda: run_pot_loop(cost, a, b, s), 1)


def cached_pool(path: Path | None, made_by: dict, make):
    """The sentence pool `make()` gives, read from `path` when a pool there was made the same way (`made_by`), else
    made and saved there with that record; a pool another source or model made (or an older cache that does not
    say) is made again, with a line saying so, where once any file there was read."""
    cached = torch.load(path) if path is not None and path.exists() else None
    if isinstance(cached, dict) and cached.get("made_by") == made_by:
        return cached["pool"]
    if cached is not None:
        said = cached.get("made_by") if isinstance(cached, dict) else "unrecorded"
        print(f"{path} holds another pool ({said}, not {made_by}): making it again")
    pool = make()
    if path is not None:
        torch.save({"pool": pool, "made_by": made_by}, path)
    return pool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", choices=["minilm", "synthetic"], default="minilm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15, help="runs of the kernel, the floor and the whole scorer")
    ap.add_argument("--quick", action="store_true", help="skip the POT per-problem loop")
    ap.add_argument("--no-baselines", action="store_true", help="only the kernel, its floor and the whole scorer")
    ap.add_argument("--device", default="cpu", help="torch device of the problems (cpu, cuda)")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results")
    ap.add_argument("--pool-model", default="minilm",
                    help="the encoder of --source minilm's pool: a name or an HF directory of all-MiniLM-L6-v2")
    ap.add_argument("--pool-cache", type=Path, default=None, help="save/load the sentence pool here (outside the repo)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import numba  # the compiled floor runs on numba's threads: as many as the kernel's (torch's), not all cores

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    torch.manual_seed(0)
    device = torch.device(args.device)

    t0 = time.perf_counter()
    made_by = {"source": args.source, "pool_model": args.pool_model, "n_papers": 400, "seed": 0}
    pool = cached_pool(args.pool_cache, made_by,
                       lambda: sentence_pool(args.source, n_papers=400, seed=0, model=args.pool_model))
    pool = pool.to(device)
    print(f"sentence pool: {tuple(pool.shape)} from {args.source} in {time.perf_counter() - t0:.1f}s, on {device}")
    rows, sweeps = [], []
    for case, B, N in CASES:
        bench_case(case, B, N, pool, args, device, rows, sweeps)
    write_results(args, rows, sweeps)


def write_results(args, rows, sweeps) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"source": args.source, "threads": args.threads, "eps": EPS, "tau": TAU, "target_err": TARGET,
            "dtype": "float32", "torch": torch.__version__, "cpu": cpu_name(), "device": args.device,
            "date": time.strftime("%Y-%m-%d"), "repeats": args.repeats}
    stem = "bench_sinkhorn_kernel" if args.no_baselines else "bench_sinkhorn"
    (args.out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows, "sweeps": sweeps}, indent=1))
    lines = [f"# Batched Sinkhorn benchmark ({args.source} sentence vectors, D = 384, float32, "
             f"{args.threads} threads, eps = {EPS}, tau = {TAU})", "",
             "Time to a plan whose L1 marginal error (rows + columns) is <= 1e-4 for every problem; "
             "|dv| = max |<C, P> - float64 reference|. Speed-up = baseline time / aspire time.", "",
             f"CPU: {meta['cpu']}; device {args.device}; {args.repeats} runs of the kernel, the timed floor and the "
             "whole scorer, alternated in a new order each round (medians).", "",
             "| case | solver | setting | median ms | max err | max abs dv | aspire speed-up | timed floor ms | x floor "
             "| whole scorer ms | x kernel | on padded batches, x kernel | gathering copies first, x kernel |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ours = {r["case"]: r["median_ms"] for r in rows if r["solver"] == "aspire sinkhorn"}
    for r in rows:
        t = r["median_ms"]
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        speed = "-" if t is None or r["solver"].startswith("aspire") else f"{t / ours[r['case']]:.1f}x"
        xfloor = f"{t / r['floor_ms']:.2f}" if r["solver"] == "aspire sinkhorn" else ""
        floor = f"{r['floor_ms']:.2f}" if r["solver"] == "aspire sinkhorn" else ""
        mfloor = (f"{r['scorer_ms']:.2f} | {r['scorer_x_kernel']:.2f} | {r.get('scorer_batches_x_kernel', 0):.2f} | "
                  f"{r['scorer_copies_x_kernel']:.2f}" if r["solver"] == "aspire sinkhorn" and "scorer_ms" in r
                  else " | | | ")
        lines.append(f"| ({r['case']}) {r['pairs']} x {r['N']}x{r['N']} | {r['solver']} | {r['setting']} | "
                     f"{fmt(t, '.2f')} | {fmt(r['max_err'], '.1e')} | {fmt(r['max_abs_value_dev'], '.1e')} | "
                     f"{speed} | {floor} | {xfloor} | {mfloor} |")
    lines += ["", "Iterations to 1e-4 (exact, per problem): " + "; ".join(
        f"({r['case']}) median {r['iters_median']:.0f}, max {r['iters_max']:.0f}"
        for r in rows if r["solver"] == "aspire sinkhorn"),
        "",
        "Baseline sweeps (fast -> slow, first setting meeting 1e-4 is timed):", "",
        "| case | solver | setting | max err | max abs dv |", "|---|---|---|---:|---:|"]
    lines += [f"| ({s['case']}) | {s['solver']} | {s['setting']} | {s['max_err']:.1e} | {s['max_abs_value_dev']:.1e} |" for s in sweeps]
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
