"""CSFCube answered by `aspire search` itself, one row per search pipeline, beside the benchmark's own runs.

    python experiments/search_pipelines_csfcube.py [--model minilm] [--results experiments/results/search_pipelines_csfcube.json]

Every pooled paper is encoded once (contextual, through the vector cache); each query's pool is indexed on
its own and the query (its facet's sentences, encoded in the context of its whole abstract) is searched by the
`Searcher` for its whole pool (`aspire.evaluate.search_run.rank_pools_by_search`), then scored by CSFCube's
protocol. Prints the two-fold test MAP / NDCG%20 per facet and writes
`experiments/results/search_pipelines_csfcube.json` (`--results`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from search_pipelines_context2doc import PIPELINES as CONTEXT2DOC_PIPELINES  # noqa: E402

from aspire.benchmarks import csfcube  # noqa: E402
from aspire.data.papers import read_paper_map  # noqa: E402
from aspire.encoders import load_encoder  # noqa: E402
from aspire.evaluate.cache import default_cache_dir  # noqa: E402
from aspire.evaluate.search_run import rank_pools_by_search  # noqa: E402
from aspire.paths import DATA  # noqa: E402

# the context2doc study's pipelines, but for its last (fused + min-L2) the fused first stage with best passage
PIPELINES = {name: o for name, o in CONTEXT2DOC_PIPELINES.items() if name != "fused + min-L2 re-rank"}
PIPELINES["fused + best-passage re-rank"] = ["stages=ann,bm25", "rerank=maxpassage"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--results", type=Path, default=REPO / "experiments" / "results" / "search_pipelines_csfcube.json",
                        help="the JSON of the rows (default: the committed one)")
    args = parser.parse_args()
    root = DATA / "csfcube"
    pool_set = csfcube.load_csfcube(root)
    papers = read_paper_map(root / csfcube.ABSTRACTS_FILE, pool_set.paper_ids(), needed_by="pooled")
    encoder = load_encoder(args.model)
    rows = []
    for name, overrides in PIPELINES.items():
        t0 = time.perf_counter()
        rankings = rank_pools_by_search(pool_set, papers, encoder, overrides, csfcube.LABEL_TO_FACET,
                                        default_cache_dir())
        results, _ = csfcube.evaluate_csfcube_rankings(root, rankings)
        seconds = time.perf_counter() - t0
        rows.append({"pipeline": name, "overrides": overrides, "test": results["test"], "seconds": round(seconds, 1)})
        print(f"{name:<32} {csfcube.format_table(results)}  ({seconds:.0f} s)", flush=True)
    out = {"command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d"), "model": args.model,
           "rows": rows}
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
