"""Sharded corpus encoding: each torchrun rank encodes its slice of the corpus into a shard directory;
`merge_shards` joins the shards (in rank order) into one index.

    torchrun --nproc_per_node 2 -m aspire.index encode-shard --model M --corpus papers.jsonl \\
        --shards SHARDS [--merge-into INDEX]
    python -m aspire.index merge --shards SHARDS --out INDEX

Over several machines, run the same command with torchrun's `--nnodes/--node_rank/--rdzv_*` on a
shared file system (or copy the shard directories together before `merge`). Rank r encodes the
contiguous slice `[r * n // W, (r + 1) * n // W)` of the n readable records, so the merged index
keeps the corpus order. Records the reader rejects are reported once, by rank 0.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
import torch.distributed as dist

from aspire.index.config import IndexBuildConfig
from aspire.index.corpus import EncodedCorpus, encode_corpus, read_corpus
from aspire.index.store import SentenceIndex, model_fingerprint

_SHARD = re.compile(r"^shard-(\d{5})-of-(\d{5})$")


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) from the torchrun environment; (0, 1) when not launched by torchrun."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def shard_name(rank: int, world: int) -> str:
    return f"shard-{rank:05d}-of-{world:05d}"


def encode_shard(encoder, corpus_path: str | Path, shards_dir: str | Path, config: IndexBuildConfig,
                 rank: int, world: int, model_name: str = "") -> Path:
    """Encode this rank's slice of the corpus and write it as `shards_dir/shard-RRRRR-of-WWWWW`."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside world of size {world}")
    papers, unreadable = read_corpus(corpus_path, config.encode)
    lo, hi = rank * len(papers) // world, (rank + 1) * len(papers) // world
    corpus = encode_corpus(encoder, papers[lo:hi], config.encode, progress=rank == 0)
    if rank == 0:
        corpus.rejected = unreadable + corpus.rejected
    meta = {"rank": rank, "world_size": world, "model_name": model_name,
            "model_fingerprint": model_fingerprint(encoder), "corpus": str(corpus_path), "slice": [lo, hi]}
    return corpus.save_shard(Path(shards_dir) / shard_name(rank, world), meta)


def load_shards(shards_dir: str | Path) -> tuple[EncodedCorpus, dict]:
    """All shards of one sharded encoding, joined in rank order; checks completeness and model."""
    shards_dir = Path(shards_dir)
    found = {}
    for path in shards_dir.iterdir():
        match = _SHARD.match(path.name)
        if match:
            found[(int(match[1]), int(match[2]))] = path
    worlds = {w for _, w in found}
    if len(worlds) != 1:
        raise ValueError(f"{shards_dir}: expected shards of one world size, found sizes {sorted(worlds) or 'none'}")
    world = worlds.pop()
    missing = [r for r in range(world) if (r, world) not in found]
    if missing:
        raise ValueError(f"{shards_dir}: shards of ranks {missing} (of {world}) are missing")
    parts, metas = zip(*(EncodedCorpus.load_shard(found[(r, world)]) for r in range(world)))
    fingerprints = {m["model_fingerprint"] for m in metas}
    if len(fingerprints) != 1:
        raise ValueError(f"{shards_dir}: shards were encoded with different models {sorted(fingerprints)}")
    return EncodedCorpus.concat(parts), dict(metas[0])


def merge_shards(shards_dir: str | Path, out: str | Path, config: IndexBuildConfig) -> SentenceIndex:
    """Build one index at `out` from all shards under `shards_dir`."""
    corpus, meta = load_shards(shards_dir)
    index = SentenceIndex.build(corpus, config, meta["model_fingerprint"], meta["model_name"])
    index.save(out)
    return index


def run_encode_shard(model: str, corpus_path: str | Path, shards_dir: str | Path, config: IndexBuildConfig,
                     merge_into: str | Path | None = None) -> Path:
    """The torchrun entry point: encode this rank's shard; with `merge_into`, rank 0 merges after
    every rank has finished (gloo barrier)."""
    from aspire.encoders import load_encoder

    rank, world = rank_and_world()
    distributed = world > 1
    if distributed and not dist.is_initialized():
        dist.init_process_group("gloo")
    try:
        encoder = load_encoder(model)
        if torch.cuda.is_available():
            encoder.to(torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))))
        path = encode_shard(encoder, corpus_path, shards_dir, config, rank, world, model_name=model)
        if distributed:
            dist.barrier()
        if merge_into is not None and rank == 0:
            merge_shards(shards_dir, merge_into, config)
        if distributed:
            dist.barrier()
        return path
    finally:
        if distributed and dist.is_initialized():
            dist.destroy_process_group()
