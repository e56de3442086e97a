"""`SentenceIndex`: every sentence vector of a corpus in faiss, with paper/sentence offsets.

On disk an index is a directory holding generations and a pointer to the live one:

    DIR/CURRENT                 one line: the name of the live generation, e.g. "gen-000002"
    DIR/gen-000002/manifest.json    format version, model fingerprint, sizes, file list (written last)
                  /config.yaml      the resolved IndexBuildConfig
                  /sentences.faiss  the faiss index over all sentence vectors (L2)
                  /vectors.npy      (N, D) sentence vectors in `index.vector_dtype` (re-scoring, OT, explanations)
                  /offsets.npy      (P + 1,) paper p owns sentence rows offsets[p]:offsets[p+1]
                  /papers.jsonl     paper_id, title, sentences (and facet labels, where known) per paper
                  /rejected.jsonl   input records that were not indexed, with reasons
                  /bm25.*           BM25 over each paper's title + abstract (bm25s files; `aspire.index.lexical`),
                                    unless `index.store_bm25` is off; the manifest records its k1, b, stop words and normalisation

Saving writes a complete new generation in a temporary directory (`begin_generation`; the manifest
last, `write_manifest`), renames it into place and only then replaces CURRENT (an atomic rename,
`publish_generation`), so an interrupted save leaves the previous index loadable;
`aspire.index.stream` fills a generation the same way, shard by shard. A save holds DIR/.lock (`aspire.index.disk.index_lock`): a second writer fails at once.
The manifest records every file's size and SHA-256; loading checks them (`aspire.index.disk`:
sizes always, checksums of files up to 64 MiB, all with `verify=True`) and confines every path
to DIR. An index saved before the BM25 files existed (or without them) has no `bm25` manifest entry
and still loads; its BM25 is then built when first searched (`aspire.index.lexical.stored_bm25`, with a log line).
An index whose manifest holds a version-1 model fingerprint (16 hex digits, built before 2026-11-30) is searched by
an encoder whose version-1 fingerprint matches it, with a warning (`SentenceIndex.check_model`;
`aspire.index.fingerprint`).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Sequence

import faiss
import numpy as np
import torch

from aspire._version import __version__
from aspire.batch import DocBatch
from aspire.config import ConfigError, load_config, save_config
from aspire.index.ann import (  # noqa: F401 (resolve_kind: re-exported)
    NonFiniteVectors,
    add_vectors,
    build_faiss,
    faiss_bytes,
    faiss_kind,
    nonfinite_rows,
    read_faiss,
    resolve_kind,
)
from aspire.index.config import IndexBuildConfig
from aspire.index.corpus import (
    WHOLE_FILE,
    EncodedCorpus,
    describe_rejected,
    first_occurrences,
    gather_docbatch,
    paper_positions,
    paper_rows,
    prefetch_rows,
    repeated_id,
    write_index_papers,
)
from aspire.index.disk import (
    GENERATION,
    IndexFormatError,
    check_files,
    check_index_dir,
    clear_leftovers,
    confined,
    file_sha256,
    index_lock,
    require_live_generation,
)
from aspire.index.disk import live_generation as _live_generation
from aspire.index.fingerprint import check_fingerprint
from aspire.index.lexical import index_bm25, title_is_sentence_0
from aspire.index.texts import SentencesOnDisk, read_index_papers
from aspire.io import finite_dumps, loads_unique, read_jsonl, write_jsonl, write_text
from aspire.scoring.lexical import FILES as LEXICAL_FILES
from aspire.scoring.lexical import BM25Index, check_normalization
from aspire.storage import check_free_space, on_disk_full

FORMAT_VERSION = 1
_FILES = ("config.yaml", "sentences.faiss", "vectors.npy", "offsets.npy", "papers.jsonl", "rejected.jsonl")
BM25_FILES = tuple(LEXICAL_FILES.values())
MANIFEST_COUNTS = ("n_papers", "n_sentences", "dim", "n_rejected", "vector_dtype")  # what a manifest says of its files


class SentenceIndex:
    """Sentence vectors of P papers in a faiss index plus the exact vectors and offsets.

    Attributes:
        faiss_index: L2 index whose row r is sentence vector r.
        vectors: (N, D) sentence vectors, in `config.index.vector_dtype` (float16: rounded; faiss is built from the float32
            ones) (a read-only memory map after `load`).
        offsets: (P + 1,) int64; paper p owns rows offsets[p]:offsets[p + 1].
        paper_ids, titles, sentences: per paper, in row order (`sentences` read from papers.jsonl on demand
            when loaded with texts on disk: `aspire.index.texts`).
        labels: per paper, its sentences' facet labels (`Paper.labels`) or None.
        rejected: input records that were not indexed, with reasons (accumulated over adds).
        config: the resolved build config; kind: the faiss structure actually built.
        model_fingerprint, model_name: the encoder that produced the vectors.
        bm25: the BM25 index over the papers (`BM25Index`, ids = positions), or None until saved or loaded.
        whole: (P, D) the papers' whole-abstract vectors from the encoder's pass (`whole.npy`), or None for an
            index built before the one-pass encoding (the hybrid re-ranker needs them).
        include_title: whether the encoder made a paper's title its sentence 0 (`include_title`; a blank title
            is no sentence), as the manifest records it; None for an index saved before it did (`title_first`).
    """

    def __init__(self, faiss_index, vectors, offsets, paper_ids, titles, sentences, rejected,
                 config: IndexBuildConfig, kind: str, model_fingerprint: str, model_name: str,
                 labels: Sequence[list[str] | None] = (), bm25=None, whole: np.ndarray | None = None,
                 include_title: bool | None = None) -> None:
        offsets = np.asarray(offsets)
        if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or len(offsets) == 0:  # a float one was cast unsaid
            raise IndexFormatError(f"inconsistent index: offsets.npy holds {offsets.dtype} of shape {offsets.shape}, "
                                   "not (P + 1,) integers")
        if vectors.ndim != 2 or vectors.dtype.kind != "f" or vectors.shape[1] != faiss_index.d:
            raise IndexFormatError(f"inconsistent index: vectors.npy holds {vectors.dtype} of shape {vectors.shape}, "
                                   f"not (N, D) floats of the faiss index's dimension {faiss_index.d}")
        self.faiss_index = faiss_index
        self.vectors = vectors
        self.offsets = offsets.astype(np.int64)
        self.paper_ids = list(paper_ids)
        self.titles = list(titles)
        self.sentences = sentences if isinstance(sentences, SentencesOnDisk) else [list(s) for s in sentences]
        self.labels = list(labels) or [None] * len(self.paper_ids)
        self.rejected = list(rejected)
        self.config = config
        self.kind = kind
        self.model_fingerprint = model_fingerprint
        self.model_name = model_name
        self.bm25 = bm25
        self.whole = whole
        self.include_title = include_title
        self._title_guess: bool | None = None
        self._positions: dict[str, int] | None = None
        self._row_papers: np.ndarray | None = None
        self._squared_norms: np.ndarray | None = None
        self._whole_norms: np.ndarray | None = None
        if faiss_index.ntotal != len(vectors) or self.offsets[-1] != len(vectors):
            raise IndexFormatError(
                f"inconsistent index: faiss holds {faiss_index.ntotal} vectors, vectors.npy "
                f"{len(vectors)}, offsets end at {self.offsets[-1]}"
            )
        if self.offsets[0] != 0 or (np.diff(self.offsets) <= 0).any():  # else rows were credited to other papers
            raise IndexFormatError(f"inconsistent index: offsets.npy does not start at row 0 and rise by at least one "
                                   f"sentence a paper (it starts {self.offsets[:5].tolist()})")
        if len(self.positions) != self.n_papers:  # else `position` found only the last and the others hid behind it
            raise ValueError(f"inconsistent index: {repeated_id(self.paper_ids)}")
        counts = {len(self.offsets) - 1, len(self.titles), len(self.sentences), len(self.labels)}
        if counts != {self.n_papers}:  # else sentence rows were credited to the papers beside theirs, unsaid
            raise IndexFormatError(f"inconsistent index: offsets.npy describes {len(self.offsets) - 1} papers, "
                                   f"papers.jsonl holds {self.n_papers} ids, {len(self.titles)} titles, "
                                   f"{len(self.sentences)} sentence lists and {len(self.labels)} label lists")
        lengths = np.diff(self.offsets).tolist()
        wrong = [] if isinstance(self.sentences, SentencesOnDisk) else [  # (texts on disk: read when asked for)
            p for p, (texts, n) in enumerate(zip(self.sentences, lengths)) if len(texts) != n]
        if wrong:  # else a hit's explanation showed another sentence's text
            raise IndexFormatError(f"inconsistent index: {len(wrong)} paper(s) have another number of sentence texts in "
                                   f"papers.jsonl than of rows in offsets.npy (e.g. {self.paper_ids[wrong[0]]!r}: "
                                   f"{len(self.sentences[wrong[0]])} texts, {lengths[wrong[0]]} rows)")
        if whole is not None and (whole.shape != (self.n_papers, self.dim) or whole.dtype.kind != "f"):
            raise IndexFormatError(f"inconsistent index: whole.npy holds {whole.dtype} of shape {whole.shape}, not one "
                                   f"vector of dimension {self.dim} for each of {self.n_papers} papers")

    # ---- construction -----------------------------------------------------------------------------
    @classmethod
    def build(cls, corpus: EncodedCorpus, config: IndexBuildConfig, model_fingerprint: str,
              model_name: str = "", include_title: bool | None = None) -> "SentenceIndex":
        """Index an encoded corpus with the faiss structure `config.index` asks for; a paper id the corpus
        repeats goes to `rejected` (the first one is indexed, as `EncodedCorpus.concat` keeps it).
        `include_title`: the encoder's (`encoder_include_title`), recorded in the manifest."""
        keep, dupes = first_occurrences(corpus.paper_ids)
        if dupes:  # else papers.jsonl repeats the id: the index would save but never load again
            corpus = corpus.subset(keep)
        if len(corpus) == 0:
            raise ValueError(f"nothing to index: all {len(corpus.rejected)} records were rejected"
                             + describe_rejected(corpus.rejected))
        try:  # `build_faiss` checks the vectors for NaN and infinity (the one pass); the error names the papers
            faiss_index, kind = build_faiss(corpus.vectors, config.index)
        except NonFiniteVectors:  # met in the IVF training sample or one batch: every such row is named, with its paper
            rows = nonfinite_rows(np.asarray(corpus.vectors))  # (an error path: a second pass costs nothing that counts)
            papers = [corpus.paper_ids[p] for p in np.unique(np.searchsorted(corpus.offsets, rows, side="right") - 1)]
            raise ValueError(f"{len(rows)} sentence vector(s) of the corpus hold NaN or infinite values (rows "
                             f"{rows[:10].tolist()}{' ...' if len(rows) > 10 else ''}) of {len(papers)} paper(s) "
                             f"{papers[:10]}; an index cannot rank them: re-encode those papers") from None
        with np.errstate(over="ignore"):  # a value past float16's range: refused by `unstorable`, naming its paper
            vectors = np.ascontiguousarray(corpus.vectors, dtype=config.index.vector_dtype)
            whole = None if corpus.whole is None else np.ascontiguousarray(corpus.whole, dtype=config.index.vector_dtype)
        error = unstorable(corpus.paper_ids, corpus.offsets, corpus.vectors, vectors,
                           None if whole is None else (corpus.whole, whole), "the corpus")
        if error is not None:
            raise error
        return cls(faiss_index, vectors, corpus.offsets, corpus.paper_ids, corpus.titles, corpus.sentences,
                   corpus.rejected + dupes, config, kind, model_fingerprint, model_name, corpus.labels, whole=whole,
                   include_title=include_title)

    def add(self, corpus: EncodedCorpus, model_fingerprint: str, legacy: str | None = None) -> "SentenceIndex":
        """Add newly encoded papers (in place); ids already indexed, and an id the corpus repeats (after its
        first paper), go to `rejected`.

        Raises ModelMismatchError when `model_fingerprint` (or, for an index built before fingerprint version 2,
        `legacy`) differs from the index's (`check_model`).
        """
        self.check_model(model_fingerprint, legacy)
        if len(corpus) and corpus.dim != self.dim:
            raise ValueError(f"new vectors have dimension {corpus.dim}, the index {self.dim}")
        keep, dupes = first_occurrences(corpus.paper_ids, self.positions)
        new = corpus.subset(keep)  # the papers added: a rejected duplicate's vectors are not checked, as `build` skips them
        if keep and self.whole is not None and new.whole is None:  # dropped for every paper, then blamed on the build
            raise ValueError(f"the index stores whole-abstract vectors and the {len(keep)} new paper(s) come without "
                             f"them (e.g. {new.paper_ids[0]}): encode them with an encoder that returns them (one pass "
                             "gives both), or every paper's would be dropped")
        if keep:
            with np.errstate(over="ignore"):  # refused by `unstorable`, naming the paper
                stored = new.vectors.astype(self.vectors.dtype)
                whole = None if self.whole is None else new.whole.astype(self.whole.dtype)
            error = unstorable(new.paper_ids, new.offsets, new.vectors, stored,
                               None if whole is None else (new.whole, whole), "the new papers")
            if error is not None:  # before faiss's lists change: a refusal leaves the index as it was
                raise error
            try:  # one batch: `add_vectors` checks it for NaN and infinity before adding any of it (the one pass)
                add_vectors(self.faiss_index, new.vectors, batch=len(new.vectors))
            except ValueError:
                bad = sorted({new.paper_ids[int(np.searchsorted(new.offsets, r, side="right")) - 1]
                              for r in nonfinite_rows(np.asarray(new.vectors))})
                if bad:  # nothing has changed: faiss would leave these papers out of every ranking
                    raise ValueError(f"{len(bad)} new paper(s) have NaN or infinite sentence vectors, e.g. {bad[:10]}; "
                                     "an index cannot rank them: re-encode those papers") from None
                raise
        self.rejected += corpus.rejected + dupes
        if not keep:
            return self
        self.vectors = np.concatenate([np.asarray(self.vectors), stored])
        self.whole = (None if self.whole is None  # an index keeps whole vectors only for all
                      else np.concatenate([np.asarray(self.whole), whole]))
        self.offsets = np.concatenate([self.offsets, self.offsets[-1] + new.offsets[1:]])
        self.paper_ids += new.paper_ids
        self.titles += new.titles
        self.sentences = list(self.sentences) + new.sentences
        self.labels += new.labels
        self._positions, self.bm25, self._title_guess = None, None, None  # BM25 is rebuilt over all papers when saved
        return self

    # ---- views --------------------------------------------------------------------------------------
    @property
    def n_papers(self) -> int:
        return len(self.paper_ids)

    @property
    def n_sentences(self) -> int:
        return int(self.offsets[-1])

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def positions(self) -> dict[str, int]:
        """paper_id -> position (row order)."""
        if self._positions is None:
            self._positions = {pid: i for i, pid in enumerate(self.paper_ids)}
        return self._positions

    def position(self, paper_id: str) -> int:
        """The row of `paper_id`, matched as the exact string; a KeyError for one not indexed names an indexed id that
        is the same text in another Unicode form or without surrounding spaces, where one is (`é` typed as `e` and a
        combining accent once read as an unknown paper, with nothing said)."""
        if paper_id not in self.positions:
            near = _same_text(paper_id, self.positions) if isinstance(paper_id, str) else None
            hint = f"; the index holds {near!r}, the same text written otherwise: give that id" if near else ""
            raise KeyError(f"paper {paper_id!r} is not in the index ({self.n_papers} papers){hint}")
        return self.positions[paper_id]

    def title_first(self, position: int) -> bool:
        """Whether the paper at `position` stores its title as sentence 0: with the recorded `include_title` and a
        title that is not blank. An index whose manifest does not record the setting is judged once from all its
        texts (`aspire.index.lexical.title_is_sentence_0`), as its BM25 is, so the two read a paper alike."""
        include_title = self.include_title
        if include_title is None:
            if self._title_guess is None:
                self._title_guess = title_is_sentence_0(self.titles, self.sentences)
            include_title = self._title_guess
        return include_title and bool(self.titles[position].strip())

    def check_model(self, model_fingerprint: str, legacy: str | None = None) -> None:
        """Raise ModelMismatchError unless the encoder with `model_fingerprint` built this index. `legacy`: the
        encoder's version-1 fingerprint (`ContextualSentenceEncoder.fingerprints`), which an index built before
        fingerprint version 2 records: it is taken with a warning, as that version does not cover the model config,
        the adapter's settings and the vocabulary."""
        check_fingerprint("the index", self.model_name, self.model_fingerprint, model_fingerprint, legacy)

    @property
    def row_papers(self) -> np.ndarray:
        """(N,) paper position of every sentence row."""
        if self._row_papers is None or len(self._row_papers) != self.n_sentences:
            self._row_papers = np.repeat(np.arange(self.n_papers, dtype=np.int64), np.diff(self.offsets))
        return self._row_papers

    @property
    def squared_norms(self) -> np.ndarray:
        """(N,) float32 squared L2 norm of every exact sentence vector (computed once)."""
        if self._squared_norms is None or len(self._squared_norms) != self.n_sentences:
            norms = np.empty(self.n_sentences, dtype=np.float32)
            for start in range(0, self.n_sentences, 65536):
                v = np.asarray(self.vectors[start : start + 65536], dtype=np.float32)
                norms[start : start + len(v)] = np.einsum("nd,nd->n", v, v)
            self._squared_norms = norms
        return self._squared_norms

    def whole_vectors(self, use: str) -> tuple[np.ndarray, np.ndarray]:
        """The (P, D) whole-abstract vectors and their (P,) L2 norms (computed once) for `use` (a stage's name);
        ValueError naming it for an index built before the one-pass encoding, which stores none."""
        if self.whole is None:
            raise ValueError(f"{use} needs the papers' whole-abstract vectors, which this index (built before the "
                             "one-pass encoding) does not store: rebuild it with `aspire index build`")
        if self._whole_norms is None or len(self._whole_norms) != self.n_papers:
            norms = np.empty(self.n_papers, dtype=np.float32)
            for start in range(0, self.n_papers, 65536):  # a memory map is read a block at a time
                block = np.asarray(self.whole[start : start + 65536], dtype=np.float32)
                norms[start : start + len(block)] = np.linalg.norm(block, axis=1)
            self._whole_norms = norms
        return self.whole, self._whole_norms

    def sentence_papers(self, rows: np.ndarray) -> np.ndarray:
        """Paper position of each sentence row (any shape); rows < 0 (no result) map to -1."""
        papers = np.searchsorted(self.offsets, rows, side="right") - 1
        return np.where(rows < 0, -1, papers)

    def gather(self, papers: Sequence[int] | np.ndarray, device=None, dtype: torch.dtype = torch.float32,
               texts: bool = True) -> DocBatch:
        """The papers at positions `papers (C,)` as a DocBatch `(C, S, D)` of exact vectors; `texts`: with sentence texts.
        Positions as `aspire.index.corpus.paper_positions` takes them (a negative one counts from the end); ValueError
        for a boolean mask, non-integer or out-of-range positions (a cast read True / False as 1 / 0 and 1.7 as 1)."""
        papers = paper_positions(papers, self.n_papers, "SentenceIndex.gather")
        sentences = [self.sentences[i] for i in papers.tolist()] if texts else ()
        return gather_docbatch(self.vectors, self.offsets, papers, [self.paper_ids[i] for i in papers.tolist()],
                               sentences, device=device, dtype=dtype, whole=self.whole)

    def gather_rows(self, papers: Sequence[int] | np.ndarray, device=None,
                    dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """The exact vectors of the papers at positions `papers (C,)`, unpadded, paper after paper:
        (vectors (n, D), lengths (C,) long); one read of the n rows (`gather` pads them into a DocBatch). Positions as
        `gather` takes them (`paper_positions`)."""
        papers = paper_positions(papers, self.n_papers, "SentenceIndex.gather_rows")
        rows, lengths = paper_rows(self.offsets, papers)
        prefetch_rows(self.vectors, self.offsets[papers], lengths)  # a memory map: every range asked for at once
        vectors = torch.from_numpy(np.take(np.asarray(self.vectors), rows, axis=0))  # (n, D), a memory map reads only these
        return vectors.to(device=device, dtype=dtype), torch.from_numpy(lengths).to(device)

    def search_sentences(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The `k` nearest indexed sentences of each query vector, one faiss call for all.

        Args: queries (n, D). Returns (dist (n, k) L2 distances, rows (n, k) sentence rows, -1 = none).
        """
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim or k < 1:  # faiss's own check: bare asserts (-O skips them)
            raise ValueError(f"search_sentences takes queries (n, {self.dim}) and k >= 1, got {queries.shape} and k={k}")
        k = min(k, self.n_sentences)
        params = None
        if self.kind == "hnsw":
            params = faiss.SearchParametersHNSW(efSearch=max(self.config.index.hnsw_ef_search, k))
        elif self.kind == "ivf":
            params = faiss.SearchParametersIVF(nprobe=self.config.index.ivf_nprobe)
        sq, rows = self.faiss_index.search(queries, k, params=params)  # squared L2 (n, k), rows (n, k)
        return np.sqrt(np.maximum(sq, 0.0)), rows

    # ---- disk ---------------------------------------------------------------------------------------
    def save(self, root: str | Path) -> Path:
        """Write a new generation under `root` and make it live atomically; returns its directory.

        The disk's free space is checked first against `saved_bytes` (DiskFullError before anything is
        written); a disk that fills up while writing is one DiskFullError too (`aspire.storage`), and on
        any failure the half-written generation is removed: the live one stays as it was.
        """
        with index_lock(root) as root:
            needed = self.saved_bytes()
            check_free_space(root, needed, "a new index generation (the live one stays)")
            tmp = begin_generation(root)
            try:
                with on_disk_full(root, "a new index generation (the live one stays)", needed):
                    self._write_generation(tmp)
                    return publish_generation(root, tmp)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise

    def saved_bytes(self) -> int:
        """About how many bytes a saved generation takes, at least: the exact vectors (the sentences' and the
        whole-abstract ones), the faiss index (`faiss_bytes`), the offsets and the texts (BM25 files, which are not
        known before they are built, are not counted)."""
        vectors = self.n_sentences * self.dim * np.dtype(np.asarray(self.vectors[:0]).dtype).itemsize
        if self.whole is not None:  # about an eighth more at 8 sentences a paper; once left out of the disk check
            vectors += self.n_papers * self.dim * np.dtype(np.asarray(self.whole[:0]).dtype).itemsize
        texts = (self.sentences.nbytes if isinstance(self.sentences, SentencesOnDisk)  # its file may be removed
                 else sum(len(t) for s in self.sentences for t in s))
        return vectors + faiss_bytes(self.faiss_index) + self.offsets.nbytes + texts + sum(map(len, self.titles))

    def _write_generation(self, path: Path) -> None:
        faiss.write_index(self.faiss_index, str(path / "sentences.faiss"))
        np.save(path / "vectors.npy", np.asarray(self.vectors))
        np.save(path / "offsets.npy", self.offsets)
        if self.whole is not None:
            np.save(path / WHOLE_FILE, np.asarray(self.whole))
        write_index_papers(path / "papers.jsonl", self.paper_ids, self.titles, self.sentences, self.labels)
        write_jsonl(path / "rejected.jsonl", self.rejected)
        search = self.config.search
        bm25 = None
        if self.config.index.store_bm25:
            if self.bm25 is None or (self.bm25.k1, self.bm25.b) != (search.bm25_k1, search.bm25_b):
                self.bm25 = index_bm25(self, search.bm25_k1, search.bm25_b)
            bm25 = self.bm25
        write_manifest(path, self.config, manifest_fields(self.faiss_index, self.kind, self.model_name,
                                                          self.model_fingerprint, self.dim, self.n_papers,
                                                          self.n_sentences, len(self.rejected),
                                                          np.asarray(self.vectors[:0]).dtype, self.include_title), bm25,
                       (WHOLE_FILE,) if self.whole is not None else ())

    @staticmethod
    def read_manifest(root: str | Path, verify: bool = False) -> dict:
        """The live generation's manifest, checked: present, JSON (no bare NaN / Infinity, no key twice), compatible
        format, every file inside the index with its recorded size and checksum (`aspire.index.disk.check_files`; all
        checksums with `verify`, else those of files up to 64 MiB)."""
        root = Path(root)
        gen = root / require_live_generation(root)
        if not confined(gen, gen / "manifest.json").is_file():
            raise IndexFormatError(f"{gen} is incomplete: no manifest.json")
        try:
            manifest = loads_unique((gen / "manifest.json").read_text(encoding="utf-8"), finite=True)
        except ValueError as err:  # not UTF-8, not JSON, a bare NaN (`write_manifest` refuses one), a key twice
            raise IndexFormatError(f"{gen}/manifest.json is corrupted: {err}") from None
        if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
            manifest = manifest if isinstance(manifest, dict) else {}
            raise IndexFormatError(
                f"{root} has index format version {manifest.get('format_version')!r} (written by aspire "
                f"{manifest.get('aspire_version')}); this aspire {__version__} reads version "
                f"{FORMAT_VERSION}. Rebuild the index."
            )
        lacking = [key for key in ("model_name", "model_fingerprint", "kind") if not isinstance(manifest.get(key), str)]
        if lacking:  # every writer records them (`manifest_fields`); a KeyError or AttributeError said nothing of where
            raise IndexFormatError(f"{gen}/manifest.json is damaged: it records no {', '.join(lacking)} (each a string)")
        whole = (WHOLE_FILE,) if WHOLE_FILE in (manifest.get("files") or {}) else ()
        check_files(gen, manifest, _FILES + whole + (BM25_FILES if "bm25" in manifest else ()), full=verify)
        manifest["path"] = str(gen)
        return manifest

    @classmethod
    def load(cls, root: str | Path, model_fingerprint: str | None = None, mmap: bool = True,
             verify: bool = False, texts: str = "auto", legacy: str | None = None) -> "SentenceIndex":
        """Load the live index under `root`; exact vectors are memory-mapped when `mmap`, sentence texts
        read from disk when needed with `texts="disk"` (`"auto"`: for a papers file over 64 MiB).

        Raises IndexFormatError for a missing/incomplete/corrupted/incompatible index (`verify`: check
        every file's checksum, see `read_manifest`) and ModelMismatchError when `model_fingerprint`
        is given and differs from the one the index was built with (`legacy`: the encoder's version-1 fingerprint,
        for an index built before version 2, as `check_model` takes it).
        """
        manifest = cls.read_manifest(root, verify=verify)
        gen = Path(manifest["path"])
        if model_fingerprint is not None:
            check_fingerprint(f"index {root}", manifest["model_name"], manifest["model_fingerprint"],
                              model_fingerprint, legacy)
        if not isinstance(manifest.get("include_title", False), bool):
            raise IndexFormatError(f"{gen}/manifest.json: include_title is {manifest['include_title']!r}, not true or false")
        config = read_config(gen)
        ids, titles, sentences, labels = read_index_papers(gen / "papers.jsonl", texts)
        bm25 = None
        if "bm25" in manifest:  # one saved before BM25 normalised with NFKC records no normalization: its texts are NFC
            try:
                bm25 = BM25Index.load(gen, [str(i) for i in range(len(ids))], manifest["bm25"].get("stopwords"),
                                      check_normalization(manifest["bm25"].get("normalization", "nfc"), gen / "manifest.json"))
            except (ValueError, KeyError, AttributeError) as err:
                raise IndexFormatError(f"{gen}: the stored BM25 index does not load: {err}") from None
        faiss_index = _load_faiss(gen, manifest["kind"])
        vectors, offsets = _load_array(gen, "vectors.npy", mmap), _load_array(gen, "offsets.npy", False)
        whole = _load_array(gen, WHOLE_FILE, mmap) if WHOLE_FILE in manifest["files"] else None
        rejected = read_jsonl(gen / "rejected.jsonl")
        try:
            index = cls(faiss_index, vectors, offsets, ids, titles, sentences, rejected, config, manifest["kind"],
                        manifest["model_fingerprint"], manifest["model_name"], labels, bm25, whole,
                        manifest.get("include_title"))
        except ValueError as err:  # files that disagree with each other: the message names them, this the generation
            raise IndexFormatError(f"{gen}: {err}") from None
        said = {key: manifest.get(key) for key in MANIFEST_COUNTS}
        held = dict(zip(MANIFEST_COUNTS, (index.n_papers, index.n_sentences, index.dim, len(index.rejected),
                                          str(np.asarray(index.vectors[:0]).dtype))))
        if said != held:  # every writer records what it wrote (`manifest_fields`): the manifest or a file was changed
            differ = ", ".join(f"{key} {said[key]!r} (the files hold {held[key]!r})" for key in MANIFEST_COUNTS
                               if said[key] != held[key])
            raise IndexFormatError(f"{gen}/manifest.json does not describe the files beside it: it records {differ}")
        return index


def read_config(gen: Path) -> IndexBuildConfig:
    """The generation `gen`'s config.yaml; IndexFormatError naming the file and the key when it fails its schema (a
    schema error named the key only, read by `aspire index info` and `add`, which said nothing of which file; a YAML
    error names the file itself)."""
    try:
        return load_config(IndexBuildConfig, gen / "config.yaml")
    except ConfigError as err:
        raise IndexFormatError(str(err) if f"{gen}/config.yaml" in str(err) else f"{gen}/config.yaml: {err}") from None


def _load_faiss(gen: Path, kind: str) -> faiss.Index:
    """The generation's sentences.faiss, of the `kind` its manifest records; IndexFormatError naming the file when
    it does not read as a faiss index (a file over 64 MiB is not checksummed at load) or holds another structure
    (then the search would ask it with the other kind's settings, or none: e.g. HNSW at faiss's efSearch 16)."""
    path = gen / "sentences.faiss"
    try:
        index = read_faiss(str(path))
    except RuntimeError as err:  # faiss's message names no file
        raise IndexFormatError(f"{path} does not read as a faiss index ({str(err).strip().splitlines()[-1]})") from None
    held = faiss_kind(index)
    if held != kind:
        raise IndexFormatError(f"{gen}/manifest.json records a {kind!r} index and {path} holds a "
                               f"{type(index).__name__} ({held or 'a structure an index never builds'}): the manifest "
                               "or the file was changed")
    return index


def _load_array(gen: Path, name: str, mmap: bool) -> np.ndarray:
    """The generation's array file `name` (memory-mapped when `mmap`); IndexFormatError naming it when it does not
    read as an array (a file cut short or overwritten, past a size check)."""
    try:
        return np.load(gen / name, mmap_mode="r" if mmap else None)
    except (OSError, ValueError, EOFError) as err:
        raise IndexFormatError(f"{gen / name} does not read as an array ({err})") from None


def begin_generation(root: Path) -> Path:
    """A new, empty temporary generation directory in `root` (hold its lock): `root` may hold only an
    index's own files; the generation's name is the next number. Fill it, then `publish_generation`."""
    check_index_dir(root)  # only an index's own files (and crash leftovers) may be there
    gens = [int(p.name[4:]) for p in root.glob("gen-*") if GENERATION.match(p.name)]  # ASCII digits, as the pointer
    tmp = root / f".tmp-gen-{max(gens, default=0) + 1:06d}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    return tmp


def publish_generation(root: Path, tmp: Path) -> Path:
    """Make the filled generation `tmp` (from `begin_generation`, its manifest written) live: rename it
    into place, then point CURRENT at it (an atomic rename) and remove every other generation. When
    CURRENT cannot be written (a full disk, an interrupt, a folder in its place), the new generation is removed again,
    the old one stays live and the error that stopped the write is the one raised."""
    name = tmp.name[len(".tmp-"):].rsplit("-", 1)[0]
    os.rename(tmp, root / name)
    try:
        _write_atomic(root / "CURRENT", name + "\n")
    except BaseException:  # an interrupt too (Ctrl-C): else a whole generation stayed behind, unlive, until a next save
        try:
            live = _live_generation(root)
        except IndexFormatError:  # CURRENT names no generation (a folder, say): its error hid this one, the new one left
            live = None
        except OSError:  # unreadable: whether it names the new generation is unknown; the next write clears it
            live = name
        if live != name:
            shutil.rmtree(root / name, ignore_errors=True)
        raise
    clear_leftovers(root, keep=name)  # previous generations and leftovers of interrupted saves
    return root / name


def manifest_fields(faiss_index, kind: str, model_name: str, fingerprint: str, dim: int, n_papers: int,
                    n_sentences: int, n_rejected: int, vector_dtype, include_title: bool | None = None) -> dict:
    """What a manifest says about an index besides its files (`include_title` None: not known, not written)."""
    fields = {"model_name": model_name, "model_fingerprint": fingerprint, "kind": kind,
              "faiss_index": type(faiss_index).__name__, "dim": int(dim), "n_papers": int(n_papers),
              "n_sentences": int(n_sentences), "n_rejected": int(n_rejected), "vector_dtype": str(np.dtype(vector_dtype))}
    return fields | ({"include_title": bool(include_title)} if include_title is not None else {})


def write_manifest(path: Path, config: IndexBuildConfig, fields: dict, bm25: BM25Index | None,
                   extra: tuple[str, ...] = ()) -> None:
    """Finish a generation whose `_FILES` other than config.yaml (and the `extra` files written beside them)
    are written: write its config and `bm25`'s files (None: no BM25 stored), flush every file to disk, then the
    manifest (last, atomically) with each file's size and SHA-256 (a NaN setting refused, naming its key)."""
    save_config(config, path / "config.yaml")
    files = _FILES + tuple(extra) + (tuple(bm25.save(path)) if bm25 is not None else ())
    for name in files:
        _fsync(path / name)
    manifest = {"format_version": FORMAT_VERSION, "aspire_version": __version__, **fields,
                "saved_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if bm25 is not None:
        manifest["bm25"] = {**bm25.settings(), "text": "title + sentences"}
    manifest["files"] = {name: (path / name).stat().st_size for name in files}
    manifest["sha256"] = {name: file_sha256(path / name) for name in files}
    _write_atomic(path / "manifest.json", finite_dumps(manifest, f"cannot write {path}/manifest.json:", indent=1) + "\n")


def unstorable(paper_ids: Sequence[str], offsets: np.ndarray, source: np.ndarray, stored: np.ndarray,
               whole: tuple[np.ndarray, np.ndarray] | None, what: str) -> ValueError | None:
    """The error for papers whose vectors as stored are not finite, or None: `stored` (N, D), the sentence vectors
    `source` cast to the index's `vector_dtype`, where a finite source value turned infinite is one past the dtype's
    range (float16: 65504; a source's own NaN or infinity is faiss's add's to refuse), and `whole` ((P, D) source,
    (P, D) as stored), the whole-abstract vectors, which nothing else checks (`unstorable_whole`). `what`: the
    vectors' source, for the message. Either once went to disk as infinity or NaN and came back as NaN distances in
    every re-ranking of those papers."""
    rows = nonfinite_rows(stored) if stored.dtype == np.float16 else np.zeros(0, dtype=np.int64)
    rows = rows[np.isfinite(np.asarray(source[rows])).all(axis=1)]
    sentence_papers = np.unique(np.searchsorted(offsets, rows, side="right") - 1)
    parts = []
    if len(sentence_papers):
        parts.append(f"the sentence vectors of {len(sentence_papers)} paper(s) ({[paper_ids[p] for p in sentence_papers[:10]]}) "
                     f"hold values past float16's range (65504): set index.vector_dtype=float32")
    said = unstorable_whole(paper_ids, *whole) if whole is not None else None
    if said is not None:
        parts.append(said)
    return ValueError(f"{what}: " + "; ".join(parts)) if parts else None


def unstorable_whole(paper_ids: Sequence[str], source: np.ndarray, stored: np.ndarray) -> str | None:
    """What is wrong with the whole-abstract vectors `stored (P, D)` (`source (P, D)` cast to the index's
    `vector_dtype`) of the papers `paper_ids (P,)`, naming them, or None when every one is finite as stored: a source
    vector holding NaN or infinity (re-encode the paper), and a finite one past float16's range (65504), stored as
    infinity (store float32). The in-RAM build, `add` (`unstorable`) and the streamed merge
    (`aspire.index.stream`) refuse them in these words."""
    bad = nonfinite_rows(stored)
    if not len(bad):
        return None
    finite = np.isfinite(np.asarray(source[bad])).all(axis=1)
    parts = []
    for rows, problem in ((bad[~finite], "hold NaN or infinite values: re-encode those papers"),
                          (bad[finite], "hold values past float16's range (65504): set index.vector_dtype=float32")):
        if len(rows):
            parts.append(f"the whole-abstract vectors of {len(rows)} paper(s) ({[paper_ids[p] for p in rows[:10].tolist()]}) "
                         f"{problem}")
    return "; ".join(parts)


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _write_atomic(path: Path, text: str) -> None:
    write_text(path, text, fsync=True)


def _same_text(paper_id: str, ids) -> str | None:
    """An id of `ids` that reads as `paper_id` once both are in Unicode's NFC form and stripped of surrounding
    whitespace, or None (read only when `paper_id` is not among them)."""
    import unicodedata

    key = unicodedata.normalize("NFC", paper_id).strip()
    return next((i for i in ids if isinstance(i, str) and unicodedata.normalize("NFC", i).strip() == key), None)
