"""Benchmark: corpus search over 100,000 abstracts on CPU.

Corpus: real sentence vectors recombined. The CSFCube abstracts and the cited abstracts of the
co-citation set (about 5,000 real abstracts) are each encoded once, contextually (one MiniLM pass
over `title [SEP] abstract`), and cached. Every synthetic paper takes the first sentences of one
real abstract and the last sentences of another, its length drawn from the real length
distribution, keeping each sentence's vector from its real context. So sentence lengths, vectors
and neighbourhoods are real; a real sentence recurs in about 20 synthetic papers (with different
companions). Encoding 100k abstracts with MiniLM on 2 cores would take hours, hence the recombination.
Queries: held-out real abstracts (the CSFCube query papers first, then random others), never part of
the pool the corpus is built from; their sentence vectors come from the same contextual encoding.

Measured (2 CPU threads): index build time, index size on disk (BM25 files included) and resident
memory, query latency p50/p95 for (a) exhaustive min-L2 over all sentence vectors, (b) ANN single
match, (c) ANN + OT re-rank of the 1,000-paper shortlist, (d) BM25 alone, (e) ANN and BM25 fused
(z-scores, 0.815 on ANN), (f) fused + OT re-rank of 1,000, (g) fused + max-passage re-rank of 1,000,
and recall@10 of each against the exhaustive OT ranking; and each stage alone (the ANN lookup of a
1,000-paper shortlist, the BM25 top 1,000, their fusion, the OT and max-passage re-ranks of 1,000).
The BM25 query text is the query abstract's sentences. Query encoding is timed separately (one abstract
through MiniLM). With `--cross-encoder DIR [--cross-top N]` (off by default), two more rows: (h) fused + the
cross-encoder stage over the top N (`aspire.retrieval.crossencoder`), and the cross-encoder's re-score of N alone
(the query text is the query abstract's sentences, each candidate's its title and sentences).

    nice python experiments/bench_search.py [--papers 100000] [--queries 50] [--config configs/index-bench.yaml]
    # the pool from the evaluators' vector cache (CSFCube abstracts, minilm contextual) instead of encoding:
    python experiments/bench_search.py --pool-cache ~/.cache/aspire/vectors/FINGERPRINT-contextual-...pt
    # and the cross-encoder stage's latency (a trained model from python -m aspire.train.crossencoder):
    python experiments/bench_search.py ... --cross-encoder runs/crossencoder/model --cross-top 50
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

from aspire.config import load_config  # noqa: E402
from aspire.data.papers import Paper  # noqa: E402
from aspire.index import EncodedCorpus, IndexBuildConfig, SentenceIndex, encode_corpus, model_fingerprint  # noqa: E402
from aspire.search import Searcher  # noqa: E402

DATA = REPO.parent / "shared" / "data"
CACHE = REPO / "experiments" / ".cache" / "bench_search"
RESULTS = REPO / "experiments" / "results"


def real_abstracts() -> tuple[list[Paper], list[str]]:
    """CSFCube abstracts and the cited abstracts of the co-citation set (deduplicated), and the
    CSFCube query paper ids."""
    papers, seen = [], set()
    with open(DATA / "csfcube" / "abstracts-csfcube-preds.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["abstract"] and r["paper_id"] not in seen:
                seen.add(r["paper_id"])
                papers.append(Paper(r["paper_id"], r["title"], r["abstract"]))
    with open(DATA / "cocite-acl" / "cocitations.jsonl", encoding="utf-8") as f:
        for line in f:
            for c in json.loads(line)["cited"]:
                pid = "acl:" + c["paper_id"]
                if c["abstract"] and pid not in seen:
                    seen.add(pid)
                    papers.append(Paper(pid, c["title"], c["abstract"]))
    queries = []
    for facet in ("background", "method", "result"):
        anns = json.loads((DATA / "csfcube" / f"test-pid2anns-csfcube-{facet}.json").read_text())
        queries += [q for q in anns if q not in queries]
    return papers, queries


def encoded_pool(model: str, path: str | None = None) -> EncodedCorpus:
    """All real abstracts encoded once with `model` (cached by model fingerprint), or the pool
    shard at `path` (e.g. one encoded by an earlier version of the encoder)."""
    from aspire.encoders import load_encoder

    if path is not None:
        return EncodedCorpus.load_shard(path)[0]

    encoder = load_encoder(model)
    path = CACHE / f"pool-{model_fingerprint(encoder)}"
    if (path / "shard.json").is_file():
        return EncodedCorpus.load_shard(path)[0]
    papers, _ = real_abstracts()
    t0 = time.perf_counter()
    corpus = encode_corpus(encoder, papers)
    print(f"encoded {len(corpus)} real abstracts ({len(corpus.vectors)} sentences) in {time.perf_counter() - t0:.0f} s")
    corpus.save_shard(path, {"model_name": model, "model_fingerprint": model_fingerprint(encoder)})
    return corpus


def pool_from_vector_cache(path: str | Path) -> EncodedCorpus:
    """The real abstracts of an `aspire.evaluate.cache` file (contextual sentence vectors) as a pool;
    titles from the CSFCube abstracts where the ids are CSFCube's (else empty)."""
    payload = torch.load(path, weights_only=False)
    titles = {}
    with open(DATA / "csfcube" / "abstracts-csfcube-preds.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            titles[r["paper_id"]] = r["title"]
    offsets = np.concatenate([[0], np.cumsum(payload["lengths"].numpy())]).astype(np.int64)
    ids = list(payload["paper_ids"])
    return EncodedCorpus(payload["emb"].float().numpy(), offsets, ids, [titles.get(i, "") for i in ids],
                         payload["sentences"])


def recombined_corpus(pool: EncodedCorpus, sources: np.ndarray, n_papers: int, seed: int) -> EncodedCorpus:
    """`n_papers` synthetic abstracts: the first h sentences of real abstract A then the last t of
    real abstract B (h + t drawn from the real lengths), vectors kept from their real context."""
    rng = np.random.default_rng(seed)
    counts = np.diff(pool.offsets)
    want = rng.choice(counts[sources], n_papers)  # (n,) target lengths, real distribution
    a, b = rng.choice(sources, n_papers), rng.choice(sources, n_papers)
    head = np.minimum(counts[a], np.maximum(1, (want + 1) // 2))  # (n,)
    tail = np.minimum(counts[b], want - head)  # (n,) may be 0
    seg_start = np.stack([pool.offsets[a], pool.offsets[b + 1] - tail], 1).reshape(-1)  # (2n,)
    seg_len = np.stack([head, tail], 1).reshape(-1)  # (2n,)
    firsts = np.concatenate([[0], np.cumsum(seg_len)[:-1]])
    rows = np.repeat(seg_start - firsts, seg_len) + np.arange(seg_len.sum())  # pool rows, paper after paper
    lengths = head + tail
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    sentences = [pool.sentences[x][:h] + pool.sentences[y][len(pool.sentences[y]) - t:]
                 for x, y, h, t in zip(a.tolist(), b.tolist(), head.tolist(), tail.tolist())]
    titles = [f"{pool.titles[x]} | {pool.titles[y]}" for x, y in zip(a.tolist(), b.tolist())]
    return EncodedCorpus(pool.vectors[rows], offsets, [f"syn{i:06d}" for i in range(n_papers)], titles, sentences)


def cache_tag(pool: EncodedCorpus, config: IndexBuildConfig, queries) -> str:
    """A short tag of the encoded pool (a checksum of its vectors), the search settings and the held-out query
    positions `queries`: the corpus is recombined from the pool's other papers, so another query set (e.g. another
    `--queries`) is another corpus, whose exhaustive OT truth a cached file of the first would silently stand in for."""
    import hashlib

    digest = hashlib.sha1(np.ascontiguousarray(pool.vectors[::97]).tobytes())
    digest.update(repr(config.search).encode())
    digest.update(np.asarray(queries, dtype=np.int64).tobytes())
    return digest.hexdigest()[:12]


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--papers", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--config", default=str(REPO / "configs" / "index-bench.yaml"))
    parser.add_argument("--truth-queries", type=int, default=20, help="queries ranked by exhaustive OT for recall")
    parser.add_argument("--pool", help="an encoded pool shard directory to use instead of encoding")
    parser.add_argument("--pool-cache", help="an aspire.evaluate.cache file of contextual vectors to use as the pool")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "bench_search"))
    parser.add_argument("--cross-encoder", metavar="DIR", help="also time the cross-encoder stage with this model")
    parser.add_argument("--cross-top", type=int, default=50, help="papers the cross-encoder re-scores (default 50)")
    args = parser.parse_args()
    import faiss

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    t_start = time.perf_counter()

    pool = pool_from_vector_cache(args.pool_cache) if args.pool_cache else encoded_pool(args.model, args.pool)
    _, csfcube_queries = real_abstracts()
    rng = np.random.default_rng(args.seed)
    position = {pid: i for i, pid in enumerate(pool.paper_ids)}
    queries = [position[q] for q in csfcube_queries if q in position][: args.queries]
    others = rng.permutation([i for i in range(len(pool)) if i not in set(queries)])
    queries += others[: args.queries - len(queries)].tolist()
    sources = np.setdiff1d(np.arange(len(pool)), queries)  # held-out queries never enter the corpus

    corpus = recombined_corpus(pool, sources, args.papers, args.seed)
    config = load_config(IndexBuildConfig, args.config)
    print(f"corpus: {len(corpus)} recombined abstracts, {len(corpus.vectors)} sentence vectors "
          f"(pool: {len(sources)} real abstracts, {pool.offsets[sources + 1].sum() - pool.offsets[sources].sum()} sentences)")

    index_dir = CACHE / "index"
    if index_dir.exists():
        import shutil

        shutil.rmtree(index_dir)
    t0 = time.perf_counter()
    index = SentenceIndex.build(corpus, config, "bench-" + args.model, args.model)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.save(index_dir)
    save_s = time.perf_counter() - t0
    del index, corpus
    gen = Path(SentenceIndex.read_manifest(index_dir)["path"])
    files_mb = {f.name: f.stat().st_size / 2**20 for f in gen.iterdir()}
    rss0 = rss_mb()
    t0 = time.perf_counter()
    searcher = Searcher(SentenceIndex.load(index_dir, mmap=False))
    load_s = time.perf_counter() - t0
    index_rss = rss_mb() - rss0
    print(f"built in {build_s:.1f} s, saved in {save_s:.1f} s, loaded in {load_s:.1f} s; "
          f"{dir_mb(gen):.0f} MB on disk, +{index_rss:.0f} MB resident")

    qbatches = [_as_query(pool.subset([q])) for q in queries]  # (1, S, D) each, all sentences selected
    if args.cross_encoder:
        from aspire.index.config import checked_search_config
        from aspire.retrieval.crossencoder import load_cross_stage

        searcher.cross_encoder = load_cross_stage(args.cross_encoder)
        searcher.config = checked_search_config(searcher.config, cross_top=args.cross_top)
    methods = {
        "(a) exhaustive min-L2": lambda q: searcher.exhaustive(q, "minl2", k=10)[0],
        "(b) ANN single match": lambda q: _positions(searcher, searcher.search(q, k=10, rerank="none")),
        "(c) ANN + OT re-rank 1000": lambda q: _positions(searcher, searcher.search(q, k=10, rerank="ot", shortlist=1000)),
        "(d) BM25": lambda q: _positions(searcher, searcher.search(q, k=10, stages="bm25")),
        "(e) ANN + BM25 fused": lambda q: _positions(searcher, searcher.search(q, k=10, stages="ann,bm25")),
        "(f) fused + OT re-rank 1000": lambda q: _positions(searcher, searcher.search(
            q, k=10, stages="ann,bm25", rerank="ot", shortlist=1000)),
        "(g) fused + max-passage re-rank 1000": lambda q: _positions(searcher, searcher.search(
            q, k=10, stages="ann,bm25", rerank="maxpassage", shortlist=1000)),
    }
    if args.cross_encoder:
        methods[f"(h) fused + cross-encoder top {args.cross_top}"] = lambda q: _positions(searcher, searcher.search(
            q, k=10, stages="ann,bm25", rerank="none", cross_encoder=True))
    stage_methods = stage_timers(searcher)
    for q in qbatches[:2]:  # warm-up
        for run in [*methods.values(), *stage_methods.values()]:
            run(q)
    latency = {name: [] for name in methods}
    cpu = {name: [] for name in methods}
    results = {name: [] for name in methods}
    load_before = os.getloadavg()[0]
    for q in qbatches:
        for name, run in methods.items():
            t0, c0 = time.perf_counter(), time.process_time()
            results[name].append(run(q))
            latency[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    stage_latency = {name: [] for name in stage_methods}
    stage_cpu = {name: [] for name in stage_methods}
    for q in qbatches:
        for name, run in stage_methods.items():
            stage_latency[name].append(run(q))
            stage_cpu[name].append(run.cpu)
    load_after = os.getloadavg()[0]
    n_truth = min(args.truth_queries, len(qbatches))
    truth_path = CACHE / f"truth-{args.papers}-{args.seed}-{n_truth}-{cache_tag(pool, config, queries)}.npy"
    t0 = time.perf_counter()
    if n_truth == 0:
        truth, truth_s = [], float("nan")
    elif truth_path.is_file():
        truth, truth_s = list(np.load(truth_path)), float("nan")
    else:
        truth = [exact_ot_top(searcher, q, 10) for q in qbatches[:n_truth]]
        truth_s = (time.perf_counter() - t0) / n_truth
        np.save(truth_path, np.stack(truth))
    from scale_common import mean_recall

    recall = {name: mean_recall(res, truth) for name, res in results.items()}  # --truth-queries 0: NaN, not measured

    from aspire.encoders import load_encoder

    encoder = load_encoder(args.model)
    real = real_abstracts()[0]
    by_id = {p.paper_id: p for p in real}
    encode_times = []
    for q in queries[:20]:
        t0 = time.perf_counter()
        encoder.encode([by_id[pool.paper_ids[q]]])
        encode_times.append(time.perf_counter() - t0)

    rows = [
        {"method": name, "p50_ms": pct(latency[name], 50), "p95_ms": pct(latency[name], 95),
         "cpu_p50_ms": pct(cpu[name], 50), "recall_at_10_vs_exhaustive_ot": recall[name][0],
         "recall_at_10_vs_exhaustive_ot_ci95": recall[name][1]}
        for name in methods
    ]
    report = {
        "model": args.model, "papers": args.papers, "sentences": searcher.index.n_sentences, "dim": searcher.index.dim,
        "queries": len(queries), "csfcube_query_papers": sum(1 for q in queries if pool.paper_ids[q] in set(csfcube_queries)),
        "threads": args.threads, "index_kind": searcher.index.kind, "config": args.config,
        "faiss_index": type(searcher.index.faiss_index).__name__,
        "build_s": build_s, "save_s": save_s, "load_s": load_s, "disk_mb": files_mb, "resident_mb": index_rss,
        "rows": rows, "exhaustive_ot_s_per_query": truth_s, "truth_queries": n_truth,
        "stages": [{"stage": name, "p50_ms": pct(stage_latency[name], 50), "p95_ms": pct(stage_latency[name], 95),
                    "cpu_p50_ms": pct(stage_cpu[name], 50)} for name in stage_methods],
        "load_average_1min": [load_before, load_after],
        "query_encoding_p50_ms": pct(encode_times, 50), "total_s": time.perf_counter() - t_start,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


def stage_timers(searcher: Searcher) -> dict:
    """One timer per pipeline stage: `timer(query)` runs the stage (after what it needs, untimed) and
    returns its wall seconds; `timer.cpu` then holds its process seconds."""
    from aspire.index.config import checked_search_config
    from aspire.retrieval.rerank import rerank
    from aspire.scoring.fusion import fuse_ranked

    cfg = checked_search_config(searcher.config, k=10, shortlist=1000, stages="ann,bm25", rerank="ot")

    def inputs(q):
        text = " ".join(q.sentences[0])
        candidates = searcher.retrieve(q, cfg)
        dense = {searcher.index.paper_ids[p]: -float(d) for p, d in zip(candidates.papers, candidates.dist)}
        papers, scores = searcher.lexical(cfg).top(text, cfg.shortlist)
        lexical = {searcher.index.paper_ids[p]: float(x) for p, x in zip(papers, scores)}
        fused = fuse_ranked([dense, lexical], [0.815, 0.185], "z")[: cfg.shortlist]
        return text, dense, lexical, fused

    def timed(fn):
        def run(q):
            args = inputs(q)
            t0, c0 = time.perf_counter(), time.process_time()
            fn(q, *args)
            run.cpu = time.process_time() - c0
            return time.perf_counter() - t0
        return run

    def rerank_by(name):
        stage_cfg = checked_search_config(cfg, rerank=name)

        def go(q, text, dense, lexical, fused):
            papers = np.array([searcher.index.positions[pid] for pid, _ in fused])
            rerank(searcher, q, papers, np.array([x for _, x in fused]), stage_cfg)
        return go

    def cross_go(q, text, dense, lexical, fused):
        from aspire.retrieval.crossencoder import candidate_text

        top = searcher.config.cross_top
        texts = {pid: candidate_text(searcher.index, searcher.index.positions[pid]) for pid, _ in fused[:top]}
        searcher.cross_encoder.head_scores(text, fused, texts, top)

    cross = {} if searcher.cross_encoder is None else {
        f"cross-encoder re-score of {searcher.config.cross_top}": timed(cross_go)}
    return {
        "ANN shortlist (1000 papers)": timed(lambda q, *a: searcher.retrieve(q, cfg)),
        "BM25 top 1000": timed(lambda q, text, *a: searcher.lexical(cfg).top(text, cfg.shortlist)),
        "fusion (z, two lists)": timed(lambda q, text, dense, lexical, fused: fuse_ranked(
            [dense, lexical], [0.815, 0.185], "z")),
        "OT re-rank of 1000": timed(rerank_by("ot")),
        "max-passage re-rank of 1000": timed(rerank_by("maxpassage")),
        **cross,
    }


def exact_ot_top(searcher: Searcher, query, k: int, step: int = 2048) -> np.ndarray:
    """The exact top-k of the exhaustive OT ranking over every indexed paper.

    The OT distance <D, P> of a plan with total mass 1 is at least the smallest sentence distance,
    i.e. the paper's min-L2 distance. Papers are OT-scored in increasing min-L2 order (all of them
    min-L2-scored exhaustively) until the next paper's min-L2 exceeds the k-th best OT distance
    found: no later paper can enter the top k. A 1e-3 relative margin covers Sinkhorn's marginal
    tolerance.
    """
    scorer = searcher.scorer("ot", searcher.config)
    minl2 = searcher._scan_min_l2(query, 262144).numpy()  # (P,)
    order = np.argsort(minl2, kind="stable")
    dists = []
    done = 0
    while done < len(order):
        papers = order[done : done + step]
        dists.append(scorer.dist(query, searcher.index.gather(papers))[0].numpy())
        done += len(papers)
        kth = np.partition(np.concatenate(dists), k - 1)[k - 1]
        if done < len(order) and minl2[order[done]] * (1 - 1e-3) > kth:
            break
    scored = np.concatenate(dists)
    return order[np.argsort(scored, kind="stable")[:k]]


def _as_query(c: EncodedCorpus):
    from aspire.batch import DocBatch

    return DocBatch.from_list([torch.from_numpy(np.asarray(c.vectors, dtype=np.float32))], c.paper_ids, c.sentences)


def _positions(searcher: Searcher, hits) -> np.ndarray:
    return np.array([searcher.index.position(h.paper_id) for h in hits])


def markdown(r: dict) -> str:
    disk = sum(r["disk_mb"].values())
    lines = [
        "# Corpus search benchmark",
        "",
        f"Corpus: {r['papers']:,} abstracts / {r['sentences']:,} sentence vectors (D = {r['dim']}), recombined from",
        f"real contextual sentence vectors ({r['model']}) of the CSFCube and co-citation abstracts (each synthetic",
        "abstract = first sentences of one real abstract + last sentences of another; see the script).",
        f"Queries: {r['queries']} held-out real abstracts ({r['csfcube_query_papers']} CSFCube query papers), all",
        f"sentences selected, query vectors precomputed. {r['threads']} CPU threads, shared machine.",
        "",
        f"Index: {r['faiss_index']} ({r['config'].split('/')[-1]}); build (train + add) {r['build_s']:.1f} s, "
        f"atomic save {r['save_s']:.1f} s, load {r['load_s']:.1f} s.",
        f"On disk {disk:.0f} MB (" + ", ".join(f"{k} {v:.0f} MB" for k, v in r["disk_mb"].items() if v >= 1) + "); "
        f"resident after load +{r['resident_mb']:.0f} MB.",
        "",
        f"| method | p50 ms | p95 ms | CPU time p50 ms | recall@10 vs exhaustive OT ({r['truth_queries']} queries; "
        "bootstrap 95% interval) |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in r["rows"]:
        lo, hi = row.get("recall_at_10_vs_exhaustive_ot_ci95", (float("nan"), float("nan")))
        lines.append(f"| {row['method']} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {row['cpu_p50_ms']:.1f} | "
                     f"{row['recall_at_10_vs_exhaustive_ot']:.3f} [{lo:.3f}, {hi:.3f}] |")
    lines += [
        "",
        "Each stage alone (its inputs computed beforehand, untimed):",
        "",
        "| stage | p50 ms | p95 ms | CPU time p50 ms |",
        "|---|---:|---:|---:|",
        *[f"| {s['stage']} | {s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {s['cpu_p50_ms']:.1f} |" for s in r["stages"]],
        "",
        f"Reference: the exact top 10 of the exhaustive OT ranking over all {r['papers']:,} papers, computed with the "
        "bound OT >= min-L2 (papers are OT-scored in min-L2 order until none left can enter the top 10), "
        f"{r['exhaustive_ot_s_per_query']:.1f} s per query. "
        f"Encoding a query abstract with {r['model']}: p50 {r['query_encoding_p50_ms']:.0f} ms (not in the latencies above).",
        f"Latencies are wall-clock per query on a machine shared with other jobs (1-minute load average "
        f"{r['load_average_1min'][0]:.1f} before / {r['load_average_1min'][1]:.1f} after the query loop, 2 cores); "
        "CPU time is the process time the query used (both threads together).",
        f"Total benchmark run: {r['total_s']:.0f} s.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__" and sys.argv[1:2] == ["--encode-only"]:
    encoded_pool("minilm")
    sys.exit(0)
elif __name__ == "__main__":
    main()
