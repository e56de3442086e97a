"""Ensembles: fuse several rankings of the same pools into one (`aspire.scoring.fusion`, search's fusion).

Each input is a folder of ranked files in the official format (`{query_pid: [[cand_pid, score],
...]}`, best first; similarities or distances, told apart by their order) and its experiment name. Per query, every run's scores
are normalised (default `z`: zero mean, unit variance over the pool) and summed with weights, so a whole-abstract vector and an aspect-conditional sentence matcher, whose scores live
on different scales, can be combined. The runs must rank exactly the same candidates for the same
queries; anything else is an error naming the query, so nothing is silently dropped.

    python -m aspire.evaluate fuse --run runs/csfcube/abstract:minilm-abstract \
        --run runs/csfcube/ts-ot:model-contextual-ot-tau1 --exp fused --out runs/csfcube/fused
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from aspire.benchmarks.pools import PoolSet, existing_ranked_path, ranked_path, write_ranked
from aspire.scoring.fusion import fuse_ranked, fusion_method


def read_scored(path: str | Path) -> dict[str, dict[str, float]]:
    """`{query_pid: {cand_pid: similarity}}` from a ranked-pool file (best first).

    Files written by this framework hold similarities (falling down each list); others, like
    the shipped SPECTER pools, hold distances (rising down each list). The direction is read
    from the order: a file whose every list is non-decreasing is taken as distances and negated;
    a file whose lists disagree with the order they are in is an error.
    """
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    out: dict[str, dict[str, float]] = {}
    rising = falling = True
    for qid, ranked in raw.items():
        scores: dict[str, float] = {}
        for entry in ranked:
            if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], (int, float))):
                raise ValueError(f"{path}: query {qid}: entries must be [cand_pid, score] pairs, got {entry!r}")
            cand, score = str(entry[0]), float(entry[1])
            if score != score or score in (float("inf"), float("-inf")):
                raise ValueError(f"{path}: query {qid}: candidate {cand} has a non-finite score {score}")
            if cand in scores:
                raise ValueError(f"{path}: query {qid}: candidate {cand} is ranked twice")
            scores[cand] = score
        values = list(scores.values())
        rising &= all(x <= y for x, y in zip(values, values[1:]))
        falling &= all(x >= y for x, y in zip(values, values[1:]))
        out[str(qid)] = scores
    if rising and not falling:  # distances, best first: turn them into similarities
        out = {q: {c: -s for c, s in scores.items()} for q, scores in out.items()}
    elif not falling:
        raise ValueError(f"{path}: scores neither fall (similarities) nor rise (distances) down every list")
    return out


def fuse_scores(
    runs: Sequence[Mapping[str, Mapping[str, float]]],
    weights: Sequence[float] | None = None,
    norm: str = "z",
    names: Sequence[str] | None = None,
) -> dict[str, list[tuple[str, float]]]:
    """Weighted sum of per-query normalised scores (`aspire.scoring.fusion.fuse_ranked`, `norm` one of its
    methods) of runs over the same candidates -> `{query: [(cand, fused score), ...]}` best first."""
    if len(runs) < 2:
        raise ValueError(f"fusion needs at least two runs, got {len(runs)}")
    names = list(names or [f"run{i}" for i in range(len(runs))])
    weights = [1.0 / len(runs)] * len(runs) if weights is None else list(weights)
    if len(weights) != len(runs):
        raise ValueError(f"{len(weights)} weights for {len(runs)} runs")
    method = fusion_method(norm)
    first = runs[0]
    for name, run in zip(names[1:], runs[1:]):
        if set(run) != set(first):
            diff = sorted(set(run) ^ set(first))[:5]
            raise ValueError(f"runs {names[0]} and {name} rank different queries (e.g. {diff})")
        for qid, scores in run.items():
            if set(scores) != set(first[qid]):
                diff = sorted(set(scores) ^ set(first[qid]))[:5]
                raise ValueError(f"query {qid}: runs {names[0]} and {name} rank different candidates (e.g. {diff})")
    return {qid: fuse_ranked([run[qid] for run in runs], weights, method) for qid in first}


def fuse_pool_set(
    pool_set: PoolSet,
    inputs: Sequence[tuple[str | Path, str]],
    out: str | Path,
    exp: str,
    weights: Sequence[float] | None = None,
    norm: str = "z",
) -> dict[str, dict[str, list[str]]]:
    """Fuse every facet's ranked files of `inputs` [(folder, exp), ...]; write `out`'s ranked files.

    Returns `{facet: {query: [cand, ...]}}`, ready for the pool evaluator.
    """
    rankings = {}
    for facet in pool_set.facets:
        runs = []
        for folder, run_exp in inputs:
            runs.append(read_scored(existing_ranked_path(folder, pool_set.name, run_exp, facet)))
        fused = fuse_scores(runs, weights, norm, names=[f"{f}:{e}" for f, e in inputs])
        write_ranked(ranked_path(out, pool_set.name, exp, facet), fused)
        rankings[facet] = {q: [c for c, _ in r] for q, r in fused.items()}
    return rankings


def fuse_runs(
    runs: Sequence[Mapping[str, Sequence[tuple[str, float]]]],
    weights: Sequence[float] | None = None,
    fusion: str = "z",
    rrf_k: float = 60.0,
) -> dict[str, list[tuple[str, float]]]:
    """Fuse ranked runs `{query: [(doc, score), ...]}` that may rank different documents, with the search
    pipeline's fusion (`aspire.scoring.fusion.fuse_ranked`): `z` / `minmax`, the weighted sum of per-query
    normalised scores (a document a run does not rank adds nothing from it), or `rrf`, the sum of
    1 / (rrf_k + rank) (weights default to 1; else to 1 / number of runs). Every run must hold the same
    queries. Returns best-first lists (ties by document id)."""
    if len(runs) < 2:
        raise ValueError(f"fusion needs at least two runs, got {len(runs)}")
    fusion = fusion_method(fusion)
    if weights is None:
        weights = [1.0 if fusion == "rrf" else 1.0 / len(runs)] * len(runs)
    if len(weights) != len(runs):
        raise ValueError(f"{len(weights)} weights for {len(runs)} runs")
    for i, run in enumerate(runs[1:], start=1):
        if set(run) != set(runs[0]):
            raise ValueError(f"runs 0 and {i} rank different queries (e.g. {sorted(set(run) ^ set(runs[0]))[:5]})")
    return {q: fuse_ranked([dict(run[q]) for run in runs], weights, fusion, rrf_k) for q in runs[0]}
