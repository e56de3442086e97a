"""Sharded corpus encoding: the corpus is cut into `num_shards` contiguous slices; each torchrun rank
encodes its shards into a shard directory; `merge_shards` joins the shards (in order) into one index.

    torchrun --nproc_per_node 2 -m aspire.index encode-shard --model M --corpus papers.jsonl \\
        --shards SHARDS [--num-shards 32] [--backend onnx --quantize int8] [--merge-into INDEX]
    python -m aspire.index merge --shards SHARDS --out INDEX [--allow-missing] [--config configs/index-million.yaml]

Over several machines, run the same command with torchrun's `--nnodes/--node_rank/--rdzv_*` on a
shared file system (or copy the shard directories together before `merge`). Shard s of S holds the
contiguous slice `[s * n // S, (s + 1) * n // S)` of the n readable records, so the merged index
keeps the corpus order; rank r of W encodes shards r, r + W, r + 2W, ... (S defaults to W: one
shard a rank). Each shard is written atomically when it is done, so with more shards than ranks an
interrupted run keeps every finished shard: running the same command again encodes only the shards
still missing, and `merge --allow-missing` indexes the finished ones. Records the reader rejects are
reported once, with shard 0 (in line order with shard 0's own rejections).

Each shard's shard.json records how it was made (`shard_record`): the model's fingerprint, the backend
and precision, the corpus (its resolved path, size in bytes and SHA-256: the same content read from
another path or machine is the same corpus), the reading limits (`encode.max_sentences`, ...), the
number n of readable records and the shard's slice. A re-run keeps a finished shard only when all of
that equals this run's; any other finished shard in the --shards folder (another corpus, a corpus that
changed since, other limits, another model or backend, another shard count) is an error naming it and
what differs, before anything is encoded: a user's shards are never re-encoded over, nor mixed in.
`merge` checks the same across the shards, and that their slices neither overlap nor leave records out.
`merge` streams (`aspire.index.stream`): it never holds all the shards' vectors at once, so the merge
machine needs memory for the faiss index and the training sample, not for the corpus.

Shards finished before fingerprint version 2 (`aspire.encoders.identity`) record the model's version-1 fingerprint.
A re-run by a model whose version-1 fingerprint is theirs keeps them, with a warning, and records that fingerprint
in the shards it writes, so the merged index is one of version 1 (searched by the model with a warning,
`SentenceIndex.check_model`), as papers `add`ed to such an index keep its fingerprint; they were once refused as
another model's, and every finished shard had to be encoded again.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Sequence

import torch
import torch.distributed as dist

from aspire.checksum import file_sha256
from aspire.data.papers import Paper
from aspire.encoders.identity import fingerprint_version
from aspire.index.build import refuse_unfitting_index, require_papers
from aspire.index.config import READING_LIMITS, IndexBuildConfig
from aspire.index.corpus import EncodedCorpus, encode_corpus, in_line_order, read_corpus, read_shard_meta
from aspire.index.disk import SHARD_META, index_entries
from aspire.index.fingerprint import encoder_include_title, model_fingerprint, model_fingerprints
from aspire.index.store import SentenceIndex
from aspire.index.stream import SHARD_DIR, SHARD_RECORD, merge_streaming, plan_shards

log = logging.getLogger(__name__)


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) from the torchrun environment; (0, 1) when not launched by torchrun."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def rank_device() -> str | None:
    """Where this rank's exact (torch) model encodes: its GPU (`cuda:LOCAL_RANK`) where CUDA is available, else None
    (the CPU, where the fast backends run in any case). `encode-shard`'s `--backend auto` chooses for it."""
    return f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else None


def same_backend_on_every_rank(options: dict) -> None:
    """ValueError, on every rank, when the ranks of a started group would encode with different backends or precisions
    (`options`: this rank's `load_encoder` keywords): `--backend auto` chooses on each machine, and machines differ.
    Said before anything is encoded, rather than by the merge, after all of it."""
    mine = (options.get("backend", "torch"), options.get("quantize"))
    chosen: list = [None] * dist.get_world_size()
    dist.all_gather_object(chosen, mine)
    if len(set(chosen)) > 1:
        said = ", ".join(f"rank {rank} {backend} {quantize or 'fp32'}" for rank, (backend, quantize) in enumerate(chosen))
        raise ValueError(f"the ranks would encode with different backends ({said}; --backend auto chooses on each "
                         "machine): give every rank the same --backend, e.g. --backend torch for the exact model")


def shard_name(shard: int, n_shards: int) -> str:
    return f"shard-{shard:05d}-of-{n_shards:05d}"


def shard_slice(shard: int, n_shards: int, n: int) -> tuple[int, int]:
    """The records [lo, hi) of shard `shard` of `n_shards` over `n` readable records."""
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard {shard} outside 0..{n_shards - 1}")
    return shard * n // n_shards, (shard + 1) * n // n_shards


def shard_record(encoder, corpus_path: str | Path, config: IndexBuildConfig, n_papers: int,
                 model_name: str = "", fingerprint: str | None = None) -> dict:
    """What every shard of this encoding records in its shard.json (`aspire.index.stream.SHARD_RECORD`), its slice
    aside: the model (and its `include_title`, which the merged index records), the backend and precision
    (`config.encode`'s), the corpus file (resolved path, size, SHA-256), the reading limits and `corpus_papers`, the
    number of readable records `n_papers` the slices cut. `fingerprint`: the encoder's, when the caller has it."""
    path = Path(corpus_path).resolve()
    return {"model_name": model_name, "model_fingerprint": fingerprint or model_fingerprint(encoder),
            "include_title": encoder_include_title(encoder),
            "backend": config.encode.backend, "quantize": config.encode.quantize,
            "corpus": str(path), "corpus_bytes": path.stat().st_size, "corpus_sha256": file_sha256(path),
            "encode": {key: getattr(config.encode, key) for key in READING_LIMITS}, "corpus_papers": n_papers}


def encode_shard(encoder, corpus_path: str | Path, shards_dir: str | Path, config: IndexBuildConfig,
                 shard: int, n_shards: int, model_name: str = "",
                 read: tuple[Sequence[Paper], list[dict]] | None = None, record: dict | None = None,
                 progress: bool = True) -> Path:
    """Encode shard `shard` of `n_shards` of the corpus and write it as `shards_dir/shard-SSSSS-of-NNNNN`.
    `read` is `read_corpus(corpus_path, config.encode)` and `record` this encoding's `shard_record` when the
    caller has them already; `progress`: a progress bar while shard 0 is encoded."""
    papers, unreadable = read if read is not None else read_corpus(corpus_path, config.encode)
    record = record if record is not None else shard_record(encoder, corpus_path, config, len(papers), model_name)
    lo, hi = shard_slice(shard, n_shards, len(papers))
    corpus = encode_corpus(encoder, papers[lo:hi], config.encode, progress=progress and shard == 0)
    if shard == 0:
        corpus.rejected = in_line_order(unreadable + corpus.rejected)  # the reader's were all written first
    corpus.rejected = [{**r, "corpus": record["corpus"]} for r in corpus.rejected]  # as a build's records name it
    meta = {"shard": shard, "num_shards": n_shards, **record, "slice": [lo, hi]}
    return corpus.save_shard(Path(shards_dir) / shard_name(shard, n_shards), meta, kept_lines(papers[lo:hi], corpus))


def kept_lines(papers: Sequence[Paper], corpus: EncodedCorpus) -> list[int] | None:
    """The corpus-file line of each paper `corpus` encoded from `papers` (a `read_corpus` slice, which knows its
    lines; None for a plain list): each of `papers` is encoded or rejected with its line, and the encoded ids are
    distinct."""
    lines = getattr(papers, "lines", None)
    if lines is None:
        return None
    taken = {r.get("line") for r in corpus.rejected}
    line_of = {p.paper_id: line for p, line in zip(papers, lines) if line not in taken}
    return [line_of[pid] for pid in corpus.paper_ids]


def check_shards_dir(shards_dir: str | Path, merge_into: str | Path | None = None) -> None:
    """Refuse a --shards folder that holds an index (shard folders written into a live index would break it), or
    that is the --merge-into folder; called before any model loads."""
    shards_dir = Path(shards_dir)
    found = index_entries(shards_dir)
    if found:
        raise ValueError(f"--shards {shards_dir} holds an index ({', '.join(found[:3])}); shards are written into a "
                         "folder of their own: give another --shards folder")
    if merge_into is not None and Path(merge_into).resolve() == shards_dir.resolve():
        raise ValueError(f"--merge-into {merge_into} is the --shards folder; the index needs a folder of its own")


def version_1_record(shards_dir: str | Path, n_shards: int, record: dict, legacy: str | None) -> dict:
    """`record` (this run's `shard_record`), or, when `shards_dir` holds finished shards of this sharding recorded
    under a version-1 fingerprint that is this run's model's (`legacy`, `model_fingerprints`), `record` with that
    fingerprint (a warning says so): `finished_shards` then keeps those shards and this run's shards record it too,
    so that the merge sees one model. Shards of another model or sharding are left to `finished_shards` to name."""
    if legacy is None or fingerprint_version(legacy) != 1 or record["model_fingerprint"] == legacy:
        return record
    shards_dir = Path(shards_dir)
    kept = []
    for path in sorted(shards_dir.iterdir()) if shards_dir.is_dir() else []:
        match = SHARD_DIR.match(path.name)
        if (match and int(match[2]) == n_shards and int(match[1]) < n_shards and (path / SHARD_META).is_file()
                and read_shard_meta(path).get("model_fingerprint") == legacy):
            kept.append(path.name)
    if not kept:
        return record
    warnings.warn(f"{shards_dir}: {', '.join(kept[:3])}{f' and {len(kept) - 3} more' if len(kept) > 3 else ''} "
                  f"recorded model {record['model_name']!r} under its version-1 fingerprint ({legacy}), which this "
                  "run's model matches in weights and settings: they are kept and this run's shards record it too, "
                  "so the merged index is one of version 1, searched with a warning (that version does not cover the "
                  "model config, adapter settings and vocabulary); encode into a new --shards folder to have them "
                  "checked", stacklevel=2)
    return {**record, "model_fingerprint": legacy}


def finished_shards(shards_dir: str | Path, n_shards: int, record: dict) -> set[int]:
    """The shards of `n_shards` already written in `shards_dir` by this very encoding (`record`: this run's
    `shard_record`), which a re-run keeps. Any other finished shard there (of another corpus or a corpus that
    changed since, other reading limits, another model, backend or shard count) raises ValueError naming it and
    what differs: it is never re-encoded over, nor mixed in."""
    shards_dir, done = Path(shards_dir), set()
    advice = "use a new --shards folder, or remove the stale shards"
    entries = sorted(shards_dir.iterdir()) if shards_dir.is_dir() else []
    for path in entries:
        match = SHARD_DIR.match(path.name)
        if not match or not (path / SHARD_META).is_file():
            continue
        if int(match[2]) != n_shards:
            raise ValueError(f"{path} is a shard of {int(match[2])}; this run cuts the corpus into {n_shards}: {advice}")
        if int(match[1]) >= n_shards:  # else shard_slice's "shard 7 outside 0..2", naming no folder
            raise ValueError(f"{path} is numbered past the last shard of a sharding into {n_shards}: {advice}")
        meta = read_shard_meta(path)
        differs = [f"{r.prep} {r.describe(meta)}, this run {r.prep} {r.describe(record)}"
                   for r in SHARD_RECORD.values() if r.value(meta) != r.value(record)]
        shard = int(match[1])
        expected = [*shard_slice(shard, n_shards, record["corpus_papers"])]
        if not differs and (meta.get("slice"), meta.get("corpus_papers")) != (expected, record["corpus_papers"]):
            differs.append(f"holding records {meta.get('slice')} of {meta.get('corpus_papers')}, this run's shard "
                           f"{expected} of {record['corpus_papers']}")
        if differs:
            again = ""  # another backend (torch, say, before encode-shard's default was auto): the flags that keep them
            if meta.get("backend") and SHARD_RECORD["backends"].value(meta) != SHARD_RECORD["backends"].value(record):
                quantize = f" --quantize {meta['quantize']}" if meta.get("quantize") else ""
                again = f"give --backend {meta['backend']}{quantize} to encode as they were, "
            raise ValueError(f"{path} was encoded {'; '.join(differs)}: {again}{advice}")
        done.add(shard)
    return done


def load_shards(shards_dir: str | Path, allow_missing: bool = False) -> tuple[EncodedCorpus, dict]:
    """The shards of one sharded encoding, joined in order in RAM, after the checks a merge makes (`plan_shards`:
    completeness, unless `allow_missing`, then the shards present, their numbers missing listed in the metadata's
    `missing_shards`; one model, corpus, backend; slices; files). The rejected records are in input-line order, as
    the merge records them (shard order once put a later shard's encoding rejections after shard 0's reader rejections
    of later lines). (`merge_shards` does not hold them all: `aspire.index.stream`.)"""
    plans, meta, rejected = plan_shards(shards_dir, allow_missing)
    parts = [EncodedCorpus.load_shard(plan.path)[0] for plan in plans]
    corpus = EncodedCorpus.concat(parts)
    corpus.rejected = rejected  # the merge's: its duplicates name their line and corpus, concat's neither
    return corpus, meta


def merge_shards(shards_dir: str | Path, out: str | Path, config: IndexBuildConfig,
                 allow_missing: bool = False) -> SentenceIndex:
    """Build one index at `out` from the shards under `shards_dir` (all of them, unless `allow_missing`),
    streaming (`aspire.index.stream.merge_streaming`); returns it loaded (exact vectors memory-mapped)."""
    merge_streaming(shards_dir, out, config, allow_missing)
    return SentenceIndex.load(out)


def run_encode_shard(model: str, corpus_path: str | Path, shards_dir: str | Path, config: IndexBuildConfig,
                     merge_into: str | Path | None = None, num_shards: int | None = None,
                     encoder_options: dict | None = None, progress: bool = True) -> list[tuple[Path, bool]]:
    """The torchrun entry point: encode this rank's shards not yet finished (`num_shards`, default the
    world size; `finished_shards` says which are, and refuses stale ones); with `merge_into`, rank 0 merges after
    every rank has finished (gloo barrier). A corpus with no readable paper is refused before the model loads.
    `encoder_options` go to `load_encoder` (e.g. `backend="onnx", quantize="int8"`; the same on every rank,
    `same_backend_on_every_rank`; the torch model on `rank_device`); `progress`: rank 0's progress
    bar. Returns the directories of this rank's shards, each with whether it was reused (finished
    by an earlier run) rather than written."""
    from aspire.encoders import load_encoder

    rank, world = rank_and_world()
    if num_shards is not None and (isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1):
        raise ValueError(f"num_shards must be an integer >= 1, got {num_shards!r}")  # 0 meant the world size, -1 nothing
    n_shards = num_shards or world
    check_shards_dir(shards_dir, merge_into)
    read = read_corpus(corpus_path, config.encode)
    require_papers(*read, corpus_path)
    distributed = world > 1
    if distributed and not dist.is_initialized():
        dist.init_process_group("gloo")
    try:
        options = dict(encoder_options or {})
        if distributed:
            same_backend_on_every_rank(options)
        encoder = load_encoder(model, **options)
        device = rank_device()
        if device is not None and options.get("backend", "torch") == "torch":
            encoder.to(torch.device(device))
        if merge_into is not None:  # the index's settings are refused now, not after every shard is encoded
            refuse_unfitting_index(config, read[0], encoder)
        fingerprint, legacy = model_fingerprints(encoder)  # one pass over the weights
        record = shard_record(encoder, corpus_path, config, len(read[0]), model, fingerprint)
        record = version_1_record(shards_dir, n_shards, record, legacy)  # shards finished before version 2
        finished = finished_shards(shards_dir, n_shards, record)
        paths = []
        for shard in range(rank, n_shards, world):
            path = Path(shards_dir) / shard_name(shard, n_shards)
            if shard in finished:
                log.info("rank %d: reused %s, finished earlier from the same corpus, model and settings", rank, path)
            else:
                path = encode_shard(encoder, corpus_path, shards_dir, config, shard, n_shards, model, read, record,
                                    progress)
                log.info("rank %d: wrote %s", rank, path)
            paths.append((path, shard in finished))
        if distributed:
            dist.barrier()
        if merge_into is not None and rank == 0:
            merge_streaming(shards_dir, merge_into, config)
        if distributed:
            dist.barrier()
        return paths
    finally:
        if distributed and dist.is_initialized():
            dist.destroy_process_group()
