"""Running a model on CSFCube (`aspire.benchmarks.csfcube` says what the benchmark is): encode, rank
every facet's pools, score with the benchmark's protocol, write the run files and `results.json`.

Its hooks in the suite's runner table (`aspire.evaluate.suite.RUNNERS`): `suite_rows` (one model),
`ensemble_rows` (members fused per facet and query over the pool) and `compare_runs` (two results folders,
paired tests on the benchmark's own figures).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from aspire.benchmarks.csfcube import (
    ABSTRACTS_FILE,
    LABEL_TO_FACET,
    evaluate_csfcube_rankings,
    load_csfcube,
    write_results,
)
from aspire.benchmarks.pools import PoolSet, write_trec
from aspire.benchmarks.stats import table_row
from aspire.data.papers import read_paper_map
from aspire.evaluate.options import EvalOptions, Stages

log = logging.getLogger(__name__)


def run_csfcube(root: str | Path, model: str | None, scorer: str | None, out: str | Path, exp: str | None = None,
                options: EvalOptions | None = None, stages: Stages | None = None) -> dict:
    """Encode CSFCube with `model`, rank every facet's pools with `scorer`, write and return results.

    `options` (`aspire.evaluate.options.EvalOptions`): the encoding, the scorer's and encoder's options, the
    cache, and how a facet's query is read (`query_text`, `cand_sentences`, `facet_code`; see
    `aspire.evaluate.facets`). `stages` (`aspire.evaluate.options.Stages`): the search pipeline's stages after
    the model (`aspire.evaluate.pool_stages`): BM25 of the facet's sentences, alone (no model) or fused with the
    model's run, and a cross-encoder rerank of each pool's top N.
    Writes `out/test-pid2pool-csfcube-EXP-{facet}-ranked.json` (similarities, best first; each stage's own
    files beside them), the per-query CSV and `out/results.json` (with timings: encoding vs scoring seconds).
    """
    return _run_csfcube(root, model, scorer, out, exp, options, stages)[0]


def _run_csfcube(root: str | Path, model: str | None, scorer: str | None, out: str | Path, exp: str | None = None,
                 options: EvalOptions | None = None, stages: Stages | None = None) -> tuple[dict, PoolSet, dict]:
    """`run_csfcube` -> (its results, the pool set it loaded, its per-query metrics as fractions), so that the suite
    neither loads the pools again nor reads back the ranked files just written."""
    from aspire.evaluate.options import options_exp
    from aspire.evaluate.pool_stages import check_stage_names, run_stages
    from aspire.evaluate.rank import rank_pool_set

    options, stages = options or EvalOptions(), stages or Stages()
    if (model is None) != (scorer is None):
        raise ValueError("give a model and a scorer, BM25, or both")
    stages.checked(model is not None)
    root, out = Path(root), Path(out)
    pool_set = load_csfcube(root)
    papers = read_paper_map(root / ABSTRACTS_FILE, ids=pool_set.paper_ids(), needed_by="pooled")
    base = None if model is None else options_exp(model, scorer, options)
    exp = exp or (stages.exp(base) if stages.staged else base)
    if stages.staged:
        check_stage_names(exp, base, stages)  # before the model runs
    info: dict = {}
    if model is not None:
        rankings, info = rank_pool_set(pool_set, papers, model, scorer, out, base if stages.staged else exp, options,
                                       LABEL_TO_FACET)
    if stages.staged:
        rankings, ran = run_stages(pool_set, papers, LABEL_TO_FACET, out, exp, base, stages)
        info.update(ran, experiment=exp)
    results, per_query = evaluate_csfcube_rankings(root, rankings, pool_set)
    results.update(info)
    write_results(out, root, exp, results, per_query, pool_set)
    write_trec(out, pool_set, rankings, exp)
    log.info("wrote %s", out / "results.json")
    return results, pool_set, per_query


def fuse_csfcube(
    root: str | Path,
    inputs: list[tuple[str | Path, str]],
    out: str | Path,
    exp: str,
    weights: list[float] | None = None,
    fusion: str = "z",
) -> dict:
    """Ensemble of ranked CSFCube runs [(folder, exp), ...] fused by `fusion` (`aspire.scoring.fusion`), scored."""
    from aspire.evaluate.fuse import fuse_pool_set

    out, pool_set = Path(out), load_csfcube(root)
    rankings = fuse_pool_set(pool_set, inputs, out, exp, weights, fusion)
    results, per_query = evaluate_csfcube_rankings(root, rankings, pool_set)
    results.update(experiment=exp, fused_from=[f"{folder}:{e}" for folder, e in inputs],
                   fusion={"method": fusion, "weights": weights or "equal"})
    write_results(out, root, exp, results, per_query, pool_set)
    write_trec(out, pool_set, rankings, exp)
    return results


def run_csfcube_search(root: str | Path, model: str, pipeline: list[str], out: str | Path, exp: str | None = None,
                       cache_dir: str | Path | None = None, batch_size: int = 32,
                       encoder_options: dict | None = None, facet_code: str = "auto", device: str | None = None) -> dict:
    """CSFCube answered by `aspire search`'s Searcher with the search-config overrides `pipeline`
    (`aspire.evaluate.search_run.rank_pools_by_search`; `facet_code`: the control code of a facet's queries, for
    a model with facet codes), scored by the benchmark's protocol; writes the per-query CSV, the TREC files and
    `out/results.json` (with the encoder options, `facet_code` and, for a model with facet codes, the codes its
    queries and papers were encoded with, as `run_csfcube` records them) and what it ran on (`run_record`).
    `device`: the torch device the model is loaded on and the queries are searched on (None: the CPU), as
    `aspire search --device` runs them."""
    import time

    from aspire.encoders.codes import query_code
    from aspire.evaluate.options import search_exp
    from aspire.evaluate.rank import run_record
    from aspire.evaluate.search_run import load_search_encoder, pipeline_config, rank_pools_by_search

    search = pipeline_config(pipeline, model=model)  # a bad or unread key before the model loads and the pools are encoded
    root, out = Path(root), Path(out)
    pool_set = load_csfcube(root)
    papers = read_paper_map(root / ABSTRACTS_FILE, ids=pool_set.paper_ids(), needed_by="pooled")
    exp = exp or search_exp(model, pipeline)
    encoder, loaded = load_search_encoder(model, None, encoder_options, device)
    t0 = time.perf_counter()
    encoded: list[dict] = []
    rankings = rank_pools_by_search(pool_set, papers, encoder, pipeline, LABEL_TO_FACET, cache_dir, batch_size,
                                    facet_code, encoded, search)  # the queries searched on the encoder's device
    results, per_query = evaluate_csfcube_rankings(root, rankings, pool_set)
    codes = {f: c for f in pool_set.facets if (c := query_code(getattr(encoder, "codes", ()), facet_code, f))}
    results.update(experiment=exp, model=str(model), **loaded, encoder_fingerprint=encoded[0]["fingerprint"],
                   encoder_options=dict(encoder_options or {}), facet_code=facet_code,
                   run_record=run_record(encoder, encoder.device, batch_size, cache_dir, encoded),
                   **({"query_codes": codes, "doc_code": encoder.code} if codes else {}),
                   search={"overrides": list(pipeline), "index": "flat, one a pool",  # k, shortlist: each pool's size
                           "config": {**asdict(search), "k": "pool size", "shortlist": "pool size"}},
                   seconds=time.perf_counter() - t0)
    write_results(out, root, exp, results, per_query, pool_set)
    write_trec(out, pool_set, rankings, exp)
    log.info("wrote %s", out / "results.json")
    return results


def _rows(bench, pool_set: PoolSet, per_query: dict, note: str = "") -> list[dict]:
    """The suite's rows: each of the benchmark's metrics over the two folds' test queries of `pool_set` (the CSFCube
    pools the run was scored on, `load_csfcube`)."""
    from aspire.benchmarks.csfcube import test_units

    return [table_row(bench.title, metric, (u := test_units(pool_set, per_query, metric)).value(), u.bootstrap(),
                      len(u.units), note) for metric in bench.metrics]


def suite_rows(bench, data: Path, model: str, scorer: str, out: Path, settings: dict,
               options: EvalOptions | None = None) -> tuple[list[dict], str]:
    """The suite's runner: `run_csfcube`, then the test figures with their intervals (from the run's own pools and
    per-query scores: nothing loaded or read back again)."""
    results, pool_set, per_query = _run_csfcube(data, model, scorer, out, options=options)
    return _rows(bench, pool_set, per_query), results["encoder_fingerprint"]


def ensemble_rows(bench, data: Path, members, out: Path, settings: dict, fuse) -> list[dict]:
    """The ensemble suite's runner: each member (`aspire.evaluate.options.Member`) run into
    `out/members/NAME/csfcube`, their similarities fused per facet and query over the pool by `fuse`."""
    from aspire.benchmarks.csfcube import FACETS, NAME
    from aspire.benchmarks.pools import ranked_path, write_ranked
    from aspire.evaluate.fuse import read_scored

    pool_set = load_csfcube(data)
    folders = [out / "members" / m.name / "csfcube" for m in members]
    exps = [run_csfcube(data, m.model, m.scorer, folder, options=m.options)["experiment"]
            for m, folder in zip(members, folders)]
    rankings = {}
    for facet in FACETS:
        runs = [{q: list(s.items()) for q, s in read_scored(ranked_path(folder, NAME, exp, facet)).items()}
                for folder, exp in zip(folders, exps)]
        fused = fuse(runs)
        write_ranked(ranked_path(out / "csfcube", NAME, "ensemble", facet), fused)
        rankings[facet] = {q: [c for c, _ in r] for q, r in fused.items()}
    results, per_query = evaluate_csfcube_rankings(data, rankings, pool_set)
    write_results(out / "csfcube", data, "ensemble", results, per_query, pool_set)
    return _rows(bench, pool_set, per_query, "members " + ", ".join(m.name for m in members))


def compare_runs(a: str, b: str, metrics=None, data=None, n_perm: int = 10000, seed: int = 0, docs=None) -> dict:
    """`{"MAP": ..., "MAP background": ..., ...}`: paired tests of two CSFCube results folders on the benchmark's
    own figures, read from their per-query CSVs: MAP and NDCG%20 (percent) over every test query and per facet,
    each the mean of the two folds' test means (the bootstrap resamples the test queries together, each keeping its
    fold). Two folders whose `results.json` record different judged sets (`judged_set`: the pools, judgments and
    folds scored) are a ValueError naming both. `docs`: `{folder: its results.json}` where the caller (the suite's
    hook contract) has read them, else read here; the figures themselves are in the CSVs."""
    from aspire.benchmarks.csfcube import FACETS
    from aspire.benchmarks.stats import UnitScores, paired_test
    from aspire.evaluate.fuse import results_doc
    from aspire.evaluate.two_fold import REPORTED, load_per_query

    metrics = metrics or REPORTED
    odd = [m for m in metrics if m not in REPORTED]
    if odd:
        raise ValueError(f"CSFCube runs are compared on {', '.join(REPORTED)}, not {odd[0]!r}")
    docs = docs or {}
    seen = [d.get("judged_set") if isinstance(d := (docs[f] if f in docs else results_doc(f)), dict) else None
            for f in (a, b)]
    if None not in seen and seen[0] != seen[1]:  # once paired silently: per-query figures of other pools
        raise ValueError(f"{a} and {b} were scored on different CSFCube pools, judgments or folds (judged set "
                         f"{seen[0]} and {seen[1]}): their queries do not pair")
    qa, qb = load_per_query(a), load_per_query(b)
    if set(qa) != set(qb):
        raise ValueError(f"{a} and {b} score different CSFCube queries, e.g. {sorted(set(qa) ^ set(qb))[:3]}")
    moved = sorted(q for q in qa if (qa[q]["facet"], qa[q]["test_fold"]) != (qb[q]["facet"], qb[q]["test_fold"]))
    if moved:  # the folds are run A's below: a run scored on another splits file would be paired on the wrong halves
        q = moved[0]
        raise ValueError(f"{a} and {b} put {len(moved)} queries in other facets or test folds, e.g. {q}: "
                         f"{qa[q]['facet']} {qa[q]['test_fold']} against {qb[q]['facet']} {qb[q]['test_fold']}")
    out = {}
    for m in metrics:
        for group in ("all", *FACETS):
            keys = sorted(q for q in qa if group in ("all", qa[q]["facet"]))
            folds = {}
            for q in keys:
                folds.setdefault(qa[q]["test_fold"], []).append(q)
            ua, ub = (UnitScores.means({q: run[q][m] for q in keys}, folds) for run in (qa, qb))
            test = paired_test(ua, ub, n_perm=n_perm, seed=seed)
            out[m if group == "all" else f"{m} {group}"] = {
                **test, "per_unit_delta": {q: qa[q][m] - qb[q][m] for q in keys}}
    return out
