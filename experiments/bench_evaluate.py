"""Benchmark: a full CSFCube evaluation of one model — encode the 4,205 abstracts (no cache), rank all
50 facet pools (16 background, 17 method, 17 result) with each scorer, compute the metrics — and the time split
between those stages.

    python experiments/bench_evaluate.py --model minilm --scorers minl2 ot attention

Writes experiments/results/bench_evaluate.json and prints a small table. The machine's load average
is recorded beside the timings, since other work on a shared machine slows every stage, and so is
each stage's process CPU time (all threads), which other load does not inflate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from aspire.benchmarks import csfcube  # noqa: E402
from aspire.data.papers import read_paper_map  # noqa: E402
from aspire.evaluate.cache import cached_encode, default_cache_dir  # noqa: E402
from aspire.evaluate.encode import encode_papers  # noqa: E402
from aspire.evaluate.facets import facet_queries  # noqa: E402
from aspire.evaluate.rank import get_eval_scorer, rank_pools  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "csfcube"
OUT = REPO / "experiments" / "results" / "bench_evaluate.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--scorers", nargs="+", default=["minl2", "ot", "attention"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--write-cache", action="store_true", help="also store the vectors in the default cache")
    args = parser.parse_args()

    from aspire.encoders import load_encoder

    report: dict = {"model": args.model, "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "platform": platform.platform(), "load_average_start": os.getloadavg()}
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    pool_set = csfcube.load_csfcube(DATA)
    papers = read_paper_map(DATA / csfcube.ABSTRACTS_FILE, ids=pool_set.paper_ids(), needed_by="pooled")
    ordered = [papers[p] for p in sorted(papers)]
    encoder = load_encoder(args.model)
    report["load_data_and_model_s"] = time.perf_counter() - t0

    t0, c0 = time.perf_counter(), time.process_time()
    batch, _ = encode_papers(encoder, ordered, "contextual", cache_dir=None, batch_size=args.batch_size)
    report["encode_s"] = time.perf_counter() - t0
    report["encode_cpu_s"] = time.process_time() - c0
    if args.write_cache:  # store the vectors where `python -m aspire.evaluate` looks for them
        cached_encode(lambda ps: batch, ordered, encoder.fingerprint(), "contextual", {}, default_cache_dir())
    report["n_papers"] = len(ordered)
    report["n_sentences"] = int(batch.mask.sum())
    report["load_average_after_encode"] = os.getloadavg()

    row = {pid: i for i, pid in enumerate(batch.paper_ids)}
    report["scorers"] = {}
    for name in args.scorers:
        scorer = get_eval_scorer(name)
        t0, c0 = time.perf_counter(), time.process_time()
        rankings = {}
        for facet in csfcube.FACETS:
            pools = {q: list(p) for q, p in pool_set.pools[facet].items()}
            queries = facet_queries(batch.index([row[q] for q in pools]), papers, facet, csfcube.LABEL_TO_FACET)
            ranked = rank_pools(queries, batch, pools, scorer)
            rankings[facet] = {q: [c for c, _ in r] for q, r in ranked.items()}
        t_score, c_score = time.perf_counter() - t0, time.process_time() - c0
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory():
            results, _ = csfcube.evaluate_csfcube_rankings(DATA, rankings)
        t_metrics = time.perf_counter() - t0
        report["scorers"][name] = {
            "score_s": t_score,
            "score_cpu_s": c_score,
            "metrics_s": t_metrics,
            "test_all_MAP": results["test"]["all"]["MAP"],
            "test_all_NDCG%20": results["test"]["all"]["NDCG%20"],
        }
        print(f"{name:10s} score {t_score:7.1f} s  metrics {t_metrics:5.1f} s  {csfcube.format_table(results)}",
              flush=True)
    report["total_s"] = time.perf_counter() - t_all
    report["load_average_end"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"load {report['load_data_and_model_s']:.1f} s, encode {report['encode_s']:.1f} s "
          f"(CPU {report['encode_cpu_s']:.1f} s) "
          f"({report['n_papers']} papers, {report['n_sentences']} sentences), total {report['total_s']:.1f} s")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
