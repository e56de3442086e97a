"""What training must never see of the benchmarks: every benchmark paper's normalised title, per
benchmark (CSFCube, the reviewer set's submissions and archives, the papers cited by context2doc's test
sentences, and the dev and test papers of the SciRepEval formats on the ACL abstracts: venue, year,
same-author, `aspire.benchmarks.acl_formats`). Training tasks and the teacher leave these papers out of the ACL abstracts; the context2doc
test sentences themselves are `aspire.benchmarks.context2doc.held_out_for`.

A title match misses a benchmark paper's text under another title (a renamed camera-ready, a journal version, an
Anthology record carrying another paper's abstract: CSFCube's 174798289 is P19-1506, "Like a Baby", and the
same-author test paper 2022.deeplo-1.1's abstract is 2022.deeplo-1.22's), so `benchmark_titles` also names the
ACL papers whose abstract is a benchmark paper's (`abstract_twin_titles`)."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

from aspire.benchmarks.acl_formats import ACL_FILE, SPLIT_FILE, check_source, heldout_ids
from aspire.benchmarks.context2doc import load_split as load_c2d_split
from aspire.benchmarks.context2doc import read_records
from aspire.benchmarks.reviewers import load_reviewer_set
from aspire.data.acl import normalise_title
from aspire.data.papers import jsonl_objects

log = logging.getLogger(__name__)
TWIN_PREFIX = 200  # normalised characters of two abstracts that must agree (`abstract_twin_titles`)


@functools.lru_cache(maxsize=4)  # the train and dev splits of a run read them once
def benchmark_titles(root: str | Path) -> dict[str, frozenset[str]]:
    """Normalised titles of every benchmark paper under `root` (`../shared/data`), per benchmark: the ranking
    benchmarks' (`ranking_titles`), the SciRepEval formats' dev and test papers (`format_titles`), and the titles
    of the ACL papers that carry one of those papers' abstracts under a title none of them has
    (`abstract_twins`, `abstract_twin_titles`)."""
    papers = acl_papers(root)  # read once for both: the formats' titles and the abstract twins
    titles = {**ranking_titles(root), "scirepeval_formats": format_titles(root, papers=papers)}
    twins = abstract_twin_titles(root, papers=papers) - frozenset().union(*titles.values())
    return {**titles, "abstract_twins": twins}


def acl_papers(root: str | Path, split_file: str | Path = SPLIT_FILE) -> list[tuple[object, object, object]]:
    """(paper_id, title, abstract) of the ACL records (`root/acl-anthology`) that have an abstract, from the file
    the split was made from (`check_source`: another file would hold other titles for the held-out ids)."""
    path = Path(root) / "acl-anthology" / ACL_FILE
    check_source(path, split_file)
    return [(r.get("paper_id"), r.get("title"), r["abstract"]) for _, r in jsonl_objects(path) if r.get("abstract")]


def abstract_twin_titles(root: str | Path, split_file: str | Path = SPLIT_FILE,
                         papers: list[tuple[object, object, object]] | None = None) -> frozenset[str]:
    """Normalised titles of the ACL papers (`root/acl-anthology`) whose abstract is a benchmark paper's: a CSFCube
    paper, a reviewer-set submission or archive paper, a paper cited by a context2doc test sentence, or a dev or
    test paper of the SciRepEval formats. Two abstracts are one when the first `TWIN_PREFIX` characters of their
    normalised text (`normalise_title`: lower case, letters and digits only) agree, so a version with a word
    changed near its end is one too (2019.iwslt-1.25 carries dev paper 2019.iwslt-1.10's abstract, reworded at
    character 692). A paper's own title is among them. `papers`: `acl_papers(root, split_file)`, when read
    already."""
    root = Path(root)
    texts = {normalise_title(" ".join(json.loads(line)["abstract"]))
             for line in open(root / "csfcube" / "abstracts-csfcube-preds.jsonl", encoding="utf-8") if line.strip()}
    for draw in load_reviewer_set(root / "reviewer-matching").draws:
        texts |= {normalise_title(abstract) for _, abstract in draw.submissions.values()}
        texts |= {normalise_title(p[2]) for papers in draw.archives.values() for p in papers}
    source = root / "cocite-acl" / "cocitations.jsonl"
    test = set(load_c2d_split(source=source)["splits"]["test"]["queries"])
    texts |= {normalise_title(" ".join(c.get("abstract") or [])) for qid, rec in read_records(source) if qid in test
              for c in rec["cited"]}
    held = heldout_ids(split_file)
    acl = [(pid, normalise_title(abstract)[:TWIN_PREFIX], title)
           for pid, title, abstract in (papers if papers is not None else acl_papers(root, split_file))
           if isinstance(abstract, str)]
    keys = {text[:TWIN_PREFIX] for text in texts} | {key for pid, key, _ in acl if pid in held}
    keys.discard("")
    return frozenset(normalise_title(title) for _, key, title in acl if key in keys and isinstance(title, str)) - {""}


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
    source = root / "cocite-acl" / "cocitations.jsonl"
    test = set(load_c2d_split(source=source)["splits"]["test"]["queries"])
    cited = {normalise_title(c.get("title") or "") for qid, rec in read_records(source) if qid in test for c in rec["cited"]}
    return {name: frozenset(titles - {""}) for name, titles in (("csfcube", csf), ("reviewer", reviewer),
                                                               ("context2doc_test", cited))}


def excluded_titles(benchmarks_dir: str | Path | None, what: str) -> tuple[frozenset[str], dict[str, int]]:
    """The normalised titles of every benchmark paper under `benchmarks_dir` and how many each benchmark
    has; None removes nothing, with a warning naming `what` (the setting that is null)."""
    if benchmarks_dir is None:
        log.warning("%s is null: benchmark papers are NOT removed", what)
        return frozenset(), {}
    by_benchmark = benchmark_titles(benchmarks_dir)
    return frozenset().union(*by_benchmark.values()), {k: len(v) for k, v in by_benchmark.items()}
