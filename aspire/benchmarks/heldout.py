"""What training must never see of the benchmarks: every benchmark paper, per benchmark (CSFCube, the reviewer
set's submissions and archives, the papers cited by context2doc's test sentences, and the dev and test papers of
the SciRepEval formats on the ACL abstracts: venue, year, same-author, `aspire.benchmarks.acl_formats`), named
four ways (`aspire.data.acl.HeldOut`, from `excluded_papers`): by normalised title, by paper id where a
training source shares the benchmark's ids (the formats' ACL ids; the context2doc papers' co-citation ids, which
are Anthology ids too), by normalised abstract text (`aspire.data.acl.abstract_key`), and by containment: a
training abstract holding at least half of a benchmark abstract's distinct word 5-grams (`Containment`,
`containment`), which catches a reworded or retitled version the other three miss (another version of the same
work: CSFCube's 9223911 is in P07-1004 at 0.68). Every training source
that reads abstracts (the `crop`, `title`, `author` and `distill` tasks' co-citation and ACL sources, the teacher,
self-training's ACL queries) leaves out a paper any of the four matches, so an empty or missing title cannot
hide one (J05-1004, C04-1073 and C04-1100, cited by context2doc test sentences, have an empty title in the
co-citation file). The context2doc test sentences themselves are `aspire.benchmarks.context2doc.held_out_for`.
The co-citation pipeline (`aspire.data.cocite.ingest_records`) and the `context2doc` task leave out the papers of
CSFCube and the reviewer set the same four ways (`cited_benchmark_papers`); they keep the papers cited by
context2doc's test sentences, that benchmark's candidates, by design.

A title match misses a benchmark paper's text under another title (a renamed camera-ready, a journal version, an
Anthology record carrying another paper's abstract: CSFCube's 174798289 is P19-1506, "Like a Baby", and the
same-author test paper 2022.deeplo-1.1's abstract is 2022.deeplo-1.22's), so `benchmark_titles` also names the
ACL papers whose abstract is a benchmark paper's (`abstract_twin_titles`), and the abstract rule removes them
from any source."""

from __future__ import annotations

import functools
import json
import logging
import re
import unicodedata
from collections import Counter
from pathlib import Path

from aspire.benchmarks.acl_formats import ACL_FILE, SPLIT_FILE, check_source, heldout_ids
from aspire.benchmarks.context2doc import load_split as load_c2d_split
from aspire.benchmarks.context2doc import read_records
from aspire.benchmarks.reviewers import load_reviewer_set
from aspire.data.acl import ABSTRACT_KEY_CHARS, HeldOut, abstract_key, normalise_title
from aspire.data.papers import jsonl_objects

log = logging.getLogger(__name__)
TWIN_PREFIX = ABSTRACT_KEY_CHARS  # normalised characters of two abstracts that must agree (`abstract_twin_titles`)
GRAM_WORDS = 5  # words a gram of the containment rule
CONTAINMENT = 0.5  # the containment rule's cut: below 0.5, different ACL papers sharing shared-task boilerplate match
CITED_BENCHMARKS = ("csfcube", "reviewer")  # the benchmarks whose papers no co-citation example may name
WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """Lower-cased `\\w+` words of `text`, after Unicode NFC: a word written with a combining accent (`"e\\u0301"`,
    which `\\w` would cut in two) is the word written with the accented letter, as `aspire.benchmarks.same_author`
    compares names."""
    return WORD.findall(unicodedata.normalize("NFC", text).lower())


def ngrams(text: str, n: int = GRAM_WORDS) -> frozenset[str]:
    """The distinct word `n`-grams of `text` (words joined by one space: `_gram_tuples`, joined); empty for fewer
    than `n` words. An `n` below 1 is a ValueError."""
    return frozenset(" ".join(g) for g in _gram_tuples(text, n))


def containment(a: str, b: str, n: int = GRAM_WORDS) -> float | None:
    """|G(a) & G(b)| / |G(a)|, G the distinct word `n`-grams: how much of `a` is in `b`; None when `a` has none."""
    ga = ngrams(a, n)
    return len(ga & ngrams(b, n)) / len(ga) if ga else None


class GramIndex:
    """The `n`-grams of many short texts (the benchmarks), so one pass over a training text gives the containment
    of every benchmark text in it: `contained(text)` -> {benchmark row: containment}, rows with none left out."""

    def __init__(self, texts: list[str], n: int = GRAM_WORDS) -> None:
        _check_n(n)
        self.n = n
        self.sizes = [0] * len(texts)
        self.postings: dict[tuple[str, ...], list[int]] = {}
        for row, text in enumerate(texts):
            grams = _gram_tuples(text, n)
            self.sizes[row] = len(grams)
            for g in grams:
                self.postings.setdefault(g, []).append(row)

    def contained(self, text: str) -> dict[int, float]:
        shared: Counter[int] = Counter()
        postings = self.postings
        for g in _gram_tuples(text, self.n) & postings.keys():  # the grams some benchmark text has
            shared.update(postings[g])
        return {row: k / self.sizes[row] for row, k in shared.items()}


def _gram_tuples(text: str, n: int) -> set[tuple[str, ...]]:
    """The distinct word `n`-grams of `text` as tuples of `words` (`ngrams` joins them; the index's inner loop over
    every training abstract does not). An `n` below 1 is a ValueError (no gram has no word)."""
    _check_n(n)
    w = words(text)
    return set(zip(*(w[i:] for i in range(n))))


def _check_n(n: object) -> None:
    """A gram's word count `n` must be an int of at least 1 (no gram has no word): a ValueError naming it."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"word grams of n={n!r} words: n must be an int of at least 1")


def _text(abstract: object) -> str:
    """An abstract as one text: a list of sentences joined by spaces; "" for anything else that is not text."""
    if isinstance(abstract, (list, tuple)):
        return " ".join(s for s in abstract if isinstance(s, str))
    return abstract if isinstance(abstract, str) else ""


class Containment:
    """The containment rule of `aspire.data.acl.HeldOut`: a training abstract is a benchmark paper's when it holds
    at least `threshold` of some benchmark abstract's distinct word `n`-grams (`containment`, by one pass over its
    grams: `GramIndex`), so a reworded or retitled version of it is one too (CSFCube's 9223911 in P07-1004, 0.68).
    A benchmark abstract of fewer than `n` words has no gram and matches nothing. Equal (and hashed) by its texts,
    threshold and `n`, so `read_acl`'s cache keys on it."""

    def __init__(self, texts, threshold: float = CONTAINMENT, n: int = GRAM_WORDS) -> None:
        if not 0 < threshold <= 1:
            raise ValueError(f"containment threshold must be in (0, 1], got {threshold!r}")
        self.texts = frozenset(t for t in (_text(x) for x in texts) if t.strip())
        self.threshold, self.n = float(threshold), n
        self._rows = sorted(self.texts)
        self.index = GramIndex(self._rows, n)
        self._key = (self.texts, self.threshold, self.n)

    def score(self, abstract: object) -> float:
        """The largest containment of a benchmark abstract in `abstract` (text or sentences); 0.0 for none."""
        return max(self.index.contained(_text(abstract)).values(), default=0.0)

    def matches(self, abstract: object) -> bool:
        return self.score(abstract) >= self.threshold

    def union(self, other: "Containment") -> "Containment":
        if (other.threshold, other.n) != (self.threshold, self.n):
            raise ValueError(f"containment rules of threshold/n {self.threshold}/{self.n} and "
                             f"{other.threshold}/{other.n} cannot be joined")
        return Containment(self.texts | other.texts, self.threshold, self.n)

    def __len__(self) -> int:
        return len(self.texts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Containment) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"Containment({len(self.texts)} abstracts, threshold={self.threshold}, n={self.n})"


def benchmark_titles(root: str | Path) -> dict[str, frozenset[str]]:
    """Normalised titles of every benchmark paper under `root` (`../shared/data`), per benchmark: the ranking
    benchmarks' (`ranking_titles`), the SciRepEval formats' dev and test papers (`format_titles`), and the titles
    of the ACL papers that carry one of those papers' abstracts under a title none of them has
    (`abstract_twins`, `abstract_twin_titles`)."""
    return _benchmarks(root)[0]


@functools.lru_cache(maxsize=4)  # the train and dev splits of a run, and every source, read them once
def _benchmarks(root: str | Path) -> tuple[dict[str, frozenset[str]], frozenset[str], Containment]:
    """(`benchmark_titles`, `benchmark_abstracts`, the containment rule over the same abstracts) of `root`, from one
    reading of the ACL file and one of the benchmarks' abstracts (the twins' titles are found with the same abstract
    keys)."""
    papers = acl_papers(root)
    texts = _abstract_texts(Path(root), SPLIT_FILE, papers)
    keys = frozenset(abstract_key(t) for t in texts) - {""}
    titles = {**ranking_titles(root), "scirepeval_formats": format_titles(root, papers=papers)}
    twins = _twin_titles(papers, keys) - frozenset().union(*titles.values())
    return {**titles, "abstract_twins": twins}, keys, Containment(texts)


def acl_papers(root: str | Path, split_file: str | Path = SPLIT_FILE) -> list[tuple[object, object, object]]:
    """(paper_id, title, abstract) of the ACL records (`root/acl-anthology`) that have an abstract, from the file
    the split was made from (`check_source`: another file would hold other titles for the held-out ids)."""
    path = Path(root) / "acl-anthology" / ACL_FILE
    check_source(path, split_file)
    return [(r.get("paper_id"), r.get("title"), r["abstract"]) for _, r in jsonl_objects(path) if r.get("abstract")]


def benchmark_abstracts(root: str | Path, split_file: str | Path = SPLIT_FILE,
                        papers: list[tuple[object, object, object]] | None = None) -> frozenset[str]:
    """The `abstract_key` of every benchmark paper's abstract under `root`: a CSFCube paper, a reviewer-set
    submission or archive paper, a paper cited by a context2doc test sentence, a dev or test paper of the
    SciRepEval formats (read from `root/acl-anthology`; `papers`: `acl_papers(root, split_file)`, when read
    already). An abstract with no key ("") names nothing."""
    texts = _abstract_texts(Path(root), split_file, papers if papers is not None else acl_papers(root, split_file))
    return frozenset(abstract_key(t) for t in texts) - {""}


def _abstract_texts(root: Path, split_file: str | Path, papers: list[tuple[object, object, object]]) -> list[object]:
    """Every benchmark paper's abstract as read (text or sentences), one entry a paper and benchmark
    (`benchmark_abstracts`' papers; `papers`: `acl_papers(root, split_file)`)."""
    texts = _cited_benchmark_texts(root)
    texts += [c.get("abstract") for c in _context2doc_test_cited(root)]
    held = heldout_ids(split_file)
    return texts + [abstract for pid, _, abstract in papers if pid in held]


def _cited_benchmark_texts(root: Path, ids: set[str] | None = None) -> list[object]:
    """The abstracts of CSFCube's papers and of the reviewer set's submissions and archive papers (`CITED_BENCHMARKS`);
    their paper ids are added to `ids` when given."""
    texts, ids = [], ids if ids is not None else set()
    for line in open(root / "csfcube" / "abstracts-csfcube-preds.jsonl", encoding="utf-8"):
        if line.strip():
            record = json.loads(line)
            texts.append(record["abstract"])
            ids.add(str(record["paper_id"]))
    for draw in load_reviewer_set(root / "reviewer-matching").draws:
        for pid, (_, abstract) in draw.submissions.items():
            texts.append(abstract)
            ids.add(pid)
        for papers in draw.archives.values():
            texts += [p[2] for p in papers]
            ids |= {p[0] for p in papers}
    return texts


def _context2doc_test_cited(root: Path) -> list[dict]:
    """The cited papers (`{paper_id, title, abstract}`) of context2doc's test sentences, one entry a citation."""
    source = root / "cocite-acl" / "cocitations.jsonl"
    test = set(load_c2d_split(source=source)["splits"]["test"]["queries"])
    return [c for qid, rec in read_records(source) if qid in test for c in rec["cited"]]


def benchmark_ids(root: str | Path, split_file: str | Path = SPLIT_FILE) -> dict[str, frozenset[str]]:
    """The paper ids of the benchmark papers whose ids a training source shares, per benchmark: the papers cited by
    context2doc's test sentences (co-citation ids, Anthology ids) and the formats' dev and test papers (ACL ids).
    CSFCube's and the reviewer set's ids are Semantic Scholar's and OpenReview's, which no source uses: their
    papers are named by title and abstract."""
    cited = {c["paper_id"] for c in _context2doc_test_cited(Path(root)) if isinstance(c.get("paper_id"), str)}
    return {"context2doc_test": frozenset(cited), "scirepeval_formats": heldout_ids(split_file)}


def abstract_twin_titles(root: str | Path, split_file: str | Path = SPLIT_FILE,
                         papers: list[tuple[object, object, object]] | None = None) -> frozenset[str]:
    """Normalised titles of the ACL papers (`root/acl-anthology`) whose abstract is a benchmark paper's
    (`benchmark_abstracts`). Two abstracts are one when their `abstract_key`s (the first `TWIN_PREFIX` characters
    of their normalised text, `normalise_title`: lower case, letters and digits only) agree, so a version with a
    word changed near its end is one too (2019.iwslt-1.25 carries dev paper 2019.iwslt-1.10's abstract, reworded
    at character 692). A paper's own title is among them. `papers`: `acl_papers(root, split_file)`, when read
    already."""
    papers = papers if papers is not None else acl_papers(root, split_file)
    return _twin_titles(papers, benchmark_abstracts(root, split_file, papers))


def _twin_titles(papers: list[tuple[object, object, object]], keys: frozenset[str]) -> frozenset[str]:
    """Normalised titles of the `papers` (`acl_papers`) whose `abstract_key` is one of `keys`."""
    return frozenset(normalise_title(title) for _, title, abstract in papers
                     if isinstance(title, str) and abstract_key(abstract) in keys) - {""}


def format_titles(root: str | Path, split_file: str | Path = SPLIT_FILE,
                  papers: list[tuple[object, object, object]] | None = None) -> frozenset[str]:
    """Normalised titles of the venue / year / same-author dev and test papers (ids in the committed split),
    read from `root/acl-anthology` (`papers`: `acl_papers(root, split_file)`, when read already)."""
    held = heldout_ids(split_file)
    papers = papers if papers is not None else acl_papers(root, split_file)
    return frozenset(normalise_title(title) for pid, title, _ in papers  # a record without a string title is no training paper
                     if pid in held and isinstance(title, str)) - {""}


@functools.lru_cache(maxsize=4)
def ranking_titles(root: str | Path) -> dict[str, frozenset[str]]:
    """Normalised titles of the ranking benchmarks' papers under `root`: CSFCube, the reviewer set, the papers
    cited by context2doc's test sentences."""
    root = Path(root)
    csf = {normalise_title(json.loads(line)["title"])
           for line in open(root / "csfcube" / "abstracts-csfcube-preds.jsonl", encoding="utf-8") if line.strip()}
    reviewer = set()
    for draw in load_reviewer_set(root / "reviewer-matching").draws:
        reviewer |= {normalise_title(title) for title, _ in draw.submissions.values()}
        reviewer |= {normalise_title(p[1]) for papers in draw.archives.values() for p in papers}
    cited = {normalise_title(c.get("title") or "") for c in _context2doc_test_cited(root)}
    return {name: frozenset(titles - {""}) for name, titles in (("csfcube", csf), ("reviewer", reviewer),
                                                               ("context2doc_test", cited))}


@functools.lru_cache(maxsize=4)
def benchmark_papers(root: str | Path) -> HeldOut:
    """Every benchmark paper under `root`, by normalised title (`benchmark_titles`), by paper id (`benchmark_ids`),
    by abstract text (`benchmark_abstracts`) and by containment (`Containment` over the same abstracts, at
    `CONTAINMENT`)."""
    titles, abstracts, rule = _benchmarks(root)
    return HeldOut(frozenset().union(*titles.values()), frozenset().union(*benchmark_ids(root).values()), abstracts,
                   rule)


def reworded_test_sentences(records_path: str | Path, data: str | Path, threshold: float = CONTAINMENT) -> set[str]:
    """The citing sentences (stripped) of the co-citation records in `records_path` that are reworded copies of a
    context2doc test query: their query text (`query_text`) holds at least `threshold` of the test query's distinct
    word 5-grams and they cite one of its papers, the rule the `context2doc` task leaves them out by
    (`aspire.train.tasks.reworded_test_twins`). `held_out_for` gives the test sentences and their twins that differ
    only in their markers; P13-1066's "There have been various extensions to multi-grain (Titov and McDonald, 2008),
    labeled (Ramage et al, 2009), and sequential ..." (test query L236 less one clause, citing its two papers) reached
    the co-citation examples of that pair. The test queries are read under `data` (`data/cocite-acl`); none there,
    none held out. A line that is no such record is passed over here: the ingest stage names it."""
    from aspire.benchmarks.context2doc import held_out_queries, query_text

    if not (Path(data) / "cocite-acl" / "cocitations.jsonl").is_file():
        return set()
    tests = held_out_queries(Path(data) / "cocite-acl")
    ids = sorted(tests)
    index = GramIndex([tests[qid][0] for qid in ids])
    found = set()
    with open(records_path, "rb") as handle:
        for raw in handle:
            try:
                rec = json.loads(raw)
            except (ValueError, RecursionError):  # not UTF-8 or not JSON: the ingest stage names the line
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("context"), str) or \
                    not isinstance(rec.get("cited"), list):
                continue
            cited = {c.get("paper_id") for c in rec["cited"] if isinstance(c, dict)}
            if any(c >= threshold and not tests[ids[row]][1].isdisjoint(cited)
                   for row, c in index.contained(query_text(rec["context"])).items()):
                found.add(rec["context"].strip())
    return found


@functools.lru_cache(maxsize=4)
def cited_benchmark_papers(root: str | Path, threshold: float = CONTAINMENT) -> HeldOut:
    """The papers of `CITED_BENCHMARKS` under `root` (CSFCube's papers, the reviewer set's submissions and archive
    papers), four ways (`HeldOut`): normalised title, paper id, `abstract_key` and the containment rule at
    `threshold` (`Containment`): what the co-citation pipeline and the `context2doc` task leave out of the papers
    they train on. The papers cited by context2doc's test sentences are not among them: that benchmark's candidates
    are trained on by design. A missing benchmark folder is a FileNotFoundError naming it."""
    root = Path(root)
    for name in ("csfcube", "reviewer-matching"):
        if not (root / name).is_dir():
            raise FileNotFoundError(f"{root / name}: no such benchmark folder (the held-out papers of "
                                    f"{', '.join(CITED_BENCHMARKS)} are read from {root})")
    ids: set[str] = set()
    texts = _cited_benchmark_texts(root, ids)
    titles = ranking_titles(root)
    return HeldOut(frozenset().union(*(titles[b] for b in CITED_BENCHMARKS)), frozenset(ids),
                   frozenset(abstract_key(t) for t in texts), Containment(texts, threshold))


def not_removed(off: str, papers: str, switch_on: str) -> str:
    """The one wording of a held-out check that is off, for every layer that warns of one: "`off`: `papers` are NOT
    removed; `switch_on`" (`off`: what is off; `papers`: what training may then see; `switch_on`: how to switch it
    on)."""
    return f"{off}: {papers} are NOT removed; {switch_on}"


def null_benchmarks_dir(what: str, papers: str = "benchmark papers") -> str:
    """`not_removed` for a benchmarks folder setting `what` that is null (`excluded_papers`, `excluded_titles`, the
    `context2doc` task's `cited_benchmark_papers`)."""
    return not_removed(f"{what} is null", papers, "set it to the benchmarks' data folder (../shared/data) to remove them")


def excluded_papers(benchmarks_dir: str | Path | None, what: str) -> tuple[HeldOut, dict[str, int]]:
    """Every benchmark paper under `benchmarks_dir` (`benchmark_papers`: what every training source leaves out)
    and the counts: titles per benchmark (as `excluded_titles`), `paper_ids`, `abstracts` (distinct keys) and
    `containment_abstracts` (distinct abstract texts of the containment rule). The containment rule costs about
    3 s to build here and 11 s of CPU a pass over the 59,416 ACL abstracts.
    None removes nothing, with a warning naming `what` (the setting that is null), and counts nothing."""
    if benchmarks_dir is None:
        log.warning("%s", null_benchmarks_dir(what))
        return HeldOut(), {}
    held = benchmark_papers(benchmarks_dir)
    counts = {k: len(v) for k, v in benchmark_titles(benchmarks_dir).items()}
    return held, {**counts, "paper_ids": len(held.paper_ids), "abstracts": len(held.abstracts),
                  "containment_abstracts": len(held.containment)}


def excluded_titles(benchmarks_dir: str | Path | None, what: str) -> tuple[frozenset[str], dict[str, int]]:
    """The normalised titles of every benchmark paper under `benchmarks_dir` and how many each benchmark
    has; None removes nothing, with a warning naming `what` (the setting that is null). Titles alone miss a
    paper whose title is empty or another: training sources use `excluded_papers`."""
    if benchmarks_dir is None:
        log.warning("%s", null_benchmarks_dir(what))
        return frozenset(), {}
    by_benchmark = benchmark_titles(benchmarks_dir)
    return frozenset().union(*by_benchmark.values()), {k: len(v) for k, v in by_benchmark.items()}
