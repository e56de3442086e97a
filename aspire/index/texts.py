"""The papers file of an index (`papers.jsonl`): ids, titles and labels in memory, sentence texts in
memory or read from the file when they are needed.

Sentence texts are the largest part of a loaded index's memory (about 2.9 KB an abstract as Python
strings and lists, against 0.4 KB of IVF-PQ codes; experiments/results/bench_million.md). Search needs them
only to show the k hits and to build a query from an indexed paper, so a large index keeps them on disk:
`SentencesOnDisk` maps the file and decodes one paper's record when it is asked for. `texts="auto"` does this
when the file is larger than `TEXTS_ON_DISK_BYTES`; `"memory"` and `"disk"` force one or the other.
"""

from __future__ import annotations

import mmap
import operator
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from aspire.index.disk import IndexFormatError
from aspire.io import UTF8_BOM, loads_unique

TEXTS_ON_DISK_BYTES = 64 << 20  # papers.jsonl above this (about 60k abstracts) keeps sentence texts on disk
TEXTS = ("auto", "memory", "disk")
JSON_WHITESPACE = b" \t\r\n"  # a blank line holds only these (JSON's whitespace)


class SentencesOnDisk(Sequence):
    """`sentences[p]` of an index read from `papers.jsonl` on demand; `starts[p]` is the byte offset of
    paper p's line and `starts[-1]` the end of the last one. The file is memory-mapped, so an index generation
    removed by a later save stays readable for as long as this object lives. A file changed after it was read (a
    line that is no longer the record of paper `ids[p]`, bytes other than those read (`crcs[p]`, the CRC-32 of
    bytes `starts[p]:starts[p+1]` when they were read: a rewrite in place of the same size is seen through the map),
    or one cut off by a truncation, which would crash the process with SIGBUS when read through the map) raises
    IndexFormatError naming it."""

    def __init__(self, path: str | Path, starts: np.ndarray, ids: Sequence[str] | None = None,
                 crcs: Sequence[int] | None = None) -> None:
        self.path = Path(path)
        self._starts = np.asarray(starts, dtype=np.int64)
        self._ids = None if ids is None else list(ids)
        if self._ids is not None and len(self._ids) != len(self._starts) - 1:
            raise ValueError(f"{self.path}: {len(self._ids)} paper ids for {len(self._starts) - 1} line offsets")
        self._crcs = None if crcs is None else np.asarray(crcs, dtype=np.uint32)
        if self._crcs is not None and self._crcs.shape != (len(self._starts) - 1,):
            raise ValueError(f"{self.path}: {self._crcs.shape} line checksums for {len(self._starts) - 1} line offsets")
        with self.path.open("rb") as handle:
            size = self.path.stat().st_size
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        if len(self._starts) == 0 or self._starts[-1] > size:
            raise IndexFormatError(f"{self.path}: line offsets do not fit the file ({size} bytes)")

    def __len__(self) -> int:
        return len(self._starts) - 1

    @property
    def nbytes(self) -> int:
        """The bytes of the papers' lines, as mapped (`path` may be gone: a later save removes its generation)."""
        return int(self._starts[-1] - self._starts[0]) if len(self) else 0

    def __getitem__(self, item):
        if isinstance(item, slice):
            return [self[i] for i in range(*item.indices(len(self)))]
        i = operator.index(item)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"paper position {item} out of range for {n} papers")
        start, end = int(self._starts[i]), int(self._starts[i + 1])
        size = self._map.size() if isinstance(self._map, mmap.mmap) else len(self._map)  # the file's size now
        if end > size:  # reading past the end of a mapped file is a SIGBUS, not an exception
            raise IndexFormatError(f"{self.path}: paper position {i} ends at byte {end}, but the file now holds "
                                   f"{size} bytes (it was truncated after it was read)")
        line = self._map[start:end]
        try:
            record = _line_record(line)  # as `read_index_papers` parsed it
            problem = record_problem(record["paper_id"], record["title"], record["sentences"], record.get("labels"))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:  # ValueError: not UTF-8 or
            problem = f"{type(err).__name__}: {err}"  # JSON, a key twice, a bare NaN, an int of over 4300 digits
        if problem is None and self._ids is not None and record["paper_id"] != self._ids[i]:
            problem = f"paper_id {record['paper_id']!r}, not {self._ids[i]!r}"
        if problem is None and self._crcs is not None and zlib.crc32(line) != int(self._crcs[i]):  # same id, other bytes
            problem = f"CRC-32 {zlib.crc32(line):08x}, read {int(self._crcs[i]):08x}"
        if problem is not None:
            raise IndexFormatError(f"{self.path}: bytes {start}-{end} (paper position {i}) are no longer the record "
                                   f"read there: the file changed after it was read ({problem})")
        return record["sentences"]

    def __repr__(self) -> str:
        return f"SentencesOnDisk({str(self.path)!r}, {len(self)} papers)"


def read_index_papers(path: str | Path, texts: str = "memory"):
    """(paper ids, titles, sentences, labels or None) per paper, as `write_index_papers` wrote them,
    streaming; `sentences` is a list (`texts="memory"`) or a `SentencesOnDisk` (`"disk"`; `"auto"` by size).
    A line that is not a UTF-8 JSON record with paper_id, title and sentences of the types written
    (`record_problem`), that starts with a byte-order mark (one is skipped before the first line only, as
    `aspire.io.iter_jsonl` skips it), that holds a key twice or a bare NaN, Infinity or -Infinity (the strict JSONL
    writer writes neither), or whose paper_id an earlier line holds, raises IndexFormatError naming it (an integer id
    was not found by its string, which search looks up; a repeated one hid the earlier paper from every lookup by id)."""
    if texts not in TEXTS:
        raise ValueError(f"unknown texts={texts!r}; valid: {list(TEXTS)}")
    path = Path(path)
    on_disk = texts == "disk" or (texts == "auto" and path.stat().st_size > TEXTS_ON_DISK_BYTES)
    ids, titles, sentences, labels, starts, pos = [], [], [], [], [], 0
    crcs: list[int] = []  # CRC-32 of each paper's bytes starts[p]:starts[p+1] (its line and the blank ones after it)
    first_line: dict[str, int] = {}
    with path.open("rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            start, pos = pos, pos + len(raw)
            if lineno == 1 and raw.startswith(UTF8_BOM):  # skipped as `iter_jsonl` skips it; on a later line it is
                raw, start = raw[3:], 3  # refused as that reader refuses it (JSONDecodeError: Unexpected UTF-8 BOM)
            if not raw.strip(JSON_WHITESPACE):  # bytes.strip() took a form feed for blank: the line was skipped
                if on_disk and crcs:
                    crcs[-1] = zlib.crc32(raw, crcs[-1])
                continue  # here and then read as part of the paper before it by `SentencesOnDisk` (JSONDecodeError)
            try:
                record = _line_record(raw)
                paper_id, title, sents = record["paper_id"], record["title"], record["sentences"]
            except (ValueError, KeyError, TypeError, RecursionError) as err:  # ValueError: not UTF-8 or JSON, a key
                # twice or a bare NaN / Infinity (aspire's writers write neither), an int of over 4300 digits
                raise IndexFormatError(f"{path}:{lineno}: not an index paper record ({type(err).__name__}: {err})") from None
            problem = record_problem(paper_id, title, sents, record.get("labels"))
            if problem is None and paper_id in first_line:
                problem = f"paper_id {paper_id!r} repeats line {first_line[paper_id]}'s"
            if problem is not None:
                raise IndexFormatError(f"{path}:{lineno}: not an index paper record ({problem})")
            first_line[paper_id] = lineno
            ids.append(paper_id)
            titles.append(title)
            labels.append(record.get("labels"))
            if not on_disk:
                sentences.append(sents)
            starts.append(start)
            if on_disk:
                crcs.append(zlib.crc32(raw))
    if on_disk:
        sentences = SentencesOnDisk(path, np.array(starts + [pos], dtype=np.int64), ids, crcs)
    return ids, titles, sentences, labels


def _line_record(raw: bytes):
    """The JSON value of one papers.jsonl line, its bytes decoded as UTF-8 (`json.loads` of the bytes also took
    UTF-16, a byte-order mark on any line and encoded surrogates), a key twice or a bare NaN refused (`loads_unique`).
    """
    return loads_unique(raw.decode("utf-8"), finite=True)


def record_problem(paper_id, title, sentences, labels) -> str | None:
    """What is wrong with an index paper record's fields, or None: paper_id a non-empty string, title a string,
    sentences a list of strings, labels absent / null or a list of strings, one a sentence."""
    if not isinstance(paper_id, str) or not paper_id:
        return f"paper_id must be a non-empty string, got {type(paper_id).__name__} {paper_id!r}"
    if not isinstance(title, str):
        return f"paper {paper_id!r}: title must be a string, got {type(title).__name__}"
    if not isinstance(sentences, list) or not all(isinstance(t, str) for t in sentences):
        return f"paper {paper_id!r}: sentences must be a list of strings"
    if labels is not None and (not isinstance(labels, list) or not all(isinstance(x, str) for x in labels)):
        return f"paper {paper_id!r}: labels must be a list of strings"
    if labels is not None and len(labels) != len(sentences):  # else a facet query picks sentences by others' labels
        return f"paper {paper_id!r}: {len(labels)} labels for {len(sentences)} sentences (one label a sentence)"
    return None
