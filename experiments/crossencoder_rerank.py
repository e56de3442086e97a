"""context2doc: choose the cross-encoder's rerank depth N and mix weight on dev, apply them on test.

    python experiments/crossencoder_rerank.py --split dev --model runs/crossencoder/model --max-top 20 \
        --out experiments/results/crossencoder_dev.json
    python experiments/crossencoder_rerank.py --split test --model runs/crossencoder/model --max-top 20 \
        --apply 10:0.5 --run-dir runs/c2d/ce --out experiments/results/crossencoder_test.json

The first stage (minilm whole-abstract + BM25, z-fused at 0.815) ranks every query; the cross-encoder
scores each query's top `--max-top` once (kept in `--scores`, reused when present). On dev every (N, weight)
of the grid is scored by MRR from those numbers; on test, `--apply N:W` (the setting dev chose) writes a
run folder (`run.trec`, `qrels.trec`, `results.json` with intervals) that `aspire evaluate compare` reads.
The test scores can be computed while dev runs: only the mix is chosen on dev.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from aspire.benchmarks.context2doc import load_context2doc
from aspire.evaluate.context2doc_rerank import cross_scores, first_stage_scores, metrics_of, sweep
from aspire.evaluate.context2doc_run import score_and_write, to_run
from aspire.paths import DATA
from aspire.retrieval.crossencoder import rerank_run
from aspire.scoring.crossencoder import CrossEncoderReranker

WEIGHTS = [0.0, 0.25, 0.5, 0.75, 1.0]


def check_saved_scores(saved: dict, path: Path, args) -> None:
    """ValueError naming `path` when the cross-encoder scores saved there are not this run's: another `--model`, a
    shallower `--max-top`, another `--max-length` or split (where recorded). They were once reused whatever the
    model, so a run reported one cross-encoder's scores under another's name."""
    if not isinstance(saved, dict) or not isinstance(saved.get("scores"), dict):
        raise ValueError(f"{path}: not a cross-encoder scores file (no 'scores' mapping)")
    differ = [f"{key} {saved.get(key)!r} (this run: {want!r})"
              for key, want in (("model", args.model), ("max_length", args.max_length), ("split", args.split))
              if key in saved and saved[key] != want]
    if "model" not in saved:
        differ.append("no model recorded")
    if not isinstance(saved.get("top"), int) or saved["top"] < args.max_top:
        differ.append(f"top {saved.get('top')!r} scored, --max-top {args.max_top} asked")
    if differ:
        raise ValueError(f"{path} holds other cross-encoder scores: {'; '.join(differ)}; give another --scores, or "
                         "remove it to score again")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DATA / "cocite-acl"))
    ap.add_argument("--split", choices=("dev", "test"), default="dev")
    ap.add_argument("--apply", metavar="N:W", help="test: the (top N, weight) dev chose")
    ap.add_argument("--run-dir", help="test: folder for run.trec / qrels.trec / results.json")
    ap.add_argument("--model", required=True)
    ap.add_argument("--max-top", type=int, default=20)
    ap.add_argument("--tops", default="5,10,20")
    ap.add_argument("--max-length", type=int, help="default: the model's own")
    ap.add_argument("--scores", help="cross-encoder scores JSON (default beside --out)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.split == "test" and not (args.apply and args.run_dir):  # before the first stage is encoded
        ap.error("--split test needs --apply N:W (chosen on dev) and --run-dir")
    try:
        tops = [int(t) for t in args.tops.split(",")]
        top, weight = (int(args.apply.split(":")[0]), float(args.apply.split(":")[1])) if args.apply else (None, None)
    except (ValueError, IndexError):
        ap.error(f"--tops takes N,N,... and --apply N:W, got {args.tops!r} and {args.apply!r}")
    deeper = [n for n in tops + ([top] if top else []) if n > args.max_top]
    if deeper:
        ap.error(f"top {deeper[0]} is deeper than --max-top {args.max_top}, the depth the cross-encoder scores")
    scores_path = Path(args.scores or Path(args.out).with_suffix(".scores.json"))
    saved = None
    if scores_path.is_file():  # checked before anything is encoded
        try:
            saved = json.loads(scores_path.read_text())
            check_saved_scores(saved, scores_path, args)
        except ValueError as err:
            ap.error(str(err))
    bench = load_context2doc(args.data, args.split)
    first = to_run(bench, first_stage_scores(bench), 100)
    if saved is not None:
        cross, speed = saved["scores"], saved.get("speed")
    else:
        reranker = CrossEncoderReranker(args.model, args.max_length)
        cross = cross_scores(bench, first, reranker, args.max_top)
        speed = reranker.speed()
        speed["ms_per_query"] = round(1000 * speed["seconds"] / len(bench.queries), 1)
        scores_path.write_text(json.dumps({"model": args.model, "top": args.max_top, "max_length": args.max_length,
                                           "split": args.split, "scores": cross, "speed": speed}))
    if args.split == "test":
        info = {"first_stage": "minilm abstract + BM25, z-fused, alpha 0.815", "rerank": {
            "model": args.model, "top_n": top, "weight": weight, "speed_top": args.max_top, "speed": speed}}
        res = score_and_write(bench, rerank_run(first, cross, top, weight), Path(args.run_dir),
                              f"ce{top}-w{weight:g}", info)
        out = {k: res[k] for k in ("benchmark", "experiment", "metrics", "ci95", "rerank", "n_queries")}
        out["first_stage_metrics"] = metrics_of(bench, first)
        Path(args.out).write_text(json.dumps(out, indent=2))
        print(json.dumps(out, indent=1))
        return
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
