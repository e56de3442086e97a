"""Teacher vectors for distillation: a stronger encoder's whole-abstract vectors of ACL Anthology papers.

`python -m aspire.train.teacher --teacher mpnet --max-papers 8000 --out runs/teacher/mpnet` encodes a
seeded sample of the ACL abstracts (every benchmark paper removed first, by normalised title, paper id or
abstract text, as the `crop`, `title` and `author` tasks do; the same sample for the same `--max-papers`) with the teacher's
whole-abstract vector (title and abstract joined by a space, mean-pooled, unit length) and writes

- `vectors.npy`: (N, D) float32, one row a paper;
- `ids.json`: the N paper ids, in row order;
- `teacher.json`: the teacher, its fingerprint, the encoding settings, the ACL file read (its absolute path and
  sha256, which a distill task compares with the file it reads) and the counts read / removed;
- with `--sentences`, `sentences.npy` (N, D): one abstract sentence a paper (seeded by its id) encoded *alone*,
  unit length, and `sentences.json`: that sentence's position in the abstract and its text, a row a paper.

The `distill` training task (`aspire.train.tasks`) reads them: it pairs each paper with one of its
nearest neighbours by the teacher, and the loss takes the teacher's similarities of the batch as its
soft targets (`loss.teacher_scale`). The sentence vectors teach at sentence level: a paper's chosen
sentence, still encoded in context by the student, is its facet query (kind `hybrid`'s facet term), and
the teacher's similarity of that sentence alone to each candidate's whole vector is the facet term's target. A
distill run records the sha256 of these files when it starts (`teacher_files`), and its `--resume` refuses a teacher
folder written again since, naming the file.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aspire.checksum import file_sha256
from aspire.cliutil import (
    add_common_options,
    command_parser,
    non_negative_int,
    positive_int,
    print_json,
    run_command,
    setup_logging,
)
from aspire.encoders.pretrained import MODEL_HELP, check_model
from aspire.io import atomic_folder, read_json, type_name, write_json
from aspire.paths import DATA
from aspire.storage import check_replaceable

log = logging.getLogger(__name__)
VECTORS, IDS, META = "vectors.npy", "ids.json", "teacher.json"
SENTENCES, SENTENCE_TEXTS = "sentences.npy", "sentences.json"


@dataclass
class TeacherVectors:
    """Unit-length teacher vectors by paper id."""

    ids: list[str]
    vectors: np.ndarray  # (N, D) float32
    meta: dict
    sentences: np.ndarray | None = None  # (N, D) float32: each paper's chosen sentence encoded alone
    sentence_texts: list[tuple[int, str]] | None = None  # (position in the abstract, text), a row a paper

    def rows(self, paper_ids: list[str], where: str) -> np.ndarray:
        """Row of each of `paper_ids`; a paper the teacher did not encode is an error naming it."""
        index = {pid: i for i, pid in enumerate(self.ids)}
        missing = [pid for pid in paper_ids if pid not in index]
        if missing:
            raise ValueError(f"{where}: {len(missing)} paper(s) have no teacher vector, e.g. {missing[:3]}; "
                             "encode them with the same --max-papers (python -m aspire.train.teacher)")
        return np.asarray([index[pid] for pid in paper_ids], dtype=np.int64)


def load_teacher(path: str | Path) -> TeacherVectors:
    """Read what `build` wrote under `path`; a missing file, an array file that does not read as a float array (a
    truncated copy), a count mismatch (with `teacher.json`'s `papers` and `dim` too, where it records them), a paper
    id that is not a string or is on two rows, a vector row that is not finite and of unit length, or a sentence row
    that is not `[position, text]` is an error naming it."""
    path = Path(path)
    for name in (VECTORS, IDS, META):
        if not (path / name).is_file():
            raise FileNotFoundError(f"teacher vectors: {path / name} is missing (python -m aspire.train.teacher)")
    vectors = _load_array(path / VECTORS)
    ids = read_json(path / IDS, "teacher's paper ids")
    if not isinstance(ids, list):
        raise ValueError(f"teacher vectors: {path / IDS} holds a JSON {type_name(ids)}, not a list of paper ids")
    odd = next((i for i, pid in enumerate(ids) if not isinstance(pid, str)), None)
    if odd is not None:  # `rows` would call every paper missing, its hint to re-encode them beside the point
        raise ValueError(f"teacher vectors: {path / IDS}, row {odd}: a paper id is a string, got "
                         f"{type_name(ids[odd])} {ids[odd]!r:.60}")
    if vectors.ndim != 2 or len(ids) != len(vectors):
        raise ValueError(f"teacher vectors: {path}: {len(ids)} ids for an array of shape {vectors.shape}")
    twice = _repeated(ids)
    if twice is not None:  # `rows` would silently read one of its two vectors
        raise ValueError(f"teacher vectors: {path / IDS}: paper id {twice!r} names two rows")
    _check_unit(vectors, ids, path / VECTORS)
    meta = read_json(path / META, "teacher's metadata", mapping=True)
    _check_counts(meta, vectors, path / META)
    has = [(path / name).is_file() for name in (SENTENCES, SENTENCE_TEXTS)]
    if any(has) and not all(has):
        raise FileNotFoundError(f"teacher vectors: {path}: {SENTENCES} and {SENTENCE_TEXTS} go together; one is missing")
    if not any(has):
        return TeacherVectors(ids, vectors, meta)
    sentences = _load_array(path / SENTENCES)
    texts = _sentence_texts(path / SENTENCE_TEXTS, ids)
    if sentences.shape != vectors.shape or len(texts) != len(ids):
        raise ValueError(f"teacher vectors: {path}: sentence vectors of shape {sentences.shape} and {len(texts)} "
                         f"sentence texts for {len(ids)} papers of shape {vectors.shape}")
    _check_unit(sentences, ids, path / SENTENCES)
    return TeacherVectors(ids, vectors, meta, sentences, texts)


def teacher_files(path: str | Path) -> list[Path]:
    """The files under `path` that `load_teacher` reads, those that are there (a missing one it refuses itself): a
    distill run records their checksums when it starts and `--resume` compares them
    (`aspire.train.config.example_files`), so a teacher written again between the two is not read unsaid."""
    files = [Path(path) / name for name in (VECTORS, IDS, META, SENTENCES, SENTENCE_TEXTS)]
    return [file for file in files if file.is_file()]


def check_source(meta: dict, path: str | Path, acl_path: str, max_papers: int, where: str) -> None:
    """ValueError naming `teacher.json` under `path`, the field and both values, when the teacher was written from
    other bytes than `acl_path` holds (its `acl_sha256`, the digest of the file it read: a byte-identical copy
    anywhere passes, the recorded file rewritten in place since does not; a folder written before the digest was
    recorded is compared by its `acl_path`: the same file, or a byte-identical copy, passes, and a recorded file that
    no longer exists here cannot be compared: a warning) or for another sample than `max_papers` (its `max_papers`; a
    teacher of every paper, 0, covers any sample): the paper ids alone matched, so the vectors of other texts under
    the same ids were read silently. A field `teacher.json` does not record (an older folder) is not compared. The
    teacher model and its fingerprint are recorded for the run's stats only: no setting names them."""
    import filecmp

    where = f"{where}: {Path(path) / META}"
    if "max_papers" in meta and meta["max_papers"] not in (0, max_papers):
        raise ValueError(f"{where} records max_papers {meta['max_papers']!r}, the task asks for {max_papers}: the "
                         "teacher encoded another sample; write it again with --max-papers "
                         f"{max_papers} (python -m aspire.train.teacher)")
    recorded, digest = meta.get("acl_path"), meta.get("acl_sha256")
    if recorded is None:
        return
    if not isinstance(recorded, str):
        raise ValueError(f"{where} records acl_path {recorded!r}, not a path")
    if "acl_sha256" in meta:  # the bytes decide: the same path passed whatever the file held since
        if not (isinstance(digest, str) and len(digest) == 64):
            raise ValueError(f"{where} records acl_sha256 {digest!r:.80}, not a sha256 digest; write the teacher again "
                             "(python -m aspire.train.teacher)")
        held = file_sha256(acl_path)
        if held != digest:
            raise ValueError(f"{where} records acl_path {recorded!r} of sha256 {digest[:12]}..., the task reads "
                             f"{acl_path!r} of sha256 {held[:12]}...: the teacher encoded other texts (another file, "
                             f"or this one since rewritten); write it again with --acl-path {acl_path} "
                             "(python -m aspire.train.teacher)")
        return
    if not os.path.isfile(recorded):
        log.warning("%s records acl_path %r, not a file here: the teacher's texts cannot be compared with %s",
                    where, recorded, acl_path)
        return
    if not (os.path.samefile(recorded, acl_path) or filecmp.cmp(recorded, acl_path, shallow=False)):
        raise ValueError(f"{where} records acl_path {recorded!r}, the task reads {acl_path!r}, another file: the "
                         "teacher encoded other texts; write it again with --acl-path "
                         f"{acl_path} (python -m aspire.train.teacher)")


def _load_array(path: Path) -> np.ndarray:
    """The float array of `.npy` file `path`, as float32; ValueError naming the file when it does not read as one (a
    truncated or damaged copy failed with numpy's "cannot reshape array of size 43 into shape (12,32)" or an
    EOFError, naming no file; a `.npz` archive with an AttributeError; a string array was read as numbers)."""
    try:
        array = np.load(path)
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"teacher vectors: {path} does not read as an array ({type(err).__name__}: {err}); write the "
                         "teacher again (python -m aspire.train.teacher)") from None
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
        if not isinstance(array, np.ndarray):
            array.close()  # a `.npz` archive holds its file open
        what = f"an array of {array.dtype}" if isinstance(array, np.ndarray) else f"a {type(array).__name__}"
        raise ValueError(f"teacher vectors: {path} holds {what}, not a float array; write the teacher again "
                         "(python -m aspire.train.teacher)")
    return array.astype(np.float32, copy=False)


def _check_counts(meta: dict, vectors: np.ndarray, path: Path) -> None:
    """ValueError naming `teacher.json` (`path`) when the `papers` or `dim` it records (where it records them) is not
    what the vectors (N, D) hold: a vectors.npy of another teacher (another width) copied in was read under this
    one's name and fingerprint."""
    held = {"papers": int(vectors.shape[0]), "dim": int(vectors.shape[1])}
    differ = [f"{key} {meta[key]!r} (the vectors hold {n})" for key, n in held.items()
              if key in meta and not (type(meta[key]) is int and meta[key] == n)]
    if differ:
        raise ValueError(f"teacher vectors: {path} records {', '.join(differ)}: the folder mixes two teachers' files; "
                         "write the teacher again (python -m aspire.train.teacher)")


def _check_unit(vectors: np.ndarray, ids: list[str], path: Path, tol: float = 1e-3) -> None:
    """ValueError naming the first row of `vectors` (N, D) that is not finite or not of unit length (within `tol`),
    and its paper: the distill task reads a row's dot products as the teacher's cosines (a NaN row, or one of
    length 2, went into the soft targets without a word)."""
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    bad = np.flatnonzero(~(np.abs(norms - 1.0) <= tol))  # NaN and inf norms fail the comparison
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"teacher vectors: {path}, row {i} (paper {ids[i]!r}): length {norms[i]:.6g}, not a finite "
                         f"unit vector ({len(bad)} such row(s)); write the teacher again (python -m aspire.train.teacher)")


def _sentence_texts(path: Path, ids: list[str]) -> list[tuple[int, str]]:
    """The (position, text) rows of `sentences.json`; a row that is not `[position >= 0, text]` is an error naming
    it and its paper (a dict was read key by key, a negative position picked a sentence from the abstract's end)."""
    rows = read_json(path, "teacher's sentence texts")
    if not isinstance(rows, list):
        raise ValueError(f"teacher vectors: {path} holds a JSON {type_name(rows)}, not a list of [position, text] rows")
    for i, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 2 and type(row[0]) is int and row[0] >= 0
                and isinstance(row[1], str)):
            paper = f" (paper {ids[i]!r})" if i < len(ids) else ""
            raise ValueError(f"teacher vectors: {path}, row {i}{paper}: not [position >= 0, sentence text], got "
                             f"{row!r:.80}")
    return [(row[0], row[1]) for row in rows]


def _repeated(ids: list[str]) -> str | None:
    """The first id of `ids` that appears twice, or None."""
    seen: set[str] = set()
    for pid in ids:
        if pid in seen:
            return pid
        seen.add(pid)
    return None


def chosen_sentence(paper_id: str, n_sentences: int) -> int:
    """The abstract sentence the teacher encodes alone for a paper: seeded by its id, the same on every run."""
    return random.Random(f"teacher-sentence:{paper_id}").randrange(n_sentences)


def build(teacher: str, out: str | Path, acl_path: str, benchmarks_dir: str | None, max_papers: int,
          max_length: int, batch_size: int = 32, device: str = "cpu", sentences: bool = False) -> dict:
    """Encode the sample with `teacher` and write it under `out` (with `sentences`, also each paper's chosen
    sentence encoded alone); returns the metadata written (`acl_path` made absolute, `acl_sha256` the digest of its
    bytes as read; `teacher`, the model as named, and its `fingerprint` are recorded for the user: no setting of a
    distill run names the teacher model). Two records with one paper id are an error naming it."""
    from aspire.benchmarks.heldout import excluded_papers
    from aspire.data.acl import read_acl
    from aspire.encoders import ContextualSentenceEncoder

    exclude, _ = excluded_papers(benchmarks_dir or None, "--benchmarks-dir")
    digest = file_sha256(acl_path)  # before the texts are read: a file rewritten meanwhile is refused, never passed
    papers, stats = read_acl(acl_path, exclude, max_papers)
    if not papers:  # an empty teacher would be written as if complete, and fail only when a task reads it
        raise ValueError(f"teacher vectors: {acl_path}: no paper to encode ({stats['read']} read, "
                         f"{stats['removed_benchmark']} removed as benchmark papers, "
                         f"{len(stats.get('rejected', {}))} rejected); nothing written")
    empty = [p.paper_id for p in papers if not p.sentences]
    if sentences and empty:
        raise ValueError(f"teacher sentences: {len(empty)} paper(s) have no abstract sentence, e.g. {empty[:3]}")
    encoder = ContextualSentenceEncoder.from_pretrained(teacher, max_length=max_length).to(device)
    vectors = encoder.encode_abstract(papers, joiner=" ", normalize=True, max_length=max_length,
                                      batch_size=batch_size, progress=True)
    if sentences:
        chosen = [(chosen_sentence(p.paper_id, len(p.sentences)), p) for p in papers]
        texts = [(i, p.sentences[i]) for i, p in chosen]
        sent_vecs = encoder.embed_texts([t for _, t in texts], normalize=True, max_length=max_length,
                                        batch_size=batch_size, progress=True)
    # the ACL file as an absolute path: `check_source` compares it from the distill run's working directory, where a
    # relative one named another file (or the task's own, when both runs passed the same relative name)
    meta = {"teacher": teacher, "fingerprint": encoder.fingerprint(), "max_length": max_length, "joiner": " ",
            "pooling": "mean", "normalize": True, "acl_path": os.path.abspath(acl_path), "acl_sha256": digest,
            "benchmarks_dir": benchmarks_dir,
            "max_papers": max_papers, "papers": len(papers), "dim": int(vectors.shape[1]),
            "sentences": "one seeded abstract sentence a paper, encoded alone" if sentences else None,
            **{k: v for k, v in stats.items() if k != "rejected"}, "rejected": len(stats.get("rejected", {}))}
    with atomic_folder(Path(out)) as staged:  # replaces an earlier build whole (its sentences never outlive it)
        if sentences:
            np.save(staged / SENTENCES, sent_vecs.numpy().astype(np.float32))
            write_json(staged / SENTENCE_TEXTS, texts, indent=None)
        np.save(staged / VECTORS, vectors.numpy().astype(np.float32))
        write_json(staged / IDS, [p.paper_id for p in papers], indent=None)
        write_json(staged / META, meta)
    return meta


EXAMPLES = """\
  aspire teacher --teacher mpnet --max-papers 8000 --out runs/teacher/mpnet
  aspire teacher --teacher mpnet --max-papers 8000 --sentences --out runs/teacher/mpnet8k-sent
  python -m aspire.train.teacher --teacher minilm --max-papers 500 --max-length 64 --out runs/teacher/minilm-small
"""


def main(argv: list[str] | None = None, prog: str = "python -m aspire.train.teacher") -> int:
    parser = command_parser(prog, __doc__, EXAMPLES)
    parser.add_argument("--teacher", default="mpnet", help=MODEL_HELP)
    parser.add_argument("--out", required=True, help="output directory: new, empty, or an earlier teacher's (replaced)")
    parser.add_argument("--acl-path", default=str(DATA / "acl-anthology" / "papers.jsonl.gz"),
                        help="the ACL Anthology abstracts (JSONL, gzipped or not)")
    parser.add_argument("--benchmarks-dir", default=str(DATA), help="benchmark papers removed ('' keeps them)")
    parser.add_argument("--max-papers", type=non_negative_int, default=8000, help="seeded sample size (0 = every paper)")
    parser.add_argument("--max-length", type=positive_int, default=128, help="word pieces per abstract")
    parser.add_argument("--sentences", action="store_true",
                        help="also encode one seeded abstract sentence a paper alone (sentence-level distillation)")
    add_common_options(parser, device=True, batch_size=True, batch_size_default=32)
    args = parser.parse_args(argv)
    setup_logging(args)

    def run() -> int:
        check_model(args.teacher)  # before the ACL sample is read
        check_replaceable(args.out, META, "an earlier teacher's folder")  # its files are replaced, others removed
        meta = build(args.teacher, args.out, args.acl_path, args.benchmarks_dir or None, args.max_papers,
                     args.max_length, args.batch_size, args.device or "cpu", args.sentences)
        print_json(meta, indent=1)
        return 0

    return run_command(run, args)


if __name__ == "__main__":
    raise SystemExit(main())
