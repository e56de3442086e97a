"""Same-author proximity (SciRepEval's same-author detection) on the ACL Anthology: each query paper ranks every
other paper of its pool; papers sharing authors with it are relevant. MAP and nDCG@10.

Name ambiguity: names are compared Unicode-NFC-normalised, lower-cased, with spaces collapsed (`author_key`); a
name carried by more than `MAX_AUTHOR_PAPERS` papers of the whole corpus (e.g. "yang liu", "min zhang": several
people, or prolific authors whose papers span topics) counts for nothing, and two papers are relevant to each other
only when they share at least `MIN_SHARED` counted names (one shared common name is not enough evidence of one person).
Papers without authors are left out (counted in the split file). Pools (`build_pools`, seeded): a random
eligible seed paper and up to `PARTNERS` papers related to it are added at a time until the pool holds `size`
papers; queries are the pool's papers with at least one relevant paper in the pool (by the rule, over the
whole pool, not only the seed's group); candidates are all the other papers of the pool.
"""

from __future__ import annotations

import random
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from aspire.benchmarks.acl_formats import SPLIT_FILE, split_records, task_splits

MAX_AUTHOR_PAPERS = 50
MIN_SHARED = 2
PARTNERS = 3
METRICS = ("MAP", "nDCG@10")
RULE = (f"relevant = at least {MIN_SHARED} shared author names (NFC, lower-cased, spaces collapsed); names on "
        f"more than {MAX_AUTHOR_PAPERS} papers of the corpus do not count")


def author_key(name: str) -> str:
    """`"  Noah A.  Smith "` -> `"noah a. smith"`. Unicode NFC first: a name written with combining accents (the
    ACL file has "Özateş" both ways) gives the same key as its precomposed form."""
    return " ".join(unicodedata.normalize("NFC", str(name)).lower().split())


def counted_names(records: Iterable[dict], max_papers: int = MAX_AUTHOR_PAPERS) -> dict[str, frozenset[str]]:
    """`{paper id: its author names that count}` (names on at most `max_papers` papers of `records`)."""
    names = {}
    for r in records:
        authors = r.get("authors") or []
        if not isinstance(authors, list) or not all(isinstance(a, str) for a in authors):
            raise ValueError(f"ACL paper {r['paper_id']}: 'authors' is {authors!r}, not a list of names")
        names[r["paper_id"]] = frozenset(author_key(a) for a in authors if a.strip())
    freq = Counter(n for ns in names.values() for n in ns)
    return {pid: frozenset(n for n in ns if freq[n] <= max_papers) for pid, ns in names.items()}


def related(a: frozenset[str], b: frozenset[str], min_shared: int = MIN_SHARED) -> bool:
    return len(a & b) >= min_shared


def qrels_of(pool: Sequence[str], names: Mapping[str, frozenset[str]], min_shared: int = MIN_SHARED
             ) -> dict[str, dict[str, int]]:
    """`{query: {candidate: 0/1}}` over `pool`: every paper with a relevant other paper is a query, judged
    against all the others."""
    qrels = {}
    for q in pool:
        judged = {c: int(related(names[q], names[c], min_shared)) for c in pool if c != q}
        if any(judged.values()):
            qrels[q] = judged
    return qrels


def build_pools(candidates: Sequence[str], names: Mapping[str, frozenset[str]], sizes: Mapping[str, int],
                seed: int = 0) -> dict[str, list[str]]:
    """Disjoint pools `{name: [paper id]}` of the given sizes from `candidates` (see the module docstring); a pool
    the candidates cannot fill is a ValueError naming it and the papers it reached (never a smaller pool), and so
    is a size below 1 (a size of 0 or -2 gave an empty pool)."""
    small = {name: size for name, size in sizes.items() if size < 1}
    if small:
        raise ValueError(f"same-author pool sizes must be at least 1, got {small}")
    by_name: dict[str, list[str]] = {}
    for pid in candidates:
        for n in names[pid]:
            by_name.setdefault(n, []).append(pid)
    rng = random.Random(seed)
    order = sorted(c for c in candidates if len(names[c]) >= MIN_SHARED)
    rng.shuffle(order)
    used: set[str] = set()
    pools: dict[str, list[str]] = {}
    it = iter(order)
    for pool_name, size in sizes.items():
        pool: list[str] = []
        for seed_pid in it:
            if len(pool) >= size:
                break
            if seed_pid in used:
                continue
            near = sorted({p for n in names[seed_pid] for p in by_name[n]
                           if p != seed_pid and p not in used and related(names[seed_pid], names[p])})
            if not near:
                continue
            group = [seed_pid] + rng.sample(near, min(PARTNERS, len(near), size - len(pool) - 1))
            pool += group
            used.update(group)
        if len(pool) < size:
            raise ValueError(f"same-author pool {pool_name!r}: the candidates fill {len(pool)} of its {size} papers "
                             "(no seed paper with an unused related paper is left)")
        pools[pool_name] = sorted(pool)
    return pools


def average_precision(relevant: np.ndarray) -> float:
    """AP of one ranking: `relevant` (N,) 0/1 in rank order; the mean precision at each relevant paper's rank."""
    hits = np.flatnonzero(relevant)
    return float(np.mean(np.arange(1, len(hits) + 1) / (hits + 1))) if len(hits) else 0.0


def ndcg_at(relevant: np.ndarray, k: int = 10) -> float:
    """nDCG@k of one ranking with binary gains and the log2(rank + 1) discount; ValueError when `k` is below 1
    (k = 0 or -1 scored every ranking 0.0)."""
    if k < 1:
        raise ValueError(f"nDCG@k needs k >= 1, got {k}")
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    ideal = discount[: min(k, int(np.sum(relevant)))].sum()
    return float((np.asarray(relevant[:k], float) * discount[: len(relevant[:k])]).sum() / ideal) if ideal else 0.0


def load_same_author(records: Mapping[str, dict], split: str = "test", split_file: str | Path = SPLIT_FILE
                     ) -> tuple[list[str], dict[str, dict[str, int]]]:
    """(the pool of `split`, its qrels) from the committed split and the corpus's author lists (`records`:
    every ACL record by id, for the name counts). ValueError naming the split file when a pool paper is not in
    `records` or no paper of the pool has a relevant one (no query)."""
    pools = task_splits(split_file, "same_author")
    if split not in pools:
        raise ValueError(f"same-author has no split {split!r}; valid: {sorted(pools)}")
    pool = list(pools[split])
    split_records(records, pool, f"the same-author {split} pool of {split_file}")
    qrels = qrels_of(pool, counted_names(records.values()))
    if not qrels:
        raise ValueError(f"the same-author {split} pool of {split_file} ({len(pool)} papers) has no query: no paper "
                         f"shares {MIN_SHARED} counted author names with another")
    return pool, qrels
