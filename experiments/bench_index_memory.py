"""Benchmark: what a loaded index's sentence texts cost in memory, kept in RAM or read from disk on demand.

The corpus is bench_search.py's: `--papers` abstracts recombined from real contextual sentence vectors
and their real sentence texts (a pool from the evaluators' vector cache). It is indexed once (IVF-Flat;
the faiss structure does not change what the texts cost) and saved; then fresh processes load it with
`texts="memory"` and with `texts="disk"` (exact vectors memory-mapped in both), and report anonymous
resident memory after loading, the load time, and the time to read the sentence texts of 10 hits.

    python experiments/bench_index_memory.py --pool-cache ~/.cache/aspire/vectors/FINGERPRINT-contextual-...pt \
        [--papers 100000] [--out experiments/results/bench_index_memory.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from bench_search import pool_from_vector_cache, recombined_corpus  # noqa: E402
from scale_common import fresh_load_memory  # noqa: E402

from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex  # noqa: E402

READ_HITS = (
    "import sys, time, json, numpy as np; sys.path[:0] = [{repo!r}]\n"
    "from aspire.index import SentenceIndex\n"
    "t0 = time.perf_counter(); index = SentenceIndex.load({root!r}, texts={texts!r}); load = time.perf_counter() - t0\n"
    "rng = np.random.default_rng(0); times = []\n"
    "for _ in range(200):\n"
    "    hits = rng.integers(0, index.n_papers, 10); t0 = time.perf_counter()\n"
    "    texts = [index.sentences[int(p)] for p in hits]; times.append(time.perf_counter() - t0)\n"
    "print(json.dumps({{'load_s': load, 'hits_p50_ms': float(np.median(times) * 1e3)}}))"
)


def measure(root: Path, texts: str) -> dict:
    memory = fresh_load_memory(root, mmap=True, texts=texts)
    code = READ_HITS.format(repo=str(HERE.parent), root=str(root), texts=texts)
    timing = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout.strip().splitlines()[-1])
    anon = memory["loaded"]["anon"] - memory["before"]["anon"]
    return {"texts": texts, "anon_mb_after_load": anon, **timing, "memory": memory}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pool-cache", required=True)
    parser.add_argument("--papers", type=int, default=100_000)
    parser.add_argument("--out", default=str(HERE / "results" / "bench_index_memory.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    pool = pool_from_vector_cache(args.pool_cache)
    corpus = recombined_corpus(pool, np.arange(len(pool)), args.papers, seed=0)
    work = Path(tempfile.mkdtemp(prefix="aspire-index-memory-"))
    try:
        root = work / "index"
        SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="ivf", ivf_nlist=1024)), "bench", "minilm").save(root)
        gen = Path(SentenceIndex.read_manifest(root)["path"])
        papers_bytes = (gen / "papers.jsonl").stat().st_size
        rows = [measure(root, texts) for texts in ("memory", "disk")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = len(corpus)
    result = {
        "command": "python " + " ".join(sys.argv), "date_utc": datetime.datetime.utcnow().isoformat(timespec="minutes"),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "papers": n, "sentences": int(corpus.offsets[-1]), "papers_jsonl_bytes": papers_bytes, "rows": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"{n} papers, {corpus.offsets[-1]} sentences, papers.jsonl {papers_bytes / n:.0f} B a paper")
    print("| sentence texts | anonymous RSS after load, MB | bytes a paper | load s | 10 hits' texts, ms p50 |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['texts']} | {r['anon_mb_after_load']:.0f} | {r['anon_mb_after_load'] * 2**20 / n:.0f} | "
              f"{r['load_s']:.1f} | {r['hits_p50_ms']:.3f} |")


if __name__ == "__main__":
    main()
