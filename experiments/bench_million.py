"""Benchmark: towards one million abstracts. An IVF-PQ index over real ACL sentence vectors plus
synthetic papers sampled around them; latency of ANN + OT re-rank of 1,000, memory, and recall@10
against the same pipeline on exact vectors.

Corpus. The real papers are the ACL Anthology abstracts encoded by the sharded run of bench_acl.py
(ONNX int8 MiniLM; the finished shards, `--allow-missing`). Each synthetic paper copies the sentence
vectors of one real paper drawn at random (its seed) and adds isotropic Gaussian noise of norm about
`alpha` times the median distance of a real sentence vector to its nearest other real sentence vector
(per coordinate sigma = alpha * d_nn / sqrt(D); measured on a sample of 5,000 real sentences against
all of them). So sentence counts and the geometry of the neighbourhoods come from real text, while
no synthetic vector repeats a real one; its sentence texts are its seed's.

Index: `SentenceIndex.build` with IVF-PQ (`--config`, default configs/index-large.yaml with
overrides such as `index.ivf_nlist=2048`), exact vectors kept as float16 in vectors.npy and memory-mapped when searching, as
`aspire search` does. Queries: real papers with a facet-like sentence selection (scale_common.py).
Measured with 2 threads: build time, files per abstract, resident memory (anonymous vs memory-mapped
file pages) after load and at peak, p50 / p95 of (b) ANN single match and (c) ANN + OT re-rank of
1,000, and recall@10 of (c) against the same pipeline with an exact first stage (exhaustive min-L2
over the stored vectors, the same 1,000 shortlist size and OT scorer: scale_common.exact_pipeline_top).

    python experiments/bench_million.py --shards runs/acl/shards --papers 200000 [index.ivf_nlist=2048 ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

import scale_common as sc  # noqa: E402

from aspire.config import load_config  # noqa: E402
from aspire.index import EncodedCorpus, IndexBuildConfig, SentenceIndex  # noqa: E402
from aspire.index.shards import load_shards  # noqa: E402
from aspire.search import Searcher  # noqa: E402

RESULTS = REPO / "experiments" / "results"


def nearest_other_distance(vectors: np.ndarray, n_sample: int, seed: int) -> np.ndarray:
    """Distance of `n_sample` random rows of `vectors (N, D)` to their nearest other row (exact, faiss)."""
    import faiss

    rng = np.random.default_rng(seed)
    flat = faiss.IndexFlatL2(vectors.shape[1])
    flat.add(np.ascontiguousarray(vectors, dtype=np.float32))
    rows = rng.choice(len(vectors), min(n_sample, len(vectors)), replace=False)
    sq, found = flat.search(np.ascontiguousarray(vectors[rows], dtype=np.float32), 2)
    first_other = np.where(found[:, 0] == rows, sq[:, 1], sq[:, 0])  # a duplicate sentence may come first
    return np.sqrt(np.maximum(first_other, 0.0))


def synthetic_corpus(real: EncodedCorpus, n_papers: int, alpha: float, seed: int) -> tuple[EncodedCorpus, dict]:
    """The real papers followed by `n_papers - len(real)` noisy copies of random real papers."""
    rng = np.random.default_rng(seed)
    d_nn = nearest_other_distance(real.vectors, 5000, seed)
    d_nn_median = float(np.median(d_nn[d_nn > 0]))
    sigma = alpha * d_nn_median / np.sqrt(real.dim)
    n_syn = n_papers - len(real)
    seeds = rng.integers(0, len(real), n_syn)  # (n_syn,)
    counts = np.diff(real.offsets)
    lengths = np.concatenate([counts, counts[seeds]])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    vectors = np.empty((offsets[-1], real.dim), np.float32)
    vectors[: len(real.vectors)] = real.vectors
    step = 20000
    for start in range(0, n_syn, step):  # chunk by chunk: the noise never exists all at once
        part = seeds[start : start + step]
        rows = np.concatenate([np.arange(real.offsets[s], real.offsets[s + 1]) for s in part.tolist()])
        lo = offsets[len(real) + start]
        noise = rng.standard_normal((len(rows), real.dim), dtype=np.float32) * np.float32(sigma)
        vectors[lo : lo + len(rows)] = real.vectors[rows] + noise
    corpus = EncodedCorpus(
        vectors, offsets, real.paper_ids + [f"syn{i:07d}" for i in range(n_syn)],
        real.titles + [real.titles[s] for s in seeds.tolist()], real.sentences + [real.sentences[s] for s in seeds.tolist()])
    noise_norm = float(sigma * np.sqrt(real.dim))
    return corpus, {"d_nn_median": d_nn_median, "d_nn_p10_p90": np.percentile(d_nn, [10, 90]).tolist(),
                    "alpha": alpha, "sigma": float(sigma), "noise_norm": noise_norm, "real_papers": len(real),
                    "synthetic_papers": n_syn}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", required=True, help="the ACL shards (bench_acl.py); finished ones are used")
    parser.add_argument("--papers", type=int, default=200_000, help="papers in the index, real ones included")
    parser.add_argument("--alpha", type=float, default=0.5, help="noise norm / median nearest-neighbour distance")
    parser.add_argument("--config", default=str(REPO / "configs" / "index-large.yaml"))
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. index.ivf_nlist=2048")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--truth-queries", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--index", default=str(REPO / "runs" / "million" / "index"))
    parser.add_argument("--out", default=str(RESULTS / "bench_million"))
    args = parser.parse_args()
    sc.set_threads(args.threads)
    overrides = list(args.overrides)
    config = load_config(IndexBuildConfig, args.config, overrides)

    real, meta = load_shards(args.shards, allow_missing=True)
    t0 = time.perf_counter()
    corpus, synth = synthetic_corpus(real, args.papers, args.alpha, args.seed)
    synth["make_s"] = time.perf_counter() - t0
    n_real = len(real)
    del real
    print(f"corpus: {len(corpus)} papers ({n_real} real), {len(corpus.vectors)} sentence vectors; {synth}", flush=True)
    index_dir = Path(args.index)
    if index_dir.exists():
        shutil.rmtree(index_dir)
    index, build_s, _ = sc.timed(SentenceIndex.build, corpus, config, meta["model_fingerprint"], meta["model_name"])
    _, save_s, _ = sc.timed(index.save, index_dir)
    build_peak = sc.memory_mb()
    del index, corpus
    gc.collect()
    gen = Path(SentenceIndex.read_manifest(index_dir)["path"])
    files = {f.name: f.stat().st_size for f in gen.iterdir()}
    print(f"built in {build_s:.0f} s, saved in {save_s:.0f} s: {files}", flush=True)

    # a fresh process measures serving memory: see --serve-only below
    report = {"date": dt.date.today().isoformat(),
              "machine": "shared 2-core CPU, loaded by other jobs (timings are upper bounds)",
              "config": args.config, "overrides": overrides, "synthetic": synth, "build_s": build_s, "save_s": save_s,
              "build_process_memory_mb": build_peak, "disk_bytes": files, "command": " ".join(sys.argv)}
    Path(args.out).with_suffix(".build.json").write_text(json.dumps(report, indent=1) + "\n")
    os.execv(sys.executable, [sys.executable, __file__, "--serve-only", args.index, args.out, str(args.queries),
                              str(args.truth_queries), str(args.threads), str(args.seed), str(n_real)])


def serve(index_dir: str, out: str, n_queries: int, n_truth: int, threads: int, seed: int, n_real: int) -> None:
    """Load the index (memory-mapped vectors) in a fresh process; time queries; recall vs the exact pipeline."""
    sc.set_threads(threads)
    before = sc.memory_mb()
    searcher, load_s, _ = sc.timed(lambda: Searcher(SentenceIndex.load(index_dir)))
    loaded = sc.memory_mb()
    rng = np.random.default_rng(seed)
    queries = sc.facet_queries(searcher, rng.choice(n_real, n_queries, replace=False))  # real papers, facet-like
    methods = sc.search_methods(searcher)
    timing = sc.time_queries(methods, queries)
    after = sc.memory_mb()
    t0 = time.perf_counter()
    truth = [sc.exact_pipeline_top(searcher, q, 1000, 10) for _, _, q in queries[:n_truth]]
    truth_s = (time.perf_counter() - t0) / max(n_truth, 1)
    after_truth = sc.memory_mb()
    report = json.loads(Path(out).with_suffix(".build.json").read_text())
    index = searcher.index
    report.update({
        "papers": index.n_papers, "sentences": index.n_sentences, "dim": index.dim, "index_kind": index.kind,
        "faiss_index": type(index.faiss_index).__name__, "nlist": int(index.faiss_index.nlist),
        "nprobe": index.config.index.ivf_nprobe, "pq_m": index.config.index.pq_m, "load_s": load_s,
        "memory_mb": {"before_load": before, "loaded": loaded, "after_queries": after,
                      "after_exact_reference": after_truth},
        "queries": n_queries, "query_sentences_mean": float(np.mean([int(q.mask.sum()) for _, _, q in queries])),
        "threads": threads, "load_average_1min": timing["load_average_1min"], "truth_queries": n_truth,
        "exact_pipeline_s_per_query": truth_s,
        "rows": sc.latency_rows(timing, truth, "recall_at_10_vs_exact_pipeline"),
    })
    Path(out).with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("papers", "sentences", "build_s", "memory_mb", "rows")}, indent=1))


if __name__ == "__main__" and sys.argv[1:2] == ["--serve-only"]:
    a = sys.argv[2:]
    serve(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5]), int(a[6]))
elif __name__ == "__main__":
    main()
