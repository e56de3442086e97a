"""Papers: the unit of input, read from and written to JSONL.

`Paper` holds an id, a title and the abstract as a list of sentences. `read_papers(path)` reads a
JSONL file of papers and accounts for every line: each becomes a `Paper`, a `RejectedRecord`
(file, line, paper id if known, reason) or a blank line. Without `skip_bad` the first bad record
raises `BadRecordError` (a `ValueError`) naming the file and line; with `skip_bad=True` every bad
record is listed in `ReadResult.rejected` and reading goes on. `iter_papers` streams the same
records for files too big to hold. `paper_from_record` applies the same rules to one record (a dict),
and `as_papers` makes Papers of Papers, records or plain abstract strings (what `encoder.encode` takes).

Record rules (one JSON object a line):
- The file is read as bytes and each line decoded as UTF-8 on its own, so an undecodable byte is
  reported with its line. A UTF-8 byte-order mark at the very start of the file is ignored. Files
  ending in `.gz` are read through gzip (and `write_papers` writes them so). Lines end at `\\n`; a trailing
  `\\r` is whitespace.
- A damaged file is not a bad record but an error for the whole file (`DataError` naming it): a `.gz` file
  that is not gzip (an empty one included), a gzip file whose name does not end in `.gz` (its magic bytes 1f 8b: the name decides how
  a file is read, and a mismatch is refused), a gzip stream that ends early (a truncated copy) or fails its
  check. It is raised where the damage is met, after the lines before it, so no reader takes the part read for
  the whole.
- Blank (whitespace-only) lines are not records: they are skipped and listed in `blank_lines`.
- `paper_id`: a non-blank string without whitespace, kept as given, or an integer (not a bool), converted with
  `str()`. Anything else is an error (a rejected id holding whitespace is recorded as given, as a rejected
  record's valid id is). Repeating the id of a paper already read (after conversion)
  is an error naming the line of its first occurrence; a rejected record does not claim its id.
- `title`: a string, possibly empty (it is context for the encoder, never a sentence to match).
- `abstract`: either a list of sentences, kept exactly as given (each must be a string with some
  non-whitespace character), or one string, split into sentences by the splitter (default
  `aspire.data.sentences.DEFAULT_SPLITTER`). An empty title together with an empty abstract is an
  error; so is an empty abstract alone (a paper needs at least one sentence to be matched).
  One sentence is fine. There is no length limit unless asked: `max_sentences` and
  `max_sentence_chars` turn over-long abstracts and sentences into bad records (the index build asks).
- Text no encoder can see is a bad record (`aspire.data.guards`): a lone surrogate in an id, title
  or sentence; a sentence with no visible character. A line over `max_line_bytes` (default 1 MiB,
  None = no limit) is a bad record, skipped unread.
- `pred_labels` (optional): a list of strings, one a sentence, stored as `Paper.labels`. It needs a
  list abstract of the same length (labels cannot follow a split the file did not give).
- Any other field is kept in `Paper.extra` and written back by `write_papers` (as strict JSON: a NaN or an
  infinity as null, listed under the record's `non_finite`).

CLI: `python -m aspire.data.papers check FILE` (counts and every rejected record; exit 1 if any) and
`python -m aspire.data.papers split FILE --out OUT` (`split_file`; OUT may not be FILE itself), also
`aspire papers check|split`.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from aspire.cliutil import command_parser, parse_and_run
from aspire.data.guards import DEFAULT_MAX_LINE_BYTES, SURROGATE, bounded_lines, id_in_head, invisible_text_reason
from aspire.data.sentences import DEFAULT_SPLITTER, SPLITTERS, SentenceSplitter, resolve_splitter
from aspire.io import UTF8_BOM, DataError, RepeatedKey, atomic_write, loads_unique, type_name
from aspire.jsonsafe import dumps, escape_surrogates

RESERVED_FIELDS = ("paper_id", "title", "abstract", "pred_labels")


@dataclass(frozen=True)
class Paper:
    """One paper: `sentences` is the abstract already split; `labels` (optional) one facet label a sentence."""

    paper_id: str
    title: str
    sentences: list[str]
    labels: list[str] | None = None
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.sentences, str):  # iterated, it would be one sentence a character
            raise TypeError(f"paper {self.paper_id}: sentences must be a list of sentences, not one string "
                            "(`as_papers` / `paper_from_record` split a string abstract)")
        if self.labels is not None and len(self.labels) != len(self.sentences):
            raise ValueError(f"paper {self.paper_id}: {len(self.labels)} labels for {len(self.sentences)} sentences")


@dataclass(frozen=True)
class RejectedRecord:
    """A line of a papers file that did not become a `Paper`, and why."""

    path: str
    line: int  # 1-based
    paper_id: str | None
    reason: str

    def __str__(self) -> str:
        pid = f" (paper_id {self.paper_id!r})" if self.paper_id is not None else ""
        return f"{self.path}:{self.line}{pid}: {self.reason}"


class BadRecordError(DataError):
    """A bad record in a papers file; the message names the file, the line and the paper id if known."""

    def __init__(self, record: RejectedRecord) -> None:
        super().__init__(str(record))
        self.record = record


@dataclass
class ReadResult:
    """Everything `read_papers` made of a file: `papers` (with `paper_lines`, the line of each),
    `rejected` and `blank_lines`; together they account for all `n_lines` lines."""

    path: str
    papers: list[Paper]
    paper_lines: list[int]
    rejected: list[RejectedRecord]
    blank_lines: list[int]
    n_lines: int

    def summary(self) -> str:
        """One line of counts."""
        return (
            f"{self.path}: {self.n_lines} lines: {len(self.papers)} papers, "
            f"{len(self.rejected)} rejected, {len(self.blank_lines)} blank"
        )


class _Bad(Exception):
    """Internal: a record is bad for `reason`; `paper_id`: its id as given, where that is bad yet readable text."""

    def __init__(self, reason: str, paper_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.paper_id = paper_id


def paper_id_problem(pid: str) -> str | None:
    """Why the string `pid` cannot be a paper id (`read_papers`' rule, after an integer id is converted), or None.
    For stages that write the ids of papers files, so they refuse a bad id where it is read."""
    if not pid.strip():
        return "paper_id is empty"
    if any(c.isspace() for c in pid):  # ' 42 ' would index 42 twice; 'a b' splits a TREC run's or a query line's columns
        return f"paper_id {pid!r} holds whitespace, which TREC runs and query lines cannot hold"
    if SURROGATE.search(pid):
        return "paper_id holds a lone surrogate (not Unicode text)"
    return None


def _parse_id(record: dict) -> str:
    if "paper_id" not in record:
        raise _Bad("missing field 'paper_id'")
    pid = record["paper_id"]
    if isinstance(pid, bool) or not isinstance(pid, (str, int)):
        raise _Bad(f"paper_id must be a string or an integer, got {type_name(pid)}")
    pid = str(pid)
    problem = paper_id_problem(pid)
    if problem:  # an id holding whitespace is recorded as given (it was once None, named in the reason alone)
        raise _Bad(problem, pid if pid.strip() and not SURROGATE.search(pid) else None)
    return pid


def _id_despite_bad_bytes(raw: bytes) -> str | None:
    """The paper id of a line that is not valid UTF-8, if it can be read with the bad bytes replaced."""
    try:
        record = json.loads(raw.decode("utf-8", errors="replace"))
        return _parse_id(record) if isinstance(record, dict) else None
    except _Bad as bad:
        return bad.paper_id
    except (ValueError, RecursionError):  # not JSON, a number of over 4300 digits, nested too deeply
        return None


def _parse_sentences(
    record: dict, splitter: Callable[[], SentenceSplitter | None], max_sentences: int | None, max_sentence_chars: int | None
) -> tuple[str, list[str], list[str] | None]:
    """(title, sentences, labels) of a record whose id is valid; raises `_Bad`."""
    for key in ("title", "abstract"):
        if key not in record:
            raise _Bad(f"missing field {key!r}")
    title, abstract = record["title"], record["abstract"]
    if not isinstance(title, str):
        raise _Bad(f"title must be a string, got {type_name(title)}")
    if SURROGATE.search(title):
        raise _Bad("title " + invisible_text_reason(title))
    if isinstance(abstract, str):
        split = splitter()
        if split is None:
            raise _Bad("abstract must be a list of sentences, got a string (this file is read without a splitter)")
        if SURROGATE.search(abstract):  # before the splitter, whose tokenizer fails on it naming nothing
            raise _Bad("abstract " + invisible_text_reason(abstract))
        sentences = split.split(abstract)
    elif isinstance(abstract, list):
        for i, sent in enumerate(abstract):
            if not isinstance(sent, str):
                raise _Bad(f"abstract[{i}] must be a string, got {type_name(sent)}")
            if not sent.strip():
                raise _Bad(f"abstract[{i}] is empty")
        sentences = list(abstract)
    else:
        raise _Bad(f"abstract must be a string or a list of strings, got {type_name(abstract)}")
    if not sentences:
        raise _Bad("empty title and abstract" if not title.strip() else "abstract is empty (no sentences)")
    for i, reason in ((i, invisible_text_reason(s)) for i, s in enumerate(sentences)):
        if reason:
            raise _Bad(f"abstract[{i}] {reason}" if isinstance(abstract, list) else f"sentence {i} {reason}")
    if max_sentences is not None and len(sentences) > max_sentences:
        raise _Bad(f"abstract has {len(sentences)} sentences, more than max_sentences={max_sentences}")
    if max_sentence_chars is not None:
        longest = max(range(len(sentences)), key=lambda i: len(sentences[i]))
        if len(sentences[longest]) > max_sentence_chars:
            raise _Bad(
                f"sentence {longest} has {len(sentences[longest])} characters, "
                f"more than max_sentence_chars={max_sentence_chars}"
            )
    labels = record.get("pred_labels")
    if labels is not None:
        if not isinstance(abstract, list):
            raise _Bad("pred_labels needs the abstract as a list of sentences, got a string")
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise _Bad("pred_labels must be a list of strings")
        if len(labels) != len(sentences):
            raise _Bad(f"pred_labels has {len(labels)} labels for {len(sentences)} sentences")
    return title, sentences, labels


def _is_gzip(path: Path) -> bool:
    """Whether a papers file is read and written through gzip: its name ends in `.gz`."""
    return path.suffix == ".gz"


GZIP_MAGIC = b"\x1f\x8b"


def _open_bytes(path: Path):
    """`path` opened for reading bytes, through gzip when its name ends in `.gz`. A file of another name that starts
    with gzip's magic bytes raises `DataError` saying so (it was read as plain bytes: one rejected record, "not valid
    UTF-8: byte 0x8b at column 2", and no paper), as a `.gz` file that is not gzip does: the name decides, as it does
    for `write_papers`, and a mismatch is refused, never guessed round."""
    if _is_gzip(path):
        if path.is_file() and path.stat().st_size == 0:  # gzip reads an empty file as an empty stream, unsaid
            raise DataError(f"{path}: not a gzip file, though its name ends in .gz (the file is empty: gzip writes a "
                            "header and a trailer even for no lines, so this is a truncated or never-written copy)")
        return gzip.open(path, "rb")
    f = path.open("rb")
    try:
        head = f.peek(2)[:2]  # not consumed: a pipe or FIFO is read on as it was
    except BaseException:
        f.close()
        raise
    if head == GZIP_MAGIC:
        f.close()
        raise DataError(f"{path}: the file is gzip-compressed, but its name does not end in .gz, so it would be read "
                        f"as plain text; rename it to {path.name}.gz (it is then read through gzip) or decompress it")
    return f


def _whole_lines(f, name: str, max_line_bytes: int | None) -> Iterator[tuple[bytes, int]]:
    """`bounded_lines` of an open papers file; a damaged gzip stream raises `DataError` naming the file and the
    last whole line read, so the lines before the damage are never taken for the whole file."""
    lines = bounded_lines(f, max_line_bytes)
    n = 0
    while True:
        try:
            item = next(lines)
        except StopIteration:
            return
        except EOFError:  # gzip's "Compressed file ended before the end-of-stream marker was reached"
            raise DataError(f"{name}: the gzip stream ends early, {_reached(n)} (a truncated or partly copied file)"
                            ) from None
        except (gzip.BadGzipFile, zlib.error) as err:  # no gzip header, bad compressed data, a failed CRC check
            if n == 0 and str(err).startswith("Not a gzipped file"):
                raise DataError(f"{name}: not a gzip file, though its name ends in .gz ({err})") from None
            raise DataError(f"{name}: the gzip stream is damaged, {_reached(n)} ({err})") from None
        n += 1
        yield item


def jsonl_objects(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSONL file, gzipped when its name ends in `.gz`, read as
    papers files are: a line that is not a JSON object, or a damaged gzip stream, raises `DataError` naming the
    file and the line. For readers of papers-like records that keep their own fields (the ACL Anthology file)."""
    path = Path(path)
    with _open_bytes(path) as f:
        for line_no, (raw, _) in enumerate(_whole_lines(f, str(path), None), start=1):
            if line_no == 1:
                raw = raw.removeprefix(UTF8_BOM)
            try:  # decoded as UTF-8 here: json.loads(bytes) also took UTF-16, a BOM on any line and encoded surrogates
                text = raw.decode("utf-8")
                if not text.strip():
                    continue
                obj = loads_unique(text)
            except RepeatedKey as err:  # json.loads kept the last of the two values unsaid
                raise DataError(f"{path}:{line_no}: {err}") from None
            except (ValueError, RecursionError) as err:  # not UTF-8 or not JSON; a number of over 4300 digits
                raise DataError(f"{path}:{line_no}: not a JSON line ({err})") from None
            if not isinstance(obj, dict):
                raise DataError(f"{path}:{line_no}: expected a JSON object, got {type(obj).__name__}")
            yield line_no, obj


def _reached(n: int) -> str:
    """Where reading stopped, `n` whole lines read."""
    return f"after line {n}" if n else "before the end of its first line"


def iter_lines(
    path: str | Path,
    *,
    splitter: str | SentenceSplitter | None = DEFAULT_SPLITTER,
    max_sentences: int | None = None,
    max_sentence_chars: int | None = None,
    max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[tuple[int, Paper | RejectedRecord | None]]:
    """(line number, outcome) for every line of a papers file: a `Paper`, a `RejectedRecord`, or
    None for a blank line. Never raises for a bad record; the splitter is built on first need.
    `splitter=None`: a string abstract is a bad record (only sentence lists are accepted).
    A damaged gzip file raises `DataError` when the damage is reached."""
    path = Path(path)
    name = str(path)
    built: list[SentenceSplitter] = []
    if isinstance(splitter, str) and splitter not in SPLITTERS:  # the name now, the splitter when first needed
        raise ValueError(f"unknown sentence splitter {splitter!r}; valid: {sorted(SPLITTERS)}")
    if max_line_bytes is not None and max_line_bytes < 0:  # readline(0) reads nothing: the file read as empty
        raise ValueError(f"max_line_bytes must be at least 0 (None: no limit), got {max_line_bytes}")

    def get_splitter() -> SentenceSplitter | None:
        if splitter is None:
            return None
        if not built:
            built.append(resolve_splitter(splitter))
        return built[0]

    first_line: dict[str, int] = {}
    with _open_bytes(path) as f:
        for line_no, (raw, too_long) in enumerate(_whole_lines(f, name, max_line_bytes), start=1):
            if line_no == 1:
                raw = raw.removeprefix(UTF8_BOM)
            pid = id_in_head(raw) if too_long else None
            try:
                if too_long:  # skipped unread; the id is taken from the line's first bytes
                    raise _Bad(f"line has {too_long} bytes, more than max_line_bytes={max_line_bytes} (skipped unread)")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    pid = _id_despite_bad_bytes(raw)
                    raise _Bad(f"not valid UTF-8: byte 0x{raw[e.start]:02x} at column {e.start + 1}") from None
                if not text.strip():
                    yield line_no, None
                    continue
                try:
                    record = loads_unique(text)
                except json.JSONDecodeError as e:
                    raise _Bad(f"invalid JSON: {e.msg} (column {e.colno})") from None
                except RepeatedKey as e:  # json.loads kept the last of the two values unsaid
                    raise _Bad(str(e)) from None
                except ValueError as e:  # a number of over 4300 digits, which Python's int() refuses
                    raise _Bad(f"invalid JSON: {str(e).split(':')[0]}") from None
                except RecursionError:
                    raise _Bad("invalid JSON: nested too deeply") from None
                if not isinstance(record, dict):
                    raise _Bad(f"expected a JSON object, got {type_name(record)}")
                pid = _parse_id(record)
                if pid in first_line:
                    raise _Bad(f"duplicate paper_id, first seen on line {first_line[pid]}")
                title, sentences, labels = _parse_sentences(
                    record, get_splitter, max_sentences, max_sentence_chars
                )
            except _Bad as bad:
                yield line_no, RejectedRecord(name, line_no, pid if pid is not None else bad.paper_id, bad.reason)
                continue
            first_line[pid] = line_no
            extra = {k: v for k, v in record.items() if k not in RESERVED_FIELDS}
            yield line_no, Paper(pid, title, sentences, labels, extra)


def iter_papers(
    path: str | Path,
    *,
    splitter: str | SentenceSplitter | None = DEFAULT_SPLITTER,
    on_reject: Callable[[RejectedRecord], None] | None = None,
    max_sentences: int | None = None,
    max_sentence_chars: int | None = None,
    max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[Paper]:
    """Stream the papers of a file. A bad record raises `BadRecordError`, unless `on_reject` is
    given: then it is called with each `RejectedRecord` and reading goes on. Blank lines are skipped."""
    for _, outcome in iter_lines(
        path, splitter=splitter, max_sentences=max_sentences, max_sentence_chars=max_sentence_chars, max_line_bytes=max_line_bytes
    ):
        if isinstance(outcome, Paper):
            yield outcome
        elif isinstance(outcome, RejectedRecord):
            if on_reject is None:
                raise BadRecordError(outcome)
            on_reject(outcome)


def read_papers(
    path: str | Path,
    *,
    splitter: str | SentenceSplitter | None = DEFAULT_SPLITTER,
    skip_bad: bool = False,
    max_sentences: int | None = None,
    max_sentence_chars: int | None = None,
    max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
) -> ReadResult:
    """Read a JSONL papers file (rules in the module docstring).

    Without `skip_bad`, the first bad record raises `BadRecordError`; with it, bad records are
    listed in `ReadResult.rejected`. `splitter` (a registry name or a `SentenceSplitter`) splits
    string abstracts; it is only loaded if one is met. With `splitter=None` a string abstract is a
    bad record.
    """
    result = ReadResult(str(path), [], [], [], [], 0)
    for line_no, outcome in iter_lines(
        path, splitter=splitter, max_sentences=max_sentences, max_sentence_chars=max_sentence_chars, max_line_bytes=max_line_bytes
    ):
        result.n_lines = line_no
        if outcome is None:
            result.blank_lines.append(line_no)
        elif isinstance(outcome, RejectedRecord):
            if not skip_bad:
                raise BadRecordError(outcome)
            result.rejected.append(outcome)
        else:
            result.papers.append(outcome)
            result.paper_lines.append(line_no)
    return result


def paper_from_record(record: object, splitter: str | SentenceSplitter = DEFAULT_SPLITTER, where: str = "") -> Paper:
    """One record (a dict, as one line of a papers file holds) as a `Paper`, by the same rules.

    Raises ValueError naming `where` (e.g. "item 3") and the paper id when the record is bad.
    """
    pid = None
    try:
        if not isinstance(record, dict):
            raise _Bad(f"expected a JSON object, got {type_name(record)}")
        pid = _parse_id(record)
        title, sentences, labels = _parse_sentences(record, lambda: resolve_splitter(splitter), None, None)
    except _Bad as bad:
        who = " ".join(x for x in (where, f"(paper_id {pid!r})" if pid is not None else "") if x)
        raise ValueError(f"{who}: {bad.reason}" if who else bad.reason) from None
    return Paper(pid, title, sentences, labels, {k: v for k, v in record.items() if k not in RESERVED_FIELDS})


def as_papers(items: Iterable[Paper | dict | str], splitter: str | SentenceSplitter = DEFAULT_SPLITTER) -> list[Paper]:
    """Papers from `Paper`s, records (dicts with paper_id, title, abstract) or plain abstract strings.

    A string becomes a paper with an empty title, split into sentences by `splitter`, and its
    position in `items` as its id ("0", "1", ...). A bad record raises ValueError naming its item; one
    paper given alone (a string, a dict or a `Paper`, not a list of them) raises TypeError, since iterating it
    would encode its characters or keys as papers.
    """
    if isinstance(items, (str, dict, Paper)) or items is None:
        one = "" if items is None else " (one paper: pass it in a list, [paper])"
        raise TypeError(f"expected a list of papers, got {type(items).__name__}{one}")
    built: list[SentenceSplitter] = []

    def get_splitter() -> SentenceSplitter:
        if not built:
            built.append(resolve_splitter(splitter))
        return built[0]

    papers = []
    for i, item in enumerate(items):
        if isinstance(item, Paper):
            papers.append(item)
        elif isinstance(item, str):
            papers.append(paper_from_record({"paper_id": str(i), "title": "", "abstract": item}, get_splitter(),
                                            f"item {i}"))
        elif isinstance(item, dict):
            papers.append(paper_from_record(item, get_splitter() if isinstance(item.get("abstract"), str) else splitter,
                                            f"item {i}"))
        else:
            raise TypeError(f"item {i}: expected a Paper, a dict or a string, got {type(item).__name__}")
    return papers


def abstract_text(title: str, sentences: Sequence[str], joiner: str = " ") -> str:
    """A paper's title and abstract as one text: the sentences joined by spaces, the title joined to them by
    `joiner` (an empty or blank part left out: a title of spaces gave "   [SEP] a b."). What the whole-abstract
    encoding, BM25 and the cross-encoder read."""
    return joiner.join(x for x in (title, " ".join(sentences)) if x.strip())


def paper_to_record(paper: Paper) -> dict:
    """The JSON object `read_papers` reads back as `paper` (abstract as its sentence list)."""
    clash = sorted(set(paper.extra) & set(RESERVED_FIELDS))
    if clash:
        raise ValueError(f"paper {paper.paper_id!r}: extra fields clash with reserved fields {clash}")
    record = {"paper_id": paper.paper_id, "title": paper.title, "abstract": list(paper.sentences)}
    if paper.labels is not None:
        record["pred_labels"] = list(paper.labels)
    record.update(paper.extra)
    return record


def write_papers(path: str | Path, papers: Iterable[Paper]) -> int:
    """Write papers as JSONL (UTF-8, one object a line), gzip-compressed when `path` ends in `.gz` (as
    `read_papers` reads it), atomically: a temporary file in the same folder is renamed over `path` only
    once complete. Each line is strict JSON, as `aspire.io.AtomicJsonl` writes it: a non-finite float (in an extra
    field) is null, its path under the record's "non_finite"; a lone surrogate (an extra field or a label read
    from a `"\\ud800"` escape) is written as that escape. Returns the number of papers written."""
    path = Path(path)
    n = 0
    with atomic_write(path, "wb") as raw:
        # mtime 0 and the target's name (not the temporary one) in the gzip header: the same papers, the same bytes
        packed = gzip.GzipFile(path.name, "wb", fileobj=raw, mtime=0) if _is_gzip(path) else nullcontext(raw)
        with packed as f:
            for paper in papers:
                record = paper_to_record(paper)
                try:
                    line = json.dumps(record, ensure_ascii=False, allow_nan=False)
                except ValueError:  # a NaN or an infinity in an extra field
                    line = dumps(record, ensure_ascii=False)
                try:
                    data = (line + "\n").encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate: the reader takes one in an extra field or a label
                    data = (escape_surrogates(line) + "\n").encode("utf-8")
                f.write(data)
                n += 1
    return n


def split_file(src: str | Path, dst: str | Path, splitter: str | SentenceSplitter = DEFAULT_SPLITTER
               ) -> tuple[int, list[RejectedRecord]]:
    """Write the papers of `src` to `dst` with each abstract as its list of sentences, split once here, so
    readers that would each split it again (every rank of a sharded encoding, the training tasks) take
    the sentences as given. Other fields are kept. A bad record is not written: it is returned, with its
    line and reason. Returns (papers written, rejected records).

    `dst` may not be `src` itself (by any name): that would replace the only copy, rejected records and all.
    Another file at `dst` is replaced, atomically, as every single output file is; `dst` ending in `.gz` is
    written as gzip. A damaged `src` (`DataError`) leaves `dst` as it was."""
    if Path(dst).exists() and os.path.samefile(src, dst):
        raise ValueError(f"the output {dst} is the input file {src}: writing it would replace the only copy "
                         "(and drop its rejected records); choose another output file")
    rejected: list[RejectedRecord] = []
    written = write_papers(dst, iter_papers(src, splitter=splitter, on_reject=rejected.append))
    return written, rejected


def read_paper_map(path: str | Path, ids: Iterable[str] | None = None, *, split_strings: bool = True,
                   needed_by: str = "requested") -> dict:
    """`{paper_id: Paper}` from a papers JSONL file, every record checked by `read_papers`' rules.

    Args:
        ids: keep only these papers; one missing from the file raises ValueError naming it (and
            `needed_by`, e.g. "pooled": "FILE: 2 pooled papers missing: [...]"). An integer id is the
            string of its digits, as the file's integer ids are. One id given alone as a string raises
            TypeError (iterated, "12" would ask for papers "1" and "2").
        split_strings: split a string abstract into sentences (the papers-file rule); False makes a
            string abstract a bad record (files written by a pipeline stage hold sentence lists).
    A bad record raises `BadRecordError` (a `DataError`) naming the file, the line and the paper id.
    """
    if isinstance(ids, (str, bytes)):  # iterated, "12" would ask for papers "1" and "2"
        raise TypeError(f"{path}: ids must be a collection of paper ids, not one {type(ids).__name__} ({ids!r}); "
                        "pass one id in a list, [paper_id]")
    wanted = None if ids is None else {str(i) if isinstance(i, int) and not isinstance(i, bool) else i for i in ids}
    result = read_papers(path) if split_strings else read_papers(path, splitter=None)
    papers = {p.paper_id: p for p in result.papers if wanted is None or p.paper_id in wanted}
    if wanted is not None:
        missing = sorted(wanted - set(papers))
        if missing:
            raise ValueError(f"{path}: {len(missing)} {needed_by} papers missing: {missing[:10]}")
    return papers


EXAMPLES = """\
  aspire papers check papers.jsonl --skip-bad
  python -m aspire.data.papers split papers.jsonl --out papers.split.jsonl
"""


def main(argv: list[str] | None = None, prog: str = "python -m aspire.data.papers") -> int:
    """`check FILE [--skip-bad] [--splitter NAME]`: print counts and rejected records; 1 if any.
    `split FILE --out OUT [--splitter NAME]`: `split_file`; prints the count and every rejected record.
    A user error (a missing file, say) is one `error:` line and status 2, as in every command."""
    parser = command_parser(prog, "Check a JSONL papers file, or split its abstracts into sentences once.", EXAMPLES)
    sub = parser.add_subparsers(dest="command", required=True, help="what to do")
    check = sub.add_parser("check", help="read FILE and report papers, rejected records and blank lines")
    check.add_argument("file", type=Path, help="the papers JSONL (.gz read as gzip)")
    check.add_argument("--skip-bad", action="store_true", help="list every bad record instead of stopping at the first")
    check.add_argument("--splitter", default=DEFAULT_SPLITTER, help="sentence splitter for string abstracts")
    split = sub.add_parser("split", help="write FILE's papers to OUT with abstracts split into sentences once")
    split.add_argument("file", type=Path, help="the papers JSONL (.gz read as gzip)")
    split.add_argument("--out", type=Path, required=True,
                       help="the JSONL file to write (atomically; .gz written as gzip), not FILE itself")
    split.add_argument("--splitter", default=DEFAULT_SPLITTER, help="sentence splitter for string abstracts")
    return parse_and_run(parser, argv, _run, common=(check, split))


def _run(args) -> int:
    if not args.file.is_file():
        raise FileNotFoundError(2, "papers file not found", str(args.file))
    if args.command == "split":
        written, rejected = split_file(args.file, args.out, args.splitter)
        print(f"{written} papers written to {args.out}, {len(rejected)} rejected record(s) not written")
        for record in rejected:
            print(f"rejected: {record}")
        return 0
    try:
        result = read_papers(args.file, splitter=args.splitter, skip_bad=args.skip_bad)
    except BadRecordError as e:
        print(f"bad record: {e}", file=sys.stderr)
        return 1
    print(result.summary())
    for rejected in result.rejected:
        print(f"rejected: {rejected}")
    return 1 if result.rejected else 0


if __name__ == "__main__":
    sys.exit(main())
