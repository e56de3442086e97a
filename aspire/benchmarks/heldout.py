"""What training must never see of the benchmarks: every benchmark paper, per benchmark (CSFCube, the reviewer
set's submissions and archives, the papers cited by context2doc's test sentences, and the dev and test papers of
the SciRepEval formats on the ACL abstracts: venue, year, same-author, `aspire.benchmarks.acl_formats`), named
three ways (`aspire.data.acl.HeldOut`, from `excluded_papers`): by normalised title, by paper id where a
training source shares the benchmark's ids (the formats' ACL ids; the context2doc papers' co-citation ids, which
are Anthology ids too), and by normalised abstract text (`aspire.data.acl.abstract_key`). Every training source
that reads abstracts (the `crop`, `title`, `author` and `distill` tasks' co-citation and ACL sources, the teacher,
self-training's ACL queries) leaves out a paper any of the three matches, so an empty or missing title cannot
hide one (J05-1004, C04-1073 and C04-1100, cited by context2doc test sentences, have an empty title in the
co-citation file). The context2doc test sentences themselves are `aspire.benchmarks.context2doc.held_out_for`.

A title match misses a benchmark paper's text under another title (a renamed camera-ready, a journal version, an
Anthology record carrying another paper's abstract: CSFCube's 174798289 is P19-1506, "Like a Baby", and the
same-author test paper 2022.deeplo-1.1's abstract is 2022.deeplo-1.22's), so `benchmark_titles` also names the
ACL papers whose abstract is a benchmark paper's (`abstract_twin_titles`), and the abstract rule removes them
from any source."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

from aspire.benchmarks.acl_formats import ACL_FILE, SPLIT_FILE, check_source, heldout_ids
from aspire.benchmarks.context2doc import load_split as load_c2d_split
from aspire.benchmarks.context2doc import read_records
from aspire.benchmarks.reviewers import load_reviewer_set
from aspire.data.acl import ABSTRACT_KEY_CHARS, HeldOut, abstract_key, normalise_title
from aspire.data.papers import jsonl_objects

log = logging.getLogger(__name__)
TWIN_PREFIX = ABSTRACT_KEY_CHARS  # normalised characters of two abstracts that must agree (`abstract_twin_titles`)


def benchmark_titles(root: str | Path) -> dict[str, frozenset[str]]:
    """Normalised titles of every benchmark paper under `root` (`../shared/data`), per benchmark: the ranking
    benchmarks' (`ranking_titles`), the SciRepEval formats' dev and test papers (`format_titles`), and the titles
    of the ACL papers that carry one of those papers' abstracts under a title none of them has
    (`abstract_twins`, `abstract_twin_titles`)."""
    return _benchmarks(root)[0]


@functools.lru_cache(maxsize=4)  # the train and dev splits of a run, and every source, read them once
def _benchmarks(root: str | Path) -> tuple[dict[str, frozenset[str]], frozenset[str]]:
    """(`benchmark_titles`, `benchmark_abstracts`) of `root`, from one reading of the ACL file and one of the
    benchmarks' abstracts (the twins' titles are found with the same abstract keys)."""
    papers = acl_papers(root)
    keys = benchmark_abstracts(root, papers=papers)
    titles = {**ranking_titles(root), "scirepeval_formats": format_titles(root, papers=papers)}
    twins = _twin_titles(papers, keys) - frozenset().union(*titles.values())
    return {**titles, "abstract_twins": twins}, keys


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
    root = Path(root)
    texts = {abstract_key(json.loads(line)["abstract"])
             for line in open(root / "csfcube" / "abstracts-csfcube-preds.jsonl", encoding="utf-8") if line.strip()}
    for draw in load_reviewer_set(root / "reviewer-matching").draws:
        texts |= {abstract_key(abstract) for _, abstract in draw.submissions.values()}
        texts |= {abstract_key(p[2]) for papers in draw.archives.values() for p in papers}
    texts |= {abstract_key(c.get("abstract")) for c in _context2doc_test_cited(root)}
    held = heldout_ids(split_file)
    texts |= {abstract_key(abstract) for pid, _, abstract in (papers if papers is not None else acl_papers(root, split_file))
              if pid in held}
    return frozenset(texts - {""})


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
    """Every benchmark paper under `root`, by normalised title (`benchmark_titles`), by paper id (`benchmark_ids`)
    and by abstract text (`benchmark_abstracts`)."""
    titles, abstracts = _benchmarks(root)
    return HeldOut(frozenset().union(*titles.values()), frozenset().union(*benchmark_ids(root).values()), abstracts)


def excluded_papers(benchmarks_dir: str | Path | None, what: str) -> tuple[HeldOut, dict[str, int]]:
    """Every benchmark paper under `benchmarks_dir` (`benchmark_papers`: what every training source leaves out)
    and the counts: titles per benchmark (as `excluded_titles`), `paper_ids` and `abstracts` (distinct keys).
    None removes nothing, with a warning naming `what` (the setting that is null), and counts nothing."""
    if benchmarks_dir is None:
        log.warning("%s is null: benchmark papers are NOT removed", what)
        return HeldOut(), {}
    held = benchmark_papers(benchmarks_dir)
    counts = {k: len(v) for k, v in benchmark_titles(benchmarks_dir).items()}
    return held, {**counts, "paper_ids": len(held.paper_ids), "abstracts": len(held.abstracts)}


def excluded_titles(benchmarks_dir: str | Path | None, what: str) -> tuple[frozenset[str], dict[str, int]]:
    """The normalised titles of every benchmark paper under `benchmarks_dir` and how many each benchmark
    has; None removes nothing, with a warning naming `what` (the setting that is null). Titles alone miss a
    paper whose title is empty or another: training sources use `excluded_papers`."""
    if benchmarks_dir is None:
        log.warning("%s is null: benchmark papers are NOT removed", what)
        return frozenset(), {}
    by_benchmark = benchmark_titles(benchmarks_dir)
    return frozenset().union(*by_benchmark.values()), {k: len(v) for k, v in by_benchmark.items()}
