"""Evaluate a model on a benchmark, or fuse or compare runs (`aspire evaluate COMMAND`).

Every subcommand is one entry of `COMMANDS` (purpose, examples, arguments, run); a model's options become
one `aspire.evaluate.options.EvalOptions` and the search stages one `Stages`, which every benchmark runner
takes (`aspire.cli.evaluate_options` reads them). The suite and the SciRepEval formats, which span several
benchmarks, are `aspire.cli.evaluate_suite`.

    aspire evaluate csfcube --model minilm --scorer minl2 --out runs/minilm-minl2
    aspire evaluate reviewers --model minilm --scorer abstract --aggregate topk:3 --out runs/rev
    aspire evaluate context2doc --bm25 --out runs/c2d-bm25
    aspire evaluate suite --model minilm --scorer minl2 --out runs/suite-minilm-minl2
    aspire evaluate compare runs/c2d-fused runs/c2d-bm25
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aspire.benchmarks import BENCHMARKS
from aspire.cli import evaluate_out
from aspire.cli.evaluate_options import (
    MODEL_FLAGS,
    STAGE_FLAGS,
    add_stage_args,
    code_arg,
    eval_options,
    facet_args,
    fusion_option,
    given_options,
    model_args,
    refuse_model_options,
    refuse_unread,
    refuse_unused_by_search,
    stage_options,
)
from aspire.cli.evaluate_suite import (
    PROBE_EXAMPLES,
    PROBE_HELP,
    probe_args,
    run_probe,
    run_suite_command,
    suite_args,
)
from aspire.cliutil import (
    Formatter,
    add_common_options,
    backend_options,
    check_paths,
    code_option,
    command_parser,
    normalize_overrides,
    number_list,
    positive_int,
    run_command,
    setup_logging,
)
from aspire.encoders.pretrained import MODELS, check_model, resolve_model
from aspire.evaluate.options import ENCODINGS, SCORERS, EvalOptions
from aspire.paths import DATA
from aspire.scoring.fusion import METHODS as FUSION_METHODS

# CSFCube's dev figure (fold1_dev, as in the published script) is scored on fold2_test's queries.
DEV_NOTE = "(fold1_dev = fold2_test: not held out)"
POOL_METRICS = ("MAP", "NDCG%20", "nDCG@10", "P@5", "P@10", "MRR", "bpref")


def _print_speed(results: dict, pairs: str = "pairs") -> None:
    speed = results["rerank"]["speed"]
    count = results["rerank"][pairs] if pairs in results["rerank"] else speed["pairs"]
    print(f"cross-encoder: {count} {pairs.replace('_', ' ')}, {speed['pairs_per_second']} pairs/s"
          + (f", {speed['ms_per_query']} ms a query" if "ms_per_query" in speed else ""))


# ---- csfcube, pools, fuse -----------------------------------------------------------------------------------

POOL_ENCODINGS = tuple(e for e in ENCODINGS if e != "abstract")  # pass: the abstract scorer reads the contextual pass


def _csfcube_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=str(DATA / "csfcube"), help="CSFCube folder (default %(default)s)")
    model_args(p, encodings=POOL_ENCODINGS)
    facet_args(p)
    add_stage_args(p, "title + abstract, the query's text its facet sentences")
    p.add_argument("--search-pipeline", nargs="*", metavar="search.KEY=VALUE",
                   help="score `aspire search` itself: each pool indexed with --model and searched by the Searcher "
                        "with these search-config overrides (e.g. search.stages=ann,bm25 search.rerank=maxpassage)")


def _check_pool_args(parser, args) -> EvalOptions | None:
    """The options of a pool-set command (`csfcube`, `pools`): None for `--ranked` files, else the model's."""
    staged = getattr(args, "bm25", False) or getattr(args, "rerank", None)
    if args.ranked:
        if not args.exp:
            parser.error("--ranked needs --exp (the name in test-pid2pool-NAME-EXP-...-ranked.json)")
        if args.model or args.scorer or staged:
            parser.error("--ranked scores existing files; leave out --model/--scorer/--bm25/--rerank")
        if args.facet_code != "auto" or args.doc_code is not None:
            parser.error("--facet-code/--doc-code choose how a model encodes: not with --ranked")
        if args.backend != "torch" or args.quantize:
            parser.error("--backend/--quantize choose how a model encodes: not with --ranked")
        refuse_unread(parser, args, (*MODEL_FLAGS, *STAGE_FLAGS, "--abstracts"),
                      "--ranked scores existing files, running no model")
        return None
    lexical_only = getattr(args, "bm25", False) and not (args.model or args.scorer)
    if not (args.model and args.scorer) and not lexical_only:
        parser.error("give --model and --scorer (and/or --bm25), or --ranked and --exp")
    if lexical_only:
        refuse_model_options(parser, args)
    if args.query_text != "abstract" and args.scorer != "abstract":
        parser.error("--query-text goes with --scorer abstract (sentence scorers select the facet's sentences)")
    if args.cand_sentences != "all" and args.scorer == "abstract":
        parser.error("--cand-sentences goes with a sentence scorer (minl2, ot, attention)")
    try:  # the options' own checks (--tau/--eps; --quantize and --device against --backend)
        return eval_options(args)
    except ValueError as err:
        parser.error(str(err))


def _csfcube(parser, args) -> int:
    from aspire.benchmarks import csfcube

    if args.search_pipeline is not None:
        return _csfcube_search(parser, args)
    options = _check_pool_args(parser, args)
    out = Path(args.out)
    if options is None:
        results = csfcube.write_ranked_dir_results(out, args.data, args.ranked, args.exp)
    else:
        from aspire.evaluate.csfcube import run_csfcube
        from aspire.evaluate.options import options_exp

        stages = stage_options(parser, args)
        base = None if args.model is None else options_exp(args.model, args.scorer, options)
        check_out(args, args.exp or (stages.exp(base) if stages.staged else base))
        results = run_csfcube(args.data, args.model, args.scorer, out, args.exp, options, stages)
        if stages.rerank is not None:
            _print_speed(results)
    print(f"CSFCube test MAP / NDCG%20  {csfcube.format_table(results, 'test')}")
    print(f"CSFCube dev  MAP / NDCG%20  {csfcube.format_table(results, 'dev')}  {DEV_NOTE}")
    print(f"wrote {out / 'results.json'}")
    return 0


def _csfcube_search(parser, args) -> int:
    """`csfcube --search-pipeline ...`: the benchmark through `aspire search`'s Searcher."""
    from aspire.benchmarks import csfcube
    from aspire.evaluate.csfcube import run_csfcube_search
    from aspire.evaluate.options import search_exp

    if not args.model or args.scorer or args.ranked or args.bm25 or args.rerank:
        parser.error("--search-pipeline takes --model and search-config overrides (search.stages=, search.rerank=, "
                     "search.fuse=); leave out --scorer, --ranked, --bm25 and --rerank")
    refuse_unused_by_search(parser, args)
    pipeline = normalize_overrides(args.search_pipeline, section="search")
    check_out(args, args.exp or search_exp(args.model, pipeline))  # the experiment's name, known only now
    results = run_csfcube_search(args.data, args.model, pipeline, args.out, args.exp,
                                 None if args.no_cache else args.cache_dir, args.batch_size,
                                 {**backend_options(args), **code_option(args.doc_code)}, facet_code=args.facet_code,
                                 device=args.device)
    print(f"CSFCube test MAP / NDCG%20  {csfcube.format_table(results, 'test')}  ({results['experiment']})")
    print(f"wrote {Path(args.out) / 'results.json'}")
    return 0


def _pools_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="folder with abstracts-NAME.jsonl and test-pid2anns-NAME*.json")
    p.add_argument("--name", required=True, help="data set name in the file names")
    p.add_argument("--facets", default="", help="comma-separated facets (test-pid2anns-NAME-FACET.json each)")
    p.add_argument("--splits", help="splits JSON ({split: [query]} or {query: split})")
    p.add_argument("--abstracts", help="papers file (default DATA/abstracts-NAME.jsonl)")
    p.add_argument("--threshold", type=positive_int, default=1, help="grade >= this is relevant (default 1)")
    p.add_argument("--metrics", default=",".join(POOL_METRICS), help="comma-separated (default %(default)s)")
    p.add_argument("--skip-no-relevant", action="store_true",
                   help="leave out (and list) queries with no relevant candidate instead of failing")
    model_args(p, encodings=POOL_ENCODINGS)
    facet_args(p)


def _pools(parser, args) -> int:
    from aspire.benchmarks.metrics import check_metrics
    from aspire.evaluate.pool_run import run_pools

    options = _check_pool_args(parser, args)
    metrics = [m for m in args.metrics.split(",") if m]
    if not metrics:  # `--metrics ,` once ran the model and wrote results of no metric, with status 0
        parser.error(f"--metrics names no metric (got {args.metrics!r}); e.g. {','.join(POOL_METRICS[:2])}")
    twice = sorted({m for m in metrics if metrics.count(m) > 1})
    if twice:  # once two identical columns in the table, results.json and perq.csv
        parser.error(f"--metrics names {', '.join(twice)} more than once")
    check_metrics(metrics, args.threshold)  # before a model encodes (once: after)
    out = Path(args.out)
    if options is not None and args.exp is None:  # a model run's experiment name, known only now
        from aspire.evaluate.options import options_exp

        check_out(args, options_exp(args.model, args.scorer, options))
    results = run_pools(
        args.data, args.name, out, facets=[f for f in args.facets.split(",") if f], splits_file=args.splits,
        abstracts_file=args.abstracts, threshold=args.threshold, metrics=metrics,
        skip_no_relevant=args.skip_no_relevant, ranked_dir=args.ranked, exp=args.exp, model=args.model,
        scorer=args.scorer, options=options)
    writer = csv.writer(sys.stdout, delimiter="\t")
    names = list(results["metrics"])
    writer.writerow(["group", "n_queries", *names])
    for group, vals in results["summary"].items():
        # a metric undefined for every query of a group (bpref where each pool is all relevant) has no mean: None in
        # results.json, once a TypeError here after the files were written
        writer.writerow([group, vals["n_queries"], *("n/a" if vals[m] is None else f"{vals[m]:.2f}" for m in names)])
    print(f"wrote {out / 'results.json'}")
    return 0


def parse_run(spec: str) -> tuple[str, str]:
    """`DIR:EXP` (a folder of ranked files and their experiment name) as (folder, exp)."""
    folder, sep, exp = spec.rpartition(":")
    if not sep or not folder or not exp:
        raise ValueError(f"--run takes DIR:EXP, got {spec!r}")
    return folder, exp


def _check_fused(parser, option: str, given: list[str], weights: list[float] | None) -> None:
    """Refuse, before the data load, fewer than two runs (`given`, as `option` took them) and a `--weights` count
    other than the runs'."""
    if len(given) < 2:  # `fuse` once loaded CSFCube first, then failed naming no option
        parser.error(f"{option}: give two or more runs to fuse (got {len(given)})")
    if weights is not None and len(weights) != len(given):  # once `1 weights for 2 runs`, naming no option
        parser.error(f"--weights gives {len(weights)} weights for {len(given)} runs ({option}); one a run")


def _fuse_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=str(DATA / "csfcube"), help="CSFCube folder (default %(default)s)")
    p.add_argument("--run", action="append", required=True, metavar="DIR:EXP",
                   help="a folder of ranked files and their experiment name; give two or more, each once")
    p.add_argument("--weights", type=number_list, help="comma-separated, one per --run (default equal)")
    p.add_argument("--fusion", choices=FUSION_METHODS, default=None,
                   help="z or minmax (per-query normalised weighted sum) or rrf (default z)")
    p.add_argument("--norm", choices=("zmuv", "min-max"), help="older spelling: --norm zmuv is --fusion z, min-max minmax")
    p.add_argument("--exp", required=True, help="experiment name of the fused ranked files")
    p.add_argument("--out", required=True, help="output folder")


def _fuse(parser, args) -> int:
    from aspire.benchmarks import csfcube
    from aspire.evaluate.csfcube import fuse_csfcube

    try:
        inputs = [parse_run(spec) for spec in args.run]
    except ValueError as err:
        parser.error(str(err))
    _check_fused(parser, "--run", args.run, args.weights)
    results = fuse_csfcube(args.data, inputs, args.out, args.exp, args.weights,
                           fusion_option(args.fusion, args.norm, parser))
    print(f"CSFCube test MAP / NDCG%20  {csfcube.format_table(results, 'test')}")
    print(f"CSFCube dev  MAP / NDCG%20  {csfcube.format_table(results, 'dev')}  {DEV_NOTE}")
    print(f"wrote {Path(args.out) / 'results.json'}")
    return 0


# ---- reviewers, context2doc ---------------------------------------------------------------------------------

def _reviewers_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=str(DATA / "reviewer-matching"), help="data folder (default %(default)s)")
    p.add_argument("--predictions", metavar="DIR:EXP", help="score the files DIR/EXP_d_20_N_ta.json as given")
    p.add_argument("--aggregate", default="max", help="over a reviewer's papers: max (default), mean, topk:K")
    p.add_argument("--weights", type=number_list, help="comma-separated weights when --scorer lists several (fused)")
    p.add_argument("--exp", help="experiment name of the written predictions (default model-scorer-aggregate)")
    add_stage_args(p, "title + abstract (a submission's against each archive paper's)")
    p.add_argument("--search-pipeline", nargs="*", metavar="search.KEY=VALUE",
                   help="score `aspire search` itself: each reviewer's archive indexed with --model and searched by "
                        "each submission with these search-config overrides (e.g. search.rerank=minl2), then aggregated")
    model_args(p, None, f"one of {', '.join(SCORERS)}, or several comma-separated (fused by z-score)",
                out_required=False)
    code_arg(p)


def _reviewers(parser, args) -> int:
    from aspire.benchmarks.reviewers import (
        load_reviewer_set,
        parse_aggregate,
        read_prediction_set,
        reviewer_units,
        summarize,
    )

    rset = load_reviewer_set(args.data)
    if args.search_pipeline is not None:
        return _reviewers_search(parser, args, rset)
    if args.predictions:
        if args.model or args.scorer or args.bm25 or args.bm25_alpha is not None or args.rerank:
            parser.error("--predictions scores given files; leave out --model/--scorer/--bm25/--rerank")
        refuse_unread(parser, args, ("--aggregate", "--weights", "--exp", *MODEL_FLAGS, *STAGE_FLAGS),
                      "--predictions scores given files as they are (their experiment is DIR:EXP's)")
        folder, sep, exp = args.predictions.rpartition(":")
        if not sep or not folder or not exp:  # `:specter` once read the current folder, `DIR:` an experiment ''
            parser.error(f"--predictions takes DIR:EXP, got {args.predictions!r}")
        from aspire.evaluate.reviewer_run import format_result

        preds = read_prediction_set(folder, exp, rset)
        results = summarize(*reviewer_units(rset, preds))
        if args.out:  # before the figures: a reader of stdout that goes away (`| head -1`) once lost the file
            from aspire.benchmarks.runs import invocation
            from aspire.io import write_json

            write_json(Path(args.out) / "results.json", {"benchmark": "reviewer-matching", "experiment": exp,
                                                         "predictions": str(Path(folder).resolve()), **results,
                                                         "command": invocation()}, indent=None)
        print(f"{exp}: {format_result(results)}")
        print("per draw: " + " ".join(f"{x:.4f}" for x in results["per_draw"]))
        return 0
    stages = stage_options(parser, args)
    if not args.out or not ((args.model and args.scorer) or (stages.bm25 and not (args.model or args.scorer))):
        parser.error("give --predictions DIR:EXP, or --model, --scorer (and/or --bm25) and --out")
    if not args.model:
        refuse_model_options(parser, args, ("--weights",))
    scorers = args.scorer.split(",") if args.scorer else []
    twice = sorted({s for s in scorers if s and scorers.count(s) > 1})
    if twice:  # `minl2,minl2` once ran as a fusion of one scorer's scores with itself, named as two
        parser.error(f"--scorer names {', '.join(twice)} more than once; each fused scorer once")
    if args.weights is not None and len(scorers) < 2:  # one scorer's scores, scaled, rank as they did
        parser.error("--weights weigh the fused scores of several --scorer; one scorer has nothing to weigh: leave it out")
    try:
        parse_aggregate(args.aggregate)
    except ValueError as err:
        parser.error(f"--aggregate: {err}")
    base = f"{Path(args.model).name}-{'+'.join(scorers)}" if args.model else None
    exp = args.exp or f"{stages.exp(base)}-{args.aggregate.replace(':', '')}"
    check_out(args, exp)
    options = eval_options(args, scorers) if args.model else None
    # the runner imports torch: the options above are refused before it loads (eval_options' promise)
    from aspire.evaluate.reviewer_run import format_result, run_reviewers

    results = run_reviewers(rset, args.model, scorers, args.out, exp, args.aggregate, args.weights, options, stages)
    print(f"{exp}: {format_result(results)}")
    print("per draw: " + " ".join(f"{x:.4f}" for x in results["per_draw"]))
    if stages.rerank is not None:
        _print_speed(results, "distinct_pairs")
    print(f"papers {results['texts']['papers']}, empty abstracts {results['texts']['empty_abstract']} (title only), "
          f"no text {results['texts']['no_text']} (left out); wrote {args.out}")
    return 0


def _reviewers_search(parser, args, rset) -> int:
    """`reviewers --search-pipeline ...`: the benchmark through `aspire search`'s Searcher."""
    from aspire.evaluate.options import search_exp
    from aspire.evaluate.reviewer_run import format_result
    from aspire.evaluate.search_run import run_reviewers_search

    if not args.model or not args.out:
        parser.error("--search-pipeline needs --model (the model the archives are indexed with) and --out")
    if args.scorer or args.predictions or args.bm25 or args.bm25_alpha is not None or args.rerank:
        parser.error("--search-pipeline takes its stages as search-config overrides (search.stages=, search.rerank=, "
                     "search.fuse=); leave out --scorer, --predictions, --bm25 and --rerank")
    refuse_unused_by_search(parser, args)
    overrides = normalize_overrides(args.search_pipeline, section="search")
    exp = args.exp or f"{search_exp(args.model, overrides)}-{args.aggregate.replace(':', '')}"
    check_out(args, exp)
    results = run_reviewers_search(rset, args.out, exp, args.model, overrides, args.aggregate,
                                   encoder_options={**backend_options(args), **code_option(args.code)},
                                   cache_dir=None if args.no_cache else args.cache_dir, batch_size=args.batch_size,
                                   device=args.device)
    print(f"{exp}: {format_result(results)}")
    print("per draw: " + " ".join(f"{x:.4f}" for x in results["per_draw"]))
    print(f"wrote {args.out}")
    return 0


def _context2doc_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=str(DATA / "cocite-acl"), help="co-citation folder (default %(default)s)")
    p.add_argument("--split", choices=("train", "dev", "test"), default="test", help="default test")
    add_stage_args(p)
    p.add_argument("--depth", type=positive_int, default=100, help="documents written per query (default 100)")
    p.add_argument("--exp", help="run tag (default from model/scorer)")
    p.add_argument("--search-pipeline", nargs="*", metavar="search.KEY=VALUE",
                   help="score `aspire search` itself: index the candidates with --model and answer each query "
                        "with the Searcher, these search-config overrides (e.g. search.stages=ann,bm25 search.rerank=none)")
    model_args(p)
    code_arg(p)


def _context2doc(parser, args) -> int:
    from aspire.benchmarks.context2doc import load_context2doc

    if args.search_pipeline is not None:
        return _context2doc_search(parser, args)
    if args.model and not args.scorer:
        parser.error("--model needs --scorer")
    if args.scorer and not args.model:  # once refused by the runner without naming either option
        parser.error("--scorer needs --model")
    stages = stage_options(parser, args)
    if not args.model:
        refuse_model_options(parser, args)
    bench = load_context2doc(args.data, args.split)
    exp = args.exp or stages.exp(f"{Path(args.model).name}-{args.scorer}" if args.model else None)
    check_out(args, exp)
    options = eval_options(args) if args.model else None
    # the runner imports torch: the options above are refused before it loads (eval_options' promise)
    from aspire.evaluate.context2doc_run import format_summary, run_context2doc

    results = run_context2doc(bench, args.out, exp, args.model, args.scorer, options, stages, args.depth)
    print(format_summary(exp, results))
    if stages.rerank is not None:
        _print_speed(results)
    print(f"wrote {Path(args.out) / 'run.trec'}")
    return 0


def _context2doc_search(parser, args) -> int:
    """`context2doc --search-pipeline ...`: the benchmark through `aspire search`'s Searcher."""
    from aspire.benchmarks.context2doc import load_context2doc
    from aspire.evaluate.context2doc_run import format_summary
    from aspire.evaluate.options import search_exp
    from aspire.evaluate.search_run import run_search_pipeline

    if not args.model:
        parser.error("--search-pipeline needs --model (the model the candidates are indexed with)")
    if args.scorer or args.bm25 or args.rerank:
        parser.error("--search-pipeline takes its stages as search-config overrides (search.stages=, search.rerank=, "
                     "search.fuse=); leave out --scorer, --bm25 and --rerank")
    refuse_unused_by_search(parser, args)
    overrides = normalize_overrides(args.search_pipeline, section="search")
    exp = args.exp or search_exp(args.model, overrides)
    check_out(args, exp)
    results = run_search_pipeline(load_context2doc(args.data, args.split), args.out, exp, args.model, overrides,
                                  args.depth, encoder_options={**backend_options(args), **code_option(args.code)},
                                  device=args.device)
    print(format_summary(exp, results))
    if results["short_of_depth"]["queries"]:
        print(f"{results['short_of_depth']['queries']} queries found fewer than {args.depth} papers "
              f"(fewest {results['short_of_depth']['fewest']})")
    print(f"wrote {args.out}")
    return 0


# ---- compare, fuse-runs -------------------------------------------------------------------------------------

def _compare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_a", help="run file, results folder, or reviewer predictions DIR:EXP")
    p.add_argument("run_b", help="the other run")
    p.add_argument("--qrels", help="TREC qrels (for run files)")
    p.add_argument("--metric", action="append", help="metric (repeatable; default: the benchmark's, e.g. MRR, "
                   "nDCG@10, MAP; two CSFCube folders: MAP, NDCG%%20, overall and per facet)")
    p.add_argument("--data", default=str(DATA / "reviewer-matching"), help="reviewer-matching folder")
    p.add_argument("--permutations", type=positive_int, default=10000, help="randomisation test samples (default 10000)")
    p.add_argument("--out", help="write the comparison (with per-query deltas) as JSON here")


def _compare(parser, args) -> int:
    from aspire.evaluate.compare import PREDICTIONS_BENCHMARK, benchmark_of, compare, format_comparison
    from aspire.evaluate.fuse import results_doc
    from aspire.io import write_json

    docs = {spec: results_doc(spec) for spec in (args.run_a, args.run_b)}  # each read once: compare reads them too
    if given_options(parser, args, ("--data",)) and PREDICTIONS_BENCHMARK not in {
            benchmark_of(spec, doc) for spec, doc in docs.items()}:
        parser.error(f"--data is the reviewer-matching folder of reviewer runs; {args.run_a} and {args.run_b} are "
                     "not, so it would not be read: leave it out")
    result = compare(args.run_a, args.run_b, args.qrels, args.metric, args.data, n_perm=args.permutations, docs=docs)
    if args.out:  # before the table: a reader of stdout that goes away (`| head -1`) once lost the file
        write_json(args.out, result, indent=None)
    print("\n".join(format_comparison(result)))
    return 0


def _fuse_runs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="two or more run files or results folders (run.trec + qrels.trec), "
                   "each once (--weights weigh them)")
    p.add_argument("--weights", type=number_list, help="comma-separated, one per run (default equal)")
    p.add_argument("--fusion", choices=FUSION_METHODS, default=None,
                   help="z or minmax (per-query normalised weighted sum) or rrf (default z)")
    p.add_argument("--norm", choices=("zmuv", "min-max"), help="older spelling: --norm zmuv is --fusion z, min-max minmax")
    p.add_argument("--method", choices=("wsum", "rrf"), help="older spelling: --method rrf is --fusion rrf")
    p.add_argument("--qrels", help="TREC qrels to score the fused run (default: the first folder's)")
    p.add_argument("--data", help=f"CSFCube folder that fused CSFCube results folders are scored on, the one they "
                                   f"were made with (default {DATA / 'csfcube'}); CSFCube folders only")
    p.add_argument("--metric", action="append", help="metric (repeatable; default MRR, nDCG@10, MAP)")
    p.add_argument("--out", required=True, help="output folder (run.trec, qrels.trec, results.json)")


def _fuse_runs(parser, args) -> int:
    from aspire.evaluate.fuse import format_fused, fuse_run_files

    _check_fused(parser, "runs", args.runs, args.weights)
    if args.method is not None and args.fusion is not None:  # --method wsum was once dropped beside --fusion rrf
        parser.error("give --fusion alone (--norm / --method are its older spelling)")
    if args.method == "rrf" and args.norm:  # --norm was once dropped beside --method rrf
        parser.error("--norm normalises a weighted sum (--method wsum): not with --method rrf")
    fusion = fusion_option(args.fusion, "rrf" if args.method == "rrf" else args.norm, parser)
    results = fuse_run_files(args.runs, args.out, args.weights, fusion, qrels=args.qrels, metrics=args.metric,
                             data=args.data)
    if "metrics" in results or results.get("benchmark") == "csfcube":
        print(format_fused(results))
    else:  # run files alone: once a line of no figures beside a relevance threshold nothing was scored at
        print("not scored: the inputs are run files and no --qrels was given")
    print(f"wrote {Path(args.out) / 'run.trec'}")
    return 0


# ---- the command table --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    """One `aspire evaluate` subcommand: its one-line purpose, its examples, its arguments and its run."""

    purpose: str
    examples: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.ArgumentParser, argparse.Namespace], int]


COMMANDS: dict[str, Command] = {
    "csfcube": Command("CSFCube aspect-conditional benchmark (two-fold test + dev protocol)", """\
  aspire evaluate csfcube --model minilm --scorer minl2 --out runs/minilm-minl2
  aspire evaluate csfcube --model mpnet --scorer ot --tau 5000 --device cuda --out runs/mpnet-ot
  aspire evaluate csfcube --model mpnet --scorer abstract --query-text facet --max-length 384 --normalize \\
      --joiner ' ' --out runs/mpnet-facet
  aspire evaluate csfcube --model minilm --scorer maxpassage --window 2 --out runs/minilm-maxp2
  aspire evaluate csfcube --model minilm --scorer ot --tau 1 --cand-sentences facet --out runs/minilm-ot-cf
  aspire evaluate csfcube --ranked ../shared/data/csfcube/sample_ranked_pools --exp specter --out runs/specter
  aspire evaluate csfcube --bm25 --out runs/csf-bm25
  aspire evaluate csfcube --model minilm --scorer abstract --max-length 256 --normalize --joiner ' ' \\
      --bm25-alpha 0.815 --rerank runs/ce/model --rerank-top 20 --rerank-weight 0.5 --out runs/csf-ce
  aspire evaluate csfcube --model minilm --search-pipeline search.stages=ann,bm25 search.rerank=maxpassage \\
      --out runs/csf-search""",
                       _csfcube_args, _csfcube),
    "pools": Command("any ASPIRE-style pool re-ranking set (RELISH, TRECCOVID-RF, SciDocs-style)", """\
  aspire evaluate pools --data DIR --name relish --threshold 1 --model minilm --scorer minl2 --out runs/relish
  aspire evaluate pools --data DIR --name treccovid --facets a,b --model mpnet --scorer ot --out runs/tc""",
                     _pools_args, _pools),
    "fuse": Command("ensemble of ranked CSFCube runs (score fusion), scored", """\
  aspire evaluate fuse --run runs/abstract:EXP1 --run runs/ot:EXP2 --exp fused --out runs/fused
  aspire evaluate fuse --run runs/a:E1 --run runs/b:E2 --weights 0.7,0.3 --exp fused --out runs/fused""",
                    _fuse_args, _fuse),
    "reviewers": Command("reviewer matching (Stelmakh et al. 2023): weighted Kendall-tau loss; published "
                         "predictions (--predictions DIR:EXP) or a model's", """\
  aspire evaluate reviewers --predictions ../shared/data/reviewer-matching/predictions:specter
  aspire evaluate reviewers --model minilm --scorer abstract --aggregate topk:3 --out runs/rev
  aspire evaluate reviewers --bm25 --out runs/rev-bm25
  aspire evaluate reviewers --model minilm --search-pipeline search.rerank=minl2 --out runs/rev-search
  aspire evaluate reviewers --model minilm --scorer abstract --max-length 256 --normalize --joiner ' ' \\
      --bm25-alpha 0.815 --rerank runs/ce/model --rerank-top 20 --rerank-weight 0.5 --out runs/rev-ce""",
                         _reviewers_args, _reviewers),
    "context2doc": Command("citation-context retrieval on the committed split: each citing sentence a query, its "
                           "cited abstracts relevant, all 768 candidates", """\
  aspire evaluate context2doc --bm25 --out runs/c2d-bm25
  aspire evaluate context2doc --model minilm --scorer abstract --normalize --joiner ' ' --bm25-alpha 0.815 \\
      --out runs/c2d-fused
  aspire evaluate context2doc --model minilm --scorer abstract --max-length 256 --normalize --joiner ' ' \\
      --bm25-alpha 0.815 --rerank runs/crossencoder/model --rerank-top 30 --out runs/c2d-ce""",
                           _context2doc_args, _context2doc),
    "compare": Command("paired test of two runs of one benchmark", """\
  aspire evaluate compare runs/c2d-fused runs/c2d-bm25
  aspire evaluate compare runs/a.run runs/b.run --qrels qrels.txt --metric MAP --out runs/a-vs-b.json""",
                       _compare_args, _compare),
    "fuse-runs": Command("fuse TREC runs of one benchmark (weighted normalised scores or RRF)", """\
  aspire evaluate fuse-runs runs/c2d-dense runs/c2d-bm25 --weights 0.815,0.185 --out runs/c2d-fused2
  aspire evaluate fuse-runs runs/a.run runs/b.run runs/c.run --fusion rrf --qrels qrels.txt --out runs/rrf""",
                         _fuse_runs_args, _fuse_runs),
    "suite": Command("every registered benchmark (" + ", ".join(BENCHMARKS) + ") in one table", """\
  aspire evaluate suite --model minilm --scorer minl2 --out runs/suite-minilm-minl2
  aspire evaluate suite --model mpnet --scorer abstract --bm25-alpha 0.815 --out runs/suite-mpnet
  aspire evaluate suite --model minilm --scorer ot --backend onnx --quantize int8 --out runs/suite-int8
  aspire evaluate suite --ensemble configs/ensemble_minilm.yaml --out runs/suite-ensemble""",
                     suite_args, run_suite_command),
    **{name: Command(purpose, PROBE_EXAMPLES[name], lambda p, name=name: probe_args(p, name), run_probe)
       for name, purpose in PROBE_HELP.items()},
}


def build_parser(prog: str = "aspire evaluate") -> argparse.ArgumentParser:
    parser = command_parser(prog, __doc__, "\n".join(c.examples.split("\n")[0] for c in COMMANDS.values()))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="COMMAND --help for its options")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.purpose, description=command.purpose,
                           epilog="examples:\n" + command.examples, formatter_class=Formatter, allow_abbrev=False)
        add_common_options(p)
        command.arguments(p)
        p.set_defaults(command_parser=p)  # a user error is reported by the subcommand's parser
    return parser


def main(argv: list[str] | None = None, prog: str = "aspire evaluate") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    setup_logging(args)
    return run_command(lambda: _run(args), args)


# ---- --out: new, empty, or this experiment's own results folder; never an input (aspire.cli.evaluate_out) ----

def check_out(args, exp: str | None = None) -> None:
    """`aspire.cli.evaluate_out.check_out` with this command table's probe formats."""
    evaluate_out.check_out(args, exp, probes=PROBE_HELP)


def _known_exp(args) -> str | None:
    """The experiment name a command takes from its arguments (None where it is computed later)."""
    if args.command == "reviewers" and getattr(args, "predictions", None):
        return args.predictions.rpartition(":")[2] or None
    if args.command in ("csfcube", "pools", "fuse"):
        return args.exp
    return None


def check_cross_encoder(name: str, max_length: int | None = None) -> None:
    """`--rerank`'s model: a trained cross-encoder (`aspire.scoring.crossencoder.check_trained_cross_encoder`), found
    as `check_model` finds a model, that reads `max_length` word pieces a pair (`--rerank-max-length`; its load's
    check, made here before the first stage runs). A plain encoder (a model name such as `minilm`, a document model's
    run folder) would get a fresh random one-logit head and re-rank by noise: a ValueError naming it. A short name
    (`MODELS`) is a document encoder: refused by name, its folder neither looked for nor (`mpnet`) unpacked."""
    from aspire.scoring.crossencoder import check_trained_cross_encoder

    if name in MODELS:
        raise ValueError(f"--rerank {name}: cross-encoder {name!r}: not a trained cross-encoder (a document encoder, "
                         f"as {', '.join(MODELS)} are; one sequence-classification logit is needed: train one with "
                         "python -m aspire.train.crossencoder)")
    check_model(name)
    try:
        check_trained_cross_encoder(resolve_model(name), max_length)
    except ValueError as err:
        length = "" if max_length is None else f" --rerank-max-length {max_length}"
        raise ValueError(f"--rerank {name}{length}: {err}") from None


def _run(args) -> int:
    # the user's own files and the model first, before the benchmark's data or torch load
    # (`pools --abstracts` once failed only after torch loaded, naming no option)
    check_paths(**{name: getattr(args, name, None)
                   for name in ("labels", "compare", "ranked", "qrels", "ensemble", "splits", "abstracts")})
    check_out(args, _known_exp(args))
    if args.command in PROBE_HELP and args.compare:
        from aspire.evaluate.probes import check_probe_results

        check_probe_results(args.compare, args.command)
    model = getattr(args, "model", None)
    if model and not (args.command == "suite" and model == "bm25"):
        check_model(model)
    # the cross-encoder: a trained one's directory, as `aspire search` takes it; not looked at where the command
    # refuses --rerank by name (--search-pipeline names its own stages; --ranked, --predictions run no model)
    refused = getattr(args, "search_pipeline", None) is not None
    refused = refused or bool(getattr(args, "ranked", None) or getattr(args, "predictions", None))
    if getattr(args, "rerank", None) and not refused:
        check_cross_encoder(args.rerank, getattr(args, "rerank_max_length", None))
    earlier = evaluate_out.run_files(args)  # what an earlier run of this experiment left in --out
    status = COMMANDS[args.command].run(args.command_parser, args)
    if status == 0:  # the folder now holds this run's files only
        evaluate_out.remove_unwritten(args, earlier)
    return status


if __name__ == "__main__":
    sys.exit(main())
