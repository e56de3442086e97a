"""Benchmark: the OT re-rank stage of search at 100k abstracts, the pruned stage against scoring the
whole shortlist, query by query in one process (a ratio the machine's drift cannot skew), alone and in
the whole fused search.

The corpus, index and queries are those of `experiments/bench_search.py` (recombined real contextual
vectors, IVF-Flat, held-out real query abstracts with all sentences selected); the shortlist is the fused
ANN + BM25 top 1,000. Per query, in alternating order:

    whole shortlist   the earlier stage: the 1,000 papers gathered into a padded DocBatch, every one scored
                      by the OT scorer (`score_chunked`)
    pruned            `aspire.retrieval.rerank` "ot": unpadded gather + one GEMM (`shortlist_cost`), then Sinkhorn
                      only for the papers whose lower bound lets them enter the k best (`ot_top_k_dist`)

and the whole search with each (`Searcher.search`: ANN + BM25, z-fusion, the OT re-rank, the k hits explained;
the earlier stage's hits gathered and solved again for their plans, as search did before),

and the pruned stage's parts: reading the vectors (`gather_rows`), the cost matrices, the bound + Sinkhorn
(with the number of papers solved). Each query's k best must be the same papers in the same order, with
scores within 1e-5 (relative) of the whole shortlist's, and both searches the same hits with the same scores;
the script fails otherwise. Hits whose aligned sentence pairs differ are counted (see the comment in `main`).

    OMP_NUM_THREADS=2 python experiments/bench_ot_stage.py --pool-cache ~/.cache/aspire/vectors/...-contextual-...pt \
        --index-dir runs/bench/index-100k [--papers 100000] [--queries 40] [--k 10]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aspire.checksum import file_sha256  # noqa: E402
from aspire.config import load_config  # noqa: E402
from aspire.index import IndexBuildConfig, SentenceIndex  # noqa: E402
from aspire.index.config import checked_search_config  # noqa: E402
from aspire.retrieval.lexical import first_stage  # noqa: E402
from aspire.retrieval.rerank import RERANK_STAGES, shortlist_cost  # noqa: E402
from aspire.scoring.chunked import score_chunked  # noqa: E402
from aspire.scoring.ot_topk import ot_top_k_dist  # noqa: E402
from aspire.search import Searcher  # noqa: E402
from experiments.bench_search import (  # noqa: E402
    _as_query,
    pool_from_vector_cache,
    real_abstracts,
    recombined_corpus,
)


def whole_shortlist(searcher, query, papers, cfg) -> tuple[np.ndarray, None]:
    """(P,) OT scores of every shortlisted paper: the stage as it was (padded gather, `score_chunked`)."""
    pool = searcher.index.gather(papers, device=query.device, dtype=query.emb.dtype, texts=False)
    return score_chunked(searcher.scorer("ot", cfg), query, pool)[0].float().cpu().numpy(), None


def earlier_ot_stage(searcher, query, papers, cfg) -> tuple[np.ndarray, object]:
    """The OT stage with the hits' explanation as search did them before: every shortlisted paper scored,
    then the k hits gathered again and solved again for their plans."""
    scores, _ = whole_shortlist(searcher, query, papers, cfg)

    def alignment(top):
        best = searcher.index.gather(papers[top], device=query.device, dtype=query.emb.dtype, texts=False)
        details = searcher.scorer("ot", cfg).dist_details(query, best)
        return details.plan[0], details.cost[0]

    return scores, alignment


def fused_ot_search(searcher, query, cfg, stage):
    """The pipeline's search (BM25 + ANN, fused, OT re-rank, explained hits) with `stage` as its OT re-ranker."""
    pruned = RERANK_STAGES["ot"]
    RERANK_STAGES["ot"] = stage
    try:
        return searcher.search(query, k=cfg.k, stages="ann,bm25", rerank="ot", shortlist=cfg.shortlist)
    finally:
        RERANK_STAGES["ot"] = pruned


def bench_record(index_dir: Path) -> Path:
    """Where the settings that built the benchmark's index are kept: beside it (an index folder holds only its own
    files)."""
    return index_dir.parent / f"{index_dir.name}.bench.json"


def reuse_index(index_dir: Path, made_by: dict) -> bool:
    """Whether `index_dir` holds the index these settings build (`made_by`, as `bench_record` keeps them); False
    where none is there yet; SystemExit naming the difference where one built with other settings is (once reused
    whatever papers, seed, queries or config had built it)."""
    if not (index_dir / "CURRENT").is_file():
        return False
    record = bench_record(index_dir)
    recorded = json.loads(record.read_text()) if record.is_file() else None
    if recorded != made_by:
        said = ("nothing" if recorded is None
                else "other " + ", ".join(k for k in made_by if recorded.get(k) != made_by[k]))
        raise SystemExit(f"{index_dir} was built with other settings ({record} records {said}); remove it or give "
                         "another --index-dir")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pool-cache", required=True)
    parser.add_argument("--index-dir", required=True, help="built here once (then reused)")
    parser.add_argument("--papers", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default=str(REPO / "configs" / "index-bench.yaml"))
    parser.add_argument("--out", default=None, help="write the report as JSON here")
    args = parser.parse_args()
    import faiss

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    pool = pool_from_vector_cache(args.pool_cache)
    _, csfcube_queries = real_abstracts()
    rng = np.random.default_rng(args.seed)  # the queries of bench_search.py with the same seed
    position = {pid: i for i, pid in enumerate(pool.paper_ids)}
    queries = [position[q] for q in csfcube_queries if q in position][: args.queries]
    others = rng.permutation([i for i in range(len(pool)) if i not in set(queries)])
    queries += others[: args.queries - len(queries)].tolist()
    index_dir = Path(args.index_dir)
    made_by = {"papers": args.papers, "seed": args.seed, "queries": queries, "config": file_sha256(args.config),
               "pool_cache": str(Path(args.pool_cache).resolve()), "pool_papers": len(pool)}
    if not reuse_index(index_dir, made_by):
        sources = np.setdiff1d(np.arange(len(pool)), queries)
        corpus = recombined_corpus(pool, sources, args.papers, args.seed)
        SentenceIndex.build(corpus, load_config(IndexBuildConfig, args.config), "bench-minilm", "minilm").save(index_dir)
        bench_record(index_dir).write_text(json.dumps(made_by) + "\n")
        del corpus
    searcher = Searcher(SentenceIndex.load(index_dir, mmap=False))
    cfg = checked_search_config(searcher.config, k=args.k, shortlist=1000, stages="ann,bm25", rerank="ot")
    scorer = searcher.scorer("ot", cfg)
    qbatches = [_as_query(pool.subset([q])) for q in queries]
    shortlists = [first_stage(searcher, q, cfg, [])[0] for q in qbatches]
    pruned = RERANK_STAGES["ot"]
    for q, papers in zip(qbatches[:2], shortlists[:2]):  # warm-up
        whole_shortlist(searcher, q, papers, cfg), pruned(searcher, q, papers, cfg)
        fused_ot_search(searcher, q, cfg, earlier_ot_stage), fused_ot_search(searcher, q, cfg, pruned)

    names = ("search, earlier OT stage", "search, pruned OT stage", "whole shortlist", "pruned", "gather_rows",
             "shortlist_cost", "bound + Sinkhorn")
    times = {name: [] for name in names}
    solved, worst, pairs, moved = [], 0.0, 0, 0
    load_before = os.getloadavg()[0]
    for i, (q, papers) in enumerate(zip(qbatches, shortlists)):
        hits = {}
        searches = [("search, earlier OT stage", earlier_ot_stage), ("search, pruned OT stage", pruned)]
        for name, stage in searches if i % 2 == 0 else searches[::-1]:
            t0 = time.perf_counter()
            hits[name] = fused_ot_search(searcher, q, cfg, stage)
            times[name].append(time.perf_counter() - t0)
        before, after = (hits[name] for name, _ in searches)
        if [h.paper_id for h in before] != [h.paper_id for h in after] or not np.allclose(
                [h.score for h in before], [h.score for h in after], rtol=1e-5, atol=0):
            raise SystemExit(f"query {i}: the searches' hits or their scores differ")
        # Aligned pairs: the L2 distance of two identical sentences is the square root of a float32 rounding
        # error (up to ~2e-3), which differs between GEMM shapes and thread counts (the earlier search explained
        # its hits from costs of another shape than those it scored them with), and a query sentence whose mass
        # splits about evenly over two hit sentences may name either. Counted, not failed on.
        pairs += sum(len(h.pairs) for h in after)
        moved += sum(sorted((p.query_sentence, p.hit_sentence) for p in b.pairs)
                     != sorted((p.query_sentence, p.hit_sentence) for p in a.pairs) for b, a in zip(before, after))
        runs = [("whole shortlist", whole_shortlist), ("pruned", pruned)]
        for name, stage in runs if i % 2 == 0 else runs[::-1]:
            t0 = time.perf_counter()
            scores, _ = stage(searcher, q, papers, cfg)
            times[name].append(time.perf_counter() - t0)
            if name == "pruned":
                new = scores
            else:
                old = scores
        top_old, top_new = np.argsort(-old, kind="stable")[: args.k], np.argsort(-new, kind="stable")[: args.k]
        if not np.array_equal(top_old, top_new):
            raise SystemExit(f"query {i}: the k best differ: {top_old.tolist()} vs {top_new.tolist()}")
        worst = max(worst, float(np.max(np.abs(new[top_new] - old[top_old]) / np.abs(old[top_old]))))
        if worst > 1e-5:
            raise SystemExit(f"query {i}: the k best's scores differ by {worst:.2e} (relative)")
        t0 = time.perf_counter()
        searcher.index.gather_rows(papers)
        times["gather_rows"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        cost, q_mask, c_mask = shortlist_cost(searcher.index, q, papers)
        times["shortlist_cost"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        res = ot_top_k_dist(cost, q_mask, c_mask, args.k, tau=scorer.tau, eps=scorer.eps, **scorer.sinkhorn_kw)
        times["bound + Sinkhorn"].append(time.perf_counter() - t0)
        solved.append(len(res.solved))
    report = {
        "papers": searcher.index.n_papers, "sentences": searcher.index.n_sentences, "queries": len(qbatches),
        "k": args.k, "threads": args.threads, "load_average_1min": [load_before, os.getloadavg()[0]],
        "stages": {name: {"p50_ms": float(np.percentile(v, 50) * 1e3), "p95_ms": float(np.percentile(v, 95) * 1e3)}
                   for name, v in times.items()},
        "ratio_p50": float(np.percentile(times["whole shortlist"], 50) / np.percentile(times["pruned"], 50)),
        "search_ratio_p50": float(np.percentile(times["search, earlier OT stage"], 50)
                                  / np.percentile(times["search, pruned OT stage"], 50)),
        "solved_per_query": {"p50": float(np.median(solved)), "max": int(max(solved)), "min": int(min(solved))},
        "top_k_identical": True, "max_relative_score_difference": worst,
        "hits_with_another_aligned_sentence": moved, "hits": len(qbatches) * args.k, "aligned_pairs": pairs,
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
