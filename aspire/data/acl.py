"""The ACL Anthology abstracts as training text: a seeded sample with its abstracts split once (and
cached), benchmark papers left out by normalised title, paper id, abstract text or containment (`HeldOut`; what to leave out
comes from the caller: `aspire.benchmarks.heldout.excluded_papers`)."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import logging
import operator
import os
import random
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Collection, Container
from dataclasses import dataclass
from pathlib import Path

from aspire.data.guards import SURROGATE, invisible_text_reason
from aspire.data.papers import Paper, jsonl_objects, paper_from_record
from aspire.data.sentences import DEFAULT_SPLITTER, SentenceSplitter, get_splitter
from aspire.io import read_json, write_json
from aspire.paths import cache_root

log = logging.getLogger(__name__)


_NOT_LETTER_OR_DIGIT = re.compile(r"[\W_]")  # punctuation, symbols, spaces, marks no letter took


def normalise_title(title: str) -> str:
    """Lower case, ASCII letters and digits only, after Unicode folding: `"BERT: Pre-training"` -> `"bertpretraining"`.
    The text is composed (NFC: `"e\\u0301"` is `"é"`), cut to its letters and digits, then NFKC- and case-folded, so
    a ligature (`"ﬁ"` -> `"fi"`), a full-width letter (`"Ｂ"` -> `"b"`), a superscript digit (`"³"` -> `"3"`) or
    `"ß"` (`"ss"`) gives the key of its plain copy; a symbol is cut before NFKC, so the mojibake `"â€™"` of a
    curly quote gives no `"tm"`. Any other character is dropped, not folded: `"Poincaré"` -> `"poincar"`, where a
    LaTeX `"Poincar\\'e"` gives `"poincare"` (folding accents would move the committed SciRepEval split; the folding
    above moves no title or abstract match of the real data)."""
    kept = _NOT_LETTER_OR_DIGIT.sub("", unicodedata.normalize("NFC", title))
    return re.sub(r"[^0-9a-z]", "", unicodedata.normalize("NFKC", kept).casefold())


ABSTRACT_KEY_CHARS = 200  # normalised characters of an abstract that name it (`abstract_key`)
REMOVED_BY = ("title", "paper_id", "abstract", "containment")  # `HeldOut.reason`'s answers, in the order it tries them


def removed_by(reasons: list[str | None], exclude: HeldOut | None = None) -> dict[str, int]:
    """How many of `reasons` (`HeldOut.reason`'s answers, None for a paper kept) each rule of `REMOVED_BY` gave:
    "title", "paper_id" and "abstract" always; "containment" where `exclude` (the `HeldOut` that gave them) runs
    that rule, zero included, so "it ran and removed none" reads apart from "it did not run" (a report from before
    the rule, or a `HeldOut` without one, has the three keys). Without `exclude`: "containment" where it removed
    any."""
    counts = {rule: reasons.count(rule) for rule in REMOVED_BY}
    containment = counts["containment"] > 0 if exclude is None else exclude.containment is not None
    return {rule: n for rule, n in counts.items() if rule != "containment" or containment}


def removed_benchmark_entry(switched_on: bool, held_out_papers: HeldOut | None,
                            reasons: list[str | None]) -> dict[str, dict[str, int] | None]:
    """The `removed_benchmark_by` entry of both co-citation inputs' ingest report (`aspire.data.cocite.ingest_records`,
    `aspire.data.s2orc.mine_s2orc`): none when `ingest.exclude_benchmark_papers` is off (`switched_on` False);
    null when it is on but no `held_out_papers` were given; else the papers taken out per rule (`reasons`, one a
    paper: `removed_by`, each rule `held_out_papers` runs counted, zero included)."""
    if not switched_on:
        return {}
    return {"removed_benchmark_by": None if held_out_papers is None else removed_by(reasons, held_out_papers)}


def take_out(cited: list[str], benchmark: Container[str], counts: Counter, removed: set[str]) -> tuple[list[str], int]:
    """`cited` (one co-citation's paper ids) less the `benchmark` papers among them -> (the rest, how many went),
    counted as both co-citation inputs count them: `records_citing_benchmark`, `benchmark_citations_removed`, and
    each paper taken out added to `removed`."""
    dropped = [pid for pid in cited if pid in benchmark]
    if dropped:
        counts["records_citing_benchmark"] += 1
        counts["benchmark_citations_removed"] += len(dropped)
        removed.update(dropped)
    return [pid for pid in cited if pid not in benchmark], len(dropped)


def abstract_key(abstract: object) -> str:
    """The first `ABSTRACT_KEY_CHARS` characters of an abstract's normalised text (`normalise_title`; a list of
    sentences is joined first), so two versions of one abstract with a word changed past them are one; "" for an
    abstract that is not text or has no letter or digit a-z / 0-9 (it names nothing)."""
    if isinstance(abstract, (list, tuple)):
        abstract = " ".join(s for s in abstract if isinstance(s, str))
    return normalise_title(abstract)[:ABSTRACT_KEY_CHARS] if isinstance(abstract, str) else ""


def same_work_groups(papers: dict[str, Paper]) -> list[list[str]]:
    """The papers that are one work under several ids, as disjoint groups (sorted ids, groups sorted) of two or more:
    papers sharing a normalised title (`normalise_title`) or an `abstract_key` are one work, and so,
    in turn, are the works they share one with. In the ACL co-citation data P05-1018 and its journal version
    J08-1001 share a title; `nearest` made each the other's first negative. A title or abstract that normalises to ""
    names nothing (five papers of that file have no title)."""
    by_key: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pid in sorted(papers):
        paper = papers[pid]
        for kind, key in (("title", normalise_title(paper.title)), ("abstract", abstract_key(paper.sentences))):
            if key:
                by_key[kind, key].append(pid)
    work: dict[str, set[str]] = {}  # paper -> its group so far
    for ids in by_key.values():
        if len(ids) > 1:
            group = set(ids).union(*(work.get(pid, ()) for pid in ids))
            work.update(dict.fromkeys(group, group))
    return [list(ids) for ids in sorted({tuple(sorted(group)) for group in work.values()})]


@dataclass(frozen=True)
class HeldOut:
    """The papers training must not see, four ways, so that no one field can hide a paper: normalised `titles`,
    `paper_ids` (ids of the sources that share the benchmarks' ids: the ACL Anthology's and the co-citation
    data's), `abstracts` (`abstract_key`s) and `containment` (None, or a rule with `matches(abstract) -> bool`
    and `union`: `aspire.benchmarks.heldout.Containment`, the word 5-gram containment of a benchmark abstract in
    the paper's, which catches a reworded or retitled version the abstract key misses). A title or abstract that
    normalises to "" names nothing (a Chinese title, an empty one); the other fields still do. A member that is
    not a string is a TypeError, a title that is not normalised (`normalise_title`) or an abstract that is not an
    `abstract_key` a ValueError: either would match no paper. Hashable: `read_acl`'s cache keys on it."""

    titles: frozenset[str] = frozenset()
    paper_ids: frozenset[str] = frozenset()
    abstracts: frozenset[str] = frozenset()
    containment: object = None

    def __post_init__(self) -> None:
        for name in ("titles", "paper_ids", "abstracts"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)):  # frozenset("bert") is {"b", "e", "r", "t"}: nothing a paper has
                raise TypeError(f"HeldOut.{name} must be a collection of strings, got one {type(value).__name__} "
                                f"{value!r}")
            value = frozenset(value) - {""}
            odd = sorted((x for x in value if not isinstance(x, str)), key=repr)
            if odd:
                raise TypeError(f"HeldOut.{name} must be a collection of strings, holds {type(odd[0]).__name__} "
                                f"{odd[0]!r}")
            key = {"titles": normalise_title, "abstracts": abstract_key}.get(name)
            raw = sorted(x for x in value if key is not None and key(x) != x)
            if raw:
                what = "a normalised title" if name == "titles" else "an abstract key"
                raise ValueError(f"HeldOut.{name} holds {raw[0][:80]!r}, not {what} (`{key.__name__}` gives "
                                 f"{key(raw[0])[:80]!r}): it would match no paper")
            object.__setattr__(self, name, value)

    @property
    def by_title_only(self) -> bool:
        return not (self.paper_ids or self.abstracts or self.containment is not None)

    def reason(self, paper_id: object, title: object, abstract: object) -> str | None:
        """Why a paper is held out (the first of `REMOVED_BY` that matches), or None when it is not. An integer
        `paper_id` is matched as its string, the id `paper_from_record` gives the paper."""
        if isinstance(paper_id, int) and not isinstance(paper_id, bool):
            paper_id = str(paper_id)
        if isinstance(title, str) and normalise_title(title) in self.titles:
            return "title"
        if isinstance(paper_id, str) and paper_id in self.paper_ids:
            return "paper_id"
        if self.abstracts and abstract_key(abstract) in self.abstracts:  # "" is never among them
            return "abstract"
        if self.containment is not None and self.containment.matches(abstract):
            return "containment"
        return None

    def union(self, other: HeldOut) -> HeldOut:
        rules = [r for r in (self.containment, other.containment) if r is not None]
        return HeldOut(self.titles | other.titles, self.paper_ids | other.paper_ids, self.abstracts | other.abstracts,
                       rules[0].union(rules[1]) if len(rules) == 2 else (rules or [None])[0])


def held_out(exclude: HeldOut | frozenset[str]) -> HeldOut:
    """`exclude` as a `HeldOut`: a set of normalised titles is titles only (what callers gave before ids and
    abstracts were matched too). A string is a TypeError (its characters were taken for titles)."""
    if isinstance(exclude, (str, bytes)):
        raise TypeError(f"exclude must be a HeldOut or a set of normalised titles, got one {type(exclude).__name__} "
                        f"{exclude!r}")
    return exclude if isinstance(exclude, HeldOut) else HeldOut(titles=frozenset(exclude))


SPLITTER_LIBRARIES = ("pysbd", "scispacy", "spacy")  # what the registry's splitters run on


def splitter_version() -> str:
    """A digest of what a split depends on besides the text: the splitters' code (`aspire.data.sentences`, and the
    visible-character rule it cuts by, `aspire.data.guards`) and the versions of the libraries they run on. A cache
    keyed by the splitter's name alone kept serving the old cuts after a guard rule or a library changed, while
    every other reader split by the new ones."""
    from aspire.data import guards, sentences

    digest = hashlib.sha256(Path(sentences.__file__).read_bytes())
    digest.update(Path(guards.__file__).read_bytes())
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


def _read_split_cache(cache: Path, warn: bool = True) -> dict:
    """The split cache's `{paper_id: [text hash, sentences]}`; one that cannot be read (damaged, not an object) is
    a warning naming it (so is a bare NaN / Infinity, which `write_json` never writes; no warning without `warn`), and
    every abstract is split again (it was a raw JSONDecodeError or AttributeError)."""
    if not cache.is_file():
        return {}
    try:
        return read_json(cache, "sentence cache", mapping=True, finite=True)
    except (ValueError, OSError) as err:
        if warn:
            log.warning("sentence cache not used, %s: splitting again and rewriting it", err)
        return {}


SPLIT_CACHE_WAIT_S = 60.0  # how long a writer of a split cache waits for another one's write (seconds, then a warning)


def _write_split_cache(cache: Path, read: dict, split: dict) -> None:
    """Write the split cache `cache`: the entries `read` from it before splitting, those another process wrote
    there since (read again now, so that runs splitting at once keep each other's), and the ones `split` since, which
    win (the text this process split). The write replaces the whole file (`write_json`: a temporary file renamed over
    it); the reading again and the write hold the lock file `CACHE.lock` (waiting up to `SPLIT_CACHE_WAIT_S`, then
    an OSError, as is a lock that cannot be made in a read-only folder)."""
    from filelock import FileLock  # imported here: most runs split nothing

    with FileLock(cache.with_name(f"{cache.name}.lock"), timeout=SPLIT_CACHE_WAIT_S):
        write_json(cache, {**read, **_read_split_cache(cache, warn=False), **split}, indent=None)


def _cached_sentences(entry: object, key: str) -> list[str] | None:
    """The sentences a cache entry holds for the text hashed `key`, None for a miss: another text, or an entry that
    is not `[key, [sentence, ...]]` (a damaged one was an IndexError, or rejected the paper as a bad record)."""
    if isinstance(entry, list) and len(entry) == 2 and entry[0] == key and isinstance(entry[1], list) and all(
            isinstance(s, str) for s in entry[1]):
        return entry[1]
    return None


def read_acl(path: str | Path, exclude: HeldOut | frozenset[str], max_papers: int,
             ids: Collection[str] | None = None, records: list[tuple[int, dict]] | None = None
             ) -> tuple[list[Paper], dict]:
    """ACL Anthology papers without the `exclude`d ones (a `HeldOut`: by normalised title, paper id, abstract
    text or containment; a set of normalised titles: by title alone), read from the raw records before any sampling or
    splitting: a sample of `max_papers` (0 = all; a negative or non-integer count is a ValueError) drawn with seed 0, the same papers for every caller, their abstracts split into sentences by the default
    splitter (built once), and the counts read / removed. `path` is JSONL, gzipped when it ends in `.gz`; an
    abstract that is already a list of sentences is kept as is. `stats["removed_benchmark"]` counts the papers
    removed; where `exclude` matches ids or abstracts too, `stats["removed_benchmark_by"]` splits it by the first
    rule that matched (`REMOVED_BY`, `removed_by`: a paper counted under "paper_id", "abstract" or "containment" is
    one a title match alone keeps). Split abstracts are cached on disk (`split_cache_path`), so only a corpus's first run pays for the
    splitting (about 10 ms an abstract); runs that split at once each add theirs to the cache (`_write_split_cache`);
    a cache that cannot be read or written is a warning, not an error. Each
    paper keeps the record's other fields (`authors`, `year`, ...) in `Paper.extra`. A record that is not a valid
    paper is left out, named with its reason in `stats["rejected"]` (and logged); a paper id (as the paper gets it: `42`
    is "42") that two valid records use is a ValueError naming both lines, whatever the sample: every record of the file that is not
    held out is checked before the sample is drawn (no splitting needed: a split has a sentence, and each sentence a
    visible character, exactly when the whole text has one), so the same bad records are named whatever `max_papers`,
    and the sample is drawn from the valid papers only (`max_papers` of them where the file holds that many).
    `ids` (paper ids as the papers get them): only the papers of the sample among them are split and returned, in
    the sample's order and as the whole sample has them (the file is checked and the sample drawn as without it;
    `stats["used"]` counts the papers returned), so a reader that needs a known few of the file's 59,416 abstracts
    does not split them all; the cache keeps what any call split, and a later call splits only what it lacks.
    How many abstracts are to be split is logged when the splitting starts, and where they were cached when it ends.

    The train and dev splits of a run read the abstracts once: the result is kept in memory for the file as it
    is on disk (its path, size and modification time), so a file rewritten in place is read again. Each call
    gets its own list and stats, so a caller that reorders or edits them changes no other caller's.
    `records`: the file's `jsonl_objects(path)`, already read by a caller that reads them for more than the papers
    (`aspire.evaluate.probes.acl_index`): the file is not parsed again, nor the result kept, and the records are left
    as they were (their abstracts are not replaced by the sentences)."""
    try:
        if isinstance(max_papers, bool) or operator.index(max_papers) < 0:
            raise TypeError
    except TypeError:
        raise ValueError(f"max_papers must be a whole number of papers, 0 or more (0 = all), got {max_papers!r}"
                         ) from None
    max_papers = operator.index(max_papers)
    path = Path(path)
    stat = path.stat()  # a missing file: FileNotFoundError naming it, as the reading would
    if isinstance(ids, (str, bytes)):  # its characters would be taken for ids
        raise TypeError(f"ids must be a collection of paper ids, got one {type(ids).__name__} {ids!r}")
    ids = None if ids is None else frozenset(ids)
    if records is None:
        papers, stats = _read_acl(str(path), os.path.abspath(path), stat.st_size, stat.st_mtime_ns, held_out(exclude),
                                  max_papers, ids)
    else:
        papers, stats = _acl_papers(path, records, held_out(exclude), max_papers, ids, own=False)
    stats = {**stats, "rejected": dict(stats["rejected"])}
    if "removed_benchmark_by" in stats:
        stats["removed_benchmark_by"] = dict(stats["removed_benchmark_by"])
    return list(papers), stats


class _WholeText(SentenceSplitter):
    """A text as one sentence: what `read_acl` checks a record with before it samples (no splitter runs). A real
    split of a text gives no sentence, or one without a visible character, exactly when this one does
    (`SentenceSplitter.spans`), so the record is refused the same."""

    name = "whole-text"

    def starts(self, text: str) -> list[int]:
        return []


_WHOLE_TEXT = _WholeText()


@functools.lru_cache(maxsize=4)
def _read_acl(path: str, where: str, size: int, mtime_ns: int, exclude: HeldOut, max_papers: int,
              ids: frozenset[str] | None) -> tuple[list[Paper], dict]:
    """`read_acl`'s reading of `path` (named as given in messages), cached by the file's absolute path `where`,
    size and modification time as well (those three are read only by the cache's key)."""
    path = Path(path)
    records = list(jsonl_objects(path))  # a bad line or a damaged .gz: one error naming the file and line
    return _acl_papers(path, records, exclude, max_papers, ids, own=True)


def _acl_papers(path: Path, records: list[tuple[int, dict]], exclude: HeldOut, max_papers: int,
                ids: frozenset[str] | None, own: bool) -> tuple[list[Paper], dict]:
    """`read_acl`'s papers of `records` (`jsonl_objects(path)`). The sampled records' abstracts are replaced by their
    sentences: in place where the records are this call's own (`own`; copying all 59,416 took 0.3 s of collecting
    garbage), in copies where a caller gave them."""
    reasons = [exclude.reason(r.get("paper_id"), r.get("title"), r.get("abstract")) for _, r in records]
    kept = [record for record, why in zip(records, reasons) if why is None]
    stats = {"read": len(records), "removed_benchmark": len(records) - len(kept)}
    if not exclude.by_title_only:
        stats["removed_benchmark_by"] = removed_by(reasons, exclude)
    rejected = {}
    valid = []
    first_line: dict[str, int] = {}
    for n, r in kept:  # checked before sampling: which bad records are named must not depend on the sample
        try:
            pid = paper_from_record(r, _WHOLE_TEXT, where=f"{path}:{n}").paper_id
        except ValueError as bad:
            rejected[f"{path}:{n}"] = str(bad)
            continue
        if pid in first_line:  # two papers under one id, whether or not both fall in the sample: the file is wrong
            raise ValueError(f"{path}: paper id {pid!r} is used by two records (lines {first_line[pid]} and {n})")
        first_line[pid] = n
        valid.append((n, r))
    kept = valid
    if max_papers and len(kept) > max_papers:
        kept = random.Random(0).sample(kept, max_papers)
    if ids is not None:  # the sample's papers among `ids`: the others are not split
        line_ids = {n: pid for pid, n in first_line.items()}
        kept = [(n, r) for n, r in kept if line_ids[n] in ids]
    if not own:  # the caller's records keep their abstracts
        kept = [(n, dict(r)) for n, r in kept]
    cache = split_cache_path(path, DEFAULT_SPLITTER)
    cached = _read_split_cache(cache)
    todo = []  # (record, paper id, text hash) of each abstract the cache lacks
    for _, r in kept:
        text, pid = r.get("abstract"), r.get("paper_id")
        pid = str(pid) if isinstance(pid, int) and not isinstance(pid, bool) else pid  # the id the paper gets
        if isinstance(text, str) and isinstance(pid, str) and not SURROGATE.search(text):
            key = hashlib.sha1(text.encode()).hexdigest()[:12]
            if _cached_sentences(cached.get(pid), key) is None:  # a changed text is split again
                todo.append((r, pid, key))
            else:
                r["abstract"] = cached[pid][1]
    if todo:  # about 10 ms an abstract: a first run over the whole file is minutes, said before, not only after
        log.info("splitting %d abstracts of %s into sentences (about %d s; once: they are cached)", len(todo),
                 path, max(1, round(len(todo) * 0.01)))
        splitter = get_splitter()
        split = {}
        for r, pid, key in todo:
            split[pid] = [key, splitter.split(r["abstract"])]
            r["abstract"] = split[pid][1]
        try:  # another run may have cached abstracts since `cached` was read: its entries are kept
            _write_split_cache(cache, cached, split)
            log.info("split %d abstracts of %s; cached in %s", len(todo), path, cache)
        except OSError as err:  # a read-only or full folder, a lock held too long: the run goes on, splitting again
            log.warning("split abstracts of %s not cached: %s (%s)", path, cache, err)
    papers = []
    for n, r in kept:  # the split sentences (or a cache's) checked again as the paper is made
        try:
            text = r.get("abstract")
            if isinstance(text, str) and SURROGATE.search(text):  # not split (nor hashed): it is no Unicode text
                pid = r.get("paper_id")
                raise ValueError(f"{path}:{n}{f' (paper_id {pid!r})' if isinstance(pid, (str, int)) else ''}: "
                                 f"abstract {invisible_text_reason(text)}")
            papers.append(paper_from_record(r, where=f"{path}:{n}"))
        except ValueError as bad:  # one bad record does not stop a run: it is named and counted
            rejected[f"{path}:{n}"] = str(bad)
    if rejected:
        log.warning("%s: %d record(s) rejected: %s", path, len(rejected), "; ".join(rejected.values()))
    stats.update(used=len(papers), rejected=rejected)
    return papers, stats


read_acl.cache_clear = _read_acl.cache_clear  # tests and long-lived callers may drop what is held
