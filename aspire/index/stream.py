"""Merging shards into one index without holding the corpus in memory (`python -m aspire.index merge`).

    merge_streaming(shards_dir, out, config, allow_missing=False) -> the new live generation's directory

The shards are the directories `EncodedCorpus.save_shard` writes (`aspire.index.shards`). A merge
reads them in three passes and holds at most one shard's papers, one batch of vectors, the IVF
training sample and the faiss index:

1. plan (`plan_shards`): each shard's shard.json, offsets and paper ids, checked (one sharding; one
   model, backend, corpus and set of reading limits, as each shard records them (`SHARD_RECORD`); slices
   of the corpus that neither overlap nor leave records out; one dimension; a vectors.npy, a papers.jsonl
   and a whole.npy of the size the offsets say, the whole.npy in every shard or in none; errors name the
   shard). A paper id met before is rejected as a "duplicate paper_id" (the first one wins, as in
   `EncodedCorpus.concat`).
2. train: the IVF training sample, the rows `aspire.index.ann.train_rows` picks over the merged rows
   (the rows an in-RAM build of the same corpus picks), read from the memory-mapped shard vectors.
3. add: shard by shard, `ADD_BATCH` rows at a time, into faiss, into the generation's vectors.npy (an
   `np.lib.format.open_memmap` filled in place, in the config's vector dtype) and its papers.jsonl. A vector
   holding NaN or infinity (in the training sample or a batch) is refused naming its shard and paper.

The index's config is the merge's, with the backend, precision and reading limits the shards record
(`encoded_config`): `add` and `search` then encode as the shards were encoded.

The generation is written as `SentenceIndex.save` writes one, under the directory's lock: a temporary
directory (`store.begin_generation`), the manifest with every file's size and SHA-256 last
(`store.write_manifest`), then renamed and made live (`store.publish_generation`). An interrupted merge
thus leaves the previous index live, and the next write removes what it left. An index at `out` is replaced (the
command refuses one without --overwrite): once the shards are checked, `out` is made ready as `build --overwrite`
makes it (`build.prepare_build_dir`): a damaged index (a folder in CURRENT's place, say) is removed then, a sound one
stays live until the new generation replaces it. For the same shards and
config the files equal those that `SentenceIndex.build` of `load_shards`'s corpus saves (the manifest's
time aside), except an HNSW graph, whose links depend on the batches it grew by.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

import faiss
import numpy as np

from aspire.index.ann import add_vectors, new_faiss, nonfinite_rows, train_faiss, train_rows
from aspire.index.build import prepare_build_dir
from aspire.index.config import READING_LIMITS, IndexBuildConfig
from aspire.index.corpus import (
    LINES_FILE,
    WHOLE_FILE,
    describe_rejected,
    first_occurrences,
    in_line_order,
    index_paper_records,
    paper_rows,
    read_shard_meta,
)
from aspire.index.disk import SHARD_META, index_lock
from aspire.index.lexical import papers_bm25
from aspire.index.store import (
    begin_generation,
    manifest_fields,
    publish_generation,
    unstorable_whole,
    write_manifest,
)
from aspire.index.texts import read_index_papers
from aspire.io import AtomicJsonl, read_jsonl, write_jsonl
from aspire.storage import on_disk_full

log = logging.getLogger(__name__)
SHARD_DIR = re.compile(r"shard-([0-9]{5})-of-([0-9]{5})\Z")  # ASCII digits, the whole name (`$` let a
# "shard-00001-of-00002\n" by, taken for shard 1 in place of the real one; `\d` read other scripts' digits)
ADD_BATCH = 65536  # sentence vectors a faiss add (and a float32 copy) at a time


@dataclass(frozen=True)
class Recorded:
    """One thing a shard records about how it was made: its shard.json `keys`, said in words by `describe(meta)`,
    after `prep` ("with model ...", "from corpus ...")."""

    keys: tuple[str, ...]
    prep: str
    describe: Callable[[dict], str]

    def value(self, meta: dict) -> str:
        """The recorded values as one comparable string (None where the shard records none)."""
        return json.dumps([meta.get(key) for key in self.keys], sort_keys=True)


def _describe_corpus(meta: dict) -> str:
    if meta.get("corpus_sha256") is None:
        return f"corpus {meta.get('corpus', '(unrecorded)')} (its size and checksum unrecorded: an older shard)"
    return f"corpus {meta.get('corpus')} ({meta.get('corpus_bytes')} bytes, SHA-256 {str(meta['corpus_sha256'])[:16]})"


def _describe_limits(meta: dict) -> str:
    limits = meta.get("encode")
    if not isinstance(limits, dict):
        return "reading limits unrecorded (an older shard)"
    return "reading limits (" + ", ".join(f"encode.{key}={limits.get(key)}" for key in READING_LIMITS) + ")"


# What every shard of one encoding shares (`aspire.index.shards.shard_record` writes it): shards merged into one
# index must agree on each, and so must a finished shard that a re-run of encode-shard keeps.
SHARD_RECORD = {
    "models": Recorded(("model_fingerprint",), "with",
                       lambda m: f"model {m.get('model_name')!r} (fingerprint {m.get('model_fingerprint')})"),
    "backends": Recorded(("backend", "quantize"), "with",
                         lambda m: f"backend {m['backend']} {m.get('quantize') or 'fp32'}" if m.get("backend")
                         else "no recorded backend"),
    "corpora": Recorded(("corpus_sha256", "corpus_bytes"), "from", _describe_corpus),
    "reading limits": Recorded(("encode",), "with", _describe_limits),
}


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
    stray = sorted(path.name for (s, n), path in found.items() if s >= n)
    if stray:  # shard numbers run 0..n-1: one past them would be left out of the merge unsaid
        raise ValueError(f"{shards_dir}: {shard_names(stray)} numbered past the last shard of a sharding into "
                         f"{n_shards}; move {'it' if len(stray) == 1 else 'them'} out of the shards folder")
    missing = [s for s in range(n_shards) if (s, n_shards) not in found]
    if missing and not allow_missing:
        raise ValueError(f"{shards_dir}: shards {missing} (of {n_shards}) are missing")
    return [found[(s, n_shards)] for s in range(n_shards) if s not in missing], n_shards, missing


def plan_shards(shards_dir: str | Path, allow_missing: bool = False) -> tuple[list[ShardPlan], dict, list[dict]]:
    """Read and check every shard's metadata, offsets and paper ids (not its vectors); returns the plans,
    the first shard's metadata (with `num_shards`, `missing_shards`, `dim`, and `whole`: whether the shards hold
    whole-abstract vectors) and the rejected records: the shards' own in input-line order (shard 0's reader
    rejections among the later shards' encoding rejections and the duplicate paper ids, by line: `in_line_order`),
    each `{"line", "paper_id", "reason", "corpus"}` as a build's (a duplicate's line None in a shard written before
    shards recorded their papers' lines, after those with one)."""
    paths, n_shards, missing = list_shards(shards_dir, allow_missing)
    seen: set[str] = set()
    plans, metas, rejected, duplicates, dims, with_whole, without_whole = [], [], [], [], set(), [], []
    for path in paths:
        meta = read_shard_meta(path)
        offsets = np.array(_open_array(path, "offsets.npy"))
        n_rows, dim = _vectors_shape(path)
        if offsets.ndim == 1 and offsets.dtype.kind in "iu":  # unsigned: a fall wrapped round in np.diff, and passed
            offsets = offsets.astype(np.int64)
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
        if (path / WHOLE_FILE).is_file():
            whole = _open_array(path, WHOLE_FILE)
            if whole.shape != (papers, dim) or whole.dtype.kind != "f":
                raise ValueError(f"shard {path}: {WHOLE_FILE} holds {whole.dtype} of shape {whole.shape}, not one "
                                 f"vector of dimension {dim} for each of its {papers} papers")
            with_whole.append(path)
        elif papers:  # a shard whose records were all rejected has no whole vectors to hold
            without_whole.append(path)
        kept, dupes = first_occurrences(ids, seen=seen, lines=_shard_lines(path, papers), corpus=meta.get("corpus"))
        keep = np.zeros(len(ids), dtype=bool)
        keep[kept] = True
        duplicates += dupes
        plans.append(ShardPlan(path, offsets.astype(np.int64), keep, paper_rows(offsets.astype(np.int64), np.flatnonzero(keep))[0]))
        rejected += [r if "corpus" in r else {**r, "corpus": meta.get("corpus")}  # a shard written before they named it
                     for r in read_jsonl(path / "rejected.jsonl")]
        metas.append(meta)
        if papers:  # a shard whose records were all rejected may not know the dimension
            dims.add(dim)
    check_same_record(shards_dir, paths, metas)
    check_slices(shards_dir, paths, metas, n_shards)
    if len(dims) > 1:
        raise ValueError(f"{shards_dir}: shards hold vectors of different dimensions {sorted(dims)}")
    if with_whole and without_whole:  # every encoding writes them: one shard without is damaged
        lack = "lacks" if len(without_whole) == 1 else "lack"
        raise ValueError(f"{shards_dir}: {shard_names(without_whole)} {lack} {WHOLE_FILE}, which {shard_names(with_whole)} "
                         "hold: a damaged shard; encode it again")
    meta = {**metas[0], "num_shards": n_shards, "missing_shards": missing, "dim": dims.pop() if dims else 0,
            "whole": bool(with_whole)}
    return plans, meta, in_line_order(rejected + duplicates)  # shard 0 holds every record the reader rejected


def shard_names(paths: Iterable[Path], shown: int = 3) -> str:
    """`shard-00000-of-00004, shard-00002-of-00004` (the first `shown`, then how many more)."""
    names = [Path(p).name for p in paths]
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def check_same_record(shards_dir: str | Path, paths: list[Path], metas: list[dict]) -> None:
    """ValueError naming the shards of each kind when the shards differ in what `SHARD_RECORD` lists (their
    model, backend and precision, corpus or reading limits)."""
    for kind, recorded in SHARD_RECORD.items():
        groups: dict[str, list[int]] = {}
        for i, meta in enumerate(metas):
            groups.setdefault(recorded.value(meta), []).append(i)
        if len(groups) > 1:
            said = "; ".join(f"{shard_names(paths[i] for i in group)} {recorded.prep} {recorded.describe(metas[group[0]])}"
                             for group in groups.values())
            raise ValueError(f"{shards_dir}: shards were encoded {recorded.prep} different {kind}: {said}; merge the "
                             "shards of one encoding only")


def check_slices(shards_dir: str | Path, paths: list[Path], metas: list[dict], n_shards: int) -> None:
    """ValueError naming the shards and their slices when the slices of the corpus they record (`slice`: records
    [lo, hi)) overlap or leave records out (between two neighbouring shards, before shard 0 or, when the shards record
    the corpus's record count `corpus_papers`, after the last). Shards that record no slice (written before slices
    were recorded) pass."""
    slices = [m.get("slice") for m in metas]
    if all(s is None for s in slices):
        return
    for path, s in zip(paths, slices):
        if not (isinstance(s, list) and len(s) == 2 and all(isinstance(x, int) for x in s) and 0 <= s[0] <= s[1]):
            raise ValueError(f"shard {path}: shard.json records the slice {s!r}, not records [lo, hi) of the corpus")
    advice = ": shards of different encodings; encode the corpus again into a new --shards folder"
    numbers = [int(SHARD_DIR.match(p.name)[1]) for p in paths]
    if numbers[0] == 0 and slices[0][0] != 0:
        raise ValueError(f"{shards_dir}: {paths[0].name} holds records [{slices[0][0]}, {slices[0][1]}): records "
                         f"[0, {slices[0][0]}) are in no shard{advice}")
    for i in range(1, len(paths)):
        (lo0, hi0), (lo, hi) = slices[i - 1], slices[i]
        both = f"{paths[i - 1].name} holds records [{lo0}, {hi0}) and {paths[i].name} [{lo}, {hi})"
        if hi0 > lo:
            raise ValueError(f"{shards_dir}: {both}: they overlap{advice}")
        if hi0 < lo and numbers[i] == numbers[i - 1] + 1:
            raise ValueError(f"{shards_dir}: {both}: records [{hi0}, {lo}) are in neither{advice}")
    totals = {m.get("corpus_papers") for m in metas}
    (lo, hi), n = slices[-1], totals.pop() if len(totals) == 1 else None
    if numbers[-1] == n_shards - 1 and n is not None and hi != n:
        left = f"records [{hi}, {n}) are in no shard" if hi < n else "it ends past the corpus's end"
        raise ValueError(f"{shards_dir}: the last shard {paths[-1].name} holds records [{lo}, {hi}) of a corpus of {n} "
                         f"records: {left}{advice}")


def encoded_config(config: IndexBuildConfig, meta: dict) -> IndexBuildConfig:
    """`config` with what the shards (`meta`, `plan_shards`'s) record of their encoding, where they record it: the
    backend and precision (which `add` and `search` then encode with) and the reading limits. A value of `config`
    other than its default that the record replaces is warned about, naming the key and both values (a `--config`
    file's `encode.max_sentences: 5` was once replaced without a word)."""
    encode = config.encode
    if "backend" in meta:
        encode = replace(encode, backend=meta["backend"], quantize=meta.get("quantize"))
    if isinstance(meta.get("encode"), dict):
        encode = replace(encode, **{key: meta["encode"][key] for key in READING_LIMITS if key in meta["encode"]})
    default = type(config.encode)()
    for key in ("backend", "quantize", *READING_LIMITS):
        given, taken = getattr(config.encode, key), getattr(encode, key)
        if given != taken and given != getattr(default, key):
            log.warning("encode.%s: the config gives %r, the shards were encoded with %r; the index records %r",
                        key, given, taken, taken)
    return replace(config, encode=encode)


def merge_streaming(shards_dir: str | Path, out: str | Path, config: IndexBuildConfig,
                    allow_missing: bool = False) -> Path:
    """Build one index at `out` from the shards under `shards_dir` (all of them, unless `allow_missing`),
    streaming (see the module docstring), replacing any index there (a damaged one too, as `build --overwrite`
    does); returns the new live generation's directory."""
    with index_lock(out) as root:
        plans, meta, rejected = plan_shards(shards_dir, allow_missing)
        if meta["missing_shards"]:
            log.warning("%s: merging %d of %d shards; missing %s", shards_dir,
                        meta["num_shards"] - len(meta["missing_shards"]), meta["num_shards"], meta["missing_shards"])
        if not any(p.keep.any() for p in plans):
            raise ValueError(f"nothing to index: all {len(rejected)} records were rejected" + describe_rejected(rejected))
        config = encoded_config(config, meta)
        prepare_build_dir(root, overwrite=True)  # replaced as `build --overwrite` replaces it (a damaged one too)
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
    extra = _merge_whole(plans, tmp, n_papers, dim, config.index.vector_dtype) if meta["whole"] else ()
    faiss.write_index(index, str(tmp / "sentences.faiss"))
    np.save(tmp / "offsets.npy", offsets)
    write_jsonl(tmp / "rejected.jsonl", rejected)
    bm25 = None
    if config.index.store_bm25:
        _, titles, sentences, _ = read_index_papers(tmp / "papers.jsonl", texts="disk")
        bm25 = papers_bm25(titles, sentences, config.search.bm25_k1, config.search.bm25_b, meta.get("include_title"))
    write_manifest(tmp, config, manifest_fields(index, kind, meta["model_name"], meta["model_fingerprint"], dim,
                                                n_papers, n, len(rejected), config.index.vector_dtype,
                                                meta.get("include_title")), bm25, extra)
    return publish_generation(root, tmp)


def _merge_whole(plans: list[ShardPlan], gen: Path, n_papers: int, dim: int, dtype) -> tuple[str, ...]:
    """The kept papers' whole-abstract vectors of every shard (each holds them: `plan_shards` checked), in order,
    written to `gen/whole.npy` a shard at a time -> the extra files written."""
    out = np.lib.format.open_memmap(gen / WHOLE_FILE, mode="w+", dtype=np.dtype(dtype), shape=(n_papers, dim))
    row = 0
    for plan in plans:
        if plan.keep.any():
            kept = np.load(plan.path / WHOLE_FILE, mmap_mode="r")[plan.keep]
            with np.errstate(over="ignore"):  # refused just below, naming the papers
                out[row : row + len(kept)] = kept
            stored = out[row : row + len(kept)]
            if len(nonfinite_rows(stored)):  # as stored: nothing else reads them before a search; worded as `build`'s
                ids = read_index_papers(plan.path / "papers.jsonl", texts="disk")[0]
                kept_ids = [ids[p] for p in np.flatnonzero(plan.keep).tolist()]
                raise ValueError(f"shard {plan.path}: {unstorable_whole(kept_ids, kept, stored)}")
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
                try:  # `add_vectors` checks the batch for NaN and infinity (the one pass); the error names the papers
                    add_vectors(index, batch)
                except ValueError:
                    bad = nonfinite_rows(batch)
                    if len(bad):
                        raise nonfinite_papers(plan, plan.rows[start + bad], ids) from None
                    raise
                with np.errstate(over="ignore"):  # refused just below, naming the papers
                    vectors[at : at + len(batch)] = batch
                over = nonfinite_rows(vectors[at : at + len(batch)]) if vectors.dtype == np.float16 else ()
                if len(over):  # finite (faiss took them), past float16's range: stored as infinity, as `build` refuses
                    raise nonfinite_papers(plan, plan.rows[start + over], ids, "hold values past float16's range "
                                           "(65504): set index.vector_dtype=float32")
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
    """(len(rows), D) float32: the merged corpus's rows `rows` (in that order), read from the shards. `rows`
    are integer positions 0..N-1 of the merged corpus's N rows (a negative one is not counted from the end, and a
    boolean mask is not a selection): anything else raises IndexError naming it."""
    bounds = np.cumsum([0] + [len(p.rows) for p in plans])
    rows = np.asarray(rows)
    if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
        raise IndexError(f"read_rows takes a 1-D array of integer row positions, got {rows.dtype} of shape {rows.shape}")
    outside = rows[(rows < 0) | (rows >= bounds[-1])]
    if len(outside):
        raise IndexError(f"row(s) {outside[:10].tolist()} out of range for the {int(bounds[-1])} rows of the shards")
    rows = rows.astype(np.int64, copy=False)
    shard_of = np.searchsorted(bounds, rows, side="right") - 1
    out = np.empty((len(rows), dim), dtype=np.float32)
    for s in np.unique(shard_of).tolist():
        where = np.flatnonzero(shard_of == s)
        local = plans[s].rows[rows[where] - bounds[s]]
        order = np.argsort(local)  # read each shard front to back
        block = np.load(plans[s].path / "vectors.npy", mmap_mode="r")[local[order]]
        bad = nonfinite_rows(block)
        if len(bad):
            raise nonfinite_papers(plans[s], local[order][bad])
        out[where[order]] = block
    return out


def nonfinite_papers(plan: ShardPlan, rows: np.ndarray, ids: list[str] | None = None,
                     problem: str = "hold NaN or infinite values; an index cannot rank them (faiss never returns "
                                    "them): encode the shard again") -> ValueError:
    """The error for the shard's sentence `rows` holding NaN or infinity (or another `problem`), naming their papers
    (`ids`: the shard's paper ids, read from its papers.jsonl when not given)."""
    if ids is None:
        ids = read_index_papers(plan.path / "papers.jsonl", texts="disk")[0]
    papers = [ids[p] for p in np.unique(np.searchsorted(plan.offsets, rows, side="right") - 1).tolist()]
    return ValueError(f"shard {plan.path}: the sentence vectors of paper(s) {papers[:10]}"
                      f"{f' and {len(papers) - 10} more' if len(papers) > 10 else ''} {problem}")


def _open_array(path: Path, name: str) -> np.ndarray:
    """The shard's array file `name`, memory-mapped; ValueError naming the shard and the file when it is missing or
    does not read as an array (a truncated file, say)."""
    try:
        return np.load(path / name, mmap_mode="r")
    except (OSError, ValueError) as err:
        raise ValueError(f"shard {path}: {name} does not read as an array ({err})") from None


def _shard_lines(path: Path, papers: int) -> list[int] | None:
    """Each of the shard's `papers` papers' line in the corpus file (`LINES_FILE`), or None for a shard written before
    it recorded them; ValueError naming the shard when the file is not one integer a paper."""
    if not (path / LINES_FILE).is_file():
        return None
    lines = _open_array(path, LINES_FILE)
    if lines.shape != (papers,) or lines.dtype.kind not in "iu":
        raise ValueError(f"shard {path}: {LINES_FILE} holds {lines.dtype} of shape {lines.shape}, not one line for "
                         f"each of its {papers} papers: a damaged shard; encode it again")
    return lines.tolist()


def _vectors_shape(path: Path) -> tuple[int, int]:
    """(rows, dimension) of a shard's vectors.npy, from its header (ValueError naming the shard if it is
    not a 2-D float array)."""
    vectors = _open_array(path, "vectors.npy")
    if vectors.ndim != 2 or vectors.dtype.kind != "f":
        raise ValueError(f"shard {path}: vectors.npy holds {vectors.dtype} of shape {vectors.shape}, not (N, D) floats")
    return int(vectors.shape[0]), int(vectors.shape[1])
