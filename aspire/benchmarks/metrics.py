"""Ranking metrics for pool re-ranking: ranx for every metric it computes, plus NDCG at a pool fraction.

A pool re-ranking is judged by `qrels` (`{query: {candidate: grade}}`, grades are integers >= 0, every
candidate of the pool judged) and `rankings` (`{query: [candidate, ...]}`, best first, a permutation of
that query's pool). Metric names (case-insensitive; the caller's spelling is kept in the output):

- binary, relevant = grade >= `threshold` (ranx `-l<threshold>`): `map`, `mrr`, `bpref`, `r-precision`
  (precision at R, R = number of relevant), `p@K`, `r@K`. As trec_eval: `map` has no cut-off, a query's
  average precision is the sum of the precision at each relevant candidate's rank divided by R (the whole
  pool ranked, so every relevant one counts); `mrr` is 1 / rank of the first relevant candidate; `p@K` is
  relevant in the top K divided by K (by K even when the pool holds fewer than K); `r@K` divides by R.
  (ranx's `map@K`, aspire's MAP@20 through `aspire.benchmarks.runs`, divides by R too, as trec_eval's
  map_cut_K, not by min(R, K).)
- graded, gains = grades, threshold ignored: `ndcg@K` (ranx / trec_eval: linear gains, rank i
  discounted by log2(i + 1)) and `ndcg%P`, the CSFCube / ASPIRE measure: NDCG at
  k = floor(P% of the pool size) (at least 1), linear gains, rank 1 undiscounted and rank i >= 2
  divided by log2(i) (Jarvelin & Kekalainen 2002, as in the published evaluation script). ranx has no
  pool-relative cut-off nor that discount, so this one is computed here (`ndcg_at_k`).

Bad input is refused with a `ValueError` naming the query: a ranking that misses a pool candidate,
holds an id outside the pool or repeats one; a query ranked but not judged or judged but not ranked;
a grade that is not an integer >= 0 (a fraction, NaN, a string: naming the candidate too). A query
with no candidate at grade >= `threshold` is refused too, unless `skip_no_relevant=True`, which
leaves it out of the returned scores (callers record which).

A metric undefined for one query (bpref when every candidate is relevant: no non-relevant one to
rank below) is None in that query's scores, never NaN; means are taken over the queries where it is
defined (None when it is defined for none), and `undefined_metrics` lists each one's queries with
the reason, for results files to report.
"""

from __future__ import annotations

import re
import warnings
from typing import Mapping, Sequence

import numpy as np

from aspire.config import is_whole

BINARY_METRICS = {"map": "map", "mrr": "mrr", "bpref": "bpref", "r-precision": "r-precision"}
AT_K_METRICS = {"p": "precision", "r": "recall", "ndcg": "ndcg"}
DISCOUNTS = ("csfcube", "trec")

UNDEFINED_REASONS = {
    "bpref": "bpref is undefined when every candidate of the pool is relevant (no non-relevant one to rank below)",
}
_AT_K = re.compile(r"^(p|r|ndcg)@(\d+)$")
_POOL_FRACTION = re.compile(r"^ndcg%(\d+)$")


def id_order(i) -> tuple[str, str]:
    """Sort key of ids that may mix types (1 and '2', which `sorted` refuses with a TypeError): their text, then their
    type's name, so that 1 and '1' come in one order in every process (by text alone the set's order decided it, which
    the hash seed moves: a message named them in either order)."""
    return str(i), type(i).__name__


def _parse_metric(name: str) -> tuple[str, int]:
    """('map'|'mrr'|'bpref'|'r-precision'|'p'|'r'|'ndcg'|'ndcg%', k or percent or 0)."""
    if not isinstance(name, str):
        raise ValueError(f"metric name {name!r} is not a string; e.g. 'map', 'p@20', 'ndcg%20'")
    low = name.strip().lower()
    if low in BINARY_METRICS:
        return low, 0
    m = _AT_K.match(low)
    if m and int(m.group(2)) > 0:
        return m.group(1), int(m.group(2))
    m = _POOL_FRACTION.match(low)
    if m and 0 < int(m.group(1)) <= 100:
        return "ndcg%", int(m.group(1))
    raise ValueError(
        f"unknown metric {name!r}; valid: {sorted(BINARY_METRICS)}, 'p@K', 'r@K', 'ndcg@K' (K >= 1), "
        "'ndcg%P' (0 < P <= 100)"
    )


def pool_cutoff(pool_size: int, percent: int) -> int:
    """k = floor(percent% of pool_size), at least 1 (integer arithmetic: no 0.2 * n rounding)."""
    return max(1, (percent * pool_size) // 100)


def ndcg_at_k(ranked_gains: Sequence[float], k: int, discount: str = "csfcube") -> float:
    """NDCG@k of one ranking with linear gains; the ideal ranking sorts the same gains.

    Args:
        ranked_gains: (N,) gains of the ranked candidates, best-ranked first (the whole pool).
        k: cut-off, >= 1.
        discount: 'csfcube' (rank 1 undiscounted, rank i >= 2 divided by log2(i), the published
            CSFCube script) or 'trec' (rank i divided by log2(i + 1), as ranx and trec_eval).
    Returns:
        NDCG in [0, 1]; 0.0 when every gain is 0.
    """
    if discount not in DISCOUNTS:
        raise ValueError(f"unknown discount {discount!r}; valid: {list(DISCOUNTS)}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    gains = np.asarray(ranked_gains, dtype=np.float64)[:k] if len(ranked_gains) else np.zeros(0)
    ideal = np.sort(np.asarray(ranked_gains, dtype=np.float64))[::-1][:k]
    ranks = np.arange(1, len(gains) + 1, dtype=np.float64)
    disc = np.maximum(1.0, np.log2(ranks)) if discount == "csfcube" else np.log2(ranks + 1.0)
    ideal_dcg = float((ideal / disc).sum())
    if ideal_dcg == 0.0:
        return 0.0
    return float((gains / disc).sum()) / ideal_dcg


def grade_value(value, where: str) -> int:
    """A relevance grade as an int: an integer >= 0 (a float holding one, such as 2.0, is accepted); anything else
    (a fraction, NaN, a string, a boolean, null, a negative number) is a ValueError naming `where`."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{where}: relevance grade {value!r} is not a number; grades are integers >= 0")
    if not float(value).is_integer():  # also NaN and infinities
        raise ValueError(f"{where}: relevance grade {value!r} is not an integer; grades are integers >= 0")
    if value < 0:
        raise ValueError(f"{where}: negative relevance grade {value!r}; grades must be >= 0")
    return int(value)


def check_rankings(qrels: Mapping[str, Mapping[str, int]], rankings: Mapping[str, Sequence[str]]) -> None:
    """Raise ValueError unless every judged query is ranked, each ranking is a permutation of its pool and every
    grade is an integer >= 0 (`grade_value`)."""
    unknown = sorted(set(rankings) - set(qrels), key=id_order)  # ids of mixed types (1, '1') sort too
    if unknown:
        raise ValueError(f"rankings hold {len(unknown)} queries without judgements: {unknown[:10]}")
    missing = sorted(set(qrels) - set(rankings), key=id_order)
    if missing:
        raise ValueError(f"{len(missing)} judged queries have no ranking: {missing[:10]}")
    for qid, ranked in rankings.items():
        pool = qrels[qid]
        for cand, grade in pool.items():
            grade_value(grade, f"query {qid} candidate {cand}")
        if len(set(ranked)) != len(ranked):
            dup = sorted({c for c in ranked if list(ranked).count(c) > 1}, key=id_order)
            raise ValueError(f"query {qid}: ranking repeats candidates {dup[:10]}")
        outside = [c for c in ranked if c not in pool]
        if outside:
            itself = "; the query itself is no candidate of its own pool: leave it out" if qid in outside else ""
            raise ValueError(f"query {qid}: ranking holds {len(outside)} ids outside the pool: {outside[:10]}{itself}")
        ranked_set = set(ranked)
        absent = [c for c in pool if c not in ranked_set]
        if absent:
            raise ValueError(
                f"query {qid}: ranking misses {len(absent)} of {len(pool)} pool candidates: {absent[:10]} "
                "(a pool re-ranking must rank the whole pool)"
            )


def queries_without_relevant(qrels: Mapping[str, Mapping[str, int]], threshold: int) -> list[str]:
    """Queries none of whose candidates has grade >= threshold."""
    return [q for q, pool in qrels.items() if not any(g >= threshold for g in pool.values())]


def without_unscorable(qrels: Mapping[str, Mapping[str, int]], runs: Sequence[Mapping], threshold: int
                       ) -> tuple[list[str], dict, list[dict]]:
    """(the queries with no document at grade >= threshold, `qrels` without them, each of `runs` without them): left
    out at every threshold, as the pools evaluator leaves them out (`--skip-no-relevant`; without it, it refuses
    them), not scored 0 (trec_eval's -lN), so a figure averages over the queries the inputs scored. `compare` and
    `fuse-runs` read TREC runs through it (each once had its own copy, both leaving them out above threshold 1 only)."""
    left = queries_without_relevant(qrels, threshold)
    gone = set(left)
    return (left, {q: g for q, g in qrels.items() if q not in gone},
            [{q: r for q, r in run.items() if q not in gone} for run in runs])


def ranx_per_query(qrels: Mapping[str, Mapping[str, int]], rankings: Mapping[str, Sequence[str]],
                   qids: Sequence[str], names: Sequence[str]) -> dict[str, dict[str, float]]:
    """ranx's values of its metrics `names` for each of `qids`, `{name: {qid: value}}` (NaN where ranx leaves one
    undefined). The input goes to ranx as its own typed lists, built by code compiled and cached at install
    (`aspire.benchmarks.ranx_lists`), each query's order exactly the given one, ties kept; a query that ranks no
    document scores 0.0 for each metric aspire names (no document ranked, no hit) where it has a relevant one (the
    callers leave out or refuse a query that has none). The calling thread's numba thread count is as before."""
    import numba
    from ranx import evaluate  # imported here: ranx's start-up is slow

    from aspire.benchmarks.ranx_lists import ranx_lists

    judged, ranked = ranx_lists(qrels, rankings, qids)
    wanted = list(dict.fromkeys(names))
    if len(wanted) == 1:  # ranx 0.3.21 cannot return per-query scores of a single metric (KeyError)
        wanted.append("hits" if wanted[0] != "hits" else "mrr")
    threads = numba.get_num_threads()
    try:
        with warnings.catch_warnings():  # numba's note on ranx's own uint64 -> int64 index cast
            warnings.filterwarnings("ignore", message="unsafe cast")
            scores = evaluate(judged, ranked, wanted, return_mean=False)
    finally:  # ranx sets numba's threads to 1 for fewer than 10 queries and leaves them so (for the calling thread)
        numba.set_num_threads(threads)
    return {name: dict(zip(qids, (float(v) for v in scores[name]))) for name in dict.fromkeys(names)}


def check_metrics(metrics: Sequence[str], threshold: int = 1) -> dict[str, tuple[str, int]]:
    """`{name: (kind, k)}` of the metric names (module docstring), or ValueError naming a name that is none, or a
    threshold that is not an integer >= 1: what `evaluate_rankings` reads, checkable before any ranking exists."""
    if not is_whole(threshold, 1):
        raise ValueError(f"threshold must be an integer >= 1 (grade 0 means not relevant), got {threshold!r}")
    if isinstance(metrics, str):  # else each character would be read as a metric name
        raise ValueError(f"metrics must be a list of names, got the string {metrics!r}; e.g. [{metrics!r}]")
    return {name: _parse_metric(name) for name in metrics}


def evaluate_rankings(
    qrels: Mapping[str, Mapping[str, int]],
    rankings: Mapping[str, Sequence[str]],
    metrics: Sequence[str],
    threshold: int = 1,
    skip_no_relevant: bool = False,
) -> dict[str, dict[str, float]]:
    """Score each query's pool ranking.

    Args:
        qrels: `{query: {candidate: grade}}`, the whole pool judged.
        rankings: `{query: [candidate, ...]}` best first, each a permutation of its pool.
        metrics: names as in the module docstring, e.g. `["MAP", "NDCG%20", "P@20"]`.
        threshold: grade at or above which a candidate counts as relevant for binary metrics.
        skip_no_relevant: leave out (instead of refusing) queries with no relevant candidate.
    Returns:
        `{query: {metric name as given: value in [0, 1], or None where undefined for that query}}`,
        queries in `rankings` order.
    """
    parsed = check_metrics(metrics, threshold)
    check_rankings(qrels, rankings)
    empty = set(queries_without_relevant(qrels, threshold))
    if empty and not skip_no_relevant:
        raise ValueError(
            f"{len(empty)} queries have no candidate with grade >= {threshold}: {sorted(empty, key=id_order)[:10]}; "
            "their precision-based metrics are undefined (pass skip_no_relevant=True to leave them out)"
        )
    qids = [q for q in rankings if q not in empty]
    out: dict[str, dict[str, float]] = {q: {} for q in qids}
    if not qids:
        return out

    ranx_names: dict[str, str] = {}
    for name, (kind, k) in parsed.items():
        if kind in BINARY_METRICS:
            ranx_names[name] = f"{BINARY_METRICS[kind]}-l{threshold}"
        elif kind in ("p", "r"):
            ranx_names[name] = f"{AT_K_METRICS[kind]}@{k}-l{threshold}"
        elif kind == "ndcg":
            ranx_names[name] = f"ndcg@{k}"  # graded gains, grade 0 contributes nothing
    if ranx_names:
        scores = ranx_per_query(qrels, rankings, qids, list(ranx_names.values()))
        for name, rname in ranx_names.items():
            for q, v in scores[rname].items():
                out[q][name] = v if np.isfinite(v) else None  # e.g. bpref with no non-relevant
    for name, (kind, percent) in parsed.items():
        if kind != "ndcg%":
            continue
        for q in qids:
            gains = [qrels[q][c] for c in rankings[q]]
            out[q][name] = ndcg_at_k(gains, pool_cutoff(len(gains), percent), discount="csfcube")
    return {q: {name: out[q][name] for name in metrics} for q in qids}


def compile_metrics() -> float:
    """Run every metric kind once on a tiny judged pool, so that ranx's numba functions are compiled and cached on
    disk (ranx's `cache=True`, and `ranx_lists`'s) before a user's first evaluation, which otherwise pays the
    compile (the first `make demo` on a fresh machine spent 43.7 s on its first metrics). Every later evaluation, and
    `runs.per_query`, reads the same compiled code. `make install` calls it; a later call reads the cache.
    -> seconds spent."""
    import time

    start = time.perf_counter()
    qrels = {"q1": {"a": 2, "b": 0, "c": 1, "d": 0}, "q2": {"a": 0, "b": 3, "c": 0, "d": 1}}
    rankings = {"q1": ["b", "a", "d", "c"], "q2": ["a", "b", "c", "d"]}
    evaluate_rankings(qrels, rankings, WARMED_METRICS, threshold=1)
    return time.perf_counter() - start


# one name of every metric kind (`_parse_metric`), as `compile_metrics` runs them
WARMED_METRICS = ("map", "mrr", "bpref", "r-precision", "p@2", "r@2", "ndcg@2", "ndcg%20")


def mean_metrics(per_query: Mapping[str, Mapping[str, float | None]], qids: Sequence[str]) -> dict[str, float | None]:
    """Mean of each metric over those of `qids` where it is defined (each query must be in
    `per_query`); None for a metric defined for none of them."""
    missing = [q for q in qids if q not in per_query]
    if missing:
        raise ValueError(f"no scores for {len(missing)} queries: {missing[:10]}")
    if not qids:
        raise ValueError("mean over an empty query list")
    out: dict[str, float | None] = {}
    for m in per_query[qids[0]]:
        values = [per_query[q][m] for q in qids if per_query[q][m] is not None]
        out[m] = float(np.mean(values)) if values else None
    return out


def undefined_metrics(per_query: Mapping[str, Mapping[str, float | None]]) -> dict[str, dict]:
    """`{metric: {"queries": [...], "reason": ...}}` for every metric undefined (None) for some query."""
    out: dict[str, dict] = {}
    for q, scores in per_query.items():
        for m, v in scores.items():
            if v is None:
                reason = UNDEFINED_REASONS.get(_parse_metric(m)[0], f"{m} is undefined for this query")
                out.setdefault(m, {"queries": [], "reason": reason})["queries"].append(q)
    return out
