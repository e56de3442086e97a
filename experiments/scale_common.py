"""Shared by the real-text-at-scale benchmarks (bench_acl.py, bench_million.py): facet-like query
selections for unlabelled abstracts, timing helpers, and the memory of this process.

Facet-selected queries. The ACL Anthology abstracts carry no facet labels and aspire has no facet
labeller (aspire.data.facets only groups stored labels), so a query selects a positional stand-in
for a facet: "background" = the first third of the abstract's sentences, "method" = the middle
third, "result" = the last third (at least one sentence each; in CSFCube's labelled abstracts the
facets mostly follow this order). Queries cycle through the three.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

FACET_PROXIES = ("background", "method", "result")


def facet_proxy(n_sentences: int, facet: str) -> list[int]:
    """0-based positions of the positional stand-in for `facet` in an abstract of `n_sentences`."""
    third = max(1, round(n_sentences / 3))
    if facet == "background":
        return list(range(min(third, n_sentences)))
    if facet == "result":
        return list(range(max(0, n_sentences - third), n_sentences))
    if facet == "method":
        lo = min(third, n_sentences - 1)
        return list(range(lo, max(lo + 1, n_sentences - third)))
    raise ValueError(f"unknown facet {facet!r}; valid: {list(FACET_PROXIES)}")


def facet_queries(searcher, positions: np.ndarray) -> list[tuple[str, str, object]]:
    """(paper id, facet, query DocBatch) for the indexed papers at `positions`, facets cycling."""
    out = []
    for i, p in enumerate(positions.tolist()):
        pid, n = searcher.index.paper_ids[p], int(searcher.index.offsets[p + 1] - searcher.index.offsets[p])
        facet = FACET_PROXIES[i % 3]
        out.append((pid, facet, searcher.query_from_index(pid, facet_proxy(n, facet))))
    return out


def exact_pipeline_tops(searcher, queries: list, shortlist: int, k: int,
                        rows_per_step: int = 1 << 18) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The ANN + OT pipeline with an exact first stage, for several queries in one pass over the stored
    vectors: per query the `shortlist` papers nearest by exhaustive min-L2 over all of them (the query
    paper left out), re-ranked by the same OT scorer. Returns per query (the exact min-L2 top `k`, the
    exact pipeline's top `k`) as index positions, best first."""
    from aspire.scoring.chunked import score_chunked

    index = searcher.index
    q = [query.emb[0, query.mask[0]].detach().float().cpu() for query in queries]  # each (n_i, D)
    owner = torch.repeat_interleave(torch.arange(len(q)), torch.tensor([len(x) for x in q]))  # (n,) query of each sentence
    stacked = torch.cat(q)  # (n, D)
    q_sq = (stacked * stacked).sum(1)
    best = torch.full((len(q), index.n_papers), float("inf"))  # (Q, P) min L2
    row_papers = torch.from_numpy(index.row_papers)
    for start in range(0, index.n_sentences, rows_per_step):
        v = torch.from_numpy(np.asarray(index.vectors[start : start + rows_per_step], dtype=np.float32))
        sq = q_sq[:, None] + (v * v).sum(1)[None, :] - 2.0 * (stacked @ v.T)  # (n, chunk) squared L2
        per_query = torch.full((len(q), len(v)), float("inf")).scatter_reduce_(
            0, owner[:, None].expand(-1, len(v)), sq, reduce="amin")  # (Q, chunk) nearest sentence of each query
        owners = row_papers[start : start + len(v)][None, :].expand(len(q), -1)
        best.scatter_reduce_(1, owners, per_query.clamp_min(0).sqrt(), reduce="amin")
    tops, pipeline = [], []
    for i, query in enumerate(queries):
        if query.paper_ids and query.paper_ids[0] in index.positions:
            best[i, index.positions[query.paper_ids[0]]] = float("inf")
        papers = torch.topk(-best[i], shortlist).indices.numpy()  # nearest first
        tops.append(papers[:k])
        scores = score_chunked(searcher.scorer("ot", searcher.config), query, index.gather(papers, texts=False))[0]
        pipeline.append(papers[torch.topk(scores, min(k, len(papers))).indices.numpy()])
    return tops, pipeline


def timed(fn, *args):
    """(result, wall seconds, process CPU seconds) of fn(*args)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - t0, time.process_time() - c0


def pct_ms(values, q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q))


def memory_mb(pid: int | str = "self") -> dict:
    """A process's resident memory now and at peak (MiB): anonymous (heap, arrays read into RAM)
    apart from file-backed (memory-mapped files: pages the kernel can drop and read again)."""
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) / 1024
    return {"rss": fields["VmRSS"], "rss_peak": fields["VmHWM"], "anon": fields["RssAnon"], "file": fields["RssFile"]}


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    return len(set(found.tolist()) & set(truth.tolist())) / max(len(truth), 1)


def mean_recall(found: list, truth: list) -> tuple[float, list[float]]:
    """Mean recall@k of the first len(truth) queries of `found` against `truth` (positions each), and its bootstrap
    95% interval over those queries (`aspire.benchmarks.stats.UnitScores`, the benchmarks' own): the truth is costly,
    so it is a few dozen queries, and the mean alone read as more certain than it is. NaN without a truth."""
    from aspire.benchmarks.stats import UnitScores

    if not truth:
        return float("nan"), [float("nan"), float("nan")]
    values = {f"{i:06d}": recall_at(np.asarray(f), np.asarray(t)) for i, (f, t) in enumerate(zip(found, truth))}
    units = UnitScores.means(values)
    return units.value(), list(units.bootstrap())


def set_threads(n: int) -> None:
    """Use `n` threads in torch and faiss."""
    import faiss

    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)


def time_queries(methods: dict, queries: list) -> dict:
    """Run every method on every query (after two warm-up queries); per method the found positions,
    wall and CPU seconds; and the 1-minute load average before and after."""
    for _, _, q in queries[:2]:  # warm-up
        for run in methods.values():
            run(q)
    out = {"found": {m: [] for m in methods}, "wall": {m: [] for m in methods}, "cpu": {m: [] for m in methods},
           "load_average_1min": [os.getloadavg()[0]]}
    for _, _, q in queries:
        for name, run in methods.items():
            top, wall, cpu = timed(run, q)
            out["found"][name].append(top)
            out["wall"][name].append(wall)
            out["cpu"][name].append(cpu)
    out["load_average_1min"].append(os.getloadavg()[0])
    return out


def latency_rows(timing: dict, truth: list, recall_name: str) -> list[dict]:
    """One row a method: p50 / p95 wall ms, p50 CPU ms, mean recall@10 of its first len(truth) queries and its
    bootstrap 95% interval (`recall_name` + `_ci95`, `mean_recall`)."""
    rows = []
    for m in timing["wall"]:
        recall, ci = mean_recall(timing["found"][m], truth)
        rows.append({"method": m, "p50_ms": pct_ms(timing["wall"][m], 50), "p95_ms": pct_ms(timing["wall"][m], 95),
                     "cpu_p50_ms": pct_ms(timing["cpu"][m], 50), recall_name: recall, f"{recall_name}_ci95": ci})
    return rows


def fresh_load_memory(index_dir, mmap: bool, texts: str = "auto") -> dict:
    """Resident memory (MiB, `memory_mb`) of a fresh Python process before and after `SentenceIndex.load`
    of `index_dir` (memory-mapped exact vectors or read into RAM; sentence texts as `texts` says): in the
    measuring process, memory freed earlier would be reused and hide what loading costs."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    code = (f"import sys, json; sys.path[:0] = [{str(here.parent)!r}, {str(here)!r}]\n"
            "from scale_common import memory_mb\nfrom aspire.index import SentenceIndex\nimport aspire.search\n"
            f"before = memory_mb(); index = SentenceIndex.load({str(index_dir)!r}, mmap={mmap!r}, texts={texts!r})\n"
            "print(json.dumps({'before': before, 'loaded': memory_mb()}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def search_methods(searcher) -> dict:
    """The two timed pipelines, each query -> the positions of its top 10: (b) ANN single match and
    (c) ANN + OT re-rank of a 1,000-paper shortlist."""
    def positions(hits) -> np.ndarray:
        return np.array([searcher.index.position(h.paper_id) for h in hits])

    return {
        "(b) ANN single match": lambda q: positions(searcher.search(q, k=10, rerank="none")),
        "(c) ANN + OT re-rank 1000": lambda q: positions(searcher.search(q, k=10, rerank="ot", shortlist=1000)),
    }
