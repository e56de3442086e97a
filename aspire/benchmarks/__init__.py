"""What a benchmark is, and the registry of them.

A benchmark here is data and a protocol, nothing about models: its queries, candidates or pools, qrels,
units and folds, its official metrics, and the papers or sentences training must not see. One module a
benchmark (`csfcube`, `reviewers`, `context2doc`; `pools` is the ASPIRE pool-set format CSFCube is one
of; `venue`, `year` and `same_author`, SciRepEval's other formats, share the split of `acl_formats`) and
one `register` line below; `aspire.evaluate.suite` runs every registered benchmark that has a runner, and `aspire evaluate suite --benchmarks` chooses among them by these names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    """One benchmark's metadata: `name` (the registry key and the suite's folder), `folder` (its data under
    the data root, `aspire.paths.DATA`), `title` (for tables), `metrics` (its reported figures, in order)."""

    name: str
    folder: str
    title: str
    metrics: tuple[str, ...]


BENCHMARKS: dict[str, Benchmark] = {}


def register(benchmark: Benchmark) -> Benchmark:
    """Add `benchmark` to the registry; a name already taken is a ValueError."""
    if benchmark.name in BENCHMARKS:
        raise ValueError(f"benchmark {benchmark.name!r} is registered already")
    BENCHMARKS[benchmark.name] = benchmark
    return benchmark


def get_benchmark(name: str) -> Benchmark:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}")
    return BENCHMARKS[name]


register(Benchmark("csfcube", "csfcube", "csfcube (two-fold test, all)", ("MAP", "NDCG%20")))
register(Benchmark("reviewers", "reviewer-matching", "reviewer matching (10 draws)", ("loss (lower better)",)))
register(Benchmark("context2doc", "cocite-acl", "context2doc test", ("MRR", "nDCG@10", "R@100", "MAP")))
register(Benchmark("venue", "acl-anthology", "ACL venue classification", ("macro-F1",)))
register(Benchmark("year", "acl-anthology", "ACL year regression", ("Kendall tau", "RMSE (years)")))
register(Benchmark("same-author", "acl-anthology", "ACL same-author proximity", ("MAP", "nDCG@10")))
