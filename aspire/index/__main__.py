"""Build and maintain a sentence index of a papers JSONL (`aspire index` / `python -m aspire.index`).

    build         [--model M] --corpus papers.jsonl --out DIR [--overwrite] [--config configs/index.yaml] [key=value ...]
                  (model: the shipped aspect model aspire-minilm unless given)
    add           --index DIR --corpus more.jsonl [--model M]   (model, backend and precision default to the index's;
                  one line says which backend, once the add goes ahead)
                  (build, encode-shard: --backend auto by default, OpenVINO bf16 where the CPU has AMX or
                  AVX512-BF16, else the exact model, one line says which; build and add without --device run the
                  exact model on the GPU where CUDA is available, as encode-shard on the rank's GPU, and auto then
                  chooses it there; --backend torch for the exact model; a config's encode.backend/encode.quantize
                  stand for --backend/--quantize in both. build, add, encode-shard: [--backend onnx [--quantize
                  int8]] encodes with ONNX Runtime on the CPU; add must use the backend the index was built with, its
                  fingerprint is checked)
    encode-shard  [--model M] --corpus papers.jsonl --shards SHARDS [--num-shards S] [--merge-into DIR [--overwrite]]
                  (under torchrun; a re-run encodes only the shards not yet finished, and refuses finished shards
                  of another corpus, model, backend or setting; --shards must not hold an index)
    merge         --shards SHARDS --out DIR [--allow-missing] [--overwrite]   (streaming: shard by shard, never the
                  whole corpus in RAM; the index records the backend and precision the shards were encoded with)
    info          --index DIR [--verify]   (the manifest, with the generation's path and, as `encoded_with`, the
                  backend and precision its config.yaml records; --verify: check every file's SHA-256)

build, merge and --merge-into refuse a folder that already holds an index unless --overwrite is given.

Overrides are dotted config keys, e.g. `index.kind=hnsw encode.batch_size=64`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from aspire.cliutil import (
    OVERRIDES_HELP,
    Formatter,
    add_backend_options,
    add_common_options,
    backend_options,
    check_folder,
    check_folders,
    check_paths,
    command_parser,
    normalize_overrides,
    on_cpu,
    positive_int,
    print_json,
    run_command,
    setup_logging,
    show_progress,
)
from aspire.config import load_config, parse_overrides
from aspire.encoders.choice import add_auto_backend_option, encoding_device, gpu_device, resolve_backend
from aspire.encoders.pretrained import ASPECT_MODEL, MODEL_HELP, check_model, pinned_model
from aspire.index.config import READING_LIMITS, IndexBuildConfig, given_search_keys, trained_search_config
from aspire.index.disk import refuse_existing_index, require_live_generation

log = logging.getLogger("aspire.index")


def load_encoder(name: str, device: str | None = None, **backend):
    """The encoder, imported only where a model is used (transformers is a heavy import)."""
    from aspire.encoders import load_encoder as load

    return load(name, device=device, **backend)


EXAMPLES = {
    "build": """\
  aspire index build --model minilm --corpus papers.jsonl --out runs/index
  aspire index build --model mpnet --corpus papers.jsonl --out runs/index index.kind=hnsw --device cuda
  aspire index build --model minilm --corpus papers.jsonl --out runs/index --config configs/index-large.yaml""",
    "add": """\
  aspire index add --index runs/index --corpus more.jsonl
  aspire index add --index runs/index --corpus more.jsonl --batch-size 64 --quiet""",
    "encode-shard": """\
  torchrun --nproc_per_node 2 -m aspire.index encode-shard --model minilm --corpus papers.jsonl --shards runs/shards
  torchrun --nproc_per_node 2 -m aspire.index encode-shard --model minilm --corpus papers.jsonl \\
      --shards runs/shards --merge-into runs/index
  OMP_NUM_THREADS=1 torchrun --nproc_per_node 2 -m aspire.index encode-shard --model minilm --corpus papers.jsonl \\
      --shards runs/shards --num-shards 32 --backend onnx --quantize int8""",
    "merge": """\
  aspire index merge --shards runs/shards --out runs/index
  aspire index merge --shards runs/shards --out runs/index index.kind=ivf
  aspire index merge --shards runs/shards --out runs/index-partial --allow-missing""",
    "info": """\
  aspire index info --index runs/index
  aspire index info --index runs/index > manifest.json""",
}
OVERRIDE_EXAMPLE = "e.g. index.kind=hnsw encode.chunk_papers=256 search.rerank=ot"


def _parser(prog: str = "python -m aspire.index") -> argparse.ArgumentParser:
    parser = command_parser(prog, __doc__, "\n".join(e.split("\n")[0] for e in EXAMPLES.values()))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="COMMAND --help for its options")

    def command(name: str, purpose: str, encodes: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=purpose, description=purpose, epilog="examples:\n" + EXAMPLES[name],
                           formatter_class=Formatter, allow_abbrev=False)
        if encodes:  # add encodes with the index's saved config (`add_to_index`), build and encode-shard with --config
            default = ("the batch size the index records, encode.batch_size in its config.yaml; one given holds for "
                       "this run only" if name == "add" else
                       "encode.batch_size of --config or an override, else 32")
            add_common_options(p, device=name != "encode-shard", batch_size=True,
                               batch_size_help=f"papers encoded per forward pass (default: {default})",
                               device_help="torch device (cpu, cuda, cuda:N, mps) of the exact torch model; default: "
                                           "cuda:0 where CUDA is available, else cpu (the fast backends run on the CPU; "
                                           "an index encoded on either is searched on either)")
        else:
            add_common_options(p)
        return p

    def overwrite(p, where: str, note: str = ""):  # an existing index is replaced only when asked
        p.add_argument("--overwrite", action="store_true", help=f"replace an existing index at {where}{note}")

    def with_config(p):
        p.add_argument("--config", help="YAML build config, e.g. configs/index.yaml (default: built-in defaults)")
        p.add_argument("overrides", nargs="*", metavar="section.key=value",
                       help=f"{OVERRIDES_HELP}, {OVERRIDE_EXAMPLE}")

    p = command("build", "encode a papers JSONL and index its sentence vectors", encodes=True)
    p.add_argument("--model", default=ASPECT_MODEL,
                   help=f"{MODEL_HELP} (default {ASPECT_MODEL}: the shipped aspect model)")
    p.add_argument("--corpus", required=True, help="papers JSONL (paper_id, title, abstract[, pred_labels])")
    p.add_argument("--out", required=True, help="index directory to create")
    overwrite(p, "--out")
    add_backend_options(p)
    add_auto_backend_option(p)  # the index records the backend chosen; search encodes its queries with it
    with_config(p)
    p = command("add", "encode more papers and add them to an index", encodes=True)
    p.add_argument("--index", required=True, help="the index directory to extend")
    p.add_argument("--corpus", required=True, help="papers JSONL; ids already indexed are rejected as duplicates")
    p.add_argument("--model", help="default: the model the index was built with")
    add_backend_options(p)
    p.set_defaults(backend=None)  # not given: the backend and precision the index records (`recorded_backend`)
    p = command("encode-shard", "encode this rank's slice of a corpus (run under torchrun)", encodes=True)
    p.add_argument("--model", default=ASPECT_MODEL,
                   help=f"{MODEL_HELP} (default {ASPECT_MODEL})")
    p.add_argument("--corpus", required=True, help="papers JSONL")
    p.add_argument("--shards", required=True, help="directory for the shards, one per rank")
    p.add_argument("--merge-into", help="rank 0 merges all shards into an index here when every rank is done")
    overwrite(p, "--merge-into")
    p.add_argument("--num-shards", type=positive_int,
                   help="cut the corpus into this many shards, each written when done (default: one a rank)")
    add_backend_options(p)
    add_auto_backend_option(p)  # as build's, so that a sharded and a single build of one corpus agree
    with_config(p)
    p = command("merge", "merge the shards of a sharded encoding into one index")
    p.add_argument("--shards", required=True, help="directory holding every rank's shard")
    p.add_argument("--out", required=True, help="index directory to write")
    overwrite(p, "--out", " (a merge after one with --allow-missing, say)")
    p.add_argument("--allow-missing", action="store_true",
                   help="index the finished shards when some are missing (they are named in a warning)")
    with_config(p)
    p = command("info", "print an index's manifest and the backend and precision it was encoded with (JSON)")
    p.add_argument("--index", required=True, help="the index directory")
    p.add_argument("--verify", action="store_true", help="check every file's SHA-256 (loading checks files up to 64 MiB)")
    return parser


def _summary(path: Path, n_new: int | None = None, n_rejected: int | None = None) -> str:
    """What the generation `path` holds, from its manifest (a merge never loads the index it wrote); `n_rejected`:
    the records this run rejected (an `add`), when not every rejected record the index lists."""
    m = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    lines = [f"index {path}: {m['n_papers']} papers, {m['n_sentences']} sentence vectors, "
             f"{m['kind']} faiss index, model {m['model_name']!r} ({m['model_fingerprint']})"]
    if n_new is not None:
        lines.append(f"indexed {n_new} new paper(s)")
    if n_rejected is not None:
        if n_rejected:
            lines.append(f"{n_rejected} record(s) of this corpus rejected ({m['n_rejected']} in all), listed in "
                         f"{path / 'rejected.jsonl'}")
    elif m["n_rejected"]:
        lines.append(f"{m['n_rejected']} record(s) rejected, listed in {path / 'rejected.jsonl'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "python -m aspire.index") -> int:
    args = _parser(prog).parse_args(argv)
    setup_logging(args)
    return run_command(lambda: _run(args), args)


def recorded_encoding(manifest: dict) -> tuple[str | None, str | None]:
    """The backend and precision the index of `manifest` (`SentenceIndex.read_manifest`'s, with its generation's
    `path`) records in its generation's config.yaml: (None, None) for one built before they were recorded, which the
    exact torch model encoded (`add` and `search` encode with it). IndexFormatError naming the config.yaml that fails
    its schema (`store.read_config`)."""
    from aspire.index.store import read_config

    encode = read_config(Path(manifest["path"])).encode
    return encode.backend, encode.quantize


def recorded_backend(args) -> tuple[tuple[str, str | None, str | None], str | None]:
    """`add` without --backend: encode with the backend the index records (torch when it records none), as `aspire
    search` does, and, without --quantize too, its precision. Returns what the index records (model name, backend,
    precision) and why this backend, for `add`'s one line (None: the user's --backend, nothing to say)."""
    from aspire.index.store import SentenceIndex

    manifest = SentenceIndex.read_manifest(args.index)
    backend, quantize = recorded_encoding(manifest)
    why = None
    if args.backend is None:
        why = ("the backend the index records" if backend else
               "the index records no backend (built before backends were recorded), so the exact torch model")
        if args.quantize is not None:  # the precision is the user's
            why += f", at the precision given (--quantize {args.quantize}; the index records {quantize or 'fp32'})"
        args.backend = backend or "torch"
        args.quantize = args.quantize if args.quantize is not None else quantize
    return (manifest["model_name"], backend, quantize), why


def encoded_with(manifest: dict) -> dict:
    """What `info` adds to an index's manifest as `encoded_with`: the backend and precision (`fp32`: none reduced) its
    vectors were encoded with, and whether the index records them (`recorded`: false for one built before they were
    recorded, taken as the exact torch model's, as `add` and `search` take it)."""
    backend, quantize = recorded_encoding(manifest)
    return {"backend": backend or "torch", "precision": quantize or "fp32", "recorded": backend is not None}


def _merged_summary(gen: Path) -> str:
    """`merge`'s and `encode-shard --merge-into`'s summary of the index written at generation `gen`."""
    return _summary(gen, json.loads((gen / "manifest.json").read_text(encoding="utf-8"))["n_papers"])


def config_backend(args, encode) -> bool:
    """build / encode-shard: the backend and precision a config names (`encode.backend` / `encode.quantize`, in
    `--config` or an override, e.g. an index's saved config.yaml) encode when `--backend/--quantize` are not given
    (they were once accepted, then replaced by the flags' default without a word); given, they must agree. ValueError
    naming the key otherwise. True when the config's backend stands for the flags."""
    from aspire.cliutil import QUANTIZATIONS

    if encode.backend is None and encode.quantize is None:
        return False
    backend = encode.backend or "torch"
    if backend not in QUANTIZATIONS:
        raise ValueError(f"encode.backend: unknown backend {encode.backend!r}; valid: {list(QUANTIZATIONS)}")
    if encode.quantize is not None and encode.quantize not in QUANTIZATIONS[backend]:
        raise ValueError(f"encode.quantize: {encode.quantize!r} does not go with encode.backend {backend}; valid: "
                         f"{list(QUANTIZATIONS[backend])} (or none)")
    if args.backend is None and args.quantize is None:
        args.backend, args.quantize = backend, encode.quantize
        return True
    if (args.backend or "torch", args.quantize) != (backend, encode.quantize):  # a --quantize alone keeps torch
        given = _named("--", args.backend, args.quantize)
        implied = "" if args.backend else " (no --backend: --quantize alone keeps torch)"
        recorded = _named("encode.", encode.backend, encode.quantize)
        if encode.backend is None:
            recorded += " (no encode.backend: torch)"
        elif encode.quantize is None:
            recorded += " (no encode.quantize)"
        raise ValueError(f"{given}{implied} and the config's {recorded} disagree: leave out {given} to encode as the "
                         f"config says, or give {_named('--', backend, encode.quantize)} to match it")
    return False


def _named(prefix: str, backend: str | None, quantize: str | None) -> str:
    """`config_backend`'s words for a backend and precision as given: `--backend onnx --quantize int8` (prefix `--`),
    `encode.backend onnx` (prefix `encode.`); what was not given is left out."""
    return " ".join(f"{prefix}{key} {value}" for key, value in (("backend", backend), ("quantize", quantize))
                    if value is not None)


def refuse_recorded_encoding(overrides: list[str]) -> None:
    """ValueError naming an `encode.*` override a merge would replace by what the shards record of their encoding
    (`aspire.index.stream.encoded_config`: the backend, its precision and the reading limits); once taken and
    read by nothing. A key given inside a section mapping (`encode={max_sentences: 5}`) is refused too."""
    encode = parse_overrides(overrides).get("encode")
    for key in ("backend", "quantize", *READING_LIMITS):
        if isinstance(encode, dict) and key in encode:
            raise ValueError(f"encode.{key}: a merge takes it from the shards' record of how they were encoded, which "
                             "the index then records for `add` and `search`: leave it out (encode the shards with it)")


def _run(args) -> int:
    # the user's paths first, so that a wrong one is reported before torch and faiss load
    check_paths(corpus=getattr(args, "corpus", None), config=getattr(args, "config", None),
                shards=args.shards if args.command == "merge" else None)
    # the folders written (encode-shard writes its shard under --shards; merge only reads it: a read-only or another
    # user's shards folder was refused as one "no folder can be made" in)
    check_folders(out=getattr(args, "out", None), merge_into=getattr(args, "merge_into", None),
                  shards=getattr(args, "shards", None) if args.command != "merge" else None)
    if args.command == "merge":
        check_folder(args.shards, "--shards", write=False)
    if args.command in ("add", "info"):
        require_live_generation(Path(args.index))
    if getattr(args, "model", None):  # a training run's folder: the index records its checkpoint, which stays put
        check_model(args.model)
        args.model = pinned_model(args.model)
    written = {"build": "out", "merge": "out", "encode-shard": "merge_into"}.get(args.command)
    if written and getattr(args, written) is not None and not args.overwrite:  # an index is never replaced unasked
        refuse_existing_index(Path(getattr(args, written)), None if args.command == "build" else
                              "give --overwrite to replace it with the shards' index, or another directory")
    overrides = normalize_overrides(getattr(args, "overrides", []))
    if getattr(args, "batch_size", None) is not None:
        overrides.append(f"encode.batch_size={args.batch_size}")
    if args.command in ("build", "encode-shard", "merge"):  # a bad key or value, too, before torch and faiss
        config = load_config(IndexBuildConfig, args.config, overrides)
    if args.command in ("build", "encode-shard"):  # the OT settings the model was trained with, unless set (said)
        config.search = trained_search_config(config.search, args.model, given_search_keys(args.config, overrides))
    if args.command == "merge":
        refuse_recorded_encoding(overrides)
    if args.command == "add":
        built, why = recorded_backend(args)
    if args.command in ("build", "encode-shard"):  # the config's backend and precision, too, before torch and faiss
        from_config = config_backend(args, config.encode)
    progress = show_progress(args)
    device = getattr(args, "device", None)
    if args.command in ("build", "encode-shard"):  # --backend auto (the default): the CPU's fastest, said in one line
        rank, torch_device = 0, gpu_device if device is None else None  # build: a function, torch imported for auto only
        if args.command == "encode-shard":  # its torch model runs on the rank's GPU where there is one
            from aspire.index.shards import rank_and_world, rank_device

            # the GPU steers auto's choice only: a fast backend ($ASPIRE_BACKEND's) runs on the CPU, as --backend's
            torch_device, rank = rank_device(), rank_and_world()[0]
        args.backend, args.quantize, note = resolve_backend(args.backend, args.quantize, args.model, device,
                                                            torch_device)
        if note and rank == 0:  # said once: ranks choosing otherwise are refused, each named (same_backend_on_every_rank)
            log.info(note)
    recorded_in = None  # what named the backend when no flag did: the index (add), the config (build)
    if args.command == "add" and why:
        recorded_in = f"the index {args.index}"
    elif args.command in ("build", "encode-shard") and from_config:
        recorded_in = "the config (encode.backend)"
    backend = backend_options(args, recorded_in) if hasattr(args, "backend") else {}
    if args.command in ("build", "encode-shard"):  # recorded: search encodes its queries the same way
        config.encode.backend, config.encode.quantize = args.backend, args.quantize
    from aspire.index.build import add_to_index, build_index
    from aspire.index.fingerprint import ModelMismatchError, describe_backend, restate_mismatch
    from aspire.index.shards import run_encode_shard
    from aspire.index.store import SentenceIndex
    from aspire.index.stream import merge_streaming

    if args.command in ("build", "add"):  # the exact model on the GPU where CUDA is available, unless --device says
        on = encoding_device(device, args.backend)

        def load(name):
            return load_encoder(name, device=on, **backend)

    if args.command == "build":  # under the directory's lock, refused or cleaned before any encoding
        index, gen = build_index(args.out, args.model, args.corpus, config, args.overwrite, load, progress)
        print(_summary(gen, index.n_papers))
    elif args.command == "add":  # overrides (--batch-size) hold for this run only
        def ready():  # said once the add goes ahead, not before a refusal (a model mismatch, say)
            if why:
                log.info("encoding with %s%s: %s", describe_backend(args.backend, args.quantize),
                         "" if on_cpu(on) else f" on {on}", why)

        try:
            index, gen, n_new, n_rejected = add_to_index(args.index, args.corpus, args.model, load, overrides,
                                                         progress, ready)
        except ModelMismatchError as err:
            used = (args.model or built[0], args.backend, args.quantize)
            raise restate_mismatch(err, built, used, "this `index add` encodes papers") from None
        print(_summary(gen, n_new, n_rejected))
    elif args.command == "encode-shard":
        paths = run_encode_shard(args.model, args.corpus, args.shards, config, args.merge_into, args.num_shards,
                                 backend, progress)
        print("\n".join(f"{'reused' if reused else 'wrote'} {path}" for path, reused in paths))
        if args.merge_into is not None and rank == 0:  # rank 0 merged, as `merge` would
            print(_merged_summary(Path(args.merge_into) / require_live_generation(Path(args.merge_into))))
    elif args.command == "merge":
        gen = merge_streaming(args.shards, args.out, config, args.allow_missing)
        print(_merged_summary(gen))
    elif args.command == "info":
        manifest = SentenceIndex.read_manifest(args.index, verify=args.verify)
        print_json({**manifest, "encoded_with": encoded_with(manifest)}, indent=1)
        if args.verify:
            print("verified: every file's size and SHA-256 match the manifest", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
