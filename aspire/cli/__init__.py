"""The `aspire` command: one entry point whose subcommands run the package's command lines.

`aspire COMMAND ...` runs the same code as `python -m aspire.MODULE ...` (both keep working);
`aspire COMMAND --help` shows the command's options and examples.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import aspire
from aspire.cliutil import Parser

# command -> (module whose `main(argv, prog)` runs it, one-line purpose)
COMMANDS = {
    "index": ("aspire.index.__main__", "build, extend and inspect a sentence index of a papers JSONL"),
    "search": ("aspire.cli.search", "search an index by a paper's selected sentences (aspect-conditional)"),
    "serve": ("aspire.serve.__main__", "serve the aspect-selection web page over an index"),
    "train": ("aspire.train.__main__", "train a document model from a YAML config"),
    "evaluate": ("aspire.cli.evaluate", "evaluate on CSFCube or ASPIRE-style pools, or fuse runs"),
    "encode": ("aspire.cli.encode", "encode a papers JSONL into sentence vectors (arrays on disk)"),
    "demo": ("aspire.demo", "encode and evaluate CSFCube end to end on embedded defaults"),
    "data": ("aspire.cli.data", "build co-citation training data, one pipeline stage a command"),
    "papers": ("aspire.data.papers", "check a papers JSONL file, or split its abstracts into sentences once"),
    "cosentbert": ("aspire.encoders.cosentbert", "train or evaluate the co-citation sentence encoder (CoSentBert)"),
    "teacher": ("aspire.train.teacher", "write a teacher model's whole-abstract vectors of ACL papers (distillation)"),
    "train-crossencoder": ("aspire.train.crossencoder", "train a cross-encoder re-ranker on context2doc's train split"),
    "self-train": ("aspire.train.self_training", "self-training rounds of the cross-encoder re-ranker on unlabelled citing sentences"),
    "export": ("aspire.train.export", "merge a trained model's adapter into plain Hugging Face weights"),
    "interpolate": ("aspire.train.interpolate", "average trained models' weights (a soup) into one model"),
    "two-fold": ("aspire.evaluate.two_fold", "choose among CSFCube runs by the two-fold dev protocol"),
}
EXAMPLES = """\
  aspire index build --model minilm --corpus papers.jsonl --out runs/index
  aspire search --index runs/index --query-id 2468783 --sentences method --k 10
  aspire serve --index runs/index search.rerank=ot
  aspire train --config configs/ts_aspire.yaml train.max_steps=200
  aspire evaluate csfcube --model minilm --scorer minl2 --out runs/csfcube
"""


def build_parser() -> argparse.ArgumentParser:
    listing = "\n".join(f"  {name:<18} {purpose}" for name, (_, purpose) in COMMANDS.items())
    parser = Parser(
        prog="aspire", description=__doc__.split("\n")[0] + "\n\ncommands:\n" + listing,
        epilog="config overrides are section.key=value (dotted keys of the command's YAML config)\n\nexamples:\n"
        + EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"aspire {aspire.__version__}")
    parser.add_argument("command", choices=list(COMMANDS), metavar="COMMAND", help="one of: " + ", ".join(COMMANDS))
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the command's options (aspire COMMAND --help)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if not argv:  # `aspire` alone: the list of commands, as a usage error
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    return int(module.main(args.args, prog=f"aspire {args.command}") or 0)


# Commands that write nothing after they return: the console entry ends their process without the interpreter's
# teardown (torch, OpenVINO, spaCy and faiss objects destroyed one by one: about a second of a one-off search).
FAST_EXIT = ("search",)


def console() -> None:
    """The `aspire` console script and `python -m aspire`: `main`, then the process's exit. After a `FAST_EXIT`
    command the output is flushed and the process ends at once (`os._exit`); every other command exits normally,
    and `main` called in a process of its own (tests, notebooks) never exits it."""
    code = main()
    argv = sys.argv[1:]
    if argv and argv[0] in FAST_EXIT:
        import logging
        import os

        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (BrokenPipeError, OSError):  # the reader went away (`aspire search ... | head`): nothing to flush
                pass
        logging.shutdown()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    console()
