"""Evaluate a model on a benchmark, or fuse or compare runs (`aspire evaluate COMMAND`).

csfcube, pools and fuse are below; reviewers, context2doc, compare, fuse-runs and suite are described
in `aspire.evaluate.bench_cli`.

    # rank CSFCube with a model and a scorer, then score it
    python -m aspire.evaluate csfcube --model minilm --scorer minl2 --out runs/minilm-minl2
    python -m aspire.evaluate csfcube --model mpnet --scorer ot --tau 5000 --out runs/mpnet-ot
    # one vector for the query's facet sentences against the candidates' whole-abstract vectors
    python -m aspire.evaluate csfcube --model mpnet --scorer abstract --query-text facet \
        --max-length 384 --normalize --joiner ' ' --out runs/mpnet-facet
    # each candidate scored by its best window of two sentences (max over passages)
    python -m aspire.evaluate csfcube --model minilm --scorer maxpassage --window 2 --out runs/minilm-maxp2
    # match the query's facet sentences only with the candidates' sentences of that facet
    python -m aspire.evaluate csfcube --model minilm --scorer ot --tau 1 --cand-sentences facet --out runs/minilm-ot-cf
    # the search pipeline's stages: BM25 of the facet's sentences, fused with the model, a cross-encoder rerank
    python -m aspire.evaluate csfcube --model minilm --scorer abstract --max-length 256 --normalize --joiner ' ' \
        --bm25-alpha 0.815 --rerank runs/ce/model --rerank-top 20 --rerank-weight 0.5 --out runs/csf-ce
    # score ranked files that already exist (e.g. the shipped SPECTER pools)
    python -m aspire.evaluate csfcube --ranked ../shared/data/csfcube/sample_ranked_pools --exp specter --out DIR
    # an ensemble of ranked CSFCube runs (per-query z-scored scores, weighted sum)
    python -m aspire.evaluate fuse --run runs/abstract:EXP1 --run runs/ot:EXP2 --exp fused --out DIR
    # any ASPIRE-style pool set (RELISH, TRECCOVID-RF, SciDocs-style)
    python -m aspire.evaluate pools --data DIR --name relish --threshold 1 --model minilm --scorer minl2 --out DIR
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from aspire.cliutil import (
    Formatter,
    add_backend_options,
    add_common_options,
    backend_options,
    code_option,
    command_parser,
    device_name,
    normalize_overrides,
    positive_int,
    run_command,
    setup_logging,
)
from aspire.data.facets import FACET_CODE_CHOICES
from aspire.evaluate.cache import default_cache_dir
from aspire.evaluate.options import CAND_SENTENCES, ENCODINGS, QUERY_TEXTS, SCORERS, scorer_options
from aspire.paths import DATA
from aspire.scoring.fusion import METHODS as FUSION_METHODS

# CSFCube's dev figure (fold1_dev, as in the published script) is scored on fold2_test's queries.
DEV_NOTE = "(fold1_dev = fold2_test: not held out)"
POOL_METRICS = ("MAP", "NDCG%20", "nDCG@10", "P@5", "P@10", "MRR", "bpref")


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="minilm, mpnet or a local Hugging Face model directory")
    p.add_argument("--scorer", choices=SCORERS, help="how a query's sentences meet a candidate's")
    p.add_argument("--encoding", choices=[e for e in ENCODINGS if e != "abstract"], default="contextual",
                   help="sentence vectors in the abstract's context, or each sentence alone (default contextual)")
    p.add_argument("--tau", type=float, help="OT scorer temperature (passed to the scorer as tau)")
    p.add_argument("--eps", type=float, help="OT scorer entropic regularisation (passed as eps)")
    p.add_argument("--window", type=positive_int, help="maxpassage scorer: sentences per passage (default 1)")
    p.add_argument("--ranked", help="score existing ranked files in this folder instead of running a model")
    p.add_argument("--exp", help="experiment name in the ranked file names (default from model/encoding/scorer)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--cache-dir", default=str(default_cache_dir()), help="sentence-vector cache (default %(default)s)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the vector cache")
    p.add_argument("--batch-size", type=positive_int, default=32, help="papers encoded per forward pass")
    p.add_argument("--device", type=device_name, help="torch device for encoding and scoring (default: the model's)")
    add_backend_options(p)
    p.add_argument("--max-length", type=int,
                   help="word-piece limit for independent sentences / the whole-abstract vector "
                        "(sentence-transformers pipelines: 256 for minilm, 384 for mpnet)")
    p.add_argument("--normalize", action="store_true",
                   help="L2-normalise independent-sentence / whole-abstract vectors (sentence-transformers pipelines do)")
    p.add_argument("--query-text", choices=QUERY_TEXTS, default="abstract",
                   help="scorer abstract on a faceted set: the query's vector from its whole abstract (default, "
                        "facet ignored), its facet sentences alone, or its title and facet sentences")
    p.add_argument("--cand-sentences", choices=CAND_SENTENCES, default="all",
                   help="sentence scorers on a faceted set: match all of a candidate's sentences (default, the "
                        "published protocol) or only those of the query's facet (a candidate with none keeps all)")
    p.add_argument("--joiner", help="whole-abstract vector: join title and abstract with this text "
                                    "(default: encode them as a text pair, [CLS] title [SEP] abstract [SEP])")
    p.add_argument("--facet-code", choices=FACET_CODE_CHOICES, default="auto",
                   help="model with facet control codes: the code of a facet's queries; auto (default) gives each "
                        "facet's queries that facet's code, none the candidates' code, a facet name that facet's")
    p.add_argument("--doc-code", help="model with control codes: the code of every other paper (the candidates; "
                                      "default: the model's own, e.g. [DOC]); none for no code")


def _scorer_options(args) -> dict:
    return scorer_options(args.scorer, args.tau, args.eps, args.window)


def _encoder_options(args) -> dict:
    """`load_encoder` keywords: the backend's, and the candidates' control code when `--doc-code` is given."""
    return {**backend_options(args), **code_option(args.doc_code)}


def _check_model_args(parser, args) -> None:
    if args.ranked:
        if not args.exp:
            parser.error("--ranked needs --exp (the name in test-pid2pool-NAME-EXP-...-ranked.json)")
        if args.model or args.scorer or getattr(args, "bm25", False) or getattr(args, "rerank", None):
            parser.error("--ranked scores existing files; leave out --model/--scorer/--bm25/--rerank")
        if args.facet_code != "auto" or args.doc_code is not None:
            parser.error("--facet-code/--doc-code choose how a model encodes: not with --ranked")
    else:
        lexical_only = getattr(args, "bm25", False) and not (args.model or args.scorer)
        if not (args.model and args.scorer) and not lexical_only:
            parser.error("give --model and --scorer (and/or --bm25), or --ranked and --exp")
    if (args.backend != "torch" or args.quantize) and args.ranked:
        parser.error("--backend/--quantize choose how a model encodes: not with --ranked")
    try:  # the options' own checks (--tau/--eps; --quantize and --device against --backend)
        _scorer_options(args)
        _encoder_options(args)
    except ValueError as err:
        parser.error(str(err))
    if args.query_text != "abstract" and args.scorer != "abstract":
        parser.error("--query-text goes with --scorer abstract (sentence scorers select the facet's sentences)")
    if args.cand_sentences != "all" and args.scorer == "abstract":
        parser.error("--cand-sentences goes with a sentence scorer (minl2, ot, attention)")


EXAMPLES = {
    "csfcube": """\
  aspire evaluate csfcube --model minilm --scorer minl2 --out runs/minilm-minl2
  aspire evaluate csfcube --model mpnet --scorer ot --tau 5000 --device cuda --out runs/mpnet-ot
  aspire evaluate csfcube --ranked ../shared/data/csfcube/sample_ranked_pools --exp specter --out runs/specter
  aspire evaluate csfcube --bm25 --out runs/csf-bm25
  aspire evaluate csfcube --model minilm --scorer abstract --max-length 256 --normalize --joiner ' ' \\
      --bm25-alpha 0.815 --rerank runs/ce/model --rerank-top 20 --rerank-weight 0.5 --out runs/csf-ce""",
    "pools": """\
  aspire evaluate pools --data DIR --name relish --threshold 1 --model minilm --scorer minl2 --out runs/relish
  aspire evaluate pools --data DIR --name treccovid --facets a,b --model mpnet --scorer ot --out runs/tc""",
    "fuse": """\
  aspire evaluate fuse --run runs/abstract:EXP1 --run runs/ot:EXP2 --exp fused --out runs/fused
  aspire evaluate fuse --run runs/a:E1 --run runs/b:E2 --weights 0.7,0.3 --exp fused --out runs/fused""",
}


def main(argv: list[str] | None = None, prog: str = "python -m aspire.evaluate") -> int:
    parser = command_parser(prog, __doc__, "\n".join(e.split("\n")[0] for e in EXAMPLES.values()))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="COMMAND --help for its options")

    def command(name: str, purpose: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=purpose, description=purpose, epilog="examples:\n" + EXAMPLES[name],
                           formatter_class=Formatter, allow_abbrev=False)
        add_common_options(p)
        return p

    pc = command("csfcube", "CSFCube aspect-conditional benchmark (two-fold test + dev protocol)")
    pc.add_argument("--data", default=str(DATA / "csfcube"), help="CSFCube folder (default %(default)s)")
    _model_args(pc)
    from aspire.evaluate.bench_cli import add_stage_args

    add_stage_args(pc, "title + abstract, the query's text its facet sentences")
    pc.add_argument("--search-pipeline", nargs="*", metavar="KEY=VALUE",
                    help="score `aspire search` itself: each pool indexed with --model and searched by the Searcher "
                         "with these search-config overrides (e.g. stages=ann,bm25 rerank=maxpassage)")

    pp = command("pools", "any ASPIRE-style pool re-ranking set")
    pp.add_argument("--data", required=True, help="folder with abstracts-NAME.jsonl and test-pid2anns-NAME*.json")
    pp.add_argument("--name", required=True, help="data set name in the file names")
    pp.add_argument("--facets", default="", help="comma-separated facets (test-pid2anns-NAME-FACET.json each)")
    pp.add_argument("--splits", help="splits JSON ({split: [query]} or {query: split})")
    pp.add_argument("--abstracts", help="papers file (default DATA/abstracts-NAME.jsonl)")
    pp.add_argument("--threshold", type=int, default=1, help="grade >= this is relevant (default 1)")
    pp.add_argument("--metrics", default=",".join(POOL_METRICS), help="comma-separated (default %(default)s)")
    pp.add_argument("--skip-no-relevant", action="store_true",
                    help="leave out (and list) queries with no relevant candidate instead of failing")
    _model_args(pp)

    pf = command("fuse", "ensemble of ranked CSFCube runs (score fusion), scored")
    pf.add_argument("--data", default=str(DATA / "csfcube"), help="CSFCube folder (default %(default)s)")
    pf.add_argument("--run", action="append", required=True, metavar="DIR:EXP",
                    help="a folder of ranked files and their experiment name; give two or more")
    pf.add_argument("--weights", help="comma-separated, one per --run (default equal)")
    pf.add_argument("--fusion", choices=FUSION_METHODS, default=None,
                    help="z or minmax (per-query normalised weighted sum) or rrf (default z)")
    pf.add_argument("--norm", choices=("zmuv", "min-max"), help="older spelling: --norm zmuv is --fusion z, min-max minmax")
    pf.add_argument("--exp", required=True, help="experiment name of the fused ranked files")
    pf.add_argument("--out", required=True, help="output folder")

    from aspire.evaluate import bench_cli

    bench_cli.add_parsers(sub)
    purposes = {action.dest: action.help for action in sub._choices_actions}
    for name in bench_cli.COMMANDS:  # their help as the others': examples (bench_cli's docstring), common options
        examples = [line.strip().replace("python -m aspire.evaluate", "aspire evaluate")
                    for line in bench_cli.__doc__.split("\n") if f"aspire.evaluate {name} " in line]
        sub.choices[name].formatter_class = Formatter
        sub.choices[name].description = sub.choices[name].description or purposes[name]
        sub.choices[name].epilog = "examples:\n" + "\n".join("  " + line for line in examples)
        add_common_options(sub.choices[name])
    args = parser.parse_args(argv)
    setup_logging(args)
    if args.command in bench_cli.COMMANDS:
        return run_command(lambda: bench_cli.run_command(parser, args), args)
    if args.command == "fuse":
        return run_command(lambda: _fuse(parser, args), args)
    if args.command == "csfcube" and args.search_pipeline is not None:
        return run_command(lambda: _csfcube_search(parser, args), args)
    _check_model_args(parser, args)
    return run_command(lambda: _evaluate(parser, args), args)


def _csfcube_search(parser, args) -> int:
    """`csfcube --search-pipeline ...`: the benchmark through `aspire search`'s Searcher."""
    from aspire.benchmarks import csfcube
    from aspire.evaluate.csfcube import run_csfcube_search

    if not args.model or args.scorer or args.ranked or args.bm25 or args.rerank:
        parser.error("--search-pipeline takes --model and search-config overrides (stages=, rerank=, fuse=); "
                     "leave out --scorer, --ranked, --bm25 and --rerank")
    pipeline = normalize_overrides(args.search_pipeline, section="search")
    results = run_csfcube_search(args.data, args.model, pipeline, args.out, args.exp,
                                 None if args.no_cache else args.cache_dir, args.batch_size, _encoder_options(args))
    print(f"CSFCube test MAP / NDCG%20  {csfcube.format_table(results, 'test')}  ({results['experiment']})")
    print(f"wrote {Path(args.out) / 'results.json'}")
    return 0


def _evaluate(parser, args) -> int:
    from aspire.benchmarks import csfcube

    cache_dir = None if args.no_cache else args.cache_dir
    encode_options = {
        k: v for k, v in (("max_length", args.max_length), ("normalize", args.normalize or None), ("joiner", args.joiner))
        if v is not None
    }
    if encode_options and args.encoding == "contextual" and args.scorer != "abstract":
        parser.error("--max-length/--normalize/--joiner apply to --encoding independent or --scorer abstract")
    out = Path(args.out)
    try:
        if args.command == "csfcube":
            if args.ranked:
                results, per_query = csfcube.evaluate_ranked_dir(args.data, args.ranked, args.exp)
                csfcube.write_results(out, args.data, args.exp, results, per_query)
            else:
                from aspire.evaluate.bench_cli import stage_options
                from aspire.evaluate.csfcube import run_csfcube

                bm25, alpha, rerank = stage_options(parser, args)
                results = run_csfcube(
                    args.data, args.model, args.scorer, out, exp=args.exp, encoding=args.encoding,
                    scorer_options=_scorer_options(args), cache_dir=cache_dir, batch_size=args.batch_size,
                    device=args.device, encode_options=encode_options, query_text=args.query_text,
                    cand_sentences=args.cand_sentences, encoder_options=_encoder_options(args),
                    facet_code=args.facet_code, bm25=bm25, alpha=alpha, k1=args.k1, b=args.b, rerank=rerank,
                )
                if rerank is not None:
                    speed = results["rerank"]["speed"]
                    print(f"cross-encoder: {speed['pairs']} pairs, {speed['pairs_per_second']} pairs/s, "
                          f"{speed['ms_per_query']} ms a query")
            print(f"CSFCube test MAP / NDCG%20  {csfcube.format_table(results, 'test')}")
            print(f"CSFCube dev  MAP / NDCG%20  {csfcube.format_table(results, 'dev')}  {DEV_NOTE}")
        else:
            from aspire.evaluate.pool_run import run_pools

            results = run_pools(
                args.data, args.name, out, facets=[f for f in args.facets.split(",") if f],
                splits_file=args.splits, abstracts_file=args.abstracts, threshold=args.threshold,
                metrics=[m for m in args.metrics.split(",") if m], skip_no_relevant=args.skip_no_relevant,
                ranked_dir=args.ranked, exp=args.exp, model=args.model, scorer=args.scorer,
                encoding=args.encoding, scorer_options=_scorer_options(args), cache_dir=cache_dir,
                batch_size=args.batch_size, device=args.device, encode_options=encode_options,
                query_text=args.query_text, cand_sentences=args.cand_sentences,
                encoder_options=_encoder_options(args), facet_code=args.facet_code,
            )
            writer = csv.writer(sys.stdout, delimiter="\t")
            names = list(results["metrics"])
            writer.writerow(["group", "n_queries", *names])
            for group, vals in results["summary"].items():
                writer.writerow([group, vals["n_queries"], *(f"{vals[m]:.2f}" for m in names)])
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out / 'results.json'}")
    return 0


def parse_run(spec: str) -> tuple[str, str]:
    """`DIR:EXP` (a folder of ranked files and their experiment name) as (folder, exp)."""
    folder, sep, exp = spec.rpartition(":")
    if not sep or not folder or not exp:
        raise ValueError(f"--run takes DIR:EXP, got {spec!r}")
    return folder, exp


def _fuse(parser, args) -> int:
    from aspire.benchmarks import csfcube
    from aspire.evaluate.csfcube import fuse_csfcube

    try:
        inputs = [parse_run(spec) for spec in args.run]
    except ValueError as err:
        parser.error(str(err))
    try:
        weights = [float(w) for w in args.weights.split(",")] if args.weights else None
        from aspire.evaluate.bench_cli import fusion_option

        results = fuse_csfcube(args.data, inputs, args.out, args.exp, weights,
                               fusion_option(args.fusion, args.norm, parser))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"CSFCube test MAP / NDCG%20  {csfcube.format_table(results, 'test')}")
    print(f"CSFCube dev  MAP / NDCG%20  {csfcube.format_table(results, 'dev')}  {DEV_NOTE}")
    print(f"wrote {Path(args.out) / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
