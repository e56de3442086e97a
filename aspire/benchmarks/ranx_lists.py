"""Judgements and rankings as ranx's own metric input, built from code that numba compiles once, at install.

ranx's metrics read two numba typed lists, one 2-D float array a query: a query's judged documents as
`(document code, grade)` rows, grade descending (its ideal DCG reads them as a ranking), and its ranking as
`(document code, score)` rows, best first. ranx's `Qrels.from_dict` / `Run.from_dict` build them through numba
typed dictionaries driven from Python, whose every method numba compiles anew in each process, uncached: about 13 s
of each fresh process's first evaluation (the demo's first "metrics" figure), whatever was compiled at install.
Here the rows are cut into a typed list by one compiled function that numba caches on disk (`make install` compiles
it, through `aspire.benchmarks.metrics.compile_metrics`), and ranx's `evaluate` takes the lists as they are (its
`len` of a list still compiles one small numba helper a process, about 0.3 s).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from numba import njit
from numba.typed import List


@njit(cache=True)
def _split_rows(rows, bounds):
    """rows[bounds[i]:bounds[i + 1]] for each i, as a typed list of contiguous copies."""
    out = List()
    for i in range(len(bounds) - 1):
        out.append(rows[bounds[i]:bounds[i + 1]].copy())
    return out


def _typed_rows(blocks: list[list[tuple[int, float]]]) -> List:
    """One `(n, 2)` float64 array a block, as a numba typed list (`_split_rows`)."""
    bounds = np.cumsum([0, *map(len, blocks)], dtype=np.int64)
    rows = np.array([row for block in blocks for row in block], dtype=np.float64).reshape(-1, 2)
    return _split_rows(rows, bounds)


def ranx_lists(qrels: Mapping[str, Mapping[str, int]], rankings: Mapping[str, Sequence[str]],
               qids: Sequence[str]) -> tuple[List, List]:
    """(judgements, rankings) of `qids`, in that order, as ranx's metrics read them. A query's documents are coded
    by their first position among its judged then ranked ids (exact as floats; ranx's own path hashes the names);
    its judgements are ordered by grade, highest first; its ranking is scored n, n-1, ..., 1, so that the order
    ranx reads is exactly the given one."""
    judged, ranked = [], []
    for q in qids:
        code = {doc: i for i, doc in enumerate(dict.fromkeys([*qrels[q], *rankings[q]]))}
        judged.append(sorted(((code[d], int(g)) for d, g in qrels[q].items()), key=lambda row: -row[1]))
        ranked.append([(code[d], float(len(rankings[q]) - i)) for i, d in enumerate(rankings[q])])
    return _typed_rows(judged), _typed_rows(ranked)
