"""Pool re-ranking data sets in the ASPIRE file layout, and ranked-pool files.

A data set NAME in a folder holds
- `abstracts-NAME.jsonl` (or another file given): one paper a line, `paper_id`, `title`, `abstract`
  (list of sentences), optional `pred_labels` (one facet label a sentence);
- `test-pid2anns-NAME.json`, or one `test-pid2anns-NAME-FACET.json` per facet:
  `{query_pid: {"cands": [...], "relevance_adju": [grade, ...], ...}}`;
- optionally a splits file: `{split: [query_key, ...]}`, `{query_key: split}` (ASPIRE's
  `NAME-evaluation_splits.json`) or one level of nesting `{group: {split: [query_key, ...]}}`
  (CSFCube's `evaluation_splits.json`), flattened to split names `group/split`.

A query key is the query pid, or `pid_facet` for a faceted set (CSFCube's convention). Rule for a
query found in its own pool: it is removed from that pool (a paper is not its own candidate) and its
key recorded in `PoolSet.self_in_pool`; a ranked file must then leave it out too.

Ranked files: `test-pid2pool-NAME-EXP[-FACET]-ranked.json` = `{query_pid: [[cand_pid, score], ...]}`,
best first. The evaluators read only the order back: scores may be similarities or distances; `write_trec`
copies them into the TREC run (distances negated).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from aspire.benchmarks.metrics import evaluate_rankings, grade_value, mean_metrics, queries_without_relevant
from aspire.data.facets import FACETS
from aspire.io import read_json, write_json

log = logging.getLogger(__name__)


def query_key(query_pid: str, facet: str | None) -> str:
    """`pid` for an unfaceted set, `pid_facet` for a faceted one."""
    return f"{query_pid}_{facet}" if facet else query_pid


@dataclass(frozen=True)
class PoolSet:
    """Judged pools of one data set.

    Attributes:
        name: data set name as in the file names (`csfcube`, `relish`, ...).
        pools: `{facet: {query_pid: {cand_pid: grade}}}` in pool order; the facet is `""` for an
            unfaceted set.
        splits: `{split name: [query key, ...]}`; empty when no splits file was given.
        self_in_pool: query keys whose own pid was removed from their pool.
    """

    name: str
    pools: dict[str, dict[str, dict[str, int]]]
    splits: dict[str, list[str]] = field(default_factory=dict)
    self_in_pool: list[str] = field(default_factory=list)

    @property
    def facets(self) -> list[str]:
        return list(self.pools)

    def qrels(self, facet: str) -> dict[str, dict[str, int]]:
        """`{query key: {cand_pid: grade}}` for one facet."""
        if facet not in self.pools:
            raise ValueError(f"unknown facet {facet!r}; valid: {self.facets}")
        return {query_key(q, facet): dict(p) for q, p in self.pools[facet].items()}

    def fingerprint(self) -> str:
        """sha1 (12 hex digits) of the judged pools (queries, candidates, grades) and the splits: two runs with
        one fingerprint were scored on the same queries, judgments and folds."""
        text = json.dumps({"pools": self.pools, "splits": {k: sorted(v) for k, v in self.splits.items()}},
                          sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def query_keys(self) -> list[str]:
        return [query_key(q, f) for f in self.pools for q in self.pools[f]]

    def paper_ids(self) -> set[str]:
        """Every query and candidate pid."""
        return {pid for pools in self.pools.values() for q, p in pools.items() for pid in (q, *p)}

    def check_texts(self, papers) -> None:
        """ValueError naming the pooled papers (queries or candidates) that `papers` (`{pid: Paper}`) has no text
        for: the rankers index `papers` by every pid (once a bare KeyError of the first one missing)."""
        missing = sorted(self.paper_ids() - set(papers))
        if missing:
            raise ValueError(f"{len(missing)} pooled papers (queries or candidates) have no paper text: {missing[:10]}")


def _load_splits(path: Path) -> dict[str, list[str]]:
    raw = read_json(path, "splits file")
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: a splits file must be a non-empty JSON object")
    values = list(raw.values())
    if all(isinstance(v, str) for v in values):  # {query_key: split}
        splits: dict[str, list[str]] = {}
        for key, split in raw.items():
            splits.setdefault(split, []).append(key)
        return splits
    if all(isinstance(v, list) for v in values):  # {split: [query_key]}
        return {k: [str(q) for q in v] for k, v in raw.items()}
    if all(isinstance(v, dict) and all(isinstance(x, list) for x in v.values()) for v in values):
        empty = [group for group, inner in raw.items() if not inner]
        if empty:  # once flattened to nothing: `{"all": {}}` read as a file with no splits
            raise ValueError(f"{path}: split group {empty[0]!r} holds no splits")
        return {f"{group}/{split}": [str(q) for q in qs] for group, inner in raw.items() for split, qs in inner.items()}
    raise ValueError(
        f"{path}: splits must be {{split: [query_key]}}, {{query_key: split}} or {{group: {{split: [query_key]}}}}"
    )


def load_pool_set(
    root: str | Path,
    name: str,
    facets: Sequence[str] = (),
    splits_file: str | Path | None = None,
    relevance_field: str = "relevance_adju",
) -> PoolSet:
    """Read `test-pid2anns-NAME[-FACET].json` (and a splits file when given) from `root`.

    Raises ValueError for a missing or malformed file, a file with no query, ragged `cands` / grades, a candidate id
    that is not a string or an integer, repeated candidates, a grade that is not an integer >= 0 (naming the query
    and candidate; the query's own entry too), a facet named twice in `facets`, or a split with no query, naming
    queries the pools do not hold or naming one query twice.
    """
    facets = list(facets)
    repeated = sorted({f for f in facets if facets.count(f) > 1})
    if repeated:  # the facet's file was read twice: its self-in-pool keys listed twice, one set of pools kept
        raise ValueError(f"facets named more than once: {repeated}")
    root = Path(root)
    pools: dict[str, dict[str, dict[str, int]]] = {}
    self_in_pool: list[str] = []
    for facet in list(facets) or [""]:
        path = root / (f"test-pid2anns-{name}-{facet}.json" if facet else f"test-pid2anns-{name}.json")
        raw = read_json(path, "annotation file")
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected {{query_pid: {{\"cands\": [...], {relevance_field!r}: [...]}}}}, "
                             f"got a JSON {type(raw).__name__}")
        if not raw:  # once a facet of no queries: left out of every mean without a word
            raise ValueError(f"{path}: the annotation file holds no query")
        pools[facet] = {}
        for qid, ann in raw.items():
            if not isinstance(ann, dict):
                raise ValueError(f"{path}: query {qid}: expected an object with 'cands' and {relevance_field!r}, "
                                 f"got a JSON {type(ann).__name__}")
            for key in ("cands", relevance_field):
                if key not in ann:
                    raise ValueError(f"{path}: query {qid} has no {key!r}; fields: {sorted(ann)}")
                if not isinstance(ann[key], list):
                    raise ValueError(f"{path}: query {qid}: {key!r} must be a list, got a JSON {type(ann[key]).__name__}")
            odd = [c for c in ann["cands"] if isinstance(c, bool) or not isinstance(c, (str, int))]
            if odd:  # null, 1.5 or ["b"] once became the candidates 'None', '1.5' and "['b']"
                raise ValueError(f"{path}: query {qid}: candidate ids must be strings or integers, got {odd[0]!r}")
            cands, grades = [str(c) for c in ann["cands"]], ann[relevance_field]
            if len(cands) != len(grades):
                raise ValueError(f"{path}: query {qid} has {len(cands)} cands but {len(grades)} grades")
            if len(set(cands)) != len(cands):
                repeated = sorted({c for c in cands if cands.count(c) > 1})
                raise ValueError(f"{path}: query {qid} repeats candidates {repeated[:10]}")
            if qid in cands:
                self_in_pool.append(query_key(qid, facet))
            checked = {c: grade_value(g, f"{path}: query {qid} candidate {c}") for c, g in zip(cands, grades)}
            pools[facet][qid] = {c: g for c, g in checked.items() if c != qid}  # the query's own grade checked too
    splits = _load_splits(Path(splits_file)) if splits_file is not None else {}
    known = {query_key(q, f) for f in pools for q in pools[f]}
    for split, keys in splits.items():
        if not keys:  # a mean over no query: dropped from `summarize`, an error far from the file in CSFCube's folds
            raise ValueError(f"split {split!r} names no query")
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise ValueError(f"split {split!r} names {len(unknown)} unknown queries: {unknown[:10]}")
        repeated = sorted(k for k, n in Counter(keys).items() if n > 1)
        if repeated:  # it would count twice in the split's mean
            raise ValueError(f"split {split!r} names queries more than once: {repeated[:10]}")
    return PoolSet(name, pools, splits, self_in_pool)


def ranked_path(folder: str | Path, name: str, exp: str, facet: str) -> Path:
    """`folder/test-pid2pool-NAME-EXP[-FACET]-ranked.json`."""
    stem = f"test-pid2pool-{name}-{exp}-{facet}-ranked.json" if facet else f"test-pid2pool-{name}-{exp}-ranked.json"
    return Path(folder) / stem


def existing_ranked_path(folder: str | Path, name: str, exp: str, facet: str) -> Path:
    """`ranked_path`, there; else FileNotFoundError naming the experiments whose ranked files of `name` `folder`
    does hold (EXP of `test-pid2pool-NAME-EXP-FACET-ranked.json` for this facet; for no facet, the names that do not
    end in a facet of `aspire.data.facets.FACETS`, which are another experiment's faceted files)."""
    path = ranked_path(folder, name, exp, facet)
    if not path.is_file():
        start, end = len(f"test-pid2pool-{name}-"), len(f"{'-' + facet if facet else ''}-ranked.json")
        held = sorted(p.name[start:-end] for p in Path(folder).glob(ranked_path("", name, "*", facet).name))
        if not facet:  # the pattern also matches EXP-FACET: 'specter-method' is no experiment of the unfaceted set
            held = [h for h in held if not h.endswith(tuple(f"-{facet}" for facet in FACETS))]
        raise FileNotFoundError(2, f"no ranked file of experiment {exp!r}{' (' + facet + ')' if facet else ''}; "
                                   f"the folder holds {held or 'none of ' + name}", str(path))
    return path


def read_ranked(path: str | Path) -> dict[str, list[str]]:
    """`{query_pid: [cand_pid, ...]}` best first, from a ranked-pool file."""
    return ranked_order(read_json(Path(path), "ranked file"), path)


def ranked_order(raw: object, path: str | Path) -> dict[str, list[str]]:
    """`{query_pid: [cand_pid, ...]}` best first, from the content `raw` of the ranked-pool file `path` (named in
    the errors)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected {{query_pid: [[cand_pid, score], ...]}}, got a JSON {type(raw).__name__}")
    out: dict[str, list[str]] = {}
    for qid, ranked in raw.items():
        if not isinstance(ranked, list) or not all(isinstance(x, list) and len(x) == 2 for x in ranked):
            raise ValueError(f"{path}: query {qid}: entries must be [cand_pid, score] pairs")
        out[str(qid)] = [str(c) for c, _ in ranked]
    return out


def write_ranked(path: str | Path, ranked: Mapping[str, Sequence[tuple[str, float]]]) -> None:
    """Write `{query_pid: [[cand_pid, score], ...]}` (best first), atomically; a score that is not a
    finite number is written as null (the order is kept as given)."""
    finite = lambda s: float(s) if math.isfinite(float(s)) else None  # noqa: E731
    write_json(path, {q: [[c, finite(s)] for c, s in r] for q, r in ranked.items()}, indent=None)


def write_trec(out: Path, pool_set: PoolSet, rankings: Mapping[str, Mapping[str, list[str]]], exp: str,
               scores_from: str | Path | None = None, ranked_files: Mapping[str, object] | None = None) -> None:
    """`out/run.trec` (query keys as `query_key`) and `out/qrels.trec`.

    A candidate's score in the run is its score in the facet's ranked file of `exp` in `scores_from` (default
    `out`, where the evaluation writes its ranked files), negated when that file holds distances (rising down every
    list), so that the run's scores fall down each ranking as TREC's do and `fuse-runs --fusion z|minmax` fuses
    the scorers' values. A facet whose ranked file is not there, or does not rank every query of `rankings` in
    their order with finite scores (a warning names it then), is written with pool size - rank + 1 instead.
    `ranked_files`: `{facet: content}` of those files as the caller has read them (`read_ranked_files`), so that
    they are not read again; every facet of `rankings` then, each the file of `exp` in `scores_from`. A query whose
    pool is empty (`load_pool_set` reads it; `evaluate_pool_set(skip_no_relevant=True)` skips it) has no line in
    either file, which a TREC file cannot hold: it is left out of both, with a warning naming it."""
    from aspire.benchmarks.runs import write_qrels, write_run

    empty = {query_key(q, f) for f in pool_set.facets for q, pool in pool_set.pools[f].items() if not pool}
    if empty:  # `write_run` refuses a query without a line: once that failure, after the results were written
        log.warning("%s: queries %s have an empty pool (no candidate, or only the query itself): left out of "
                    "run.trec and qrels.trec", pool_set.name, sorted(empty)[:10])
    folder = Path(out if scores_from is None else scores_from)
    run = {}
    for f, ranked in rankings.items():
        path = ranked_path(folder, pool_set.name, exp, f)
        if ranked_files is None:
            scores = _ranked_scores(path, ranked)
        elif f not in ranked_files:
            raise ValueError(f"ranked_files holds no file of facet {f!r}; it holds {sorted(ranked_files)}")
        else:
            scores = _ranked_scores(path, ranked, ranked_files[f])
        for q, r in ranked.items():
            values = scores[q] if scores is not None else [float(len(r) - i) for i in range(len(r))]
            if query_key(q, f) not in empty:
                run[query_key(q, f)] = list(zip(r, values))
    write_run(out / "run.trec", run, exp)
    write_qrels(out / "qrels.trec", {k: v for f in pool_set.facets for k, v in pool_set.qrels(f).items()
                                     if k not in empty})


_UNREAD = object()  # `_ranked_scores`: the file is to be read


def _ranked_scores(path: Path, rankings: Mapping[str, Sequence[str]],
                   raw: object = _UNREAD) -> dict[str, list[float]] | None:
    """`{query: [score, ...]}` of the ranked file at `path` (`raw`: its content, already read), similarities
    (distances negated), when it ranks every query of `rankings` in that order with finite scores; None when there
    is no file, or (with a warning naming the file) when it ranks otherwise or its scores neither all fall nor all
    rise down the lists."""
    if raw is _UNREAD:
        if not path.is_file():
            return None
        raw = read_json(path, "ranked file")
    scores: dict[str, list[float]] = {}
    for q, ranked in rankings.items():
        entries = raw.get(q) if isinstance(raw, dict) else None
        if not isinstance(entries, list) or [str(e[0]) if isinstance(e, list) and len(e) == 2 else None for e in entries] != list(ranked):
            log.warning("%s does not rank query %s as scored: run.trec gets rank scores", path, q)
            return None
        values = [e[1] for e in entries]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            log.warning("%s: query %s has a score that is not a finite number: run.trec gets rank scores", path, q)
            return None
        scores[q] = [float(v) for v in values]
    falling = all(x >= y for v in scores.values() for x, y in zip(v, v[1:]))
    rising = all(x <= y for v in scores.values() for x, y in zip(v, v[1:]))
    if not (falling or rising):
        log.warning("%s: scores neither fall nor rise down every list: run.trec gets rank scores", path)
        return None
    return scores if falling else {q: [-v for v in values] for q, values in scores.items()}


def evaluate_pool_set(
    pool_set: PoolSet,
    rankings: Mapping[str, Mapping[str, Sequence[str]]],
    metrics: Sequence[str],
    threshold: int = 1,
    skip_no_relevant: bool = False,
) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Score rankings `{facet: {query_pid: [cand_pid, ...]}}` of every facet of `pool_set`.

    Returns:
        (`{query key: {metric: value}}`, query keys left out for having no relevant candidate —
        empty unless `skip_no_relevant`).
    """
    per_query: dict[str, dict[str, float]] = {}
    skipped: list[str] = []
    for facet in pool_set.facets:
        if facet not in rankings:
            raise ValueError(f"no rankings for facet {facet!r}")
        qrels = pool_set.qrels(facet)
        ranked = {query_key(q, facet): list(r) for q, r in rankings[facet].items()}
        per_query.update(evaluate_rankings(qrels, ranked, metrics, threshold, skip_no_relevant))
        if skip_no_relevant:
            skipped += queries_without_relevant(qrels, threshold)
    if not per_query:
        raise ValueError(f"no query has a candidate with grade >= {threshold}: nothing to evaluate")
    return per_query, skipped


def read_ranked_pool_set(pool_set: PoolSet, folder: str | Path, exp: str,
                         files: Mapping[str, object] | None = None) -> dict[str, dict[str, list[str]]]:
    """Every facet's ranking `{facet: {query_pid: [cand_pid, ...]}}` from its ranked file
    `test-pid2pool-NAME-EXP[-FACET]-ranked.json` in `folder`, or from `files` (`{facet: content}` of those files as
    `read_ranked_files` read them), which `write_trec(ranked_files=...)` takes too: each file read once."""
    files = read_ranked_files(pool_set, folder, exp) if files is None else files
    missing = [f for f in pool_set.facets if f not in files]
    if missing:
        raise ValueError(f"files holds no ranked file of facet {missing[0]!r}; it holds {sorted(files)}")
    return {facet: ranked_order(files[facet], ranked_path(folder, pool_set.name, exp, facet))
            for facet in pool_set.facets}


def read_ranked_files(pool_set: PoolSet, folder: str | Path, exp: str) -> dict[str, object]:
    """`{facet: content}` of every facet's ranked file `test-pid2pool-NAME-EXP[-FACET]-ranked.json` in `folder`,
    as read (FileNotFoundError naming the experiments the folder holds when one is not there)."""
    return {facet: read_json(existing_ranked_path(folder, pool_set.name, exp, facet), "ranked file")
            for facet in pool_set.facets}


def summarize(
    pool_set: PoolSet, per_query: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float | int]]:
    """Mean metrics over all queries, each facet, and each split (queries left out are not counted).

    Returns `{group: {metric: mean, ..., "n_queries": count}}` with groups `all`, `facet:F` per facet
    of a faceted set, and `split:S` per split. A metric undefined for some queries of a group is the
    mean over the others (None if none), and the group gets `"n_undefined": {metric: count}`.
    """
    groups: dict[str, list[str]] = {"all": list(per_query)}
    if pool_set.facets != [""]:
        for facet in pool_set.facets:
            groups[f"facet:{facet}"] = [query_key(q, facet) for q in pool_set.pools[facet]]
    for split, keys in pool_set.splits.items():
        groups[f"split:{split}"] = keys
    out: dict[str, dict[str, float | int]] = {}
    for group, keys in groups.items():
        kept = [k for k in keys if k in per_query]
        if kept:
            out[group] = {**mean_metrics(per_query, kept), "n_queries": len(kept)}
            undefined = {m: n for m in per_query[kept[0]] if (n := sum(per_query[k][m] is None for k in kept))}
            if undefined:
                out[group]["n_undefined"] = undefined
    return out
