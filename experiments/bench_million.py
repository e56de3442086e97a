"""Benchmark: one million abstracts. An IVF-PQ index over the real ACL sentence vectors plus synthetic
papers sampled around them, built by the streaming merge; build time, disk, memory, latency of ANN
alone and of ANN + OT re-rank of 1,000, inside and outside a 4 GB memory cgroup, and recall@10 against
the same pipeline on exact vectors.

Steps (each a subcommand; outputs under --work, default runs/million):

    corpus  the real papers (the finished ACL shards of the sharded ONNX-int8 MiniLM encoding) and
            synthetic ones, written as a sharded encoding (`EncodedCorpus.save_shard`, the format
            `encode-shard` writes), so that the index is built by the real `merge` command;
    build   `python -m aspire.index merge --shards ... --config configs/index-million.yaml` in a child
            process (niced by the caller): wall time, its peak anonymous and file-backed memory
            (sampled every 0.5 s), the files of the index;
    serve   a fresh process loads the index as `aspire search` does (exact vectors memory-mapped,
            texts on disk) after the index's pages are dropped from the page cache (cold start);
            memory after load; then, 2 threads, over `--queries` held-out real papers with a
            facet-like selection: (b) ANN single match and (c) ANN + OT re-rank of 1,000 for each `--nprobe`.
            `--cgroup 4G` runs the process inside a cgroup-v1 memory cgroup of that limit (the page
            cache it fills counts against the limit) and records the cgroup's peak and failures;
    truth   the same pipeline with an exact first stage (exhaustive min-L2 over all stored vectors,
            the same 1,000 shortlist and OT scorer, `scale_common.exact_pipeline_tops`) for the first
            `--truth-queries` queries, and the exact min-L2 top 10;
    report  joins the above into experiments/results/bench_million.json (recall@10 per method, with its bootstrap
            95% interval over the truth's queries).

Queries: `--holdout` real papers are kept out of the index and are copied by no synthetic paper, so a
query's neighbours are other papers, never its own noisy copies. Their stored vectors are the query
vectors (no encoding in the timings); the selection is a facet stand-in (scale_common.py).

Synthetic papers: each copies the sentence vectors of a real paper drawn at random (its seed) and
adds isotropic Gaussian noise of norm about `alpha` x the median distance from a real sentence vector
to its nearest other real sentence vector (sigma = alpha * d_nn / sqrt(D) a coordinate; d_nn measured
on 5,000 sampled real sentences against all of them). Sentence counts, texts and the neighbourhoods'
geometry come from real text; no synthetic vector repeats a real one.

    python experiments/bench_million.py corpus --real /work/main/runs/acl/shards --papers 1000000
    nice -n 10 python experiments/bench_million.py build
    runs/quiet.sh python experiments/bench_million.py serve --tag plain
    runs/quiet.sh python experiments/bench_million.py serve --tag cgroup4g --cgroup 4G
    nice -n 10 python experiments/bench_million.py truth
    python experiments/bench_million.py report
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

import scale_common as sc  # noqa: E402

from aspire.index import EncodedCorpus, SentenceIndex, gather_docbatch  # noqa: E402
from aspire.index.shards import load_shards, shard_name  # noqa: E402

RESULTS = REPO / "experiments" / "results"
CGROUP = Path("/sys/fs/cgroup/memory")


# ---- corpus --------------------------------------------------------------------------------------
def nearest_other_distance(vectors: np.ndarray, n_sample: int, seed: int) -> np.ndarray:
    """Distance of `n_sample` random rows of `vectors (N, D)` to their nearest other row (exact, torch)."""
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(vectors), min(n_sample, len(vectors)), replace=False)
    v = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))
    q = v[torch.from_numpy(rows)]
    best = torch.full((len(rows),), float("inf"))
    for start in range(0, len(v), 65536):
        block = v[start : start + 65536]
        sq = (q * q).sum(1)[:, None] + (block * block).sum(1)[None, :] - 2.0 * (q @ block.T)  # (n, chunk)
        own = torch.from_numpy(rows)[:, None] == torch.arange(start, start + len(block))[None, :]
        best = torch.minimum(best, sq.masked_fill(own, float("inf")).amin(1))  # a duplicate sentence counts
    return best.clamp_min(0).sqrt().numpy()


def write_corpus(args) -> None:
    """The real papers but `--holdout` of them (kept apart as queries), then noisy copies of random
    indexed real papers, as shards of `--per-shard` papers."""
    every, meta = load_shards(args.real, allow_missing=True)
    rng = np.random.default_rng(args.seed)
    held = np.sort(rng.choice(len(every), args.holdout, replace=False))
    every.subset(held).save_shard(Path(args.work) / "holdout", {k: meta[k] for k in ("model_name", "model_fingerprint")})
    real = every.subset(np.setdiff1d(np.arange(len(every)), held))
    real.rejected = every.rejected
    del every
    d_nn = nearest_other_distance(real.vectors, 5000, args.seed)
    d_nn_median = float(np.median(d_nn[d_nn > 0]))
    sigma = args.alpha * d_nn_median / np.sqrt(real.dim)
    n_real, n_syn = len(real), args.papers - len(real)
    seeds = rng.integers(0, n_real, n_syn)  # (n_syn,) the real paper each synthetic one copies
    n_shards = -(-args.papers // args.per_shard)
    out = Path(args.work) / "shards"
    shard_meta = {k: meta[k] for k in ("model_name", "model_fingerprint")}
    t0 = time.perf_counter()
    for s in range(n_shards):
        lo, hi = s * args.per_shard, min((s + 1) * args.per_shard, args.papers)
        parts = []
        if lo < n_real:
            parts.append(real.subset(np.arange(lo, min(hi, n_real))))
        if hi > n_real:
            chosen = seeds[max(lo, n_real) - n_real : hi - n_real]
            copy = real.subset(chosen)
            noise = np.random.default_rng([args.seed, s]).standard_normal(copy.vectors.shape, dtype=np.float32)
            ids = [f"syn{i:07d}" for i in range(max(lo, n_real) - n_real, hi - n_real)]
            parts.append(EncodedCorpus(copy.vectors + np.float32(sigma) * noise, copy.offsets, ids, copy.titles,
                                       copy.sentences))
        part = EncodedCorpus.concat(parts)
        part.rejected = real.rejected if s == 0 else []
        part.save_shard(out / shard_name(s, n_shards), {**shard_meta, "shard": s, "num_shards": n_shards,
                                                        "synthetic_from": str(args.real)})
    synth = {"real_papers": n_real, "held_out_queries": args.holdout, "real_shards_used": meta["num_shards"] - len(meta["missing_shards"]),
             "real_shards_of": meta["num_shards"], "real_sentences": int(len(real.vectors)),
             "synthetic_papers": n_syn, "alpha": args.alpha, "d_nn_median": d_nn_median,
             "d_nn_p10_p90": np.percentile(d_nn, [10, 90]).tolist(), "sigma": float(sigma),
             "noise_norm": float(sigma * np.sqrt(real.dim)), "shards": n_shards, "papers_per_shard": args.per_shard,
             "write_s": time.perf_counter() - t0, "command": " ".join(sys.argv)}
    save(args, "corpus", synth)
    print(json.dumps(synth, indent=1))


# ---- build ---------------------------------------------------------------------------------------
def build(args) -> None:
    """The real merge command in a child process; its wall time and sampled peak memory."""
    index = Path(args.work) / "index"
    cmd = [sys.executable, "-m", "aspire.index", "merge", "--shards", str(Path(args.work) / "shards"),
           "--out", str(index), "--overwrite", "--config", args.config, "--log-level", "INFO", *args.overrides]
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO)})
    peak = sample_peak(child)
    if child.wait() != 0:
        raise SystemExit(f"merge failed with exit code {child.returncode}")
    wall = time.perf_counter() - t0
    gen = Path(SentenceIndex.read_manifest(index)["path"])
    files = {f.name: f.stat().st_size for f in gen.iterdir()}
    report = {"build_s": wall, "merge_peak_mb": peak, "disk_bytes": files, "config": args.config,
              "overrides": args.overrides, "command": " ".join(cmd), "load_average_1min_end": os.getloadavg()[0]}
    save(args, "build", report)
    print(json.dumps(report, indent=1))


def sample_peak(child: subprocess.Popen, every_s: float = 0.5) -> dict:
    """Peak anonymous and file-backed resident memory (MiB) of a running child, sampled until it ends."""
    peak = {"anon": 0.0, "file": 0.0, "rss": 0.0}
    while child.poll() is None:
        try:
            now = sc.memory_mb(child.pid)
        except (FileNotFoundError, ProcessLookupError, KeyError):
            break
        peak = {k: max(peak[k], now[k]) for k in peak}
        time.sleep(every_s)
    return peak


# ---- serve ---------------------------------------------------------------------------------------
def serve(args) -> None:
    """Drop the index from the page cache, then run the query loop in a child (in a cgroup if asked)."""
    gen = Path(SentenceIndex.read_manifest(Path(args.work) / "index")["path"])
    for f in gen.iterdir():  # cold start: otherwise pages cached by the build are free to a cgroup
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    group = None
    if args.cgroup:
        group = CGROUP / f"aspire-{args.tag}"
        group.mkdir(exist_ok=True)
        (group / "memory.limit_in_bytes").write_text(args.cgroup)
        (group / "memory.max_usage_in_bytes").write_text("0")  # reset the peak
        (group / "memory.failcnt").write_text("0")
    cmd = [sys.executable, __file__, "_queries", *sys.argv[2:]]
    join = (lambda: (group / "cgroup.procs").write_text(str(os.getpid()))) if group else None
    result = subprocess.run(cmd, preexec_fn=join, env={**os.environ, "PYTHONPATH": str(REPO)})
    if group is not None:
        stat = dict(line.split() for line in (group / "memory.stat").read_text().splitlines())
        cg = {"limit": args.cgroup, "max_usage_mb": int((group / "memory.max_usage_in_bytes").read_text()) / 2**20,
              "failcnt": int((group / "memory.failcnt").read_text()),
              "total_pgmajfault": int(stat["total_pgmajfault"])}
        path = Path(args.work) / f"serve-{args.tag}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "cgroup": cg}, indent=1) + "\n")
        group.rmdir()
        print(json.dumps(cg))
    if result.returncode:
        raise SystemExit(result.returncode)


def queries_for(work: str, n: int) -> list:
    """(paper id, facet, query DocBatch) for the first `n` held-out real papers (in no index, copied by
    no synthetic paper), with a facet-like sentence selection, the facets cycling."""
    held, _ = EncodedCorpus.load_shard(Path(work) / "holdout")
    if n > len(held):
        raise SystemExit(f"{n} queries asked for, {len(held)} papers held out (corpus --holdout)")
    out = []
    for i in range(n):
        facet = sc.FACET_PROXIES[i % 3]
        doc = gather_docbatch(held.vectors, held.offsets, np.array([i]), [held.paper_ids[i]], [held.sentences[i]])
        out.append((held.paper_ids[i], facet, doc.select_sentences([sc.facet_proxy(int(doc.lengths[0]), facet)])))
    return out


def run_queries(args) -> None:
    """The serving process: load, memory, the timed query loop for each nprobe."""
    from aspire.search import Searcher

    sc.set_threads(args.threads)
    before = sc.memory_mb()
    searcher, load_s, _ = sc.timed(lambda: Searcher(SentenceIndex.load(Path(args.work) / "index")))
    loaded = sc.memory_mb()
    queries = queries_for(args.work, args.queries)
    runs = {}
    for nprobe in args.nprobe:
        searcher.index.config.index.ivf_nprobe = nprobe
        timing = sc.time_queries(sc.search_methods(searcher), queries)
        runs[str(nprobe)] = {"found": {m: [f.tolist() for f in v] for m, v in timing["found"].items()},
                             "wall_s": timing["wall"], "cpu_s": timing["cpu"],
                             "load_average_1min": timing["load_average_1min"], "memory_mb": sc.memory_mb()}
        print(nprobe, {m: round(sc.pct_ms(v, 50), 1) for m, v in timing["wall"].items()}, flush=True)
    index = searcher.index
    report = {"tag": args.tag, "papers": index.n_papers, "sentences": index.n_sentences, "dim": index.dim,
              "faiss_index": type(index.faiss_index).__name__, "nlist": int(index.faiss_index.nlist),
              "pq_m": index.config.index.pq_m, "texts_on_disk": not isinstance(index.sentences, list),
              "load_s": load_s, "memory_mb": {"before_load": before, "loaded": loaded},
              "queries": args.queries, "query_ids": [pid for pid, _, _ in queries],
              "query_sentences_mean": float(np.mean([int(q.mask.sum()) for _, _, q in queries])),
              "threads": args.threads, "runs": runs, "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(),
              "command": " ".join(sys.argv)}
    (Path(args.work) / f"serve-{args.tag}.json").write_text(json.dumps(report, indent=1) + "\n")


# ---- truth and report ----------------------------------------------------------------------------
def truth(args) -> None:
    from aspire.search import Searcher

    sc.set_threads(args.threads)
    searcher = Searcher(SentenceIndex.load(Path(args.work) / "index"))
    queries = queries_for(args.work, args.truth_queries)
    (tops, pipeline), truth_s, _ = sc.timed(sc.exact_pipeline_tops, searcher, [q for _, _, q in queries], 1000, 10)
    save(args, "truth", {"query_ids": [pid for pid, _, _ in queries], "exact_minl2_top10": [t.tolist() for t in tops],
                         "exact_pipeline_top10": [t.tolist() for t in pipeline], "s": truth_s})
    print(f"exact pipeline for {len(queries)} queries in {truth_s:.0f} s")


def report(args) -> None:
    corpus, built, exact = load(args, "corpus"), load(args, "build"), load(args, "truth")
    serves = {p.stem[len("serve-"):]: json.loads(p.read_text()) for p in sorted(Path(args.work).glob("serve-*.json"))}
    rows = []
    for tag, run in serves.items():
        assert run["query_ids"][: len(exact["query_ids"])] == exact["query_ids"], "queries differ from the truth's"
        for nprobe, r in run["runs"].items():
            for method, found in r["found"].items():
                vs_pipeline, vs_pipeline_ci = sc.mean_recall(found, exact["exact_pipeline_top10"])
                vs_minl2, vs_minl2_ci = sc.mean_recall(found, exact["exact_minl2_top10"])
                rows.append({
                    "run": tag, "nprobe": int(nprobe), "method": method,
                    "p50_ms": sc.pct_ms(r["wall_s"][method], 50), "p95_ms": sc.pct_ms(r["wall_s"][method], 95),
                    "cpu_p50_ms": sc.pct_ms(r["cpu_s"][method], 50),
                    "recall_at_10_vs_exact_pipeline": vs_pipeline, "recall_at_10_vs_exact_pipeline_ci95": vs_pipeline_ci,
                    "recall_at_10_vs_exact_minl2": vs_minl2, "recall_at_10_vs_exact_minl2_ci95": vs_minl2_ci,
                    "load_average_1min": r["load_average_1min"]})
    out = {"date": dt.date.today().isoformat(), "corpus": corpus, "build": built, "truth_queries": len(exact["query_ids"]),
           "exact_pipeline_s": exact["s"], "serve": {t: {k: v for k, v in s.items() if k != "runs"} | {
               "memory_after_queries_mb": {p: r["memory_mb"] for p, r in s["runs"].items()}} for t, s in serves.items()},
           "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for row in rows:
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k != "load_average_1min"})


def save(args, name: str, obj: dict) -> None:
    path = Path(args.work) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1) + "\n")


def load(args, name: str) -> dict:
    return json.loads((Path(args.work) / f"{name}.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=["corpus", "build", "serve", "_queries", "truth", "report"])
    parser.add_argument("--work", default=str(REPO / "runs" / "million"))
    parser.add_argument("--real", default="/work/main/runs/acl/shards", help="the ACL shards; finished ones are used")
    parser.add_argument("--papers", type=int, default=1_000_000, help="papers in the index, real ones included")
    parser.add_argument("--per-shard", type=int, default=10_000)
    parser.add_argument("--holdout", type=int, default=200, help="real papers kept out of the index as queries")
    parser.add_argument("--alpha", type=float, default=0.5, help="noise norm / median nearest-neighbour distance")
    parser.add_argument("--config", default=str(REPO / "configs" / "index-million.yaml"))
    parser.add_argument("--overrides", nargs="*", default=[], help="config overrides for build, e.g. index.ivf_nlist=2048")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--truth-queries", type=int, default=40)
    parser.add_argument("--nprobe", type=int, nargs="+", default=[32])
    parser.add_argument("--tag", default="plain")
    parser.add_argument("--cgroup", help="memory limit of a cgroup to serve in, e.g. 4G")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "bench_million.json"))
    args = parser.parse_args()
    {"corpus": write_corpus, "build": build, "serve": serve, "_queries": run_queries, "truth": truth,
     "report": report}[args.step](args)


if __name__ == "__main__":
    main()
