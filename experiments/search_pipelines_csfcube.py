"""CSFCube answered by `aspire search` itself, one row per search pipeline, beside the benchmark's own runs.

    python experiments/search_pipelines_csfcube.py [--model minilm]

Every pooled paper is encoded once (contextual, through the vector cache); each query's pool is indexed on
its own and the query (its facet's sentences, encoded in the context of its whole abstract) is searched by the
`Searcher` for its whole pool (`aspire.evaluate.search_run.rank_pools_by_search`), then scored by CSFCube's
protocol. Prints the two-fold test MAP / NDCG%20 per facet and writes
`experiments/results/search_pipelines_csfcube.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aspire.benchmarks.csfcube import (  # noqa: E402
    ABSTRACTS_FILE,
    LABEL_TO_FACET,
    evaluate_csfcube_rankings,
    format_table,
    load_csfcube,
)
from aspire.data.papers import read_paper_map  # noqa: E402
from aspire.encoders import load_encoder  # noqa: E402
from aspire.evaluate.cache import default_cache_dir  # noqa: E402
from aspire.evaluate.search_run import rank_pools_by_search  # noqa: E402
from aspire.paths import DATA  # noqa: E402

PIPELINES = {
    "dense (ann), no re-rank": ["stages=ann", "rerank=none"],
    "dense + min-L2 re-rank": ["stages=ann", "rerank=minl2"],
    "dense + OT re-rank": ["stages=ann", "rerank=ot"],
    "dense + best-passage re-rank": ["stages=ann", "rerank=maxpassage"],
    "BM25": ["stages=bm25", "rerank=none"],
    "fused (ann + BM25), no re-rank": ["stages=ann,bm25", "rerank=none"],
    "fused + best-passage re-rank": ["stages=ann,bm25", "rerank=maxpassage"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm")
    args = parser.parse_args()
    root = DATA / "csfcube"
    pool_set = load_csfcube(root)
    papers = read_paper_map(root / ABSTRACTS_FILE, pool_set.paper_ids(), needed_by="pooled")
    encoder = load_encoder(args.model)
    rows = []
    for name, overrides in PIPELINES.items():
        t0 = time.perf_counter()
        rankings = rank_pools_by_search(pool_set, papers, encoder, overrides, LABEL_TO_FACET, default_cache_dir())
        results, _ = evaluate_csfcube_rankings(root, rankings)
        seconds = time.perf_counter() - t0
        rows.append({"pipeline": name, "overrides": overrides, "test": results["test"], "seconds": round(seconds, 1)})
        print(f"{name:<32} {format_table(results)}  ({seconds:.0f} s)", flush=True)
    out = {"command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d"), "model": args.model,
           "rows": rows}
    (REPO / "experiments" / "results" / "search_pipelines_csfcube.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
