"""The ACL Anthology abstracts as training text: a seeded sample with its abstracts split once (and
cached), benchmark papers left out by normalised title (the titles come from the caller:
`aspire.benchmarks.heldout.excluded_titles`)."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import logging
import os
import random
import re
from pathlib import Path

from aspire.data.papers import Paper, jsonl_objects, paper_from_record
from aspire.data.sentences import DEFAULT_SPLITTER, get_splitter
from aspire.io import read_json, write_json
from aspire.paths import cache_root

log = logging.getLogger(__name__)


def normalise_title(title: str) -> str:
    """Lower case, letters and digits only: `"BERT: Pre-training"` -> `"bertpretraining"`."""
    return re.sub(r"[^0-9a-z]", "", title.lower())


SPLITTER_LIBRARIES = ("pysbd", "scispacy", "spacy")  # what the registry's splitters run on


def splitter_version() -> str:
    """A digest of what a split depends on besides the text: the splitters' code (`aspire.data.sentences`) and the
    versions of the libraries they run on. A cache keyed by the splitter's name alone kept serving the old cuts
    after a guard rule or a library changed, while every other reader split by the new ones."""
    from aspire.data import sentences

    digest = hashlib.sha256(Path(sentences.__file__).read_bytes())
    for name in SPLITTER_LIBRARIES:
        try:
            digest.update(f"{name}={importlib.metadata.version(name)};".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{name}=-;".encode())
    return digest.hexdigest()[:8]


def split_cache_path(path: Path, splitter: str) -> Path:
    """Where the sentences of the corpus file `path` split by `splitter` are kept between runs:
    `$ASPIRE_CACHE/sentences` (else `~/.cache/aspire/sentences`), keyed by the file's SHA-256, the splitter's
    name and `splitter_version`."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return cache_root() / "sentences" / f"{path.name}-{digest}-{splitter}-{splitter_version()}.json"


def _read_split_cache(cache: Path) -> dict:
    """The split cache's `{paper_id: [text hash, sentences]}`; one that cannot be read (damaged, not an object) is
    a warning naming it, and every abstract is split again (it was a raw JSONDecodeError or AttributeError)."""
    if not cache.is_file():
        return {}
    try:
        return read_json(cache, "sentence cache", mapping=True)
    except (ValueError, OSError) as err:
        log.warning("sentence cache not used, %s: splitting again and rewriting it", err)
        return {}


def _cached_sentences(entry: object, key: str) -> list[str] | None:
    """The sentences a cache entry holds for the text hashed `key`, None for a miss: another text, or an entry that
    is not `[key, [sentence, ...]]` (a damaged one was an IndexError, or rejected the paper as a bad record)."""
    if isinstance(entry, list) and len(entry) == 2 and entry[0] == key and isinstance(entry[1], list) and all(
            isinstance(s, str) for s in entry[1]):
        return entry[1]
    return None


def read_acl(path: str | Path, exclude: frozenset[str], max_papers: int) -> tuple[list[Paper], dict]:
    """ACL Anthology papers without the `exclude`d normalised titles: a seeded sample of `max_papers`
    (0 = all), their abstracts split into sentences by the default splitter (built once), and the
    counts read / removed. `path` is JSONL, gzipped when it ends in `.gz`; an abstract that is already
    a list of sentences is kept as is. Split abstracts are cached on disk (`split_cache_path`), so only
    a corpus's first run pays for the splitting (about 10 ms an abstract); a cache that cannot be read or
    written is a warning, not an error. Each paper keeps the
    record's other fields (`authors`, `year`, ...) in `Paper.extra`. A record that is not a valid paper
    is left out, named with its reason in `stats["rejected"]` (and logged).

    The train and dev splits of a run read the abstracts once: the result is kept in memory for the file as it
    is on disk (its path, size and modification time), so a file rewritten in place is read again. Each call
    gets its own list and stats, so a caller that reorders or edits them changes no other caller's."""
    path = Path(path)
    stat = path.stat()  # a missing file: FileNotFoundError naming it, as the reading would
    papers, stats = _read_acl(str(path), os.path.abspath(path), stat.st_size, stat.st_mtime_ns, exclude, max_papers)
    return list(papers), {**stats, "rejected": dict(stats["rejected"])}


@functools.lru_cache(maxsize=4)
def _read_acl(path: str, where: str, size: int, mtime_ns: int, exclude: frozenset[str],
              max_papers: int) -> tuple[list[Paper], dict]:
    """`read_acl`'s reading of `path` (named as given in messages), cached by the file's absolute path `where`,
    size and modification time as well (those three are read only by the cache's key)."""
    path = Path(path)
    records = list(jsonl_objects(path))  # a bad line or a damaged .gz: one error naming the file and line
    kept = [(n, r) for n, r in records if not isinstance(r.get("title"), str) or normalise_title(r["title"]) not in exclude]
    stats = {"read": len(records), "removed_benchmark": len(records) - len(kept)}
    if max_papers and len(kept) > max_papers:
        kept = random.Random(0).sample(kept, max_papers)
    cache = split_cache_path(path, DEFAULT_SPLITTER)
    cached = _read_split_cache(cache)
    splitter, new = None, 0
    for _, r in kept:
        text = r.get("abstract")
        if isinstance(text, str) and isinstance(r.get("paper_id"), str):
            key = hashlib.sha1(text.encode()).hexdigest()[:12]
            if _cached_sentences(cached.get(r["paper_id"]), key) is None:  # a changed text is split again
                splitter = splitter or get_splitter()
                cached[r["paper_id"]] = [key, splitter.split(text)]
                new += 1
            r["abstract"] = cached[r["paper_id"]][1]
    if new:
        try:
            write_json(cache, cached, indent=None)
            log.info("split %d abstracts of %s; cached in %s", new, path, cache)
        except OSError as err:  # a read-only or full cache folder: the run goes on, splitting again next time
            log.warning("split abstracts of %s not cached: %s (%s)", path, cache, err)
    papers, rejected = [], {}
    for n, r in kept:
        try:
            papers.append(paper_from_record(r, where=f"{path}:{n}"))
        except ValueError as bad:  # one bad record does not stop a run: it is named and counted
            rejected[f"{path}:{n}"] = str(bad)
    if rejected:
        log.warning("%s: %d record(s) rejected: %s", path, len(rejected), "; ".join(rejected.values()))
    stats.update(used=len(papers), rejected=rejected)
    return papers, stats


read_acl.cache_clear = _read_acl.cache_clear  # tests and long-lived callers may drop what is held
