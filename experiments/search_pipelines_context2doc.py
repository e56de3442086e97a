"""context2doc answered by `aspire search` itself, one row per search pipeline, beside the benchmark's own runs.

    python experiments/search_pipelines_context2doc.py [--model minilm] [--split test] [--out runs/search-c2d]
        [--results experiments/results/search_pipelines_context2doc.json]

The 768 candidates are indexed once (exact flat index, as `aspire index build` encodes them) and each pipeline
answers the 463 test citing sentences with the `Searcher` (`aspire.evaluate.search_run`), 100 papers a query.
Prints MRR / nDCG@10 / R@100 / MAP with bootstrap intervals and writes
`experiments/results/search_pipelines_context2doc.json` (`--results`). `--depth` must reach R@100's 100 (the
benchmark's own check, `check_depth`): a shallower run would report R@100 at its own depth. The benchmark's own rows (whole-abstract cosine, its
fusion with BM25) use a whole-abstract vector the index does not hold; they are in `results/suite/`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aspire.benchmarks.context2doc import load_context2doc  # noqa: E402
from aspire.config import apply_overrides  # noqa: E402
from aspire.encoders import load_encoder  # noqa: E402
from aspire.evaluate.context2doc_run import check_depth, score_and_write  # noqa: E402
from aspire.evaluate.search_run import answer_queries, encode_text_queries, index_candidates  # noqa: E402
from aspire.paths import DATA  # noqa: E402
from aspire.search import Searcher  # noqa: E402

PIPELINES = {
    "dense (ann), no re-rank": ["stages=ann", "rerank=none"],
    "dense + min-L2 re-rank": ["stages=ann", "rerank=minl2"],
    "dense + OT re-rank": ["stages=ann", "rerank=ot"],
    "dense + best-passage re-rank": ["stages=ann", "rerank=maxpassage"],
    "BM25": ["stages=bm25", "rerank=none"],
    "fused (ann + BM25), no re-rank": ["stages=ann,bm25", "rerank=none"],
    "fused + min-L2 re-rank": ["stages=ann,bm25", "rerank=minl2"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--split", default="test")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--out", default=str(REPO / "runs" / "search-c2d"))
    parser.add_argument("--results", type=Path, default=REPO / "experiments" / "results" / "search_pipelines_context2doc.json",
                        help="the JSON of the rows (default: the committed one)")
    args = parser.parse_args()
    bench = load_context2doc(DATA / "cocite-acl", args.split)
    try:  # before any encoding: a shallower run reported R@100 at its own depth under R@100's name
        check_depth(bench, args.depth)
    except ValueError as err:
        parser.error(str(err))
    encoder = load_encoder(args.model)
    t0 = time.perf_counter()
    index = index_candidates(encoder, bench.candidates)
    queries = encode_text_queries(encoder, bench.queries)
    encode_seconds = time.perf_counter() - t0
    rows = []
    for name, overrides in PIPELINES.items():
        searcher = Searcher(index, apply_overrides(index.config.search, overrides, "search"), encoder)
        searcher.shortfalls = []
        t1 = time.perf_counter()
        run = answer_queries(searcher, queries, args.depth)
        seconds = time.perf_counter() - t1
        res = score_and_write(bench, run, Path(args.out) / "-".join(o.replace("=", "_") for o in overrides),
                              name.replace(" ", "_"), {"overrides": overrides, "seconds": seconds})
        rows.append({"pipeline": name, "overrides": overrides, "metrics": res["metrics"], "ci95": res["ci95"],
                     "short_queries": len(searcher.shortfalls), "seconds": round(seconds, 1)})
        print(f"{name:<34} " + "  ".join(f"{m} {res['metrics'][m]:.4f} [{res['ci95'][m][0]:.3f}, "
                                         f"{res['ci95'][m][1]:.3f}]" for m in ("MRR", "nDCG@10", "R@100", "MAP"))
              + f"  ({seconds:.0f} s)", flush=True)
    out = {"command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d"), "model": args.model,
           "split": args.split, "n_queries": len(bench.queries), "n_candidates": len(bench.candidates),
           "encode_seconds": round(encode_seconds, 1), "rows": rows}
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
