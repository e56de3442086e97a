"""How `aspire evaluate`'s command line becomes what the benchmark runners take: the option groups of a model
(`model_args`, `code_arg`, `facet_args`) and of the search stages (`add_stage_args`), and their readers:
`eval_options` (an `aspire.evaluate.options.EvalOptions`), `stage_options` (a `Stages`) and `fusion_option`."""

from __future__ import annotations

import argparse
import sys

from aspire.cliutil import add_backend_options, backend_options, code_option, device_name, positive_int
from aspire.data.facets import FACET_CODE_CHOICES
from aspire.encoders.pretrained import MODEL_HELP
from aspire.encoders.trained import trained_defaults
from aspire.evaluate.cache import default_cache_dir
from aspire.evaluate.options import CAND_SENTENCES, QUERY_TEXTS, SCORERS, EvalOptions, Stages, scorer_options
from aspire.scoring.fusion import fusion_method


def model_args(p: argparse.ArgumentParser, scorers=SCORERS, scorer_help: str = "how a query's sentences meet a "
                "candidate's", out_required: bool = True, encodings=("contextual", "independent")) -> None:
    """A model, its scorer and how it encodes: the options `eval_options` reads."""
    p.add_argument("--model", help=MODEL_HELP)
    p.add_argument("--scorer", choices=scorers, help=scorer_help)
    p.add_argument("--encoding", choices=encodings, default="contextual",
                   help="sentence vectors in the abstract's context (default), each sentence alone"
                        + (", or (scorer abstract) the contextual pass's whole-abstract vector" if "pass" in encodings
                           else ""))
    p.add_argument("--tau", type=float, help="OT scorer temperature (passed to the scorer as tau)")
    p.add_argument("--eps", type=float, help="OT scorer entropic regularisation (passed as eps)")
    p.add_argument("--window", type=positive_int, help="maxpassage scorer: sentences per passage (default 1)")
    p.add_argument("--out", required=out_required, help="output folder")
    p.add_argument("--cache-dir", default=str(default_cache_dir()), help="vector cache (default %(default)s)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the vector cache")
    p.add_argument("--batch-size", type=positive_int, default=32, help="papers encoded per forward pass")
    p.add_argument("--device", type=device_name, help="torch device for encoding and scoring (default: cpu, also "
                                                      "where CUDA is available: the known answers are the CPU's)")
    add_backend_options(p)
    p.add_argument("--max-length", type=positive_int,
                   help="word-piece limit for independent sentences / the whole-abstract vector "
                        "(sentence-transformers pipelines: 256 for minilm, 384 for mpnet)")
    p.add_argument("--normalize", action="store_true",
                   help="L2-normalise independent-sentence / whole-abstract vectors (sentence-transformers pipelines do)")
    p.add_argument("--joiner", help="whole-abstract vector: join title and abstract with this text "
                                    "(default: encode them as a text pair, [CLS] title [SEP] abstract [SEP])")


def code_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--code", help="model with control codes: the code every query and paper gets (default: the "
                                  "model's own, its first task's; e.g. [CONTEXT2DOC]); none for no code")


def facet_args(p: argparse.ArgumentParser) -> None:
    """A faceted pool set's options: how a facet's query is read, and which ranked files to score instead."""
    p.add_argument("--ranked", help="score existing ranked files in this folder instead of running a model")
    p.add_argument("--exp", help="experiment name in the ranked file names (default from model/encoding/scorer)")
    p.add_argument("--query-text", choices=QUERY_TEXTS, default="abstract",
                   help="scorer abstract on a faceted set: the query's vector from its whole abstract (default, "
                        "facet ignored), its facet sentences alone, or its title and facet sentences")
    p.add_argument("--cand-sentences", choices=CAND_SENTENCES, default="all",
                   help="sentence scorers on a faceted set: match all of a candidate's sentences (default, the "
                        "published protocol) or only those of the query's facet (a candidate with none keeps all)")
    p.add_argument("--facet-code", choices=FACET_CODE_CHOICES, default="auto",
                   help="model with facet control codes: the code of a facet's queries; auto (default) gives each "
                        "facet's queries that facet's code, none the candidates' code, a facet name that facet's")
    p.add_argument("--doc-code", help="model with control codes: the code of every other paper (the candidates; "
                                      "default: the model's own, e.g. [DOC]); none for no code")


# the scorer options of the command line -> the scorers that read them (keywords of `aspire.scoring`'s scorers;
# tests/test_reliability_round9_cli.py checks the table against the registry): given for none of the run's scorers,
# an option was silently dropped (`--scorer abstract --tau 5`) or failed with a traceback (`--scorer minl2 --tau 5`)
SCORER_OPTION_READERS = {"--tau": ("ot", "attention", "hybrid"), "--eps": ("ot", "hybrid"), "--window": ("maxpassage",)}

# the options of a model run (`model_args`, `facet_args`, `code_arg`): none of them is read where no model runs
MODEL_FLAGS = ("--encoding", "--tau", "--eps", "--window", "--max-length", "--normalize", "--joiner", "--device",
               "--backend", "--quantize", "--batch-size", "--cache-dir", "--no-cache", "--query-text",
               "--cand-sentences", "--facet-code", "--doc-code", "--code")
# the options of the search stages (`add_stage_args`) beside `--bm25` and `--rerank`
STAGE_FLAGS = ("--bm25-alpha", "--k1", "--b", "--rerank-top", "--rerank-weight", "--rerank-max-length")


def refuse_model_options(parser: argparse.ArgumentParser, args, flags=()) -> None:
    """A parser error naming the `flags` and `MODEL_FLAGS` given to a run of BM25 alone (no `--model`), which reads
    none of them but `--device` where `--rerank` runs its cross-encoder there."""
    flags = [f for f in (*flags, *MODEL_FLAGS) if f != "--device" or not getattr(args, "rerank", None)]
    refuse_unread(parser, args, flags, "--bm25 without --model ranks by BM25 alone, running no model")


def given_options(parser: argparse.ArgumentParser, args, flags) -> list[str]:
    """The `flags` the command line gave a value other than their default (`parser`'s: the subcommand's), in order;
    flags the parser does not have are skipped."""
    found = []
    for flag in flags:
        dest = flag[2:].replace("-", "_")
        if hasattr(args, dest) and getattr(args, dest) != parser.get_default(dest):
            found.append(flag)
    return found


def refuse_unread(parser: argparse.ArgumentParser, args, flags, why: str) -> None:
    """A parser error naming the `flags` given (`given_options`) on a path that does not read them, and `why`."""
    given = given_options(parser, args, flags)
    if given:
        parser.error(f"{why}: {', '.join(given)} would not be read; leave {'it' if len(given) == 1 else 'them'} out")


# options of a model run that a `--search-pipeline` run does not read (the index and its search config decide):
# given, they were silently ignored
_NOT_SEARCH_OPTIONS = ("--encoding", "--tau", "--eps", "--window", "--max-length", "--normalize", "--joiner",
                       "--query-text", "--cand-sentences", "--k1", "--b", "--bm25-alpha", "--rerank-top",
                       "--rerank-weight", "--rerank-max-length", "--weights")
# ... nor these, which the context2doc runner does not take: its candidates are encoded by the index build's own path
# (no vector cache, the index's batch size). Every search runner loads the model on `--device` and searches there.
_NOT_READ_BY_SEARCH_RUNNER = {"csfcube": (), "reviewers": (), "context2doc": ("--batch-size", "--cache-dir", "--no-cache")}


def refuse_unused_by_search(parser, args) -> None:
    """A parser error naming the options given beside `--search-pipeline` that it does not read."""
    given = given_options(parser, args, _NOT_SEARCH_OPTIONS)
    if given:
        parser.error(f"--search-pipeline does not read {', '.join(given)}: the search config decides (give its keys "
                     "as overrides, e.g. search.bm25_k1=, search.ot_tau=), or run the model with --scorer")
    given = given_options(parser, args, _NOT_READ_BY_SEARCH_RUNNER[args.command])
    if given:
        parser.error(f"--search-pipeline does not read {', '.join(given)}: its {args.command} runner encodes the "
                     "candidates as `aspire index build` does (no vector cache, the index's batch size); leave "
                     f"{'it' if len(given) == 1 else 'them'} out, or run the model with --scorer")


def eval_options(args, scorers: list[str] | None = None) -> EvalOptions:
    """The `EvalOptions` of the parsed arguments; `scorers` (default: `--scorer`) decide whether the
    whole-abstract options (`--max-length`, `--normalize`, `--joiner`) and the scorer options (`--tau`, `--eps`,
    `--window`: `SCORER_OPTION_READERS`) apply; `--tau` / `--eps` left out are the ones `--model` was trained with
    where its scorer is among them (`aspire.encoders.trained.trained_defaults`, said in one line). ValueError when an
    option does not fit (`--tau` without a scorer that reads it, `--encoding independent` with the abstract scorer
    alone, `--quantize` against `--backend`, an encode option the encoding does not take, ...), before torch is
    imported."""
    scorers = scorers or [args.scorer or ""]
    for flag, readers in SCORER_OPTION_READERS.items():
        if getattr(args, flag[2:], None) is not None and not set(scorers) & set(readers):
            raise ValueError(f"{flag} goes with --scorer {' or '.join(readers)}; "
                             f"{'+'.join(scorers) or 'no scorer'} does not read it")
    encode = {k: v for k, v in (("max_length", args.max_length), ("normalize", args.normalize or None),
                                ("joiner", args.joiner)) if v is not None}
    if encode and "abstract" not in scorers and args.encoding == "contextual":
        raise ValueError("--max-length/--normalize/--joiner apply to --scorer abstract or --encoding independent")
    if args.encoding == "independent" and set(scorers) == {"abstract"}:  # the abstract scorer's encoding is its own
        raise ValueError("--encoding independent encodes a sentence scorer's sentences each alone; --scorer abstract "
                         "reads the whole-abstract vector (its options: --max-length, --normalize, --joiner), so it "
                         "would not be read: leave it out")
    code = args.doc_code if hasattr(args, "doc_code") else getattr(args, "code", None)
    given = scorer_options(",".join(scorers), args.tau, args.eps, args.window)
    if getattr(args, "model", None):  # the settings the model was trained with, where none are given (said)
        given = trained_defaults(args.model, scorers, given)
    options = EvalOptions(
        encoding=args.encoding, scorer_options=given,
        cache_dir=None if args.no_cache else args.cache_dir, batch_size=args.batch_size, device=args.device,
        encode_options=encode, query_text=getattr(args, "query_text", "abstract"),
        cand_sentences=getattr(args, "cand_sentences", "all"),
        encoder_options={**backend_options(args), **code_option(code)},
        facet_code=getattr(args, "facet_code", "auto"))
    if len(scorers) == 1 and scorers[0]:  # the runners' own check (`--encoding pass --max-length 5`), before torch
        options.checked(scorers[0], faceted=True)  # whether the set has facets is the runner's to check
    return options


def add_stage_args(p: argparse.ArgumentParser, documents: str = "title + abstract") -> None:
    """The search pipeline's stages as evaluator options: BM25 (alone or fused with the model) and a
    cross-encoder rerank of the top N (`stage_options` reads them)."""
    p.add_argument("--bm25", action="store_true", help=f"BM25 over {documents} (alone, or fused with --model)")
    p.add_argument("--bm25-alpha", type=float, help="fuse the model with BM25: z-scores, this weight on the model")
    p.add_argument("--k1", type=float, default=1.25, help="BM25 k1 (default 1.25)")
    p.add_argument("--b", type=float, default=0.75, help="BM25 b (default 0.75)")
    p.add_argument("--rerank", metavar="MODEL", help="re-score the top N with this cross-encoder (a trained one's "
                                                     "directory: python -m aspire.train.crossencoder)")
    p.add_argument("--rerank-top", type=positive_int, default=50,
                   help="documents re-scored per query (default 50; a shorter list is re-scored whole)")
    p.add_argument("--rerank-weight", type=float, default=1.0,
                   help="weight on the cross-encoder's z-scores against the first stage's (default 1: replace)")
    p.add_argument("--rerank-max-length", type=positive_int,
                   help="cross-encoder word pieces (default: the length the model was trained with)")


def stage_options(parser, args) -> Stages:
    """The `Stages` of `add_stage_args`' options; a parser error when they do not fit together or with `--model`."""
    if args.bm25_alpha is not None and not args.model:
        parser.error("--bm25-alpha fuses a model with BM25: give --model and --scorer")
    if not (args.bm25 or args.bm25_alpha is not None) and (args.k1, args.b) != (1.25, 0.75):
        parser.error("--k1/--b set BM25: give --bm25 (or --bm25-alpha to fuse it with the model)")
    rerank = None
    if args.rerank:
        from aspire.retrieval.crossencoder import RerankOptions

        depth = getattr(args, "depth", None)  # context2doc's documents a query: the most a rerank can re-score
        if depth is not None and args.rerank_top > depth:
            parser.error(f"--rerank-top {args.rerank_top} is deeper than the {depth} documents a query keeps "
                         f"(--depth): give --rerank-top {depth} or fewer, or a deeper --depth")
        rerank = RerankOptions(args.rerank, args.rerank_top, args.rerank_weight, args.rerank_max_length,
                               device=getattr(args, "device", None))  # --device: the model's and the reranker's
    elif (args.rerank_top, args.rerank_weight, args.rerank_max_length) != (50, 1.0, None):
        parser.error("--rerank-top/--rerank-weight/--rerank-max-length go with --rerank MODEL")
    return Stages(args.bm25 or args.bm25_alpha is not None, args.bm25_alpha, args.k1, args.b, rerank)


def fusion_option(fusion: str | None, old: str | None, parser) -> str:
    """`--fusion`, or its older spelling (`--norm zmuv|min-max`, `--method rrf`) with a one-line note; not both."""
    if fusion and old:
        parser.error("give --fusion alone (--norm / --method are its older spelling)")
    if old:
        fusion = fusion_method(old)
        print(f"note: {old!r} is read as --fusion {fusion}", file=sys.stderr)
    return fusion or "z"
