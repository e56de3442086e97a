"""An encoded corpus: every sentence vector of every paper, flat, with per-paper offsets.

`EncodedCorpus` is what encoding produces and what an index stores: `vectors (N, D)` holds the
sentence vectors paper after paper, and paper p owns rows `offsets[p]:offsets[p + 1]`. The same
layout is written as a shard by each rank of a sharded (torchrun) encoding and merged back in rank
order. Every input record ends up either encoded or in `rejected` with a reason.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from aspire.batch import DocBatch
from aspire.data.facets import title_labelled
from aspire.data.guards import invisible_text_reason
from aspire.data.papers import Paper, paper_id_problem, read_papers
from aspire.index.config import EncodeConfig
from aspire.index.disk import SHARD_META
from aspire.index.texts import read_index_papers
from aspire.io import atomic_folder, finite_dumps, read_json, read_jsonl, type_name, write_jsonl
from aspire.storage import check_replaceable

SHARD_FORMAT_VERSION = 1
SHARD_KEYS = ("n_papers", "n_sentences", "dim", "model_name", "model_fingerprint")  # what every shard.json holds
PROGRESS_BATCHES = 4  # encode_corpus encodes (and moves its bar) this many batches of papers at a time


WHOLE_FILE = "whole.npy"  # (P, D) whole-abstract vectors of a shard or index; absent where encoded before the one-pass encoding
LINES_FILE = "lines.npy"  # (P,) each shard paper's line in the corpus file; absent in shards written before it was

@dataclass
class EncodedCorpus:
    """Sentence vectors of P papers, flat.

    Attributes:
        vectors: (N, D) float sentence vectors, paper after paper (N = total sentence count).
        offsets: (P + 1,) int64; paper p's sentences are rows `offsets[p]:offsets[p + 1]`.
        paper_ids, titles, sentences: per paper; `len(sentences[p]) == offsets[p+1] - offsets[p]`.
        rejected: records that were not encoded, each `{"paper_id", "reason", ...}`.
        labels: per paper, its sentences' facet labels (`Paper.labels`, one a sentence) or None;
            an empty list (the default) means no paper has labels.
        whole: (P, D) each paper's whole-abstract vector from the same encoder pass (`DocBatch.whole`), or None
            (a corpus encoded before the one-pass encoding).
    """

    vectors: np.ndarray
    offsets: np.ndarray
    paper_ids: list[str]
    titles: list[str]
    sentences: list[list[str]]
    rejected: list[dict] = field(default_factory=list)
    labels: list[list[str] | None] = field(default_factory=list)
    whole: np.ndarray | None = None

    def __post_init__(self) -> None:
        P = len(self.paper_ids)
        if self.vectors.ndim != 2:  # checked before `whole`, whose check reads the dimension (an IndexError naming nothing)
            raise ValueError(f"vectors must be (N, D), got shape {self.vectors.shape}")
        if self.whole is not None and self.whole.shape != (P, self.vectors.shape[1]):
            raise ValueError(f"whole vectors {self.whole.shape} do not match {P} papers of dimension {self.vectors.shape[1]}")
        self.labels = list(self.labels) or [None] * P
        if self.offsets.dtype.kind not in "iu":  # float offsets were taken, and `subset` / `gather_docbatch` then failed
            raise ValueError(f"offsets must be integers, got {self.offsets.dtype}")
        if self.offsets.shape != (P + 1,) or self.offsets[0] != 0 or self.offsets[-1] != len(self.vectors):
            raise ValueError(
                f"offsets {self.offsets.shape} do not describe {P} papers over {len(self.vectors)} vectors"
            )
        if len(self.titles) != P or len(self.sentences) != P:
            raise ValueError("paper_ids, titles and sentences must have one entry per paper")
        counts = np.diff(self.offsets)
        if (counts <= 0).any():
            raise ValueError("every paper needs at least one sentence vector")
        if any(len(s) != c for s, c in zip(self.sentences, counts.tolist())):
            raise ValueError("sentence texts do not match the sentence-vector counts in offsets")
        if len(self.labels) != P or any(lab is not None and len(lab) != c for lab, c in zip(self.labels, counts.tolist())):
            raise ValueError("labels must hold, per paper, None or one label per sentence vector")

    def __len__(self) -> int:
        return len(self.paper_ids)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @classmethod
    def empty(cls, dim: int, rejected: Sequence[dict] = ()) -> "EncodedCorpus":
        return cls(np.zeros((0, dim), np.float32), np.zeros(1, np.int64), [], [], [], list(rejected))

    @classmethod
    def from_docbatch(cls, batch: DocBatch, titles: Sequence[str],
                      labels: Sequence[list[str] | None] = ()) -> "EncodedCorpus":
        """Flatten a DocBatch `(B, S, D)` + mask `(B, S)` into rows; sentence texts from the batch,
        `labels` (empty, or one entry a paper: one label a sentence text of the batch, or None; ValueError naming the
        paper otherwise) cut like the texts. A narrowed mask (an aspect selection,
        `DocBatch.select_sentences`) keeps the texts and labels of the sentences it selects (the first ones were
        kept: a paper's vectors of sentences 1 and 2 went with the texts of sentences 0 and 1)."""
        if not batch.paper_ids or not batch.sentences:
            raise ValueError("from_docbatch needs a DocBatch carrying paper_ids and sentences")
        mask = batch.mask.cpu().numpy()  # (B, S)
        kept = [np.flatnonzero(m).tolist() for m in mask]  # per paper, the positions of its vectors
        for pid, s, pos in zip(batch.paper_ids, batch.sentences, kept):
            if pos and pos[-1] >= len(s):
                raise ValueError(f"paper {pid}: the mask marks sentence {pos[-1]} and the batch holds {len(s)} "
                                 "sentence texts for it")
        lengths = mask.sum(axis=1).astype(np.int64)  # (B,)
        vectors = batch.emb[batch.mask].detach().float().cpu().numpy()  # (N, D), row-major = paper order
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        sentences = [[s[j] for j in pos] for s, pos in zip(batch.sentences, kept)]
        if labels and len(labels) != len(batch.paper_ids):
            raise ValueError(f"from_docbatch: {len(labels)} label lists for {len(batch.paper_ids)} papers: give one "
                             "a paper (None for a paper without labels)")
        for pid, s, lab in zip(batch.paper_ids, batch.sentences, labels):
            if lab is not None and len(lab) != len(s):  # else the labels past its sentences were dropped unsaid
                raise ValueError(f"paper {pid}: {len(lab)} labels for the {len(s)} sentence texts the batch holds "
                                 "for it: give one label a sentence")
        cut = [None if lab is None else [lab[j] for j in pos] for lab, pos in zip(labels, kept)]
        whole = None if batch.whole is None else batch.whole.detach().float().cpu().numpy()
        return cls(vectors, offsets, list(batch.paper_ids), list(titles), sentences, labels=cut, whole=whole)

    @classmethod
    def concat(cls, parts: Sequence["EncodedCorpus"]) -> "EncodedCorpus":
        """Join corpora in order; a paper id seen earlier is moved to `rejected` (first one wins, `first_occurrences`).
        Parts holding papers must all carry whole-abstract vectors or none (ValueError naming the parts without)."""
        if not parts:
            raise ValueError("EncodedCorpus.concat needs at least one part")
        dims = {p.dim for p in parts if len(p)}
        if len(dims) > 1:
            raise ValueError(f"cannot concatenate corpora of different dimensions {sorted(dims)}")
        without = [i for i, p in enumerate(parts) if len(p) and p.whole is None]
        if without and len(without) < sum(1 for p in parts if len(p)):  # else every paper's were dropped, unsaid
            raise ValueError(f"parts {without[:10]} carry no whole-abstract vectors and the other parts do: encode "
                             "every part with one encoder (one pass gives both), or every paper's would be dropped")
        dim = dims.pop() if dims else parts[0].dim
        seen: set[str] = set()
        rejected = [r for p in parts for r in p.rejected]
        keep_parts: list[EncodedCorpus] = []
        for part in parts:
            keep, dupes = first_occurrences(part.paper_ids, seen=seen)
            rejected += dupes
            keep_parts.append(part.subset(keep))
        keep_parts = [p for p in keep_parts if len(p)]
        if not keep_parts:
            return cls.empty(dim, rejected)
        vectors = np.concatenate([p.vectors for p in keep_parts])
        whole = None if keep_parts[0].whole is None else np.concatenate([p.whole for p in keep_parts])
        counts = np.concatenate([np.diff(p.offsets) for p in keep_parts])
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(
            vectors,
            offsets,
            [x for p in keep_parts for x in p.paper_ids],
            [x for p in keep_parts for x in p.titles],
            [x for p in keep_parts for x in p.sentences],
            rejected,
            [x for p in keep_parts for x in p.labels],
            whole,
        )

    def subset(self, papers: Sequence[int]) -> "EncodedCorpus":
        """The papers at positions `papers`, in that order (rejected list kept). Positions are integers; a negative
        one counts from the end, as in a list; ValueError for a boolean mask, non-integer or out-of-range positions
        (`paper_positions`)."""
        idx = paper_positions(papers, len(self), "EncodedCorpus.subset")
        if len(idx) == len(self) and (idx == np.arange(len(self))).all():
            return self
        rows, lengths = paper_rows(self.offsets, idx)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return EncodedCorpus(
            self.vectors[rows],
            offsets,
            [self.paper_ids[i] for i in idx.tolist()],
            [self.titles[i] for i in idx.tolist()],
            [self.sentences[i] for i in idx.tolist()],
            list(self.rejected),
            [self.labels[i] for i in idx.tolist()],
            None if self.whole is None else self.whole[idx],
        )

    # ---- shard files ----------------------------------------------------------------------------
    def save_shard(self, path: str | Path, meta: dict, lines: Sequence[int] | None = None) -> Path:
        """Write this corpus as a shard directory (atomically: `aspire.io.atomic_folder`, a folder beside it moved
        into place whole), replacing an earlier shard there; any other existing folder is refused
        (`storage.check_replaceable`). A write that fails (a full disk) leaves `path` as it was and no folder
        beside it (a temporary folder was once left, and the earlier shard removed before the new one was in place).

        `meta`: what else shard.json records; it must hold `model_name` and `model_fingerprint` (`SHARD_KEYS`: a shard
        without them does not load). The format version and counts (`shard_format_version`, `n_papers`,
        `n_sentences`, `dim`) are this corpus's: a meta holding one with another value (say a loaded shard's meta
        saved with a subset) is refused, naming the key, as it would have replaced the true count in shard.json (the
        same value, as a loaded shard's meta holds it, is taken). A NaN or infinity in meta is refused, naming its key,
        before anything is written: `json.dumps` wrote it as a bare `NaN`, which is not JSON (`read_shard_meta`
        refuses it). `lines`: each paper's line in the corpus file (`LINES_FILE`; the merge names a duplicate paper id
        by it), one a paper, or None (not written)."""
        path = Path(path)
        if lines is not None and len(lines) != len(self):
            raise ValueError(f"cannot save shard {path}: {len(lines)} input lines for {len(self)} papers")
        repeat = repeated_id(self.paper_ids)
        if repeat is not None:  # else the shard was written and its papers.jsonl never read back (`load_shard`)
            raise ValueError(f"cannot save shard {path}: {repeat}")
        counts = {"shard_format_version": SHARD_FORMAT_VERSION, "n_papers": len(self),
                  "n_sentences": int(len(self.vectors)), "dim": self.dim}
        clash = [f"{key} {meta[key]!r} (this corpus: {value!r})" for key, value in counts.items()
                 if key in meta and (type(meta[key]) is not type(value) or meta[key] != value)]
        if clash:  # `{**counts, **meta}` wrote the caller's: a shard that said 5 papers and held 3
            raise ValueError(f"cannot save shard {path}: meta records {', '.join(clash)}; save_shard writes the "
                             "corpus's own counts: leave them out of meta")
        lacking = [key for key in SHARD_KEYS if key not in counts and key not in meta]
        if lacking:  # else written, and refused by `read_shard_meta` when loaded ("a damaged shard")
            raise ValueError(f"cannot save shard {path}: meta lacks {', '.join(map(repr, lacking))}, which every "
                             "shard records")
        info = {**counts, **{key: value for key, value in meta.items() if key not in counts}}
        text = finite_dumps(info, f"cannot save shard {path}: meta", indent=1)  # a NaN, keys 1 and "1": named
        check_replaceable(path, SHARD_META, "a shard folder")
        with atomic_folder(path) as tmp:
            np.save(tmp / "vectors.npy", np.ascontiguousarray(self.vectors, dtype=np.float32))
            np.save(tmp / "offsets.npy", self.offsets)
            if self.whole is not None:
                np.save(tmp / WHOLE_FILE, np.ascontiguousarray(self.whole, dtype=np.float32))
            if lines is not None:
                np.save(tmp / LINES_FILE, np.asarray(lines, dtype=np.int64))
            write_index_papers(tmp / "papers.jsonl", self.paper_ids, self.titles, self.sentences, self.labels)
            write_jsonl(tmp / "rejected.jsonl", self.rejected)
            (tmp / SHARD_META).write_text(text, encoding="utf-8")
        return path

    @classmethod
    def load_shard(cls, path: str | Path) -> tuple["EncodedCorpus", dict]:
        """Read a shard directory written by `save_shard`; returns (corpus, shard metadata). ValueError naming the
        shard (and the file) for a damaged one: an array file that does not read, files that do not describe one
        corpus (`EncodedCorpus`'s checks), or a shard.json whose `n_papers`, `n_sentences` or `dim` are not those of
        the files (they were never compared: a shard.json saying 5 papers loaded with 3), or a shard.json or
        rejected.jsonl holding a bare NaN / Infinity (`save_shard` refuses a non-finite meta value; `write_jsonl`
        never writes one)."""
        path = Path(path)
        meta = read_shard_meta(path)
        ids, titles, sentences, labels = read_index_papers(path / "papers.jsonl")
        whole = _shard_array(path, WHOLE_FILE) if (path / WHOLE_FILE).is_file() else None
        vectors, offsets = _shard_array(path, "vectors.npy"), _shard_array(path, "offsets.npy")
        rejected = read_jsonl(path / "rejected.jsonl", finite=True)  # write_jsonl wrote it: a bare NaN is damage
        try:
            corpus = cls(vectors, offsets, ids, titles, sentences, rejected, labels, whole)
        except ValueError as err:
            raise ValueError(f"shard {path}: {err}: a damaged shard; encode it again") from None
        said = {key: meta[key] for key in ("n_papers", "n_sentences", "dim")}
        held = {"n_papers": len(corpus), "n_sentences": int(len(corpus.vectors)), "dim": corpus.dim}
        if said != held:
            differ = ", ".join(f"{key} {said[key]!r} (the files hold {held[key]})" for key in said if said[key] != held[key])
            raise ValueError(f"shard {path}: {SHARD_META} records {differ}: a damaged shard; encode it again")
        return corpus, meta


def _shard_array(path: Path, name: str) -> np.ndarray:
    """The shard's array file `name`; ValueError naming the shard and the file when it does not read as an array."""
    try:
        return np.load(path / name)
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"shard {path}: {name} does not read as an array ({err})") from None


def read_shard_meta(path: Path) -> dict:
    """A shard directory's shard.json, checked: present, a JSON object without a bare NaN / Infinity (naming the file
    and the constant: `save_shard` never writes one), this code's shard format, holding every key of `SHARD_KEYS`."""
    meta_path = path / SHARD_META
    if not meta_path.is_file():
        raise FileNotFoundError(f"{path} is not a complete shard (no shard.json)")
    meta = read_json(meta_path, f"shard {path.name}'s record", finite=True)
    if not isinstance(meta, dict) or meta.get("shard_format_version") != SHARD_FORMAT_VERSION:
        version = meta.get("shard_format_version") if isinstance(meta, dict) else None
        raise ValueError(f"shard {path} has format version {version}, this code reads version {SHARD_FORMAT_VERSION}")
    missing = [key for key in SHARD_KEYS if key not in meta]
    if missing:
        raise ValueError(f"{meta_path} lacks {', '.join(map(repr, missing))}: a damaged shard; encode it again")
    return meta


def paper_positions(papers, n_papers: int, what: str) -> np.ndarray:
    """`papers` as an int64 array `(C,)` of positions in `0..n_papers - 1`, a negative position counting from the end
    (as in a list, and `DocBatch.index`). ValueError, naming `what`, for a boolean mask, non-integer positions or
    positions out of range: a cast to int64 read True / False as 1 / 0 and 1.7 as 1, and a negative position took
    its rows from the offsets' other end (-2: the last paper's vectors, -1: none) while its id and texts were
    another paper's."""
    idx = np.asarray(papers)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        got = "a boolean mask" if idx.dtype == bool else f"{idx.ndim}-d {idx.dtype} positions"
        raise ValueError(f"{what} takes a 1-d sequence of integer paper positions, got {got}"
                         + (" (select by a mask with np.flatnonzero(mask))" if idx.dtype == bool else ""))
    idx = idx.astype(np.int64)
    bad = idx[(idx < -n_papers) | (idx >= n_papers)]
    if len(bad):
        raise ValueError(f"{what}: paper positions {bad[:5].tolist()} out of range for {n_papers} papers")
    return np.where(idx < 0, idx + n_papers, idx)


def paper_rows(offsets: np.ndarray, papers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row numbers of the sentences of `papers (C,)` (positions, `paper_positions`), concatenated, and each paper's
    count (C,)."""
    papers = paper_positions(papers, len(offsets) - 1, "paper_rows")
    starts = offsets[papers]
    lengths = offsets[papers + 1] - starts
    total = int(lengths.sum())
    # row r of paper c = starts[c] + (r - first row of c in the output)
    firsts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    rows = np.repeat(starts - firsts, lengths) + np.arange(total, dtype=np.int64)
    return rows, lengths


def gather_docbatch(
    vectors: np.ndarray,
    offsets: np.ndarray,
    papers: np.ndarray,
    paper_ids: Sequence[str] = (),
    sentences: Sequence[Sequence[str]] = (),
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    whole: np.ndarray | None = None,
) -> DocBatch:
    """The papers at `papers (C,)` as a padded DocBatch `(C, S, D)`, S = their longest abstract, with their
    rows of `whole (P, D)` (the whole-abstract vectors) when given.

    `vectors (N, D)` may be a memory map; only the needed rows are read (asked for all at once:
    `prefetch_rows`). `papers` are positions as `paper_positions` takes them (a negative one counts from the end).
    """
    papers = paper_positions(papers, len(offsets) - 1, "gather_docbatch")
    starts = offsets[papers]  # (C,)
    lengths = offsets[papers + 1] - starts  # (C,)
    prefetch_rows(vectors, starts, lengths)
    S = int(lengths.max()) if len(papers) else 0
    pos = np.arange(S, dtype=np.int64)  # (S,)
    mask = pos[None, :] < lengths[:, None]  # (C, S)
    rows = (starts[:, None] + pos[None, :])[mask]  # (n,) the real sentences, row-major
    mask_t = torch.from_numpy(mask)
    emb = torch.zeros(len(papers), S, vectors.shape[1], dtype=dtype)  # (C, S, D), padding stays zero
    emb[mask_t] = torch.from_numpy(np.asarray(vectors[rows])).to(dtype)  # one gather of (n, D)
    emb, mask_t = emb.to(device), mask_t.to(device)
    whole_t = None if whole is None else torch.from_numpy(np.asarray(whole[papers])).to(device=device, dtype=dtype)
    return DocBatch(emb, mask_t, list(paper_ids), [list(s) for s in sentences], whole_t)


def prefetch_rows(vectors: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
    """Ask the kernel to read rows `[starts[i], starts[i] + lengths[i])` of a memory-mapped `vectors`
    now, every range at once (madvise WILLNEED), so that the disk serves them together instead of one
    page fault after another when the rows are then copied: a re-rank of 1,000 papers whose vectors
    are not in the page cache took 130-150 ms one fault at a time and 35-50 ms prefetched
    (experiments/results/bench_million.md). Arrays in RAM (and views of a map) are left alone."""
    if not isinstance(vectors, np.memmap) or not isinstance(vectors.base, mmap.mmap) or len(starts) == 0:
        return
    first = vectors.offset % mmap.ALLOCATIONGRANULARITY  # where row 0 lies in the map
    for lo, hi in page_ranges(first + starts * vectors.strides[0], lengths * vectors.strides[0]):
        vectors.base.madvise(mmap.MADV_WILLNEED, lo, hi - lo)


def first_occurrences(paper_ids: Sequence[str], known=(), seen: set[str] | None = None,
                      lines: Sequence[int] | None = None, corpus: str | None = None) -> tuple[list[int], list[dict]]:
    """Which of `paper_ids` to index (positions): each id's first occurrence, unless it is in `known` (the ids
    indexed already) or `seen` (met earlier in the same corpus: shards or parts before this one; the kept ids are
    added to it); and a rejected record for every other, with the reason `encode_corpus` gives. Where the caller
    knows the papers' file (`corpus`) or their `lines` in it (one a paper), each record is `{"line", "paper_id",
    "reason", "corpus"}` as a build's (None for what is not known); else `{"paper_id", "reason"}`."""
    keep, dupes, seen = [], [], set() if seen is None else seen
    where = lines is not None or corpus is not None
    for i, pid in enumerate(paper_ids):
        if pid in known or pid in seen:
            again = "already indexed" if pid in known else "again in this corpus"
            record = {"paper_id": pid, "reason": f"duplicate paper_id ({again})"}
            dupes.append({"line": None if lines is None else int(lines[i]), **record, "corpus": corpus} if where
                         else record)
        else:
            seen.add(pid)
            keep.append(i)
    return keep, dupes


def repeated_id(paper_ids: Sequence[str]) -> str | None:
    """None when every one of `paper_ids` is distinct, else what is wrong, naming the first id met again and both its
    positions (a shard or an index holds each id once: its papers file does not load with one repeated)."""
    first: dict[str, int] = {}
    for p, pid in enumerate(paper_ids):
        if first.setdefault(pid, p) != p:
            return (f"paper id {pid!r} is at positions {first[pid]} and {p} (each id once: `SentenceIndex.build` and "
                    "`EncodedCorpus.concat` keep the first and reject the others)")
    return None


def page_ranges(starts: np.ndarray, sizes: np.ndarray, page: int = mmap.PAGESIZE) -> list[tuple[int, int]]:
    """The byte ranges `[starts[i], starts[i] + sizes[i])` as sorted, disjoint ranges `(lo, hi)` with
    page-aligned `lo` (what madvise takes), ranges that touch or overlap joined; none for no range."""
    if len(starts) == 0:  # else an IndexError (the first range is always kept: a mask of one for no range)
        return []
    order = np.argsort(starts, kind="stable")
    lo = np.asarray(starts)[order] // page * page
    hi = np.asarray(starts)[order] + np.asarray(sizes)[order]
    new = np.concatenate([[True], lo[1:] > np.maximum.accumulate(hi)[:-1]])  # does not touch those before it
    return list(zip(lo[new].tolist(), np.maximum.reduceat(hi, np.flatnonzero(new)).tolist()))


def encode_corpus(
    encoder,
    papers: Sequence[Paper],
    config: EncodeConfig | None = None,
    skip_ids: Iterable[str] = (),
    progress: bool = True,
    lines: Sequence[int] | None = None,
) -> EncodedCorpus:
    """Encode `papers` with `encoder.encode(...) -> DocBatch`, `config.chunk_papers` at a time (checked for
    unseen text), `PROGRESS_BATCHES` x `config.batch_size` a call (the progress bar moves after each call).

    Papers without sentences, papers whose id is in `skip_ids` (already indexed) or repeated, papers whose id
    is no paper id by `read_papers`' rules (not a string, blank, holding whitespace: `paper_id_problem`),
    papers with a sentence no encoder can see (`aspire.data.guards.invisible_text_reason`) or, when
    the encoder can tell (`encoder.unseen_sentences`), one its tokenizer gives no word piece, and
    papers for which the encoder returns no sentence vector go to `rejected` with a reason, in input order;
    every other paper is encoded, in input order. The papers longer than the encoder's window are named in one warning
    at the end (`aspire.encoders.pieces.long_papers_held`), not in one a call. `lines` (one per paper: its line in the
    input file; default `papers.lines` where `papers` comes from `read_corpus`) puts each rejected record's `"line"`
    first, as `read_corpus` names the records it rejects.
    """
    from aspire.encoders.contextual import paper_sentences  # the encoder's sentence set, for the reasons given
    from aspire.encoders.pieces import long_papers_held

    config = config or EncodeConfig()
    lines = getattr(papers, "lines", None) if lines is None else list(lines)
    papers = list(papers)
    if lines is not None and len(lines) != len(papers):
        raise ValueError(f"{len(lines)} input lines for {len(papers)} papers: give one line a paper")
    skipped = set(skip_ids)
    bad = [pid for pid in skipped if not isinstance(pid, str)]
    if bad:  # 7 never matched the paper "7": both were encoded
        raise TypeError(f"skip_ids holds {type_name(bad[0])} {bad[0]!r}: paper ids are strings (an integer id of a "
                        "papers file is read as the string of its digits)")
    seen = set(skipped)
    rejected: list[tuple[int, dict]] = []  # (input position, record): sorted into input order at the end

    def reject(i: int, reason: str) -> None:
        where = {} if lines is None else {"line": lines[i]}
        rejected.append((i, {**where, "paper_id": papers[i].paper_id, "reason": reason}))

    todo: list[Paper] = []
    position: dict[str, int] = {}  # input position of each paper in `todo` (their ids are distinct)
    for i, paper in enumerate(papers):
        pid = paper.paper_id
        id_problem = (f"paper_id must be a string, got {type_name(pid)}" if not isinstance(pid, str)
                      else paper_id_problem(pid))
        invisible = next(((k, r) for k, s in enumerate(paper.sentences) if (r := invisible_text_reason(s))), None)
        if id_problem:
            reject(i, id_problem)
        elif pid in seen:
            reject(i, f"duplicate paper_id ({'already indexed' if pid in skipped else 'again in this corpus'})")
        elif not paper.sentences:
            reject(i, "no abstract sentences")
        elif invisible:
            reject(i, f"sentence {invisible[0]} {invisible[1]}")
        else:
            seen.add(pid)
            position[pid] = i
            todo.append(paper)
    parts: list[EncodedCorpus] = []
    bar = tqdm(total=len(todo), desc="encoding papers", unit="paper", disable=not progress)
    with long_papers_held(encoder):  # the papers longer than the window in one warning, not one a call
        for start in range(0, len(todo), config.chunk_papers):
            chunk = todo[start : start + config.chunk_papers]
            if hasattr(encoder, "unseen_sentences"):  # judged by what the encoder's tokenizer will see
                unseen = encoder.unseen_sentences(chunk, batch_size=config.batch_size)
                texts = lambda p: paper_sentences(p, getattr(encoder, "include_title", False))  # noqa: E731
                for p, u in zip(chunk, unseen):
                    if u:
                        reject(position[p.paper_id], f"sentence(s) {u} give the encoder's tokenizer no word piece "
                                                     f"(e.g. {texts(p)[u[0]][:40]!r})")
                bar.update(sum(1 for u in unseen if u))
                chunk = [p for p, u in zip(chunk, unseen) if not u]
                if not chunk:
                    continue
            step = PROGRESS_BATCHES * config.batch_size  # the bar moves every few batches, not every chunk
            for sub in (chunk[i : i + step] for i in range(0, len(chunk), step)):
                parts += _encoded_part(encoder, sub, config, lambda p, reason: reject(position[p.paper_id], reason))
                bar.update(len(sub))
        bar.close()  # before the warning
    records = [record for _, record in sorted(rejected, key=lambda r: r[0])]
    if not parts:
        dim = int(getattr(encoder, "dim", 0) or 0)
        return EncodedCorpus.empty(dim, records)
    corpus = EncodedCorpus.concat(parts)
    corpus.rejected = records + corpus.rejected
    return corpus


def _encoded_part(encoder, chunk: list[Paper], config: EncodeConfig, reject) -> list[EncodedCorpus]:
    """`chunk` encoded (at most one part); papers the encoder gives no sentence vector go to `reject(paper, reason)`."""
    batch = encoder.encode(chunk, batch_size=config.batch_size, progress=False)
    if len(batch) != len(chunk):
        raise ValueError(f"encoder returned {len(batch)} papers for {len(chunk)}")
    asked = [p.paper_id for p in chunk]
    if not batch.paper_ids:
        batch = DocBatch(batch.emb, batch.mask, asked, batch.sentences, batch.whole)
    elif list(batch.paper_ids) != asked:  # titles and labels are matched by position: else given to other papers
        odd = [i for i, (got, want) in enumerate(zip(batch.paper_ids, asked)) if got != want]
        raise ValueError(f"encoder returned papers {[batch.paper_ids[i] for i in odd[:5]]} at positions {odd[:5]} "
                         f"where {[asked[i] for i in odd[:5]]} were asked ({len(odd)} positions differ): an encoder "
                         "returns the papers it is given, in that order")
    if not batch.sentences:
        batch = DocBatch(batch.emb, batch.mask, batch.paper_ids, [p.sentences for p in chunk], batch.whole)
    counts = batch.lengths.tolist()
    for i, n in enumerate(counts):
        if n == 0:
            reject(chunk[i], "encoder produced no sentence vectors")
    keep = [i for i, n in enumerate(counts) if n > 0]
    if keep:
        part = batch if len(keep) == len(chunk) else batch.index(keep)
        labels = [title_labelled(chunk[i].labels, len(part.sentences[j])) for j, i in enumerate(keep)]
        return [EncodedCorpus.from_docbatch(part, [chunk[i].title for i in keep], labels)]
    return []


# ---- the papers file of a shard or index (`{"paper_id", "title", "sentences"[, "labels"]}` a line) ----
def write_index_papers(path: Path, paper_ids, titles, sentences, labels=None) -> None:
    """One record a paper (`index_paper_records`), written atomically."""
    write_jsonl(path, index_paper_records(paper_ids, titles, sentences, labels))


def index_paper_records(paper_ids, titles, sentences, labels=None) -> Iterable[dict]:
    """One record a paper: paper_id, title, sentences, and `labels` (one a sentence) where known. ValueError when the
    lists differ in length (zip wrote only the papers of the shortest, and dropped the others unsaid)."""
    labels = labels or [None] * len(paper_ids)
    sizes = [len(paper_ids), len(titles), len(sentences), len(labels)]
    if len(set(sizes)) > 1:
        raise ValueError(f"paper records need one entry a paper: {sizes[0]} paper ids, {sizes[1]} titles, "
                         f"{sizes[2]} sentence lists and {sizes[3]} label lists")
    return ({"paper_id": p, "title": t, "sentences": s, **({"labels": lab} if lab is not None else {})}
            for p, t, s, lab in zip(paper_ids, titles, sentences, labels))


def in_line_order(rejected: Sequence[dict]) -> list[dict]:
    """Rejected records (`read_corpus`'s and `encode_corpus`'s of one file) as one list in input-line order: by
    `"line"`, records without one after those with one, each group in the order given (a stable sort). The reader's
    rejections were written first and the encoding's after them, so rejected.jsonl was not in line order."""
    return sorted(rejected, key=lambda r: (r.get("line") is None, r.get("line") or 0))


def describe_rejected(rejected: Sequence[dict], shown: int = 5) -> str:
    """`: why` for the first `shown` rejected records (line, paper id, reason), then how many more."""
    parts = []
    for record in rejected[:shown]:
        where = [f"line {record['line']}"] if record.get("line") is not None else []
        where += [f"paper {record['paper_id']!r}"] if record.get("paper_id") is not None else []
        parts.append(f"{' '.join(where) or 'a record'}: {record.get('reason', 'no reason recorded')}")
    more = f"; and {len(rejected) - shown} more" if len(rejected) > shown else ""
    return (": " + "; ".join(parts) + more) if parts else ""


class CorpusPapers(list):
    """`read_corpus`'s papers: a list of `Paper` that holds each one's line in the input file (`lines`), so that
    `encode_corpus` names the line of a paper it rejects as `read_corpus` names its own.

    Slicing, `copy` (and `copy.copy`, `copy.deepcopy`, pickling), and the edits that move or drop papers (`sort`,
    `reverse`, `pop`, `remove`, `del`, `clear`, `*=`) keep `lines` in step; the edits that put in papers
    (`append`, `extend`, `insert`, `+=`, item and slice assignment) raise TypeError, as the new papers have no line
    (they left `lines` out of step: a rejected record named another paper's line). Build a new
    `CorpusPapers(papers, lines)`, or take `list(papers)` (no lines)."""

    def __init__(self, papers: Iterable[Paper] = (), lines: Iterable[int] = ()) -> None:
        super().__init__(papers)
        self.lines = list(lines)
        if len(self.lines) != len(self):
            raise ValueError(f"{len(self.lines)} input lines for {len(self)} papers")

    def __getitem__(self, item):
        if isinstance(item, slice):
            return CorpusPapers(super().__getitem__(item), self.lines[item])
        return super().__getitem__(item)

    def __reduce__(self):  # pickling and copying rebuild it through __init__ (list's way appends the items)
        return CorpusPapers, (list(self), list(self.lines))

    def copy(self) -> "CorpusPapers":
        return CorpusPapers(self, self.lines)

    def _no_line(self, edit: str):
        raise TypeError(f"CorpusPapers.{edit} would put in papers without an input line (CorpusPapers keeps each "
                        "paper's line): build a new CorpusPapers(papers, lines), or edit list(papers)")

    def append(self, paper) -> None:
        self._no_line("append")

    def extend(self, papers) -> None:
        self._no_line("extend")

    def insert(self, index, paper) -> None:
        self._no_line("insert")

    def __iadd__(self, papers):
        self._no_line("__iadd__ (+=)")

    def __setitem__(self, item, value) -> None:
        self._no_line("__setitem__ (item assignment)")

    def __imul__(self, n):
        super().__imul__(n)
        self.lines *= n
        return self

    def __delitem__(self, item) -> None:
        super().__delitem__(item)
        del self.lines[item]

    def pop(self, index=-1):
        paper = super().pop(index)
        self.lines.pop(index)
        return paper

    def remove(self, paper) -> None:
        del self[self.index(paper)]

    def clear(self) -> None:
        super().clear()
        self.lines.clear()

    def reverse(self) -> None:
        super().reverse()
        self.lines.reverse()

    def sort(self, *, key=None, reverse: bool = False) -> None:
        """Sort the papers (as `list.sort`: stable, by `key(paper)`) and their lines with them."""
        order = sorted(range(len(self)), key=(lambda i: key(list.__getitem__(self, i))) if key is not None
                       else (lambda i: list.__getitem__(self, i)), reverse=reverse)
        papers, lines = [list.__getitem__(self, i) for i in order], [self.lines[i] for i in order]
        list.__setitem__(self, slice(None), papers)
        self.lines = lines


def read_corpus(path: str | Path, config: EncodeConfig | None = None) -> tuple[CorpusPapers, list[dict]]:
    """Papers from a JSONL papers file (`aspire.data.papers.read_papers` rules, with the per-paper
    limits of `config`), as a `CorpusPapers` (a list that knows each paper's line), and every record that could not
    be read as `{"line", "paper_id", "reason"}`."""
    config = config or EncodeConfig()
    result = read_papers(path, skip_bad=True, max_sentences=config.max_sentences or None,
                         max_sentence_chars=config.max_sentence_chars or None,
                         max_line_bytes=config.max_line_bytes or None)
    rejected = [{"line": r.line, "paper_id": r.paper_id, "reason": r.reason} for r in result.rejected]
    return CorpusPapers(result.papers, result.paper_lines), rejected
