"""Each search stage's contribution on context2doc, as the search pipeline composes them (issue 26, item 7).

Input: full-depth run files (all 768 candidates ranked) of one split, written by
`python -m aspire.evaluate context2doc --depth 768`: BM25, the whole-abstract vector (dense), the
max-passage scorer at windows 1..3, and OT. Rows, as `aspire search` builds them:

    BM25 alone · dense alone · fused (z-scores, 0.815 on dense: the suite's setting, checked on dev)
    + max-passage: the fused run's top SHORTLIST re-ranked by beta * z(fused) + (1 - beta) * z(max passage),
      z over the shortlist (aspire.retrieval.rerank), window and beta chosen on dev
    + OT re-rank: the fused run's top SHORTLIST re-ordered by the OT score alone

Everything below the shortlist keeps the fused order. `--choose` scores the grid of window x beta on
the dev runs and prints the best by MRR; `--window`/`--beta` then score one setting on test with 95%
bootstrap intervals and paired tests against the fused run.

    python experiments/pipeline_stages.py --runs runs/pipe/c2d-dev --choose
    python experiments/pipeline_stages.py --runs runs/pipe/c2d-test --window 1 --beta 0.7 --out experiments/results/pipeline_context2doc.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aspire.benchmarks.runs import mean_scores, per_query, read_qrels, read_run  # noqa: E402
from aspire.benchmarks.stats import UnitScores, paired_test  # noqa: E402
from aspire.evaluate.fuse import fuse_runs  # noqa: E402
from aspire.scoring.fusion import normalise  # noqa: E402

METRICS = ("MRR", "nDCG@10", "R@100", "MAP")


def rerank_shortlist(first: dict, stage: dict, shortlist: int, beta: float | None) -> dict:
    """Per query, the top `shortlist` of `first` re-ordered by the stage's score (beta None) or by
    beta * z(first) + (1 - beta) * z(stage) over the shortlist; the rest keeps `first`'s order."""
    out = {}
    for q, ranked in first.items():
        head, tail = ranked[:shortlist], ranked[shortlist:]
        own = dict(stage[q])
        f = np.array([s for _, s in head])
        g = np.array([own[d] for d, _ in head])
        score = g if beta is None else beta * normalise(f, "z") + (1 - beta) * normalise(g, "z")
        order = np.argsort(-score, kind="stable")
        top = [(head[i][0], float(len(ranked) * 2 - r)) for r, i in enumerate(order)]
        out[q] = top + [(d, float(len(tail) - r)) for r, (d, _) in enumerate(tail)]
    return out


def check_dev_runs(root: Path) -> None:
    """ValueError naming the run folder under `root` whose `results.json` (written by `aspire evaluate context2doc`)
    says it ranked another split than dev: `--choose` picks the window and beta, which must be chosen on dev only."""
    for name in ("bm25", "abstract", "maxp1", "maxp2", "maxp3", "ot"):
        path = root / name / "results.json"
        if path.is_file():
            bench = json.loads(path.read_text(encoding="utf-8")).get("benchmark", "")
            if bench != "context2doc-dev":
                raise ValueError(f"{path}: a {bench or 'unnamed'} run; --choose chooses on context2doc dev runs only")


def scores(qrels, run) -> dict:
    return per_query(qrels, {q: r[:100] for q, r in run.items()}, METRICS)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", required=True, help="folder holding bm25/, abstract/, maxp1..3/, ot/ (run.trec each)")
    p.add_argument("--shortlist", type=int, default=100)
    p.add_argument("--alpha", type=float, default=0.815, help="fusion weight on the dense run")
    p.add_argument("--choose", action="store_true", help="grid over window x beta, best by MRR (use on dev)")
    p.add_argument("--window", type=int, default=1)
    p.add_argument("--beta", type=float, default=0.5)
    p.add_argument("--out", help="write the rows as JSON here")
    args = p.parse_args()
    root = Path(args.runs)
    if args.choose:
        try:
            check_dev_runs(root)
        except ValueError as err:
            p.error(str(err))
    qrels = read_qrels(root / "bm25" / "qrels.trec")
    bm25, dense = read_run(root / "bm25" / "run.trec"), read_run(root / "abstract" / "run.trec")
    fused = fuse_runs([dense, bm25], [args.alpha, 1 - args.alpha])
    if args.choose:
        grid = []
        for w in (1, 2, 3):
            maxp = read_run(root / f"maxp{w}" / "run.trec")
            for beta in np.round(np.arange(0, 1.01, 0.1), 2):
                mrr = mean_scores(scores(qrels, rerank_shortlist(fused, maxp, args.shortlist, float(beta))))["MRR"]
                grid.append({"window": w, "beta": float(beta), "MRR": mrr})
        base = mean_scores(scores(qrels, fused))["MRR"]
        best = max(grid, key=lambda r: r["MRR"])
        print(json.dumps({"fused_MRR": base, "best": best, "grid": grid}, indent=1))
        if args.out:
            Path(args.out).write_text(json.dumps({"split": str(root), "fused_MRR": base, "best": best, "grid": grid},
                                                 indent=1) + "\n")
        return
    maxp = read_run(root / f"maxp{args.window}" / "run.trec")
    runs = {
        "BM25 alone": bm25,
        "dense alone (minilm whole-abstract)": dense,
        f"fused (z, {args.alpha} on dense)": fused,
        f"+ max-passage (window {args.window}, beta {args.beta})": rerank_shortlist(fused, maxp, args.shortlist,
                                                                                   args.beta),
        "+ OT re-rank (OT alone over the shortlist)": rerank_shortlist(fused, read_run(root / "ot" / "run.trec"),
                                                                       args.shortlist, None),
    }
    per = {name: scores(qrels, run) for name, run in runs.items()}
    fused_name = f"fused (z, {args.alpha} on dense)"
    rows = []
    for name, values in per.items():
        row = {"stage": name, "n_queries": len(qrels)}
        for m in METRICS:
            units = UnitScores.means(values[m])
            row[m] = units.value()
            row[m + "_ci95"] = list(units.bootstrap())
        if name != fused_name:
            test = paired_test(UnitScores.means(values["MRR"]), UnitScores.means(per[fused_name]["MRR"]))
            row["MRR_vs_fused"] = {k: test[k] for k in ("delta", "ci95", "p_value")}
        rows.append(row)
        print(f"{name:<55} " + "  ".join(f"{m} {row[m]:.3f} [{row[m + '_ci95'][0]:.3f}, {row[m + '_ci95'][1]:.3f}]"
                                         for m in METRICS)
              + (f"  ΔMRR vs fused {row['MRR_vs_fused']['delta']:+.3f} {row['MRR_vs_fused']['ci95']} "
                 f"p={row['MRR_vs_fused']['p_value']:.3f}" if "MRR_vs_fused" in row else ""))
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": str(root), "shortlist": args.shortlist, "rows": rows},
                                             indent=1) + "\n")


if __name__ == "__main__":
    main()
