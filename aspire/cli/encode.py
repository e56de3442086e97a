"""Encode a papers JSONL into contextual sentence vectors, saved as a directory of flat arrays.

The output directory holds `vectors.npy` (N, D) float32 sentence vectors paper after paper,
`offsets.npy` (P + 1,) with paper p's rows at offsets[p]:offsets[p + 1], `whole.npy` (P, D) float32
whole-abstract vectors of the same encoder pass, `papers.jsonl` (paper_id, title, sentences, labels; in
the corpus's order, rejected records left out), `rejected.jsonl` (records not encoded, with reasons, in
input-line order: the reader's and the encoding's together) and `shard.json` (model name and fingerprint):
`aspire.index.EncodedCorpus.load_shard(DIR)` reads it back (the corpus and shard.json's fields). Without `--device`
the exact torch model encodes on the GPU where CUDA is available (`aspire.encoders.choice.encoding_device`), else on
the CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aspire.cliutil import (
    add_backend_options,
    add_common_options,
    backend_options,
    check_folders,
    command_parser,
    input_file,
    run_command,
    setup_logging,
    show_progress,
)
from aspire.encoders.choice import encoding_device
from aspire.encoders.pretrained import MODEL_HELP, check_model, pinned_model
from aspire.index.disk import SHARD_META
from aspire.storage import check_replaceable

EXAMPLES = """\
  aspire encode --model minilm --corpus papers.jsonl --out runs/vectors
  aspire encode --model mpnet --corpus papers.jsonl --out runs/vectors-mpnet --device cuda --batch-size 64
  aspire encode --model runs/ts/model --corpus papers.jsonl --out runs/vectors-ts --quiet
  aspire encode --model minilm --corpus papers.jsonl --out runs/vectors-int8 --backend onnx --quantize int8
  aspire encode --model minilm --corpus papers.jsonl --long-report
"""


def main(argv: list[str] | None = None, prog: str = "python -m aspire.encoders") -> int:
    parser = command_parser(prog, __doc__, EXAMPLES)
    parser.add_argument("--model", required=True, help=MODEL_HELP)
    parser.add_argument("--corpus", required=True, help="papers JSONL (paper_id, title, abstract[, pred_labels])")
    parser.add_argument("--out", help="output directory: new, empty, or an earlier encoding's (replaced); needed unless --long-report")
    parser.add_argument("--long-report", action="store_true",
                        help="encode nothing: list every paper longer than the model's window, one a line "
                             "(paper id, sentences past the first window, sentences split by it)")
    add_common_options(parser, device=True, batch_size=True, batch_size_default=32,
                       device_help="torch device (cpu, cuda, cuda:N, mps) of the exact torch model; default: cuda:0 "
                                   "where CUDA is available, else cpu (onnx and openvino run on the CPU)")
    add_backend_options(parser)
    args = parser.parse_args(argv)
    if not args.out and not args.long_report:
        parser.error("give --out (or --long-report)")
    if args.out and args.long_report:  # once checked, then ignored
        parser.error("--long-report encodes and writes nothing: leave out --out")
    setup_logging(args)
    return run_command(lambda: _run(args), args)


def _run(args) -> int:
    input_file(args.corpus, "--corpus")  # before torch and transformers load
    check_model(args.model)
    backend_options(args)  # --quantize with a backend it does not go with: before the corpus is read and torch loads
    if args.out:
        check_folders(out=args.out)  # a folder under a file once failed after the whole encoding, naming no option
        check_replaceable(args.out, SHARD_META, "an earlier encoding's folder")
    args.model = pinned_model(args.model)  # a run folder: its checkpoint, recorded in shard.json
    return _long_report(args) if args.long_report else _encode(args)


def _long_report(args) -> int:
    """Every paper of the corpus that does not fit in the model's first window, one tab-separated line each; the
    records that are no paper (`read_corpus`'s rejected) and the papers with a sentence the model's tokenizer gives no
    word piece (both of which `_encode` rejects) are named on stderr."""
    from aspire.encoders import load_encoder
    from aspire.index.corpus import describe_rejected, read_corpus

    papers, unreadable = read_corpus(args.corpus)
    if unreadable:  # once left out unsaid: a bad record was neither listed nor counted
        print(f"{len(unreadable)} record(s) of {args.corpus} are no paper and were not checked"
              + describe_rejected(unreadable), file=sys.stderr)
    encoder = load_encoder(args.model, device=args.device, **backend_options(args))
    unseen = encoder.unseen_sentences(papers, batch_size=args.batch_size)  # such a paper once stopped the report
    unseeable = [{"line": line, "paper_id": p.paper_id, "reason": f"sentence(s) {u} give the tokenizer no word piece"}
                 for p, line, u in zip(papers, papers.lines, unseen) if u]
    if unseeable:
        print(f"{len(unseeable)} paper(s) of {args.corpus} are not encoded and were not checked"
              + describe_rejected(unseeable), file=sys.stderr)
        papers = [p for p, u in zip(papers, unseen) if not u]
    report = encoder.truncation_report(papers, batch_size=args.batch_size)
    for record in report:
        print(f"{record.paper_id}\tpast the window: {record.cut}\tsplit by it: {record.partial}")
    print(f"{len(report)} of {len(papers)} papers longer than {encoder.max_length} word pieces "
          f"({'encoded in continuation windows' if encoder.overflow == 'window' else 'cut'})", file=sys.stderr)
    return 0


def _encode(args) -> int:
    from aspire.encoders import load_encoder
    from aspire.index.config import EncodeConfig
    from aspire.index.corpus import describe_rejected, encode_corpus, in_line_order, read_corpus

    papers, unreadable = read_corpus(args.corpus)
    if not papers:  # before loading a model
        if not unreadable:  # an empty file was said to have had "all 0 records" rejected
            raise ValueError(f"nothing to encode: {args.corpus} holds no records")
        raise ValueError(f"nothing to encode: all {len(unreadable)} records of {args.corpus} were rejected"
                         + describe_rejected(unreadable))
    encoder = load_encoder(args.model, device=encoding_device(args.device, args.backend), **backend_options(args))
    corpus = encode_corpus(encoder, papers, EncodeConfig(batch_size=args.batch_size), progress=show_progress(args))
    corpus.rejected = in_line_order(unreadable + corpus.rejected)  # the reader's were all written first
    if len(corpus) == 0:
        raise ValueError(f"nothing to encode: all {len(corpus.rejected)} records were rejected"
                         + describe_rejected(corpus.rejected))
    out = corpus.save_shard(Path(args.out), {"model_name": args.model, "model_fingerprint": encoder.fingerprint()})
    print(f"{out}: {len(corpus)} papers, {len(corpus.vectors)} sentence vectors of dimension {corpus.dim}, "
          f"{len(corpus.rejected)} record(s) rejected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
