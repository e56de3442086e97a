"""Benchmark: real text at scale. The ACL Anthology abstracts, encoded in shards under torchrun and merged
into one index; build time, bytes per abstract on disk and in memory, query latency and recall.

Encoding (run first, separately; the abstracts split into sentences once, so that the ranks do not each
split the whole corpus; ONNX Runtime int8 MiniLM, two ranks of one thread each, 48 shards each written when
done, so an interrupted run keeps its finished shards and a re-run resumes):

    python -m aspire.data.papers split ../shared/data/acl-anthology/papers.jsonl.gz --out runs/acl/papers.split.jsonl
    OMP_NUM_THREADS=1 torchrun --nproc_per_node 2 -m aspire.index encode-shard --model minilm \\
        --corpus runs/acl/papers.split.jsonl --shards runs/acl/shards --num-shards 48 \\
        --backend onnx --quantize int8

This script then merges the finished shards into one index (`merge_shards`, `--allow-missing` when
the encoding is not complete) and measures, with 2 threads: merge (faiss build + save) time, the index
files per abstract, resident memory per abstract (anonymous memory a fresh process adds by loading the index
fully into RAM, and with memory-mapped exact vectors),
p50 / p95 latency of (b) ANN single match and (c) ANN + OT re-rank of 1,000 for facet-selected queries
(positional stand-ins, see scale_common.py), and recall@10 of both against the exhaustive OT ranking
(bench_search.exact_ot_top) on a sample of the queries.

    python experiments/bench_acl.py --shards runs/acl/shards --index runs/acl/index [--allow-missing]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

from bench_search import exact_ot_top  # noqa: E402
from scale_common import (  # noqa: E402
    facet_queries,
    fresh_load_memory,
    latency_rows,
    memory_mb,
    search_methods,
    set_threads,
    time_queries,
    timed,
)

from aspire.config import load_config  # noqa: E402
from aspire.index import IndexBuildConfig, SentenceIndex  # noqa: E402
from aspire.index.shards import load_shards, merge_shards  # noqa: E402
from aspire.search import Searcher  # noqa: E402

RESULTS = REPO / "experiments" / "results"


def encoding_record(shards: Path, started: str | None) -> dict:
    """What the sharded encoding did: shards finished, papers, sentences and the wall time from `started`
    (ISO time the torchrun command began) to the last finished shard."""
    metas = [json.loads(p.read_text()) | {"done": p.stat().st_mtime} for p in sorted(shards.glob("shard-*/shard.json"))]
    last = max(m["done"] for m in metas)
    record = {"shards_finished": len(metas), "num_shards": metas[0]["num_shards"],
              "papers": sum(m["n_papers"] for m in metas), "sentences": sum(m["n_sentences"] for m in metas),
              "model_fingerprint": metas[0]["model_fingerprint"],
              "last_shard_utc": dt.datetime.fromtimestamp(last, dt.timezone.utc).isoformat(timespec="seconds")}
    if started:
        record["started_utc"] = started
        record["wall_s"] = last - dt.datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp()
        record["papers_per_s"] = record["papers"] / record["wall_s"]
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", required=True)
    parser.add_argument("--index", required=True, help="index directory to (re)build from the shards")
    parser.add_argument("--allow-missing", action="store_true", help="merge the finished shards only")
    parser.add_argument("--started", help="ISO UTC time the encoding began (default: SHARDS/../start.txt)")
    parser.add_argument("--total-papers", type=int, default=59416, help="papers in the whole corpus (extrapolation)")
    parser.add_argument("--config", default=str(REPO / "configs" / "index-bench.yaml"))
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--truth-queries", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "acl_index"))
    args = parser.parse_args()
    set_threads(args.threads)
    shards, index_dir = Path(args.shards), Path(args.index)
    start_file = shards.parent / "start.txt"
    started = args.started or (start_file.read_text().strip() if start_file.is_file() else None)
    encoding = encoding_record(shards, started)
    encoding["extrapolated_full_wall_s"] = encoding.get("wall_s", float("nan")) * args.total_papers / encoding["papers"]

    config = load_config(IndexBuildConfig, args.config)
    if index_dir.exists():
        shutil.rmtree(index_dir)
    _, read_s, _ = timed(load_shards, shards, args.allow_missing)  # reading the shards alone, for the split below
    index, merge_s, _ = timed(merge_shards, shards, index_dir, config, args.allow_missing)
    del index
    gen = Path(SentenceIndex.read_manifest(index_dir)["path"])
    files = {f.name: f.stat().st_size for f in gen.iterdir()}

    fresh = {"in_ram": fresh_load_memory(index_dir, mmap=False), "mmap": fresh_load_memory(index_dir, mmap=True)}
    searcher, load_s, _ = timed(lambda: Searcher(SentenceIndex.load(index_dir)))  # mmap, as `aspire search` loads it
    n_papers, n_sentences = searcher.index.n_papers, searcher.index.n_sentences

    rng = np.random.default_rng(args.seed)
    queries = facet_queries(searcher, rng.choice(n_papers, args.queries, replace=False))
    methods = search_methods(searcher)
    timing = time_queries(methods, queries)
    after_queries = memory_mb()
    n_truth = min(args.truth_queries, len(queries))
    t0 = time.perf_counter()
    truth = [top[top != searcher.index.position(pid)][:10]  # the query paper itself is excluded, as in search
             for pid, _, q in queries[:n_truth] for top in [exact_ot_top(searcher, q, 11)]]
    truth_s = (time.perf_counter() - t0) / max(n_truth, 1)
    rows = latency_rows(timing, truth, "recall_at_10_vs_exhaustive_ot")
    report = {
        "date": dt.date.today().isoformat(), "machine": "shared 2-core CPU, loaded by other jobs (timings are upper bounds)",
        "encoding": encoding, "config": args.config, "index_kind": searcher.index.kind,
        "faiss_index": type(searcher.index.faiss_index).__name__, "papers": n_papers, "sentences": n_sentences,
        "dim": searcher.index.dim, "read_shards_s": read_s, "merge_s": merge_s, "load_s": load_s,
        "disk_bytes": files, "disk_bytes_per_abstract": sum(files.values()) / n_papers,
        "memory_mb": {"fresh_process": fresh, "after_queries": after_queries},
        "ram_bytes_per_abstract": {k: (v["loaded"]["anon"] - v["before"]["anon"]) * 2**20 / n_papers
                                   for k, v in fresh.items()},
        "queries": len(queries), "query_facets": [f for _, f, _ in queries],
        "query_sentences_mean": float(np.mean([int(q.mask.sum()) for _, _, q in queries])),
        "threads": args.threads, "rows": rows, "truth_queries": n_truth, "exhaustive_ot_s_per_query": truth_s,
        "load_average_1min": timing["load_average_1min"], "command": " ".join(sys.argv),
    }
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("encoding", "merge_s", "disk_bytes_per_abstract", "ram_bytes_per_abstract",
                                             "rows")}, indent=1))


if __name__ == "__main__":
    main()
