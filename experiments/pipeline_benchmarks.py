"""Each search stage's contribution on CSFCube (two-fold) and reviewer matching (issue 26, item 7).

CSFCube (`csfcube`): `--runs DIR` holds full-pool runs of `aspire evaluate csfcube`, one folder each: bm25/,
abstract/ (the dense first stage), maxp1/ .. maxp3/, ot/; `--cross NAME=FILE` names cross-encoder logits over
every pool pair (the `crossencoder_scores.json` of a `--rerank-top 300 --rerank-weight 1` run). The rows are
composed as `aspire search` composes its stages:

    BM25 alone · dense alone · fused: z(dense) * alpha + z(BM25) * (1 - alpha), per query over the pool
    + max passage: the fused top SHORTLIST re-ranked by beta * z(fused) + (1 - beta) * z(max passage)
    + OT re-rank: the fused top SHORTLIST re-ordered by the OT score alone
    + cross-encoder NAME: the fused top N mixed with its logits at weight w (`aspire.scoring.crossencoder.mix_rerank`)

Every setting is chosen by the two-fold protocol: for each fold K, the setting best on foldK_dev (MAP over
all facets) ranks foldK_test, and each stage after the fusion builds on fold K's own fusion choice. A row's
figure is the mean of the two test folds; intervals resample queries keeping the folds; paired randomisation
tests are against the fused and the dense rows.

Reviewer matching (`reviewers`): `--runs DIR` holds prediction folders of `aspire evaluate reviewers`: bm25/,
abstract/, fused/, maxp2/, ot/, and `--cross NAME=FOLDER` the cross-encoder runs (`NAME=FOLDER@N:W`: its logits
mixed with fused/'s predictions again at top N, weight W, `mix_logits`). No dev split exists, so
every setting is fixed in advance: + max passage is beta * z(fused) + (1 - beta) * z(max passage) per reviewer
with beta = 0.9 (context2doc's dev choice); the OT re-rank of a shortlist that holds all of a reviewer's
(at most 10) submissions is the OT order itself. Intervals over reviewers, paired tests against fused.

    python experiments/pipeline_benchmarks.py csfcube --runs runs/pipe/csf --cross ce400=runs/pipe/csf/ce400-all/crossencoder_scores.json \
        --out experiments/results/pipeline_csfcube.json
    python experiments/pipeline_benchmarks.py reviewers --runs runs/pipe/rev --cross ce400=runs/pipe/rev/ce400 \
        --cross ce400=runs/pipe/rev/ce400@20:0.25 --out experiments/results/pipeline_reviewers.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline_stages import rerank_shortlist  # noqa: E402

from aspire.benchmarks.csfcube import evaluate_csfcube_rankings, load_csfcube, test_units  # noqa: E402
from aspire.benchmarks.pools import query_key  # noqa: E402
from aspire.benchmarks.stats import paired_test  # noqa: E402
from aspire.evaluate.fuse import fuse_runs  # noqa: E402
from aspire.evaluate.pool_stages import read_scored_pool_set  # noqa: E402
from aspire.evaluate.two_fold import FOLDS, select_two_fold  # noqa: E402
from aspire.paths import DATA  # noqa: E402
from aspire.retrieval.crossencoder import rerank_run

ALPHAS = sorted({round(a, 2) for a in np.arange(0, 1.01, 0.1)} | {0.815})
BETAS = [round(b, 1) for b in np.arange(0, 1.01, 0.1)]
TOPS = (5, 10, 20, 50)
WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
REPORTED = ("MAP", "NDCG%20")


# ------------------------------------------------------------------ CSFCube


def flat_run(pool_set, folder: Path) -> dict[str, list[tuple[str, float]]]:
    """`{query key: [(cand, similarity), ...]}` of a run folder (its results.json names the experiment)."""
    exp = json.loads((folder / "results.json").read_text())["experiment"]
    scored = read_scored_pool_set(pool_set, folder, exp)
    return {query_key(q, f): r for f in pool_set.facets for q, r in scored[f].items()}


def scored(pool_set, root: Path, run: dict) -> tuple[dict, dict]:
    """(results with fold means, per-query metrics) of a flat run."""
    rankings = {f: {} for f in pool_set.facets}
    for f in pool_set.facets:
        for q in pool_set.pools[f]:
            rankings[f][q] = [c for c, _ in run[query_key(q, f)]]
    return evaluate_csfcube_rankings(root, rankings)


def choose(pool_set, root: Path, grids: dict[str, dict[str, dict]]) -> tuple[dict, dict]:
    """Per fold, the best of `grids[fold]` ({setting: flat run}) on that fold's dev half; returns the
    choices and the composite per-query metrics (each fold's test queries from its own choice)."""
    chosen, per_query = {}, {}
    for fold in FOLDS:
        evaluated = {name: scored(pool_set, root, run) for name, run in grids[fold].items()}
        chosen[fold] = select_two_fold({n: r for n, (r, _) in evaluated.items()})["chosen"][fold]
        for key in pool_set.splits[f"all/{fold}_test"]:
            per_query[key] = evaluated[chosen[fold]][1][key]
    return chosen, per_query


def csfcube(args) -> dict:
    root = Path(args.data)
    pool_set = load_csfcube(root)
    runs = Path(args.runs)
    base = {name: flat_run(pool_set, runs / name) for name in ("bm25", "abstract", "maxp1", "maxp2", "maxp3", "ot")}
    fused = {a: fuse_runs([base["abstract"], base["bm25"]], [a, 1 - a]) for a in ALPHAS}
    rows: dict[str, tuple[dict, dict]] = {  # name: (per-query metrics, choices)
        "BM25 alone (k1 1.25, b 0.75; query: the facet's sentences)": (scored(pool_set, root, base["bm25"])[1], {}),
        "dense alone (minilm whole-abstract vector)": (scored(pool_set, root, base["abstract"])[1], {}),
    }
    alpha_of, per_query = choose(pool_set, root, {fold: {f"alpha {a:g}": fused[a] for a in ALPHAS} for fold in FOLDS})
    rows["fused (z; alpha on dense chosen two-fold)"] = (per_query, alpha_of)
    first = {fold: fused[float(alpha_of[fold].split()[1])] for fold in FOLDS}
    grids = {fold: {f"window {w}, beta {b:g}": rerank_shortlist(first[fold], base[f"maxp{w}"], args.shortlist, b)
                    for w in (1, 2, 3) for b in BETAS} for fold in FOLDS}
    rows[f"+ max-passage re-rank of the top {args.shortlist} (window, beta two-fold)"] = choose(pool_set, root, grids)[::-1]
    grids = {fold: {"OT": rerank_shortlist(first[fold], base["ot"], args.shortlist, None)} for fold in FOLDS}
    rows[f"+ OT re-rank of the top {args.shortlist} (instead)"] = choose(pool_set, root, grids)[::-1]
    for spec in args.cross or []:
        name, _, path = spec.partition("=")
        cross = json.loads(Path(path).read_text())
        alone = {q: sorted(cross[q].items(), key=lambda kv: (-kv[1], kv[0])) for q in base["abstract"]}
        rows[f"cross-encoder {name} alone (every pool pair)"] = (scored(pool_set, root, alone)[1], {})
        grids = {fold: {f"top {n}, weight {w:g}": rerank_run(first[fold], cross, n, w) for n in TOPS for w in WEIGHTS}
                 for fold in FOLDS}
        rows[f"+ cross-encoder {name} (instead; top N, weight two-fold)"] = choose(pool_set, root, grids)[::-1]
    return table(pool_set, rows, "fused (z; alpha on dense chosen two-fold)", "dense alone (minilm whole-abstract vector)")


def table(pool_set, rows: dict, fused_name: str, dense_name: str) -> dict:
    out = []
    units = {name: {m: test_units(pool_set, pq, m) for m in REPORTED} for name, (pq, _) in rows.items()}
    for name, (_, chosen) in rows.items():
        row = {"stage": name, "chosen": chosen}
        for m in REPORTED:
            row[m] = units[name][m].value()
            row[f"{m}_ci95"] = list(units[name][m].bootstrap())
            for ref, label in ((fused_name, "vs_fused"), (dense_name, "vs_dense")):
                if name != ref:
                    test = paired_test(units[name][m], units[ref][m])
                    row[f"{m}_{label}"] = {k: test[k] for k in ("delta", "ci95", "p_value")}
        out.append(row)
        line = "  ".join(f"{m} {row[m]:.2f} [{row[m + '_ci95'][0]:.2f}, {row[m + '_ci95'][1]:.2f}]" for m in REPORTED)
        vs = row.get("MAP_vs_fused")
        print(f"{name:<75} {line}" + (f"  dMAP vs fused {vs['delta']:+.2f} [{vs['ci95'][0]:.2f}, {vs['ci95'][1]:.2f}] "
                                      f"p={vs['p_value']:.3f}" if vs else "") + (f"  {chosen}" if chosen else ""))
    return {"rows": out}


# ------------------------------------------------------------------ reviewer matching


def reviewers(args) -> dict:
    from aspire.benchmarks.reviewers import (
        load_reviewer_set,
        prediction_files,
        read_predictions,
        reviewer_units,
        summarize,
    )
    from aspire.evaluate.reviewer_run import fuse_predictions, mix_logits

    rset = load_reviewer_set(Path(args.data))

    def predictions(folder: Path) -> list[dict]:
        exp = json.loads((folder / "results.json").read_text())["experiment"]
        return [read_predictions(p) for p in prediction_files(folder / "predictions", exp, rset)]

    runs = Path(args.runs)
    preds = {
        "BM25 alone (k1 1.25, b 0.75; query: the submission's title + abstract)": predictions(runs / "bm25"),
        "dense alone (minilm whole-abstract vector)": predictions(runs / "abstract"),
        "fused (z per reviewer, 0.815 on dense, fixed in advance)": predictions(runs / "fused"),
    }
    fused = preds["fused (z per reviewer, 0.815 on dense, fixed in advance)"]
    preds[f"+ max passage (window 2): beta {args.beta:g} on fused, fixed in advance"] = fuse_predictions(
        [fused, predictions(runs / "maxp2")], [args.beta, 1 - args.beta])
    preds["+ OT re-rank (instead; the shortlist holds every submission: the OT order)"] = predictions(runs / "ot")
    for spec in args.cross or []:  # NAME=FOLDER (its predictions) or NAME=FOLDER@N:W (its logits mixed again)
        name, _, rest = spec.partition("=")
        folder, _, setting = rest.partition("@")
        meta = json.loads((Path(folder) / "results.json").read_text())["rerank"]
        top, weight = (int(setting.split(":")[0]), float(setting.split(":")[1])) if setting else (meta["top_n"],
                                                                                                  meta["weight"])
        label = f"+ cross-encoder {name} (top {top}, weight {weight:g}, fixed in advance" + (
            "; logits remixed)" if setting else ")")
        if setting:
            logits = json.loads((Path(folder) / "crossencoder_scores.json").read_text())
            known = {p for draw in rset.draws for p in draw.submissions} | {
                a for draw in rset.draws for papers in draw.archives.values() for a, _, _ in papers}
            preds[label] = mix_logits(rset, known, fused, logits, top, weight, meta["aggregate"])
        else:
            preds[label] = predictions(Path(folder))
    units = {name: reviewer_units(rset, p) for name, p in preds.items()}
    ref = "fused (z per reviewer, 0.815 on dense, fixed in advance)"
    out = []
    for name, (u, counts) in units.items():
        row = {"stage": name, **{k: v for k, v in summarize(u, counts).items() if k in ("loss", "ci95", "n_reviewers")}}
        if name != ref:
            test = paired_test(u, units[ref][0])
            row["loss_vs_fused"] = {k: test[k] for k in ("delta", "ci95", "p_value")}
        out.append(row)
        vs = row.get("loss_vs_fused")
        print(f"{name:<80} loss {row['loss']:.3f} [{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}]"
              + (f"  vs fused {vs['delta']:+.3f} [{vs['ci95'][0]:.3f}, {vs['ci95'][1]:.3f}] p={vs['p_value']:.3f}"
                 if vs else ""))
    return {"rows": out}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("benchmark", choices=("csfcube", "reviewers"))
    p.add_argument("--runs", required=True, help="folder of the first-stage runs (see the module)")
    p.add_argument("--data", help="the benchmark's data folder (default ../shared/data/BENCHMARK)")
    p.add_argument("--cross", action="append", metavar="NAME=PATH", help="cross-encoder logits (csfcube) or run (reviewers)")
    p.add_argument("--shortlist", type=int, default=100, help="csfcube: re-ranked top (default 100, as search)")
    p.add_argument("--beta", type=float, default=0.9, help="reviewers: weight on fused against max passage")
    p.add_argument("--out", help="write the rows as JSON here")
    args = p.parse_args()
    args.data = args.data or str(DATA / ("csfcube" if args.benchmark == "csfcube" else "reviewer-matching"))
    result = (csfcube if args.benchmark == "csfcube" else reviewers)(args)
    if args.out:
        Path(args.out).write_text(json.dumps({"benchmark": args.benchmark, "runs": args.runs, "cross": args.cross,
                                              **result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
