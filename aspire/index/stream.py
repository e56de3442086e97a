"""Merging shards into one index without holding the corpus in memory (`python -m aspire.index merge`).

    merge_streaming(shards_dir, out, config, allow_missing=False) -> the new live generation's directory

The shards are the directories `EncodedCorpus.save_shard` writes (`aspire.index.shards`). A merge
reads them in three passes and holds at most one shard's papers, one batch of vectors, the IVF
training sample and the faiss index:

1. plan (`plan_shards`): each shard's shard.json, offsets and paper ids, checked (one sharding, one
   model, one dimension, a vectors.npy and a papers.jsonl of the size the offsets say; errors name the
   shard). A paper id met before is rejected as "duplicate paper_id" (the first one wins, as in
   `EncodedCorpus.concat`).
2. train: the IVF training sample, the rows `aspire.index.ann.train_rows` picks over the merged rows
   (the rows an in-RAM build of the same corpus picks), read from the memory-mapped shard vectors.
3. add: shard by shard, `ADD_BATCH` rows at a time, into faiss, into the generation's vectors.npy (an
   `np.lib.format.open_memmap` filled in place, in the config's vector dtype) and its papers.jsonl.

The generation is written as `SentenceIndex.save` writes one, under the directory's lock: a temporary
directory (`store.begin_generation`), the manifest with every file's size and SHA-256 last
(`store.write_manifest`), then renamed and made live (`store.publish_generation`). An interrupted merge
thus leaves the previous index live, and the next write removes what it left. For the same shards and
config the files equal those that `SentenceIndex.build` of `load_shards`'s corpus saves (the manifest's
time aside), except an HNSW graph, whose links depend on the batches it grew by.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from aspire.index.ann import add_vectors, new_faiss, train_faiss, train_rows
from aspire.index.config import IndexBuildConfig
from aspire.index.corpus import WHOLE_FILE, index_paper_records, paper_rows, read_shard_meta
from aspire.index.disk import SHARD_META, index_lock
from aspire.index.lexical import papers_bm25
from aspire.index.store import (
    begin_generation,
    describe_rejected,
    manifest_fields,
    publish_generation,
    write_manifest,
)
from aspire.index.texts import read_index_papers
from aspire.io import AtomicJsonl, read_jsonl, write_jsonl
from aspire.storage import on_disk_full

log = logging.getLogger(__name__)
SHARD_DIR = re.compile(r"^shard-(\d{5})-of-(\d{5})$")
ADD_BATCH = 65536  # sentence vectors a faiss add (and a float32 copy) at a time


@dataclass
class ShardPlan:
    """One shard as the merge uses it: `rows`, its sentence rows that are indexed (in order), and
    `keep (p,)`, which of its papers are (False: a paper id seen in an earlier shard)."""

    path: Path
    offsets: np.ndarray
    keep: np.ndarray
    rows: np.ndarray


def list_shards(shards_dir: str | Path, allow_missing: bool = False) -> tuple[list[Path], int, list[int]]:
    """The finished shard directories of one sharding in order, the shard count and the numbers missing
    (an error unless `allow_missing`)."""
    shards_dir = Path(shards_dir)
    found = {}
    for path in shards_dir.iterdir():
        match = SHARD_DIR.match(path.name)
        if match and (path / SHARD_META).is_file():
            found[(int(match[1]), int(match[2]))] = path
    counts = {n for _, n in found}
    if len(counts) != 1:
        raise ValueError(f"{shards_dir}: expected complete shards of one sharding, found shard counts "
                         f"{sorted(counts) or 'none'}")
    n_shards = counts.pop()
    missing = [s for s in range(n_shards) if (s, n_shards) not in found]
    if missing and not allow_missing:
        raise ValueError(f"{shards_dir}: shards {missing} (of {n_shards}) are missing")
    return [found[(s, n_shards)] for s in range(n_shards) if s not in missing], n_shards, missing


def plan_shards(shards_dir: str | Path, allow_missing: bool = False) -> tuple[list[ShardPlan], dict, list[dict]]:
    """Read and check every shard's metadata, offsets and paper ids (not its vectors); returns the plans,
    the first shard's metadata (with `num_shards`, `missing_shards` and `dim`) and the rejected records:
    the shards' own, in shard order, then the duplicate paper ids."""
    paths, n_shards, missing = list_shards(shards_dir, allow_missing)
    seen: set[str] = set()
    plans, metas, rejected, duplicates, dims = [], [], [], [], set()
    for path in paths:
        meta = read_shard_meta(path)
        offsets = np.load(path / "offsets.npy")
        n_rows, dim = _vectors_shape(path)
        if (offsets.ndim != 1 or offsets.dtype.kind not in "iu" or len(offsets) == 0 or offsets[0] != 0
                or offsets[-1] != n_rows or (np.diff(offsets) <= 0).any()):
            raise ValueError(f"shard {path}: offsets.npy does not describe papers of at least one sentence over "
                             f"the {n_rows} rows of vectors.npy")
        papers = len(offsets) - 1
        if (meta.get("n_papers"), meta.get("n_sentences"), meta.get("dim")) != (papers, n_rows, dim):
            raise ValueError(f"shard {path}: shard.json says {meta.get('n_papers')} papers, {meta.get('n_sentences')} "
                             f"sentences of dimension {meta.get('dim')}; its files hold {papers}, {n_rows}, {dim}")
        ids = read_index_papers(path / "papers.jsonl", texts="disk")[0]
        if len(ids) != papers:
            raise ValueError(f"shard {path}: papers.jsonl holds {len(ids)} papers, offsets.npy {papers}")
        keep = np.array([pid not in seen and not seen.add(pid) for pid in ids], dtype=bool)
        duplicates += [{"paper_id": pid, "reason": "duplicate paper_id"} for pid, k in zip(ids, keep) if not k]
        plans.append(ShardPlan(path, offsets.astype(np.int64), keep, paper_rows(offsets.astype(np.int64), np.flatnonzero(keep))[0]))
        rejected += read_jsonl(path / "rejected.jsonl")
        metas.append(meta)
        if papers:  # a shard whose records were all rejected may not know the dimension
            dims.add(dim)
    fingerprints = {m["model_fingerprint"] for m in metas}
    if len(fingerprints) != 1:
        raise ValueError(f"{shards_dir}: shards were encoded with different models {sorted(fingerprints)}")
    if len(dims) > 1:
        raise ValueError(f"{shards_dir}: shards hold vectors of different dimensions {sorted(dims)}")
    meta = {**metas[0], "num_shards": n_shards, "missing_shards": missing, "dim": dims.pop() if dims else 0}
    return plans, meta, rejected + duplicates


def merge_streaming(shards_dir: str | Path, out: str | Path, config: IndexBuildConfig,
                    allow_missing: bool = False) -> Path:
    """Build one index at `out` from the shards under `shards_dir` (all of them, unless `allow_missing`),
    streaming (see the module docstring); returns the new live generation's directory."""
    with index_lock(out) as root:
        plans, meta, rejected = plan_shards(shards_dir, allow_missing)
        if meta["missing_shards"]:
            log.warning("%s: merging %d of %d shards; missing %s", shards_dir,
                        meta["num_shards"] - len(meta["missing_shards"]), meta["num_shards"], meta["missing_shards"])
        if not any(p.keep.any() for p in plans):
            raise ValueError(f"nothing to index: all {len(rejected)} records were rejected" + describe_rejected(rejected))
        tmp = begin_generation(root)  # refuses a directory holding anything an index never writes
        try:
            with on_disk_full(root, "a new index generation (the live one stays)"):
                return _fill_generation(root, tmp, plans, meta, rejected, config)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # the previous index stays live
            raise


def _fill_generation(root: Path, tmp: Path, plans: list[ShardPlan], meta: dict, rejected: list[dict],
                     config: IndexBuildConfig) -> Path:
    """Make, train and fill the faiss index, write the generation `tmp` and make it live; returns its directory."""
    n, n_papers, dim = sum(len(p.rows) for p in plans), int(sum(p.keep.sum() for p in plans)), meta["dim"]
    index, kind = new_faiss(config.index, n, dim)
    if not index.is_trained:
        t0 = time.perf_counter()
        rows = train_rows(n, config.index)
        train_faiss(index, read_rows(plans, np.arange(n) if rows is None else rows, dim), config.index)
        log.info("trained the %s index on %d of %d vectors in %.0f s", kind, n if rows is None else len(rows),
                 n, time.perf_counter() - t0)
    offsets = _add_shards(plans, index, tmp, config, n, dim)
    extra = _merge_whole(plans, tmp, n_papers, dim, config.index.vector_dtype)
    faiss.write_index(index, str(tmp / "sentences.faiss"))
    np.save(tmp / "offsets.npy", offsets)
    write_jsonl(tmp / "rejected.jsonl", rejected)
    bm25 = None
    if config.index.store_bm25:
        _, titles, sentences, _ = read_index_papers(tmp / "papers.jsonl", texts="disk")
        bm25 = papers_bm25(titles, sentences, config.search.bm25_k1, config.search.bm25_b)
    write_manifest(tmp, config, manifest_fields(index, kind, meta["model_name"], meta["model_fingerprint"], dim,
                                                n_papers, n, len(rejected), config.index.vector_dtype), bm25, extra)
    return publish_generation(root, tmp)


def _merge_whole(plans: list[ShardPlan], gen: Path, n_papers: int, dim: int, dtype) -> tuple[str, ...]:
    """The kept papers' whole-abstract vectors of every shard, in order, written to `gen/whole.npy` a shard at a
    time; nothing when a shard has none (encoded before the one-pass encoding) -> the extra files written."""
    if not all((p.path / WHOLE_FILE).is_file() for p in plans if p.keep.any()):
        return ()
    out = np.lib.format.open_memmap(gen / WHOLE_FILE, mode="w+", dtype=np.dtype(dtype), shape=(n_papers, dim))
    row = 0
    for plan in plans:
        if plan.keep.any():
            kept = np.load(plan.path / WHOLE_FILE, mmap_mode="r")[plan.keep]
            out[row : row + len(kept)] = kept
            row += len(kept)
    out.flush()
    del out
    return (WHOLE_FILE,)


def _add_shards(plans: list[ShardPlan], index: faiss.Index, gen: Path, config: IndexBuildConfig, n: int,
                dim: int) -> np.ndarray:
    """Add every shard's kept rows to `index` and write them (vectors.npy) and their papers (papers.jsonl)
    into the generation directory `gen`; returns the merged (P + 1,) offsets."""
    vectors = np.lib.format.open_memmap(gen / "vectors.npy", mode="w+", dtype=config.index.vector_dtype, shape=(n, dim))
    counts, at, t0 = [], 0, time.perf_counter()
    with AtomicJsonl(gen / "papers.jsonl") as papers_out:
        for s, plan in enumerate(plans):
            ids, titles, sentences, labels = read_index_papers(plan.path / "papers.jsonl", texts="memory")
            lengths = np.diff(plan.offsets)
            for i, (pid, sents, labs) in enumerate(zip(ids, sentences, labels)):
                if len(sents) != lengths[i] or (labs is not None and len(labs) != lengths[i]):
                    raise ValueError(f"shard {plan.path}: paper {pid!r} has {len(sents)} sentence texts and "
                                     f"{'no' if labs is None else len(labs)} labels for {lengths[i]} sentence vectors")
            source = np.load(plan.path / "vectors.npy", mmap_mode="r")
            for start in range(0, len(plan.rows), ADD_BATCH):
                batch = np.ascontiguousarray(source[plan.rows[start : start + ADD_BATCH]], dtype=np.float32)
                add_vectors(index, batch)
                vectors[at : at + len(batch)] = batch
                at += len(batch)
            keep = np.flatnonzero(plan.keep).tolist()
            for record in index_paper_records([ids[i] for i in keep], [titles[i] for i in keep],
                                              [sentences[i] for i in keep], [labels[i] for i in keep]):
                papers_out.write(record)
            counts.append(lengths[plan.keep])
            log.info("added shard %d of %d (%s): %d vectors in all, %.0f s", s + 1, len(plans), plan.path.name, at,
                     time.perf_counter() - t0)
    vectors.flush()
    del vectors
    return np.concatenate([[0], np.cumsum(np.concatenate(counts))]).astype(np.int64)


def read_rows(plans: list[ShardPlan], rows: np.ndarray, dim: int) -> np.ndarray:
    """(len(rows), D) float32: the merged corpus's rows `rows` (in that order), read from the shards."""
    bounds = np.cumsum([0] + [len(p.rows) for p in plans])
    shard_of = np.searchsorted(bounds, rows, side="right") - 1
    out = np.empty((len(rows), dim), dtype=np.float32)
    for s in np.unique(shard_of).tolist():
        where = np.flatnonzero(shard_of == s)
        local = plans[s].rows[rows[where] - bounds[s]]
        order = np.argsort(local)  # read each shard front to back
        out[where[order]] = np.load(plans[s].path / "vectors.npy", mmap_mode="r")[local[order]]
    return out


def _vectors_shape(path: Path) -> tuple[int, int]:
    """(rows, dimension) of a shard's vectors.npy, from its header (ValueError naming the shard if it is
    not a 2-D float array)."""
    try:
        vectors = np.load(path / "vectors.npy", mmap_mode="r")
    except (OSError, ValueError) as err:
        raise ValueError(f"shard {path}: vectors.npy does not read as an array ({err})") from None
    if vectors.ndim != 2 or vectors.dtype.kind != "f":
        raise ValueError(f"shard {path}: vectors.npy holds {vectors.dtype} of shape {vectors.shape}, not (N, D) floats")
    return int(vectors.shape[0]), int(vectors.shape[1])
