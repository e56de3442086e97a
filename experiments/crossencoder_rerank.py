"""context2doc dev: choose the cross-encoder's rerank depth N and mix weight over the z-fusion first stage.

    python experiments/crossencoder_rerank.py --model runs/crossencoder/model --max-top 30 \
        --out experiments/results/crossencoder_dev.json

The first stage (minilm whole-abstract + BM25, z-fused at 0.815) ranks every dev query; the cross-encoder
scores each query's top `--max-top` once (kept in `--scores`, reused when present), and every (N, weight)
of the grid is scored by dev MRR from those numbers. The chosen setting is then run on test with
`python -m aspire.evaluate context2doc ... --rerank MODEL --rerank-top N --rerank-weight W`.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from aspire.evaluate.context2doc import load_context2doc
from aspire.evaluate.context2doc_run import to_run
from aspire.evaluate.rerank_run import cross_scores, first_stage_scores, metrics_of, rerank_run, sweep
from aspire.evaluate.suite import DATA
from aspire.scoring.crossencoder import CrossEncoderReranker

WEIGHTS = [0.0, 0.25, 0.5, 0.75, 1.0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DATA / "cocite-acl"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--max-top", type=int, default=30)
    ap.add_argument("--tops", default="10,20,30")
    ap.add_argument("--max-length", type=int, help="default: the model's own")
    ap.add_argument("--scores", help="cross-encoder scores JSON (default beside --out)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    bench = load_context2doc(args.data, "dev")
    first = to_run(bench, first_stage_scores(bench), 100)
    scores_path = Path(args.scores or Path(args.out).with_suffix(".scores.json"))
    speed = None
    if scores_path.is_file():
        cross = json.loads(scores_path.read_text())["scores"]
    else:
        reranker = CrossEncoderReranker(args.model, args.max_length)
        cross = cross_scores(bench, first, reranker, args.max_top)
        speed = reranker.speed()
        speed["ms_per_query"] = round(1000 * speed["seconds"] / len(bench.queries), 1)
        scores_path.write_text(json.dumps({"model": args.model, "top": args.max_top, "scores": cross}))
    tops = [int(t) for t in args.tops.split(",")]
    result = sweep(bench, first, cross, tops, WEIGHTS)
    best = result["best"]
    out = {"split": "dev", "model": args.model, "max_length": args.max_length, "n_queries": len(bench.queries),
           "first_stage": metrics_of(bench, first), "sweep_MRR": result["table"], "best": best,
           "best_metrics": metrics_of(bench, rerank_run(first, cross, best["top_n"], best["weight"])),
           "speed": speed, "machine": f"{platform.node()} shared 2-core CPU, loaded by other jobs"}
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps({k: out[k] for k in ("first_stage", "sweep_MRR", "best", "best_metrics", "speed")}, indent=1))


if __name__ == "__main__":
    main()
