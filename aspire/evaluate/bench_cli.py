"""Command line of the benchmarks beyond CSFCube: `reviewers`, `context2doc`, `compare`, `fuse-runs`, `suite`.

    python -m aspire.evaluate reviewers --predictions ../shared/data/reviewer-matching/predictions:specter
    python -m aspire.evaluate reviewers --model minilm --scorer abstract --aggregate topk:3 --out runs/rev
    python -m aspire.evaluate reviewers --bm25 --out runs/rev-bm25
    python -m aspire.evaluate reviewers --model minilm --scorer abstract --max-length 256 --normalize --joiner ' ' \
        --bm25-alpha 0.815 --rerank runs/ce/model --rerank-top 20 --rerank-weight 0.5 --out runs/rev-ce
    python -m aspire.evaluate context2doc --bm25 --out runs/c2d-bm25
    python -m aspire.evaluate context2doc --model minilm --scorer abstract --normalize --joiner ' ' \
        --bm25-alpha 0.815 --out runs/c2d-fused
    python -m aspire.evaluate context2doc --model minilm --scorer abstract --max-length 256 --normalize \
        --joiner ' ' --bm25-alpha 0.815 --rerank runs/crossencoder/model --rerank-top 30 --out runs/c2d-ce
    python -m aspire.evaluate compare runs/c2d-fused runs/c2d-bm25
    python -m aspire.evaluate compare runs/a.run runs/b.run --qrels qrels.txt --metric MAP --out runs/a-vs-b.json
    python -m aspire.evaluate fuse-runs runs/c2d-dense runs/c2d-bm25 --weights 0.815,0.185 --out runs/c2d-fused2
    python -m aspire.evaluate fuse-runs runs/a.run runs/b.run runs/c.run --method rrf --qrels qrels.txt --out runs/rrf
    python -m aspire.evaluate suite --model minilm --scorer minl2 --out runs/suite-minilm-minl2
    python -m aspire.evaluate suite --model mpnet --scorer abstract --bm25-alpha 0.815 --out runs/suite-mpnet
    python -m aspire.evaluate suite --model minilm --scorer ot --backend onnx --quantize int8 --out runs/suite-int8
    python -m aspire.evaluate suite --ensemble configs/ensemble_minilm.yaml --out runs/suite-ensemble
    python -m aspire.evaluate venue --model minilm --out runs/scirepeval/minilm/venue
    python -m aspire.evaluate venue --model minilm --labels my_labels.jsonl --out runs/scirepeval/my-labels
    python -m aspire.evaluate year --model minilm --out runs/scirepeval/minilm/year
    python -m aspire.evaluate year --model runs/my_model/best --out runs/scirepeval/mine/year --compare runs/scirepeval/minilm/year
    python -m aspire.evaluate same-author --model mpnet --out runs/scirepeval/mpnet/same-author
    python -m aspire.evaluate same-author --model runs/codes/best --code [PRX] --out runs/scirepeval/codes/same-author
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from aspire.benchmarks import BENCHMARKS
from aspire.cliutil import add_backend_options, backend_options, code_option, normalize_overrides, positive_int
from aspire.evaluate.options import scorer_options
from aspire.paths import DATA
from aspire.scoring.fusion import METHODS as FUSION_METHODS
from aspire.scoring.fusion import fusion_method

COMMANDS = ("reviewers", "context2doc", "compare", "fuse-runs", "suite", "venue", "year", "same-author")
PROBE_HELP = {"venue": "ACL venue classification: macro-F1 of a linear probe (SciRepEval's classification format)",
              "year": "ACL year of publication: Kendall tau and RMSE of a ridge probe (SciRepEval's regression format)",
              "same-author": "ACL same-author proximity: MAP / nDCG@10 (SciRepEval's proximity format)"}


def _encoder_args(p: argparse.ArgumentParser, scorers, scorer_help: str = "how two papers' sentences are compared",
                  out_required: bool = True) -> None:
    from aspire.evaluate.cache import default_cache_dir

    p.add_argument("--model", help="minilm, mpnet or a local model directory")
    p.add_argument("--scorer", choices=scorers, help=scorer_help)
    p.add_argument("--encoding", choices=("contextual", "independent"), default="contextual",
                   help="sentence vectors in context (default) or each sentence alone")
    p.add_argument("--tau", type=float, help="OT scorer temperature")
    p.add_argument("--eps", type=float, help="OT scorer entropic regularisation")
    p.add_argument("--window", type=positive_int, help="maxpassage scorer: sentences per passage (default 1)")
    p.add_argument("--max-length", type=int, help="word-piece limit of the whole-abstract vector")
    p.add_argument("--normalize", action="store_true", help="L2-normalise whole-abstract vectors")
    p.add_argument("--joiner", help="whole-abstract vector: join title and abstract with this text")
    p.add_argument("--cache-dir", default=str(default_cache_dir()), help="vector cache (default %(default)s)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the vector cache")
    p.add_argument("--batch-size", type=int, default=32, help="papers per encoder batch (default 32)")
    p.add_argument("--device", help="torch device (default: the model's)")
    add_backend_options(p)
    p.add_argument("--code", help="model with control codes: the code every query and paper gets (default: the "
                                  "model's own, its first task's; e.g. [CONTEXT2DOC]); none for no code")
    p.add_argument("--out", required=out_required, help="output folder")


def _options(args, scorers: list[str] | None = None) -> dict:
    """The runners' keyword options from the parsed arguments; `scorers` (default: `--scorer`) decide
    whether the whole-abstract options (`--max-length`, `--normalize`, `--joiner`) apply."""
    encode = {k: v for k, v in (("max_length", args.max_length), ("normalize", args.normalize or None),
                                ("joiner", args.joiner)) if v is not None}
    if encode and "abstract" not in (scorers or [args.scorer]) and args.encoding == "contextual":
        raise ValueError("--max-length/--normalize/--joiner apply to --scorer abstract or --encoding independent")
    return {"encoder_options": {**backend_options(args), **code_option(args.code)},
            "encoding": args.encoding,
            "scorer_options": scorer_options(",".join(scorers or [args.scorer or ""]), args.tau, args.eps, args.window),
            "cache_dir": None if args.no_cache else args.cache_dir, "batch_size": args.batch_size,
            "device": args.device, "encode_options": encode}


def _probe_args(p: argparse.ArgumentParser) -> None:
    """The SciRepEval formats' model options: no scorer, their two representations are fixed (`aspire.evaluate.probes`)."""
    from aspire.evaluate.cache import default_cache_dir

    options = {"--model": dict(required=True, help="minilm, mpnet or a local model directory"),
               "--code": dict(help="model with control codes: the code every paper gets (default: the model's own)"),
               "--cache-dir": dict(default=str(default_cache_dir()), help="vector cache (default %(default)s)"),
               "--no-cache": dict(action="store_true", help="do not read or write the vector cache"),
               "--batch-size": dict(type=int, default=32, help="papers per encoder batch (default 32)"),
               "--device": dict(help="torch device (default: the model's)"),
               "--out": dict(required=True, help="output folder")}
    for flag, settings in options.items():
        p.add_argument(flag, **settings)
    add_backend_options(p)


def add_stage_args(p: argparse.ArgumentParser, documents: str = "title + abstract") -> None:
    """The search pipeline's stages as evaluator options: BM25 (alone or fused with the model) and a
    cross-encoder rerank of the top N (`stage_options` reads them)."""
    p.add_argument("--bm25", action="store_true", help=f"BM25 over {documents} (alone, or fused with --model)")
    p.add_argument("--bm25-alpha", type=float, help="fuse the model with BM25: z-scores, this weight on the model")
    p.add_argument("--k1", type=float, default=1.25, help="BM25 k1 (default 1.25)")
    p.add_argument("--b", type=float, default=0.75, help="BM25 b (default 0.75)")
    p.add_argument("--rerank", metavar="MODEL", help="re-score the top N with this cross-encoder (a directory)")
    p.add_argument("--rerank-top", type=int, default=50, help="documents re-scored per query (default 50)")
    p.add_argument("--rerank-weight", type=float, default=1.0,
                   help="weight on the cross-encoder's z-scores against the first stage's (default 1: replace)")
    p.add_argument("--rerank-max-length", type=int,
                   help="cross-encoder word pieces (default: the length the model was trained with)")


def stage_options(parser, args) -> tuple[bool, float | None, object]:
    """(BM25 on, fusion weight on the model or None, `RerankOptions` or None) from `add_stage_args`' options;
    a parser error when they do not fit together or with `--model`."""
    if args.bm25_alpha is not None and not args.model:
        parser.error("--bm25-alpha fuses a model with BM25: give --model and --scorer")
    rerank = None
    if args.rerank:
        from aspire.retrieval.crossencoder import RerankOptions

        rerank = RerankOptions(args.rerank, args.rerank_top, args.rerank_weight, args.rerank_max_length)
    elif (args.rerank_top, args.rerank_weight, args.rerank_max_length) != (50, 1.0, None):
        parser.error("--rerank-top/--rerank-weight/--rerank-max-length go with --rerank MODEL")
    return args.bm25 or args.bm25_alpha is not None, args.bm25_alpha, rerank


def add_parsers(sub) -> None:
    from aspire.evaluate.options import SCORERS

    pr = sub.add_parser("reviewers", help="reviewer matching (Stelmakh et al. 2023): weighted Kendall-tau loss",
                        description="Score published predictions (--predictions DIR:EXP) or a model's.")
    pr.add_argument("--data", default=str(DATA / "reviewer-matching"), help="data folder (default %(default)s)")
    pr.add_argument("--predictions", metavar="DIR:EXP", help="score the files DIR/EXP_d_20_N_ta.json as given")
    pr.add_argument("--aggregate", default="max", help="over a reviewer's papers: max (default), mean, topk:K")
    pr.add_argument("--weights", help="comma-separated weights when --scorer lists several (fused)")
    pr.add_argument("--exp", help="experiment name of the written predictions (default model-scorer-aggregate)")
    add_stage_args(pr, "title + abstract (a submission's against each archive paper's)")
    _encoder_args(pr, None, f"one of {', '.join(SCORERS)}, or several comma-separated (fused by z-score)",
                  out_required=False)

    pc = sub.add_parser("context2doc", help="citation-context retrieval on the committed split",
                        description="Each citing sentence a query, its cited abstracts relevant, all 768 candidates.")
    pc.add_argument("--data", default=str(DATA / "cocite-acl"), help="co-citation folder (default %(default)s)")
    pc.add_argument("--split", choices=("train", "dev", "test"), default="test", help="default test")
    add_stage_args(pc)
    pc.add_argument("--depth", type=int, default=100, help="documents written per query (default 100)")
    pc.add_argument("--exp", help="run tag (default from model/scorer)")
    pc.add_argument("--search-pipeline", nargs="*", metavar="KEY=VALUE",
                    help="score `aspire search` itself: index the candidates with --model and answer each query "
                         "with the Searcher, these search-config overrides (e.g. stages=ann,bm25 rerank=none)")
    _encoder_args(pc, SCORERS)

    pm = sub.add_parser("compare", help="paired test of two runs of one benchmark",
                        description=(__import__("aspire.evaluate.compare", fromlist=["x"]).__doc__ or "").split("\n")[0])
    pm.add_argument("run_a", help="run file, results folder, or reviewer predictions DIR:EXP")
    pm.add_argument("run_b", help="the other run")
    pm.add_argument("--qrels", help="TREC qrels (for run files)")
    pm.add_argument("--metric", action="append", help="metric (repeatable; default MRR, nDCG@10, MAP; two CSFCube "
                    "folders: MAP, NDCG%%20, overall and per facet)")
    pm.add_argument("--data", default=str(DATA / "reviewer-matching"), help="reviewer-matching folder")
    pm.add_argument("--permutations", type=int, default=10000, help="randomisation test samples (default 10000)")
    pm.add_argument("--out", help="write the comparison (with per-query deltas) as JSON here")

    pu = sub.add_parser("fuse-runs", help="fuse TREC runs of one benchmark (weighted normalised scores or RRF)")
    pu.add_argument("runs", nargs="+", help="two or more run files or results folders (run.trec + qrels.trec)")
    pu.add_argument("--weights", help="comma-separated, one per run (default equal)")
    pu.add_argument("--fusion", choices=FUSION_METHODS, default=None,
                    help="z or minmax (per-query normalised weighted sum) or rrf (default z)")
    pu.add_argument("--norm", choices=("zmuv", "min-max"), help="older spelling: --norm zmuv is --fusion z, min-max minmax")
    pu.add_argument("--method", choices=("wsum", "rrf"), help="older spelling: --method rrf is --fusion rrf")
    pu.add_argument("--qrels", help="TREC qrels to score the fused run (default: the first folder's)")
    pu.add_argument("--metric", action="append", help="metric (repeatable; default MRR, nDCG@10, MAP)")
    pu.add_argument("--out", required=True, help="output folder (run.trec, qrels.trec, results.json)")

    for name, purpose in PROBE_HELP.items():
        pf = sub.add_parser(name, help=purpose, description=purpose + "; see aspire.evaluate.probes")
        pf.add_argument("--data", default=str(DATA / "acl-anthology"), help="ACL folder (default %(default)s)")
        if name != "same-author":
            pf.add_argument("--labels", help="your own labels: JSONL of paper_id and label for every paper of the split")
        pf.add_argument("--compare", metavar="DIR", help="paired tests against another results folder of this format")
        _probe_args(pf)

    ps = sub.add_parser("suite", help="every registered benchmark (" + ", ".join(BENCHMARKS) + ") in one table")
    ps.add_argument("--data", default=str(DATA),
                    help="folder holding " + ", ".join(b.folder + "/" for b in BENCHMARKS.values()))
    ps.add_argument("--benchmarks", nargs="+", choices=list(BENCHMARKS), metavar="NAME",
                    help="run only these (default: all of " + ", ".join(BENCHMARKS) + ")")
    ps.add_argument("--aggregate", default="max", help="reviewer matching aggregate (default max)")
    ps.add_argument("--bm25-alpha", type=float, help="context2doc: fuse with BM25 at this weight on the model")
    ps.add_argument("--ensemble", metavar="YAML",
                    help="an ensemble (configs/ensemble_*.yaml: members, weights, fusion) instead of --model/--scorer")
    _encoder_args(ps, SCORERS)


def fusion_option(fusion: str | None, old: str | None, parser) -> str:
    """`--fusion`, or its older spelling (`--norm zmuv|min-max`, `--method rrf`) with a one-line note; not both."""
    if fusion and old:
        parser.error("give --fusion alone (--norm / --method are its older spelling)")
    if old:
        fusion = fusion_method(old)
        print(f"note: {old!r} is read as --fusion {fusion}", file=sys.stderr)
    return fusion or "z"


def _fail(err: Exception) -> int:
    print(f"error: {err}", file=sys.stderr)
    return 2


def run_command(parser, args) -> int:
    """Run one of this module's subcommands; a user error is one line on stderr and exit status 2."""
    try:
        return {"reviewers": _reviewers, "context2doc": _context2doc, "compare": _compare, "suite": _suite,
                "fuse-runs": _fuse_runs, **dict.fromkeys(PROBE_HELP, _probe)}[
            args.command](parser, args)
    except ValueError as err:
        return _fail(err)


def _reviewers(parser, args) -> int:
    from aspire.benchmarks.reviewers import (
        load_reviewer_set,
        prediction_files,
        read_predictions,
        reviewer_units,
        summarize,
    )
    from aspire.evaluate.reviewer_run import format_result, run_reviewers

    rset = load_reviewer_set(args.data)
    if args.predictions:
        if args.model or args.scorer or args.bm25 or args.bm25_alpha is not None or args.rerank:
            parser.error("--predictions scores given files; leave out --model/--scorer/--bm25/--rerank")
        folder, sep, exp = args.predictions.rpartition(":")
        if not sep:
            parser.error("--predictions takes DIR:EXP")
        preds = [read_predictions(p) for p in prediction_files(folder, exp, rset)]
        results = summarize(*reviewer_units(rset, preds))
        print(f"{exp}: {format_result(results)}")
        print("per draw: " + " ".join(f"{x:.4f}" for x in results["per_draw"]))
        if args.out:
            from aspire.io import write_json

            write_json(Path(args.out) / "results.json", {"benchmark": "reviewer-matching", "experiment": exp,
                                                               "predictions": folder, **results}, indent=None)
        return 0
    from aspire.evaluate.pool_stages import stage_exp

    bm25, alpha, rerank = stage_options(parser, args)
    if not args.out or not ((args.model and args.scorer) or (bm25 and not (args.model or args.scorer))):
        parser.error("give --predictions DIR:EXP, or --model, --scorer (and/or --bm25) and --out")
    scorers = args.scorer.split(",") if args.scorer else []
    weights = [float(w) for w in args.weights.split(",")] if args.weights else None
    base = f"{Path(args.model).name}-{'+'.join(scorers)}" if args.model else None
    exp = args.exp or f"{stage_exp(base, bm25, alpha, rerank)}-{args.aggregate.replace(':', '')}"
    opts = _options(args, scorers) if args.model else {}
    results = run_reviewers(rset, args.model, scorers, args.out, exp, args.aggregate, weights, **opts, bm25=bm25,
                            alpha=alpha, k1=args.k1, b=args.b, rerank=rerank)
    print(f"{exp}: {format_result(results)}")
    print("per draw: " + " ".join(f"{x:.4f}" for x in results["per_draw"]))
    if rerank is not None:
        speed = results["rerank"]["speed"]
        print(f"cross-encoder: {results['rerank']['distinct_pairs']} distinct pairs, {speed['pairs_per_second']} "
              f"pairs/s")
    print(f"papers {results['texts']['papers']}, empty abstracts {results['texts']['empty_abstract']} (title only), "
          f"no text {results['texts']['no_text']} (left out); wrote {args.out}")
    return 0


def _context2doc(parser, args) -> int:
    from aspire.benchmarks.context2doc import load_context2doc
    from aspire.evaluate.context2doc_run import format_result, run_context2doc
    from aspire.evaluate.pool_stages import stage_exp

    if args.search_pipeline is not None:
        return _context2doc_search(parser, args)
    if args.model and not args.scorer:
        parser.error("--model needs --scorer")
    bm25, alpha, rerank = stage_options(parser, args)
    bench = load_context2doc(args.data, args.split)
    exp = args.exp or stage_exp(f"{Path(args.model).name}-{args.scorer}" if args.model else None, bm25, alpha, rerank)
    dense = _options(args) if args.model else {}
    results = run_context2doc(bench, args.out, exp, args.model, args.scorer, bm25=bm25,
                              alpha=alpha, k1=args.k1, b=args.b, depth=args.depth, rerank=rerank, **dense)
    print(f"context2doc {args.split} ({results['n_queries']} queries) {exp}: {format_result(results)}")
    if rerank is not None:
        speed = results["rerank"]["speed"]
        print(f"cross-encoder: {speed['pairs']} pairs, {speed['pairs_per_second']} pairs/s, "
              f"{speed['ms_per_query']} ms a query")
    print(f"wrote {Path(args.out) / 'run.trec'}")
    return 0


def _context2doc_search(parser, args) -> int:
    """`context2doc --search-pipeline ...`: the benchmark through `aspire search`'s Searcher."""
    from aspire.benchmarks.context2doc import load_context2doc
    from aspire.evaluate.context2doc_run import format_result
    from aspire.evaluate.search_run import run_search_pipeline, search_exp

    if not args.model:
        parser.error("--search-pipeline needs --model (the model the candidates are indexed with)")
    if args.scorer or args.bm25 or args.rerank:
        parser.error("--search-pipeline takes its stages as search-config overrides (stages=, rerank=, fuse=); "
                     "leave out --scorer, --bm25 and --rerank")
    overrides = normalize_overrides(args.search_pipeline, section="search")
    exp = args.exp or search_exp(args.model, overrides)
    results = run_search_pipeline(load_context2doc(args.data, args.split), args.out, exp, args.model, overrides,
                                  args.depth, encoder_options=backend_options(args))
    print(f"context2doc {args.split} ({results['n_queries']} queries) {exp}: {format_result(results)}")
    if results["short_of_depth"]["queries"]:
        print(f"{results['short_of_depth']['queries']} queries found fewer than {args.depth} papers "
              f"(fewest {results['short_of_depth']['fewest']})")
    print(f"wrote {args.out}")
    return 0


def _compare(parser, args) -> int:
    from aspire.evaluate.compare import compare, format_comparison
    from aspire.io import write_json

    result = compare(args.run_a, args.run_b, args.qrels, args.metric, args.data,
                     n_perm=args.permutations)
    print("\n".join(format_comparison(result)))
    if args.out:
        write_json(args.out, result, indent=None)
    return 0


def _fuse_runs(parser, args) -> int:
    from aspire.benchmarks.runs import mean_scores, per_query, read_qrels, read_run, write_qrels, write_run
    from aspire.evaluate.compare import DEFAULT_METRICS
    from aspire.evaluate.fuse import fuse_runs
    from aspire.io import write_json

    if len(args.runs) < 2:
        parser.error("give two or more runs")
    paths = [Path(r) / "run.trec" if Path(r).is_dir() else Path(r) for r in args.runs]
    qrels_path = args.qrels or (Path(args.runs[0]) / "qrels.trec" if Path(args.runs[0]).is_dir() else None)
    weights = [float(w) for w in args.weights.split(",")] if args.weights else None
    fusion = fusion_option(args.fusion, "rrf" if args.method == "rrf" else args.norm, parser)
    fused = fuse_runs([read_run(p) for p in paths], weights, fusion)
    out = Path(args.out)
    write_run(out / "run.trec", fused, "fused")
    results = {"fused_from": [str(p) for p in paths], "fusion": fusion, "weights": weights}
    if qrels_path:
        qrels = read_qrels(qrels_path)
        write_qrels(out / "qrels.trec", qrels)
        results["metrics"] = mean_scores(per_query(qrels, fused, args.metric or DEFAULT_METRICS))
        print("  ".join(f"{m} {v:.4f}" for m, v in results["metrics"].items()))
    write_json(out / "results.json", results, indent=None)
    print(f"wrote {out / 'run.trec'}")
    return 0


def _probe(parser, args) -> int:
    from aspire.evaluate.probes import compare_probe_results, run_format

    res = run_format(args.command, args.data, args.model, args.out, None if args.no_cache else args.cache_dir,
                     args.batch_size, args.device, {**backend_options(args), **code_option(args.code)},
                     getattr(args, "labels", None))
    for rep, r in res["representations"].items():
        print(rep, "  ".join(f"{m} {v:.4f} [{r['ci95'][m][0]:.4f}, {r['ci95'][m][1]:.4f}]" for m, v in r["metrics"].items()),
              r.get("chosen", ""))
    if args.compare:
        tests = compare_probe_results(args.out, args.compare)
        print(json.dumps(tests, indent=1))
        from aspire.io import write_json

        write_json(Path(args.out) / "compare.json", {"against": args.compare, "tests": tests})
    print(f"wrote {Path(args.out) / 'results.json'}")
    return 0


def _suite(parser, args) -> int:
    from aspire.evaluate.suite import format_rows, run_suite

    if args.ensemble:
        return _ensemble_suite(parser, args)
    if not args.model or (args.model != "bm25" and not args.scorer):
        parser.error("give --model and --scorer (or --model bm25)")
    if args.model == "bm25" and (args.backend != "torch" or args.quantize):
        parser.error("--backend/--quantize choose a model's encoder; --model bm25 has none")
    opts = _options(args) if args.model != "bm25" else {}
    suite = run_suite(args.model, args.scorer, args.out, args.data, args.aggregate, args.bm25_alpha, **opts,
                      benchmarks=args.benchmarks)
    print("\n".join(format_rows(suite["rows"])))
    print(json.dumps(suite["seconds"]))
    print(f"wrote {Path(args.out) / 'suite.json'}")
    return 0


def _ensemble_suite(parser, args) -> int:
    from aspire.evaluate.ensemble import run_ensemble_suite
    from aspire.evaluate.suite import format_rows

    given = [flag for flag, value in (("--model", args.model), ("--scorer", args.scorer), ("--tau", args.tau),
                                      ("--eps", args.eps), ("--window", args.window), ("--bm25-alpha", args.bm25_alpha),
                                      ("--max-length", args.max_length), ("--joiner", args.joiner),
                                      ("--code", args.code)) if value is not None]
    if given or args.normalize or args.encoding != "contextual":
        parser.error(f"--ensemble takes each member's model and options from its YAML; leave out {given or '--encoding/--normalize'}")
    suite = run_ensemble_suite(args.ensemble, args.out, args.data, args.aggregate,
                               None if args.no_cache else args.cache_dir, args.batch_size, args.device)
    print("\n".join(format_rows(suite["rows"])))
    for line in suite["skipped"]:
        print(f"skipped: {line}")
    print(f"wrote {Path(args.out) / 'suite.json'}")
    return 0
