"""`python -m aspire.index {build,add,encode-shard,merge,info}`: build and maintain a sentence index.

    build         --model M --corpus papers.jsonl --out DIR [--config configs/index.yaml] [key=value ...]
    add           --index DIR --corpus more.jsonl [--model M]   (model defaults to the index's)
    encode-shard  --model M --corpus papers.jsonl --shards SHARDS [--merge-into DIR]   (under torchrun)
    merge         --shards SHARDS --out DIR
    info          --index DIR

Overrides are dotted config keys, e.g. `index.kind=hnsw encode.batch_size=64`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from aspire.config import load_config
from aspire.index.config import IndexBuildConfig
from aspire.index.corpus import encode_corpus, read_corpus
from aspire.index.shards import merge_shards, run_encode_shard
from aspire.index.store import SentenceIndex, model_fingerprint


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m aspire.index", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p):
        p.add_argument("--config", help="YAML build config (default: built-in defaults)")
        p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. index.kind=hnsw")

    p = sub.add_parser("build", help="encode a corpus and index it")
    p.add_argument("--model", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--overwrite", action="store_true", help="replace an existing index at --out")
    with_config(p)
    p = sub.add_parser("add", help="encode more papers and add them to an index")
    p.add_argument("--index", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--model", help="default: the model the index was built with")
    p = sub.add_parser("encode-shard", help="encode this rank's slice of a corpus (run under torchrun)")
    p.add_argument("--model", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--shards", required=True)
    p.add_argument("--merge-into", help="rank 0 merges all shards into an index here when every rank is done")
    with_config(p)
    p = sub.add_parser("merge", help="merge the shards of a sharded encoding into one index")
    p.add_argument("--shards", required=True)
    p.add_argument("--out", required=True)
    with_config(p)
    p = sub.add_parser("info", help="print an index's manifest")
    p.add_argument("--index", required=True)
    return parser


def _summary(index: SentenceIndex, path: Path, n_new: int | None = None) -> str:
    lines = [f"index {path}: {index.n_papers} papers, {index.n_sentences} sentence vectors, "
             f"{index.kind} faiss index, model {index.model_name!r} ({index.model_fingerprint})"]
    if n_new is not None:
        lines.append(f"indexed {n_new} new paper(s)")
    if index.rejected:
        lines.append(f"{len(index.rejected)} record(s) rejected, listed in {path / 'rejected.jsonl'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from aspire.encoders import load_encoder  # heavy import, only where a model is used

    if args.command in ("build", "encode-shard", "merge"):
        config = load_config(IndexBuildConfig, args.config, args.overrides)
    if args.command == "build":
        out = Path(args.out)
        if (out / "CURRENT").exists() and not args.overwrite:
            raise SystemExit(f"{out} already holds an index; use `add` to extend it or --overwrite to replace it")
        encoder = load_encoder(args.model)
        papers, unreadable = read_corpus(args.corpus)
        corpus = encode_corpus(encoder, papers, config.encode)
        corpus.rejected = unreadable + corpus.rejected
        index = SentenceIndex.build(corpus, config, model_fingerprint(encoder), args.model)
        gen = index.save(out)
        print(_summary(index, gen, len(index.paper_ids)))
    elif args.command == "add":
        index = SentenceIndex.load(args.index, mmap=False)
        encoder = load_encoder(args.model or index.model_name)
        fingerprint = model_fingerprint(encoder)
        index.check_model(fingerprint)
        papers, unreadable = read_corpus(args.corpus)
        before = index.n_papers
        corpus = encode_corpus(encoder, papers, index.config.encode, skip_ids=index.positions)
        corpus.rejected = unreadable + corpus.rejected
        index.add(corpus, fingerprint)
        gen = index.save(args.index)
        print(_summary(index, gen, index.n_papers - before))
    elif args.command == "encode-shard":
        path = run_encode_shard(args.model, args.corpus, args.shards, config, args.merge_into)
        print(f"wrote {path}")
    elif args.command == "merge":
        index = merge_shards(args.shards, args.out, config)
        print(_summary(index, Path(SentenceIndex.read_manifest(args.out)["path"]), index.n_papers))
    elif args.command == "info":
        print(json.dumps(SentenceIndex.read_manifest(args.index), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
