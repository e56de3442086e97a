"""What training must never see of the benchmarks: every benchmark paper's normalised title, per
benchmark (CSFCube, the reviewer set's submissions and archives, the papers cited by context2doc's test
sentences). Training tasks and the teacher leave these papers out of the ACL abstracts; the context2doc
test sentences themselves are `aspire.benchmarks.context2doc.held_out_for`."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

from aspire.benchmarks.context2doc import load_split as load_c2d_split
from aspire.benchmarks.context2doc import read_records
from aspire.benchmarks.reviewers import load_reviewer_set
from aspire.data.acl import normalise_title

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=4)  # the train and dev splits of a run read them once
def benchmark_titles(root: str | Path) -> dict[str, frozenset[str]]:
    """Normalised titles of every benchmark paper under `root` (`../shared/data`), per benchmark."""
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
