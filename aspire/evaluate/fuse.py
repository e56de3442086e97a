"""Ensembles: fuse several rankings of the same pools into one (`aspire.scoring.fusion`, search's fusion).

Each input is a folder of ranked files in the official format (`{query_pid: [[cand_pid, score],
...]}`, best first; similarities or distances, told apart by their order) and its experiment name. Per query, every run's scores
are normalised (default `z`: zero mean, unit variance over the pool) and summed with weights, so a whole-abstract vector and an aspect-conditional sentence matcher, whose scores live
on different scales, can be combined. The runs must rank exactly the same candidates for the same
queries; anything else is an error naming the query, so nothing is silently dropped. One file given twice is
refused (it would weigh double unsaid): a run's share is its weight.

    python -m aspire.evaluate fuse --run runs/csfcube/abstract:minilm-abstract \
        --run runs/csfcube/ts-ot:model-contextual-ot-tau1 --exp fused --out runs/csfcube/fused
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aspire.benchmarks.metrics import id_order
from aspire.benchmarks.pools import PoolSet, existing_ranked_path, ranked_path, write_ranked
from aspire.io import read_json, write_json
from aspire.scoring.fusion import check_weights, fuse_ranked, fusion_method

log = logging.getLogger(__name__)


def read_scored(path: str | Path) -> dict[str, dict[str, float]]:
    """`{query_pid: {cand_pid: similarity}}` from a ranked-pool file (best first).

    Files written by this framework hold similarities (falling down each list); others, like
    the shipped SPECTER pools, hold distances (rising down each list). The direction is read
    from the order: a file whose every list is non-decreasing is taken as distances and negated;
    a file whose lists disagree with the order they are in is an error. A file that is missing or no JSON, a query
    in it twice (Python's json kept the last ranking and dropped the other unsaid) or a score past the float range
    is a ValueError naming the file.
    """
    raw = read_json(path, "ranked file")
    if not isinstance(raw, dict):  # once an AttributeError naming no file
        raise ValueError(f"{path}: a ranked file is a JSON object {{query_pid: [[cand_pid, score], ...]}}, got a "
                         f"JSON {type(raw).__name__}")
    out: dict[str, dict[str, float]] = {}
    for qid, ranked in raw.items():
        if not isinstance(ranked, list):
            raise ValueError(f"{path}: query {qid}: its ranking must be a list of [cand_pid, score] pairs, got "
                             f"{type(ranked).__name__}")
        scores: dict[str, float] = {}
        for entry in ranked:
            # a boolean is no score (true once read as 1.0), as `aspire.benchmarks.pools.write_trec` refuses it
            if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], (int, float))
                    and not isinstance(entry[1], bool)):
                raise ValueError(f"{path}: query {qid}: entries must be [cand_pid, score] pairs, got {entry!r}")
            try:  # an integer past the float range (10**400) was a bare OverflowError naming no file
                cand, score = str(entry[0]), float(entry[1])
            except OverflowError:
                raise ValueError(f"{path}: query {qid}: candidate {entry[0]} has a score past the float range "
                                 f"(an integer of {len(str(entry[1]))} digits)") from None
            if score != score or score in (float("inf"), float("-inf")):
                raise ValueError(f"{path}: query {qid}: candidate {cand} has a non-finite score {score}")
            if cand in scores:
                raise ValueError(f"{path}: query {qid}: candidate {cand} is ranked twice")
            scores[cand] = score
        out[str(qid)] = scores
    if score_direction({q: list(scores.values()) for q, scores in out.items()}, str(path)) < 0:
        out = {q: {c: -s for c, s in scores.items()} for q, scores in out.items()}  # distances -> similarities
    return out


def score_direction(lists: Mapping[str, Sequence[float]], name: str) -> int:
    """+1 when the scores of every list `{query: [score, ...] best first}` fall (or tie) down the list
    (similarities), -1 when every list's rise instead (distances, best first); else ValueError naming `name`
    and a query whose scores go against the others'. `read_scored` and `fuse_runs` read a run's direction by it."""
    rising = [q for q, v in lists.items() if any(x < y for x, y in zip(v, v[1:]))]
    falling = [q for q, v in lists.items() if any(x > y for x, y in zip(v, v[1:]))]
    mixed = sorted(set(rising) & set(falling))
    if mixed:
        raise ValueError(f"{name}: query {mixed[0]}: scores neither fall (similarities) nor rise (distances) "
                         "down its ranking")
    if rising and falling:
        raise ValueError(f"{name}: scores neither fall (similarities) nor rise (distances) down every ranking: they "
                         f"fall down query {sorted(falling)[0]}'s and rise down query {sorted(rising)[0]}'s")
    return -1 if rising else 1


def check_finite(name: str, qid: str, scores) -> None:
    """ValueError naming the run `name`, the query and the document when one of `scores` (`(doc, score)` pairs) is
    not a finite number: `fuse_ranked` would name only its list's position and the document, and a distance run's
    score negated. A string (`"2"`) is no number, though `float` reads it (it was fused, its rank direction read by
    comparing strings: `"10" < "9"`), nor is a boolean."""
    for doc, score in scores:
        try:
            finite = isinstance(score, numbers.Real) and not isinstance(score, bool) and math.isfinite(float(score))
        except (TypeError, ValueError, OverflowError):  # 10**400: OverflowError, once raised bare
            finite = False
        if not finite:
            raise ValueError(f"run {name}: query {qid}: document {doc} has the score {score!r}: fusion needs finite "
                             "numbers")


def _run_names(names: Sequence[str] | None, n: int, default: str) -> list[str]:
    """`names` as a list, one for each of `n` runs (default `default.format(i)`); else ValueError: a run without a
    name was left out of the checks that its queries and candidates are the others' (zip stopped at the names)."""
    names = [default.format(i) for i in range(n)] if names is None else list(names)
    if len(names) != n:
        raise ValueError(f"{len(names)} run names for {n} runs")
    return names


def check_distinct_files(paths: Sequence[str | Path], names: Sequence[str]) -> None:
    """ValueError when two of the run files `paths` (named `names` as given) are one file however spelt (a relative
    and an absolute path, `..`, a link: their resolved paths), naming both positions (from 1) and the file: fused
    with itself a run changes nothing, beside a third it weighs double unsaid (a run's share is its `--weights`).
    Two files with the same content are the user's choice, fused as given."""
    seen: dict[Path, int] = {}
    for i, path in enumerate(paths):
        j = seen.setdefault(Path(path).resolve(), i)
        if j != i:
            raise ValueError(f"runs {j + 1} and {i + 1} ({names[j]} and {names[i]}) are one file, "
                             f"{Path(path).resolve()}: fused twice it would weigh double (with no other run, change "
                             "nothing): give it once and weigh it with --weights")


def fuse_scores(
    runs: Sequence[Mapping[str, Mapping[str, float]]],
    weights: Sequence[float] | None = None,
    norm: str = "z",
    names: Sequence[str] | None = None,
) -> dict[str, list[tuple[str, float]]]:
    """Weighted sum of per-query normalised scores (`aspire.scoring.fusion.fuse_ranked`, `norm` one of its
    methods) of runs over the same candidates -> `{query: [(cand, fused score), ...]}` best first. `names` (one a
    run, default `run0`, ...) name the runs in errors."""
    if len(runs) < 2:
        raise ValueError(f"fusion needs at least two runs, got {len(runs)}")
    names = _run_names(names, len(runs), "run{}")
    if weights is not None and len(weights) != len(runs):
        raise ValueError(f"{len(weights)} weights for {len(runs)} runs")
    weights = [1.0 / len(runs)] * len(runs) if weights is None else check_weights(weights, len(runs))
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
    for name, run in zip(names, runs):
        for qid, scores in run.items():
            check_finite(name, qid, scores.items())
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

    Returns `{facet: {query: [cand, ...]}}`, ready for the pool evaluator. One ranked file given twice (the same
    folder and experiment, however spelt, or a link to it) is a ValueError (`check_distinct_files`), before anything
    is written; a copy of it is fused as given.
    """
    names = [f"{f}:{e}" for f, e in inputs]
    paths = {facet: [existing_ranked_path(folder, pool_set.name, run_exp, facet) for folder, run_exp in inputs]
             for facet in pool_set.facets}
    for facet_paths in paths.values():
        check_distinct_files(facet_paths, names)
    rankings = {}
    for facet in pool_set.facets:
        fused = fuse_scores([read_scored(path) for path in paths[facet]], weights, norm, names=names)
        write_ranked(ranked_path(out, pool_set.name, exp, facet), fused)
        rankings[facet] = {q: [c for c, _ in r] for q, r in fused.items()}
    return rankings


def fuse_runs(
    runs: Sequence[Mapping[str, Sequence[tuple[str, float]]]],
    weights: Sequence[float] | None = None,
    fusion: str = "z",
    rrf_k: float = 60.0,
    names: Sequence[str] | None = None,
) -> dict[str, list[tuple[str, float]]]:
    """Fuse ranked runs `{query: [(doc, score), ...] in rank order}` (as `aspire.benchmarks.runs.read_run` reads
    them) that may rank different documents, with the search pipeline's fusion (`aspire.scoring.fusion.fuse_ranked`):
    `z` / `minmax`, the weighted sum of per-query normalised scores (a document a run does not rank adds nothing
    from it), or `rrf`, the sum of 1 / (rrf_k + rank) with the rank each run gives (weights default to 1; else to
    1 / number of runs). For score fusion a run's scores must fall down every ranking, or rise down every one
    (distances, negated: `score_direction`); else ValueError naming the run (`names`, default `run 0`, ...) and a
    query. Every run must hold the same queries, and rank a document at most once a query (else ValueError naming
    the run and query). Returns best-first lists (ties by document id)."""
    if len(runs) < 2:
        raise ValueError(f"fusion needs at least two runs, got {len(runs)}")
    fusion = fusion_method(fusion)
    names = _run_names(names, len(runs), "run {}")
    if weights is None:
        weights = [1.0 if fusion == "rrf" else 1.0 / len(runs)] * len(runs)
    if len(weights) != len(runs):
        raise ValueError(f"{len(weights)} weights for {len(runs)} runs")
    weights = check_weights(weights, len(runs))
    for name, run in zip(names[1:], runs[1:]):
        if set(run) != set(runs[0]):
            raise ValueError(f"runs {names[0]} and {name} rank different queries "
                             f"(e.g. {sorted(set(run) ^ set(runs[0]), key=id_order)[:5]})")  # 1 and '1' sort too
    for name, run in zip(names, runs):  # a document ranked twice once kept its last rank and score unsaid
        for q, ranked in run.items():
            docs = [doc for doc, _ in ranked]
            if len(set(docs)) != len(docs):
                twice = sorted({d for d in docs if docs.count(d) > 1}, key=id_order)
                raise ValueError(f"run {name}: query {q} ranks document(s) {twice[:3]} twice")
    if fusion == "rrf":  # the runs' own order: position i scores -i, so fuse_ranked's rank is the run's rank
        lists = [{q: {doc: -float(i) for i, (doc, _) in enumerate(ranked)} for q, ranked in run.items()}
                 for run in runs]
    else:
        lists = []
        for name, run in zip(names, runs):
            for q, ranked in run.items():
                check_finite(name, q, ranked)
            sign = score_direction({q: [s for _, s in ranked] for q, ranked in run.items()}, name)
            lists.append({q: {doc: sign * s for doc, s in ranked} for q, ranked in run.items()})
    return {q: fuse_ranked([run[q] for run in lists], weights, fusion, rrf_k) for q in runs[0]}


BINARY = ("map", "mrr", "bpref", "p", "r", "recall")  # metrics a relevance threshold applies to (not ndcg)


def results_doc(folder: str | Path) -> dict | None:
    """The `results.json` of the results folder `folder` (a JSON object), None when it holds none (a run file, a
    `FOLDER:EXP` spec, a folder without one); ValueError naming the file when `aspire.io.read_json` cannot read it
    (not JSON, a bare NaN / Infinity, which aspire's writers never write, ...) or it is not an object. The one
    reader of results folders for fuse-runs and compare."""
    path = Path(folder) / "results.json"
    return read_json(path, "results file", mapping=True, finite=True) if path.is_file() else None


def recorded_protocol(folder: Path) -> tuple[str | None, int | None]:
    """(benchmark, relevance threshold) a results folder's `results.json` records (`benchmark` or the pools
    command's `dataset`; `relevance_threshold`), None for what it does not record."""
    return protocol_of(results_doc(folder), folder)


def protocol_of(doc: Any, folder: str | Path = "") -> tuple[str | None, int | None]:
    """`recorded_protocol` of a `results.json` already read (`results_doc`; None: the folder has none). A recorded
    `relevance_threshold` that is no whole number >= 1, or a benchmark that is no string, is a ValueError naming the
    results folder `folder` (a threshold once read as none, so the run was scored at another threshold than its file
    says)."""
    if not isinstance(doc, dict):
        return None, None
    threshold = doc.get("relevance_threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1):
        raise ValueError(f"{Path(folder) / 'results.json'}: relevance_threshold must be a whole number >= 1, got "
                         f"{threshold!r}")
    benchmark = doc.get("benchmark", doc.get("dataset"))
    if benchmark is not None and not isinstance(benchmark, str):  # once a bare "unhashable type" TypeError
        raise ValueError(f"{Path(folder) / 'results.json'}: the benchmark it records (benchmark / dataset) must be a "
                         f"name, got {benchmark!r}")
    return benchmark, threshold


def check_csfcube_data(inputs: Sequence[Path], root: Path, docs: Mapping[Path, Any] | None = None) -> PoolSet | None:
    """ValueError when the CSFCube results folders `inputs` were scored on other queries, judgments or folds than
    the CSFCube folder `root` holds: their `results.json` record it (`judged_set`, `PoolSet.fingerprint`), and two
    inputs that record different ones, or one that differs from `root`'s, are refused, naming them. A warning names
    the inputs that record none (written before it was recorded), which cannot be checked; when none records one,
    `root` is not read here. `docs`: `{folder: results_doc(folder)}` where the caller has read them (the others are
    read here). Returns `load_csfcube(root)` where it was loaded (for the caller to score on), else None."""
    docs = docs or {}
    recorded = {}
    for folder in inputs:
        doc = docs.get(folder)
        if doc is None:  # not read by the caller, or missing: read_json names it
            doc = read_json(folder / "results.json", "results file", mapping=True, finite=True)
        if isinstance(doc, dict) and isinstance(doc.get("judged_set"), str):
            recorded[folder] = doc["judged_set"]
    (a, seen_a), *rest = recorded.items() or [(None, None)]
    other = next(((b, seen_b) for b, seen_b in rest if seen_b != seen_a), None)
    if other is not None:
        raise ValueError(f"{a} and {other[0]} were scored on different CSFCube queries, judgments or folds (judged "
                         f"set {seen_a} and {other[1]}): fuse runs of one CSFCube copy")
    unknown = [str(f) for f in inputs if f not in recorded]
    if unknown:
        log.warning("%d input(s) record no judged set (written before it was recorded), so they cannot be checked "
                    "against the CSFCube folder %s they are scored on: %s", len(unknown), root, ", ".join(unknown))
    if recorded:
        from aspire.benchmarks.csfcube import load_csfcube

        pool_set = load_csfcube(root)
        ours = pool_set.fingerprint()
        if seen_a != ours:
            raise ValueError(f"{', '.join(map(str, recorded))} were scored on judged set {seen_a}, the CSFCube folder "
                             f"{root} holds {ours} (other queries, judgments or folds): give the CSFCube folder they "
                             "were made with (--data)")
        return pool_set
    return None


def at_threshold(metric: str, threshold: int) -> str:
    """`MAP` -> `MAP-l2` at threshold 2 for the binary metrics without their own `-lN`; others unchanged."""
    import re

    name = metric.strip().lower()  # as `aspire.benchmarks.runs.ranx_name` reads it: `MAP-L2` has its level
    if threshold == 1 or re.search(r"-l\d+$", name) or name.partition("@")[0] not in BINARY:
        return metric
    return f"{metric}-l{threshold}"


def fuse_run_files(inputs: Sequence[str | Path], out: str | Path, weights: Sequence[float] | None = None,
                   fusion: str = "z", rrf_k: float = 60.0, qrels: str | Path | None = None,
                   metrics: Sequence[str] | None = None, data: str | Path | None = None) -> dict:
    """`aspire evaluate fuse-runs`: fuse TREC runs (files, or results folders holding `run.trec` and `qrels.trec`)
    with `fuse_runs`, write `out/run.trec`, and with qrels (default: the first input folder's, which the other
    folders' must equal; `_scoring_qrels`) score it; returns and writes `out/results.json` (with the command that
    made it, `command`: `aspire.benchmarks.runs.invocation`). `metrics` with no qrels (run files alone) is a
    ValueError, as is one run file given twice however spelt (`check_distinct_files`; a copy is fused as given).
    Documents some inputs do not rank (two runs' top 100s) are fused with nothing from those inputs, which a warning
    and `results.json`'s `unranked` say (`unranked_record`).

    The relevance threshold is the one every input folder's `results.json` records with its benchmark
    (`recorded_protocol`); when they disagree or record none it is 1, and `threshold_from` says which. The binary
    metrics (`BINARY`) are scored at it (`MAP-l2`), over the queries with a document at or above it (the others are
    listed under `skipped_no_relevant`, as the pools evaluator leaves them out). Fused CSFCube folders are scored
    by the CSFCube evaluator (its two-fold protocol, its per-query CSV and results.json), so they compare with the
    benchmark's own folders; `qrels` and `metrics` do not apply to them (ValueError). They are scored on the CSFCube
    folder `data` (default `DATA/csfcube`; recorded as `data`), which must hold the judged set the inputs record
    (`check_csfcube_data`: inputs made with another `--data` are refused, not scored on other judgments); `data`
    applies to CSFCube folders alone (ValueError for other inputs).

    A pools or CSFCube folder's `run.trec` holds the scores of its ranked files (similarities; distances negated),
    or each candidate's rank as its score (pool size - rank + 1) where a ranked file could not give them
    (`aspire.benchmarks.pools.write_trec`): `z` / `minmax` fusion then fuses normalised ranks for that folder. A fused
    CSFCube folder holds its fused ranked files (`test-pid2pool-csfcube-fused-FACET-ranked.json`) and a `run.trec` of
    the fused scores, as the evaluator's folders do, so it can be fused again."""
    from aspire.benchmarks.metrics import without_unscorable
    from aspire.benchmarks.runs import (
        DEFAULT_METRICS,
        invocation,
        mean_scores,
        per_query,
        read_run,
        write_qrels,
        write_run,
    )

    inputs, out = [Path(p) for p in inputs], Path(out)
    paths = [p / "run.trec" if p.is_dir() else p for p in inputs]
    check_distinct_files(paths, [str(p) for p in inputs])  # before anything is read
    docs = {p: results_doc(p) for p in inputs if p.is_dir()}  # each read once: the CSFCube check reads them too
    recorded = {protocol_of(docs[p], p) if p.is_dir() else (None, None) for p in inputs}
    (benchmark, threshold), = recorded if len(recorded) == 1 else {(None, None)}
    threshold_from = "the inputs' results.json" if threshold is not None else (
        "default: the inputs record none" if len(recorded) == 1 else "default: the inputs disagree: " + "; ".join(
            sorted(f"{b or 'no benchmark'}, threshold {'none' if t is None else t}" for b, t in recorded)))
    threshold = 1 if threshold is None else threshold
    if benchmark == "csfcube" and (qrels is not None or metrics):  # once dropped without a word
        raise ValueError(f"{', '.join(map(str, inputs))}: CSFCube folders are scored by the CSFCube evaluator on its "
                         "own qrels and figures (MAP, NDCG%20): --qrels and --metric do not apply")
    if benchmark != "csfcube" and data is not None:  # else dropped without a word
        raise ValueError(f"{', '.join(map(str, inputs))}: --data is the CSFCube folder that fused CSFCube results "
                         "folders are scored on; these are not CSFCube folders (their qrels score them)")
    pool_set = None  # the CSFCube pools, where the check loads them: scored on as loaded, not loaded again
    if benchmark == "csfcube":  # before anything is written
        from aspire.paths import DATA

        data = Path(data) if data is not None else DATA / "csfcube"
        pool_set = check_csfcube_data(inputs, data, docs)
    judged = None if benchmark == "csfcube" else _scoring_qrels(inputs, qrels, metrics)  # before anything is written
    runs = [read_run(p) for p in paths]
    fused = fuse_runs(runs, weights, fusion, rrf_k, names=[str(p) for p in paths])
    info = {"fused_from": [str(p) for p in paths], "fusion": fusion, "weights": list(weights) if weights else "equal",
            **({"rrf_k": rrf_k} if fusion == "rrf" else {}), **unranked_record(runs, fused, paths, fusion)}
    if benchmark == "csfcube":  # scored, then written (`write_trec` writes run.trec)
        info = {**info, "data": str(data)}
        return _csfcube_fused(fused, out, info, pool_set)
    results = {"experiment": "fused", **({"benchmark": benchmark} if benchmark else {}), "relevance_threshold": threshold,
               "threshold_from": threshold_from, **info}
    if judged is not None:  # scored before anything is written: a refusal here once left run.trec and qrels.trec
        # without results.json, a folder a re-run into it refused ("holds files but no readable results.json")
        names = [at_threshold(m, threshold) for m in (metrics or DEFAULT_METRICS)]
        left, scored, (scored_run,) = without_unscorable(judged, [fused], threshold)
        if left:
            results["skipped_no_relevant"] = left
        results["metrics"] = mean_scores(per_query(scored, scored_run, names))
    write_run(out / "run.trec", fused, "fused")
    if judged is not None:
        write_qrels(out / "qrels.trec", judged)
    results["command"] = invocation()
    write_json(out / "results.json", results, indent=None)
    return results


UNRANKED_SCORE = {  # what a document a run does not rank gets from that run, by fusion method (`fuse_ranked`)
    "z": "0 from that run, its mean z-score: above the documents it ranks below its mean",
    "minmax": "0 from that run, its lowest score's",
    "rrf": "0 from that run, below any rank it gives",
}


def unranked_record(runs: Sequence[Mapping[str, Sequence[tuple[str, float]]]],
                    fused: Mapping[str, Sequence[tuple[str, float]]], paths: Sequence[str | Path], fusion: str) -> dict:
    """`{"unranked": {"pairs", "of", "by_run", "scored"}}` for `fuse_run_files`' results, with a warning saying the
    same, when some (query, document) pairs of the fused run `fused` are missing from some of the `runs` (named by
    `paths`): each such document adds nothing from the run that does not rank it (`UNRANKED_SCORE`; ranx's
    convention). `by_run` counts each run's missing pairs, `pairs` those missing from one run or more, `of` all the
    fused pairs. Empty when every run ranks every fused document: two top-100 runs fused under z once put a
    document one run left out at that run's mean score without a word (11,558 of the 52,079 pairs of two
    context2doc BM25 runs), and `--weights 1,0` did not give back the first run."""
    by_run = dict.fromkeys(map(str, paths), 0)
    pairs = of = 0
    for q, ranked in fused.items():
        held = [{d for d, _ in run[q]} for run in runs]
        for d, _ in ranked:
            left = [name for name, docs in zip(by_run, held) if d not in docs]
            for name in left:
                by_run[name] += 1
            pairs += bool(left)
        of += len(ranked)
    if not pairs:
        return {}
    scored = UNRANKED_SCORE[fusion_method(fusion)]
    by_run = {name: n for name, n in by_run.items() if n}
    log.warning("fuse-runs: %d of the fused run's %d (query, document) pairs are not ranked by every input; such a "
                "document scores %s (%s)", pairs, of, scored, "; ".join(f"{name} leaves out {n}" for name, n in
                                                                        by_run.items()))
    return {"unranked": {"pairs": pairs, "of": of, "by_run": by_run, "scored": scored}}


def _scoring_qrels(inputs: Sequence[Path], qrels: str | Path | None, metrics: Sequence[str] | None
                   ) -> dict[str, dict[str, int]] | None:
    """The judgments `fuse_run_files` scores the fused run on: `qrels`, else the first input folder's `qrels.trec`;
    None when there are none (only run files, no `qrels`). ValueError when `metrics` are named with nothing to score
    them on (once dropped without a word), or, with no `qrels`, when another input folder's `qrels.trec` holds other
    judgments, naming both folders (the fused figure was that of the first folder's judgments, so it changed with
    the inputs' order; compare refuses such runs)."""
    from aspire.benchmarks.runs import read_qrels

    if qrels is not None:
        return read_qrels(qrels)
    folders = [p for p in inputs if p.is_dir()]
    if not folders:
        if metrics:
            raise ValueError(f"{', '.join(map(str, inputs))}: run files hold no judgments to score --metric on: give "
                             "--qrels")
        return None
    judged = read_qrels(folders[0] / "qrels.trec")
    for other in folders[1:]:
        if (other / "qrels.trec").is_file() and read_qrels(other / "qrels.trec") != judged:
            raise ValueError(f"{folders[0]} and {other} are judged by different qrels (qrels.trec): not runs of one "
                             "benchmark; give --qrels to score the fused run on one of them")
    return judged


def _csfcube_fused(fused: Mapping[str, Sequence[tuple[str, float]]], out: Path, info: dict,
                   pool_set: PoolSet | None = None) -> dict:
    """A fused CSFCube run (`PID_FACET` queries) scored and written as the CSFCube evaluator does, on the CSFCube
    folder `info["data"]` (recorded with the rest of `info`). `pool_set`: `load_csfcube(info["data"])` where the
    caller has it loaded (`check_csfcube_data`; else loaded here)."""
    from aspire.benchmarks.csfcube import NAME, evaluate_csfcube_rankings, load_csfcube, write_results
    from aspire.benchmarks.pools import write_trec

    root = Path(info["data"])
    rankings: dict[str, dict[str, list[str]]] = {}
    scored: dict[str, dict[str, Sequence[tuple[str, float]]]] = {}
    for key, ranked in fused.items():
        pid, _, facet = key.rpartition("_")
        rankings.setdefault(facet, {})[pid] = [doc for doc, _ in ranked]
        scored.setdefault(facet, {})[pid] = ranked
    pool_set = load_csfcube(root) if pool_set is None else pool_set
    results, per_query = evaluate_csfcube_rankings(root, rankings, pool_set)
    results.update(experiment="fused", threshold_from="the inputs' results.json", **info)
    write_results(out, root, "fused", results, per_query, pool_set)  # with the command (`command`)
    # the fused ranked files, which `write_trec` reads the scores from: without them run.trec held rank scores, and a
    # second z / minmax fusion of this folder fused its ranks, not its fused scores
    for facet in pool_set.facets:  # each ranked by now: the evaluator refuses a facet without rankings
        write_ranked(ranked_path(out, NAME, "fused", facet), scored[facet])
    write_trec(out, pool_set, rankings, "fused")
    return results


def format_fused(results: dict) -> str:
    """The fused run's figures: `MRR 0.3197  ...` and the threshold, or CSFCube's test table."""
    if results.get("benchmark") == "csfcube":
        from aspire.benchmarks.csfcube import format_table

        return f"CSFCube test MAP / NDCG%20  {format_table(results, 'test')}"
    figures = "  ".join(f"{m} {v:.4f}" for m, v in results.get("metrics", {}).items())
    return f"{figures}  (relevant: grade >= {results['relevance_threshold']}, {results['threshold_from']})"
