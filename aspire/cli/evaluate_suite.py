"""`aspire evaluate`'s commands over several benchmarks at once: `suite` (one model, or an ensemble, over every
registered benchmark in one table) and SciRepEval's formats on the ACL papers (`venue`, `year`, `same-author`,
`PROBE_HELP`). `aspire.cli.evaluate` lists them in its command table beside the one-benchmark commands.

    aspire evaluate suite --model minilm --scorer minl2 --out runs/suite-minilm-minl2
    aspire evaluate suite --ensemble configs/ensemble_minilm.yaml --out runs/suite-ensemble
    aspire evaluate venue --model minilm --out runs/scirepeval/minilm/venue
"""

from __future__ import annotations

import argparse
import errno
from pathlib import Path

from aspire.benchmarks import BENCHMARKS
from aspire.cli.evaluate_options import MODEL_FLAGS, code_arg, eval_options, given_options, model_args, refuse_unread
from aspire.cliutil import add_backend_options, backend_options, code_option, device_name, positive_int, print_json
from aspire.encoders.pretrained import MODEL_HELP
from aspire.evaluate.cache import default_cache_dir
from aspire.evaluate.options import Stages
from aspire.paths import DATA

PROBE_HELP = {"venue": "ACL venue classification: macro-F1 of a linear probe (SciRepEval's classification format)",
              "year": "ACL year of publication: Kendall tau and RMSE of a ridge probe (SciRepEval's regression format)",
              "same-author": "ACL same-author proximity: MAP / nDCG@10 (SciRepEval's proximity format)"}
PROBE_EXAMPLES = {
    "venue": """\
  aspire evaluate venue --model minilm --out runs/scirepeval/minilm/venue
  aspire evaluate venue --model minilm --labels my_labels.jsonl --out runs/scirepeval/my-labels""",
    "year": """\
  aspire evaluate year --model minilm --out runs/scirepeval/minilm/year
  aspire evaluate year --model runs/my_model/best --out runs/scirepeval/mine/year --compare runs/scirepeval/minilm/year""",
    "same-author": """\
  aspire evaluate same-author --model mpnet --out runs/scirepeval/mpnet/same-author
  aspire evaluate same-author --model runs/codes/best --code [PRX] --out runs/scirepeval/codes/same-author""",
}


# ---- the SciRepEval formats ---------------------------------------------------------------------------------

def probe_args(p: argparse.ArgumentParser, name: str) -> None:
    """The SciRepEval formats' options: no scorer, their two representations are fixed (`aspire.evaluate.probes`)."""
    p.add_argument("--data", default=str(DATA / "acl-anthology"), help="ACL folder (default %(default)s)")
    if name != "same-author":
        p.add_argument("--labels", help="your own labels: JSONL of paper_id and label for every paper of the split")
    p.add_argument("--compare", metavar="DIR", help="paired tests against another results folder of this format")
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--code", help="model with control codes: the code every paper gets (default: the model's own)")
    p.add_argument("--cache-dir", default=str(default_cache_dir()), help="vector cache (default %(default)s)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the vector cache")
    p.add_argument("--batch-size", type=positive_int, default=32, help="papers per encoder batch (default 32)")
    p.add_argument("--device", type=device_name, help="torch device (default: cpu, also where CUDA is available: "
                                                      "the known answers are the CPU's)")
    p.add_argument("--out", required=True, help="output folder")
    add_backend_options(p)


def run_probe(parser, args) -> int:
    from aspire.evaluate.probes import compare_probe_results, run_format
    from aspire.io import write_json

    res = run_format(args.command, args.data, args.model, args.out, None if args.no_cache else args.cache_dir,
                     args.batch_size, args.device, {**backend_options(args), **code_option(args.code)},
                     getattr(args, "labels", None))
    tests = None
    if args.compare:  # written before anything is printed: a reader of stdout that goes away once lost the file
        tests = compare_probe_results(args.out, args.compare)
        write_json(Path(args.out) / "compare.json", {"against": args.compare, "tests": tests})
    for rep, r in res["representations"].items():
        print(rep, "  ".join(f"{m} {v:.4f} [{r['ci95'][m][0]:.4f}, {r['ci95'][m][1]:.4f}]"
                             for m, v in r["metrics"].items()), r.get("chosen", ""))
    if tests is not None:
        print_json(tests, indent=1)
    print(f"wrote {Path(args.out) / 'results.json'}")
    return 0


# ---- suite --------------------------------------------------------------------------------------------------

def suite_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=str(DATA), help="folder holding "
                   + ", ".join(dict.fromkeys(b.folder + "/" for b in BENCHMARKS.values())))
    p.add_argument("--benchmarks", nargs="+", choices=list(BENCHMARKS), metavar="NAME",
                   help="run only these (default: all of " + ", ".join(BENCHMARKS) + ")")
    p.add_argument("--aggregate", default="max", help="reviewer matching aggregate (default max)")
    p.add_argument("--bm25-alpha", type=float, help="context2doc: fuse with BM25 at this weight on the model")
    p.add_argument("--ensemble", metavar="YAML",
                   help="an ensemble (configs/ensemble_*.yaml: members, weights, fusion) instead of --model/--scorer")
    model_args(p)
    code_arg(p)


def run_suite_command(parser, args) -> int:
    if args.ensemble:
        return _ensemble_suite(parser, args)
    if not args.model or (args.model != "bm25" and not args.scorer and not _formats_alone(args)):
        parser.error("give --model and --scorer (or --model bm25; --benchmarks of SciRepEval's formats alone: no "
                     "--scorer)")
    if args.model == "bm25" and (args.backend != "torch" or args.quantize):
        parser.error("--backend/--quantize choose a model's encoder; --model bm25 has none")
    if args.model == "bm25":  # BM25 alone on the lexical benchmarks (context2doc): no scorer, encoder or aggregate
        refuse_unread(parser, args, ("--scorer", "--aggregate", "--bm25-alpha", *MODEL_FLAGS),
                      "--model bm25 ranks by BM25 alone on context2doc")
    _refuse_left_out(parser, args)
    _check_suite_settings(args)
    options = eval_options(args) if args.model != "bm25" else None
    if args.model != "bm25":  # every named benchmark runs: its data before the first one's encoding
        _check_data(args.data, args.benchmarks or list(BENCHMARKS))
    from aspire.evaluate.suite import RUNNERS, format_rows, format_seconds, run_suite  # torch: after every check

    if args.model == "bm25":  # BM25 alone runs only the lexical benchmarks: the others are skipped
        lexical = [n for n in dict.fromkeys(args.benchmarks or BENCHMARKS) if RUNNERS[n].lexical]
        if not lexical:  # once an empty table, an empty suite.json and exit status 0
            parser.error(f"--model bm25 ranks only {', '.join(n for n, r in RUNNERS.items() if r.lexical)} (no model "
                         f"needed); --benchmarks {' '.join(args.benchmarks)} has none of them")
        _check_data(args.data, lexical)
    suite = run_suite(args.model, args.scorer, args.out, args.data, args.aggregate, args.bm25_alpha, options,
                      benchmarks=args.benchmarks)
    print("\n".join(format_rows(suite["rows"])))
    print(format_seconds(suite["seconds"]))
    if suite.get("kept"):
        print(f"kept from the earlier run in {args.out} (same settings): {', '.join(suite['kept'])}")
    print(f"wrote {Path(args.out) / 'suite.json'}")
    return 0


def _ensemble_suite(parser, args) -> int:
    given = given_options(parser, args, ("--model", "--scorer", "--tau", "--eps", "--window", "--bm25-alpha",
                                         "--max-length", "--joiner", "--code"))
    if given or args.normalize or args.encoding != "contextual":
        parser.error(f"--ensemble takes each member's model and options from its YAML; leave out "
                     f"{given or '--encoding/--normalize'}")
    refuse_unread(parser, args, ("--backend", "--quantize"), "--ensemble members encode with the exact torch model")
    _refuse_left_out(parser, args)
    _check_suite_settings(args)
    from aspire.evaluate.ensemble import load_ensemble, members_of, run_ensemble_suite  # torch: after every check
    from aspire.evaluate.suite import RUNNERS, format_rows

    # the data of every benchmark where two or more members apply (the others are skipped) before any member runs: a
    # missing folder was found only after the members of every benchmark before it had run
    lexical = [m.lexical for m in members_of(load_ensemble(args.ensemble, say=False))]
    _check_data(args.data, [name for name in dict.fromkeys(args.benchmarks or BENCHMARKS)
                            if name in RUNNERS and sum(RUNNERS[name].lexical or not lex for lex in lexical) >= 2])
    suite = run_ensemble_suite(args.ensemble, args.out, args.data, args.aggregate,
                               None if args.no_cache else args.cache_dir, args.batch_size, args.device,
                               benchmarks=args.benchmarks)
    print("\n".join(format_rows(suite["rows"])))
    for line in suite["skipped"]:
        print(f"skipped: {line}")
    print(f"wrote {Path(args.out) / 'suite.json'}")
    return 0


def _check_suite_settings(args) -> None:
    """ValueError for a bad `--aggregate` or `--bm25-alpha` before the first benchmark runs: each is read by one
    benchmark (reviewers, context2doc), which refused it only after every benchmark before it had run."""
    if args.benchmarks is None or "reviewers" in args.benchmarks:
        from aspire.benchmarks.reviewers import parse_aggregate  # torch-free: checked before any model loads

        parse_aggregate(args.aggregate)
    if args.bm25_alpha is not None:
        Stages(bm25=True, alpha=args.bm25_alpha).checked(has_model=True)


def _check_data(data: str, names) -> None:
    """FileNotFoundError naming `--data` when the folder of a benchmark of `names` is not under `data`, before any
    benchmark runs: a missing one was found only when its turn came, after every benchmark before it had run (a wrong
    `--data` after torch had loaded)."""
    for name in dict.fromkeys(names):
        folder = Path(data) / BENCHMARKS[name].folder
        if not folder.is_dir():
            raise FileNotFoundError(errno.ENOENT, f"No such folder (--data {data}: the {name} benchmark's data)",
                                    str(folder))


def _refuse_left_out(parser, args) -> None:
    """`--aggregate` / `--bm25-alpha` are read by one benchmark each (reviewers / context2doc): a parser error when
    `--benchmarks` leaves it out."""
    for flag, bench in (("--aggregate", "reviewers"), ("--bm25-alpha", "context2doc")):
        if args.benchmarks is not None and bench not in args.benchmarks and given_options(parser, args, (flag,)):
            parser.error(f"{flag} applies to the {bench} benchmark, which --benchmarks leaves out; leave it out")
    if _formats_alone(args):  # `aspire.evaluate.probes.probe_rows`
        refuse_unread(parser, args, ("--scorer", "--encoding", "--tau", "--eps", "--window", "--max-length",
                                     "--normalize", "--joiner"), "the SciRepEval formats score their own two representations, "
                                                  "whatever the scorer and its encoding")


def _formats_alone(args) -> bool:
    """`--benchmarks` names SciRepEval's formats alone, which read no scorer (`PROBE_HELP`)."""
    return args.benchmarks is not None and set(args.benchmarks) <= set(PROBE_HELP)
