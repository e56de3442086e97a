"""Study: the ANN single match of several query sentences against the exhaustive one, before and after the
lookups widen to the k-th paper's distance (`aspire.search.reach`).

Real contextual sentence vectors (minilm, the evaluators' cache of CSFCube's 4,205 abstracts), as the pool
itself and recombined into a larger corpus as `experiments/bench_search.py` does. Queries: pool papers, all
their sentences selected, their own paper left out; `rerank: none`, k = 10. For each index kind and corpus, the
two rules run alternately query by query in one process ("before" is the same code with `reach` infinite: the
old stopping rule), and each is scored against every paper's exact single-match distance (the exhaustive scan): the share of queries
whose ten papers are an exhaustive ten with their true distances (ties allowed), recall@10 (a paper counts when
it is no farther than the exhaustive tenth), the largest distance error of a returned paper, the lookups' widenings a query, and latency p50 / p95.

    python experiments/search_reach.py --pool-cache ~/.cache/aspire/vectors/FINGERPRINT-contextual-...pt \
        [--papers 50000] [--queries 200] [--out experiments/results/search_reach]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
from bench_search import pool_from_vector_cache, recombined_corpus

import aspire.search as search_module
from aspire.batch import DocBatch
from aspire.index import IndexBuildConfig, IndexConfig, SearchConfig, SentenceIndex
from aspire.io import write_json
from aspire.search import Searcher

RESULTS = Path(__file__).resolve().parent / "results"
REACH = search_module.reach


def query_of(index: SentenceIndex, p: int) -> DocBatch:
    rows = slice(index.offsets[p], index.offsets[p + 1])
    emb = torch.from_numpy(np.asarray(index.vectors[rows], dtype=np.float32))
    return DocBatch.from_list([emb], [index.paper_ids[p]], [[""] * emb.shape[0]])


def run(index: SentenceIndex, queries: list[int], k: int, tol: float) -> dict:
    """Each rule's figures over `queries`. Ties are common (a recombined corpus repeats real sentences, so many
    papers share a distance), so a paper counts as right when its true single-match distance is within `tol` of
    the exhaustive k-th or nearer, and a ranking as exact when every paper is right and its distance true. `tol`
    covers float32 rounding: faiss and the scan expand |q - v|^2 = |q|^2 - 2 q.v + |v|^2, whose square root is
    off by a few thousandths for a sentence the corpus repeats (true distance 0)."""
    searcher = Searcher(index, SearchConfig(k=k))
    rows = {rule: {"same": 0, "recall": [], "err": 0.0, "ms": [], "lookups": 0} for rule in ("before", "after")}
    lookup, calls = index.search_sentences, [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return lookup(*args, **kwargs)

    index.search_sentences = counted  # how often the lookups widen: one call a round
    for n, p in enumerate(queries):
        query = query_of(index, p)
        true = searcher._scan_min_l2(query, 4096 * 64).numpy()  # (P,) every paper's exact distance
        true[p] = np.inf  # the query's own paper is left out
        kth = np.sort(true)[k - 1]
        for rule in (("before", "after") if n % 2 == 0 else ("after", "before")):
            search_module.reach = REACH if rule == "after" else (lambda dist: math.inf)
            calls[0] = 0
            t0 = time.perf_counter()
            hits = searcher.search(query)
            rows[rule]["ms"].append(1000 * (time.perf_counter() - t0))
            rows[rule]["lookups"] += calls[0]
            at = [index.positions[h.paper_id] for h in hits]
            right = [true[i] <= kth + tol for i in at]
            err = max((abs(-h.score - true[i]) for h, i in zip(hits, at)), default=0.0)
            rows[rule]["same"] += all(right) and len(hits) == k and err <= tol
            rows[rule]["recall"].append(sum(right) / k)
            rows[rule]["err"] = max(rows[rule]["err"], float(err))
    search_module.reach = REACH
    index.search_sentences = lookup
    return {rule: {"exact_top_k": r["same"] / len(queries), "recall@k": float(np.mean(r["recall"])),
                   "widened": r["lookups"] / len(queries) - 1,
                   "max_dist_error": r["err"], "p50_ms": float(np.percentile(r["ms"], 50)),
                   "p95_ms": float(np.percentile(r["ms"], 95))} for rule, r in rows.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pool-cache", required=True)
    parser.add_argument("--papers", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tol", type=float, default=1e-2, help="distance tolerance (float32 rounding near 0)")
    parser.add_argument("--out", default=str(RESULTS / "search_reach"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import faiss

    faiss.omp_set_num_threads(args.threads)
    pool = pool_from_vector_cache(args.pool_cache)
    corpora = {"csfcube pool": pool,
               f"{args.papers} recombined": recombined_corpus(pool, np.arange(len(pool)), args.papers, seed=0)}
    rng = np.random.default_rng(0)
    table, out = [], {"k": args.k, "queries": args.queries, "threads": args.threads, "tol": args.tol, "runs": []}
    for name, corpus in corpora.items():
        for kind in ("flat", "hnsw", "ivf"):
            config = IndexConfig(kind=kind, ivf_nlist=256 if len(corpus) < 10_000 else 1024, ivf_nprobe=16)
            index = SentenceIndex.build(corpus, IndexBuildConfig(index=config), "study")
            multi = [p for p in range(index.n_papers) if index.offsets[p + 1] - index.offsets[p] > 1]
            queries = rng.choice(multi, min(args.queries, len(multi)), replace=False).tolist()
            result = run(index, queries, args.k, args.tol)
            out["runs"].append({"corpus": name, "kind": kind, "sentences": index.n_sentences, **result})
            for rule, r in result.items():
                table.append(f"| {name} | {kind} | {rule} | {r['exact_top_k']:.3f} | {r['recall@k']:.4f} | {r['widened']:.3f} | "
                             f"{r['max_dist_error']:.4f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} |")
            print("\n".join(table[-2:]), flush=True)
    header = ("| corpus | index | rule | top 10 as exhaustive | recall@10 | widenings a query | max distance error | p50 ms "
              "| p95 ms |\n|---|---|---|---:|---:|---:|---:|---:|---:|")
    print(header + "\n" + "\n".join(table))
    write_json(Path(args.out).with_suffix(".json"), out)


if __name__ == "__main__":
    main()
