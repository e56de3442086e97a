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
still missing (a finished shard of another model is an error, never mixed in), and `merge
--allow-missing` indexes the finished ones. Records the reader rejects are reported once, with shard 0.
`merge` streams (`aspire.index.stream`): it never holds all the shards' vectors at once, so the merge
machine needs memory for the faiss index and the training sample, not for the corpus.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Sequence

import torch
import torch.distributed as dist

from aspire.data.papers import Paper
from aspire.index.config import IndexBuildConfig
from aspire.index.corpus import EncodedCorpus, encode_corpus, read_corpus
from aspire.index.disk import SHARD_META
from aspire.index.store import SentenceIndex, model_fingerprint
from aspire.index.stream import list_shards, merge_streaming

log = logging.getLogger(__name__)


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) from the torchrun environment; (0, 1) when not launched by torchrun."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def shard_name(shard: int, n_shards: int) -> str:
    return f"shard-{shard:05d}-of-{n_shards:05d}"


def shard_slice(shard: int, n_shards: int, n: int) -> tuple[int, int]:
    """The records [lo, hi) of shard `shard` of `n_shards` over `n` readable records."""
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard {shard} outside 0..{n_shards - 1}")
    return shard * n // n_shards, (shard + 1) * n // n_shards


def encode_shard(encoder, corpus_path: str | Path, shards_dir: str | Path, config: IndexBuildConfig,
                 shard: int, n_shards: int, model_name: str = "",
                 read: tuple[Sequence[Paper], list[dict]] | None = None) -> Path:
    """Encode shard `shard` of `n_shards` of the corpus and write it as `shards_dir/shard-SSSSS-of-NNNNN`.
    `read` is `read_corpus(corpus_path, config.encode)` when the caller has it already."""
    papers, unreadable = read if read is not None else read_corpus(corpus_path, config.encode)
    lo, hi = shard_slice(shard, n_shards, len(papers))
    corpus = encode_corpus(encoder, papers[lo:hi], config.encode, progress=shard == 0)
    if shard == 0:
        corpus.rejected = unreadable + corpus.rejected
    meta = {"shard": shard, "num_shards": n_shards, "model_name": model_name,
            "model_fingerprint": model_fingerprint(encoder), "corpus": str(corpus_path), "slice": [lo, hi]}
    return corpus.save_shard(Path(shards_dir) / shard_name(shard, n_shards), meta)


def finished_shard(shards_dir: str | Path, shard: int, n_shards: int, fingerprint: str) -> bool:
    """Whether shard `shard` of `n_shards` is written (complete) by the model with `fingerprint`;
    a finished shard of another model raises ValueError naming both."""
    meta_path = Path(shards_dir) / shard_name(shard, n_shards) / SHARD_META
    if not meta_path.is_file():
        return False
    found = json.loads(meta_path.read_text(encoding="utf-8")).get("model_fingerprint")
    if found != fingerprint:
        raise ValueError(f"{meta_path.parent} was encoded with model {found}, this run's is {fingerprint}: "
                         "use another --shards directory, or remove it")
    return True


def load_shards(shards_dir: str | Path, allow_missing: bool = False) -> tuple[EncodedCorpus, dict]:
    """The shards of one sharded encoding, joined in order in RAM; checks completeness (unless
    `allow_missing`: then the shards present, their numbers missing listed in the metadata's
    `missing_shards`) and model. (`merge_shards` does not hold them all: `aspire.index.stream`.)"""
    paths, n_shards, missing = list_shards(shards_dir, allow_missing)
    parts, metas = zip(*(EncodedCorpus.load_shard(path) for path in paths))
    fingerprints = {m["model_fingerprint"] for m in metas}
    if len(fingerprints) != 1:
        raise ValueError(f"{shards_dir}: shards were encoded with different models {sorted(fingerprints)}")
    return EncodedCorpus.concat(parts), {**metas[0], "num_shards": n_shards, "missing_shards": missing}


def merge_shards(shards_dir: str | Path, out: str | Path, config: IndexBuildConfig,
                 allow_missing: bool = False) -> SentenceIndex:
    """Build one index at `out` from the shards under `shards_dir` (all of them, unless `allow_missing`),
    streaming (`aspire.index.stream.merge_streaming`); returns it loaded (exact vectors memory-mapped)."""
    merge_streaming(shards_dir, out, config, allow_missing)
    return SentenceIndex.load(out)


def run_encode_shard(model: str, corpus_path: str | Path, shards_dir: str | Path, config: IndexBuildConfig,
                     merge_into: str | Path | None = None, num_shards: int | None = None,
                     encoder_options: dict | None = None) -> list[Path]:
    """The torchrun entry point: encode this rank's shards not yet finished (`num_shards`, default the
    world size); with `merge_into`, rank 0 merges after every rank has finished (gloo barrier).
    `encoder_options` go to `load_encoder` (e.g. `backend="onnx", quantize="int8"`). Returns the
    directories of this rank's shards."""
    from aspire.encoders import load_encoder

    rank, world = rank_and_world()
    n_shards = num_shards or world
    distributed = world > 1
    if distributed and not dist.is_initialized():
        dist.init_process_group("gloo")
    try:
        options = dict(encoder_options or {})
        encoder = load_encoder(model, **options)
        if torch.cuda.is_available() and options.get("backend", "torch") == "torch":
            encoder.to(torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))))
        fingerprint = model_fingerprint(encoder)
        read = read_corpus(corpus_path, config.encode)
        paths = []
        for shard in range(rank, n_shards, world):
            path = Path(shards_dir) / shard_name(shard, n_shards)
            if finished_shard(shards_dir, shard, n_shards, fingerprint):
                log.info("rank %d: %s is already finished", rank, path)
            else:
                path = encode_shard(encoder, corpus_path, shards_dir, config, shard, n_shards, model, read)
                log.info("rank %d: wrote %s", rank, path)
            paths.append(path)
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
