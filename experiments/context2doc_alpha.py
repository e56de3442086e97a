"""context2doc: the dense / BM25 fusion weight chosen on dev, scored on test.

    python experiments/context2doc_alpha.py --model minilm --scorer abstract --max-length 256 --normalize \
        --joiner ' ' --out experiments/results/context2doc_alpha.json

Dense and BM25 scores are computed once per split; each weight alpha (on the dense z-scores) in the grid
is scored on dev by MRR, the best is then scored on test beside the published 0.815 and both stages alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aspire.benchmarks.context2doc import load_context2doc
from aspire.benchmarks.runs import mean_scores, per_query
from aspire.benchmarks.stats import UnitScores
from aspire.evaluate.context2doc_run import METRICS, bm25_scores, dense_scores, fuse_dense_bm25, to_run
from aspire.evaluate.options import EvalOptions

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cocite-acl"
GRID = [0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.815, 0.85, 0.9, 0.95, 1.0]


def scores_for(split: str, args) -> tuple:
    bench = load_context2doc(args.data, split)
    encode = {k: v for k, v in (("max_length", args.max_length), ("normalize", args.normalize or None),
                                ("joiner", args.joiner)) if v is not None}
    dense, _ = dense_scores(bench, args.model, args.scorer, EvalOptions(encode_options=encode))
    return bench, dense, bm25_scores(bench)


def evaluate(bench, scores) -> dict:
    values = per_query(bench.qrels, to_run(bench, scores, 100), METRICS)
    means = mean_scores(values)
    return {m: [means[m], *UnitScores.means(values[m]).bootstrap(1000)] for m in METRICS[:4]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--scorer", default="abstract")
    ap.add_argument("--max-length", type=int)
    ap.add_argument("--normalize", action="store_true")
    ap.add_argument("--joiner")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    dev, d_dense, d_bm25 = scores_for("dev", args)
    dev_mrr = {a: evaluate(dev, fuse_dense_bm25(dev, d_dense, d_bm25, a))["MRR"][0] for a in GRID}
    best = max(GRID, key=lambda a: (dev_mrr[a], -abs(a - 0.815)))
    test, t_dense, t_bm25 = scores_for("test", args)
    rows = {"dense": evaluate(test, t_dense), "bm25": evaluate(test, t_bm25),
            f"fused alpha {best:g} (best on dev)": evaluate(test, fuse_dense_bm25(test, t_dense, t_bm25, best)),
            "fused alpha 0.815 (published)": evaluate(test, fuse_dense_bm25(test, t_dense, t_bm25, 0.815))}
    print("dev MRR by alpha: " + "  ".join(f"{a:g}: {v:.4f}" for a, v in dev_mrr.items()))
    print(f"{'test':<34}" + "".join(f"{m:>26}" for m in METRICS[:4]))
    for name, vals in rows.items():
        print(f"{name:<34}" + "".join(f"{v[0]:>10.4f} [{v[1]:.3f}, {v[2]:.3f}]" for v in vals.values()))
    Path(args.out).write_text(json.dumps({"model": args.model, "scorer": args.scorer, "dev_mrr": dev_mrr,
                                          "alpha_best_on_dev": best, "test": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
