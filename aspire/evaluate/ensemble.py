"""Ensembles: several models or scorers run on the suite's benchmarks and fused per query, from YAML.

    python -m aspire.evaluate suite --ensemble configs/ensemble_minilm.yaml --out runs/suite/ensemble

A config (`configs/ensemble_*.yaml`) lists the members and how they are fused:

    fusion: z            # z | minmax: weighted sum of per-query normalised scores; rrf: sum of w / (rrf_k + rank)
    rrf_k: 60
    members:
      - {name: abstract, model: minilm, scorer: abstract, weight: 0.8,
         encode_options: {max_length: 256, normalize: true, joiner: " "}}
      - {name: maxp, model: minilm, scorer: maxpassage, weight: 0.2, scorer_options: {window: 2}}
      - {name: bm25, model: bm25, weight: 0.2}     # lexical: benchmarks with text queries only

Each member runs as in `aspire.evaluate.suite` (its files under `out/members/NAME/`); each benchmark's
runs are then fused with `aspire.evaluate.fuse.fuse_runs` (the search pipeline's `aspire.scoring.fusion`):
CSFCube per facet and query over the pool, reviewer matching per draw and reviewer over the rated
submissions, context2doc per query over all candidates. A `bm25` member takes part in context2doc only
(CSFCube and reviewer matching have no text queries for it); each row's note names the members fused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aspire.benchmarks import BENCHMARKS
from aspire.benchmarks.runs import invocation
from aspire.config import load_config, to_dict
from aspire.evaluate.fuse import fuse_runs
from aspire.evaluate.suite import _row
from aspire.io import write_json
from aspire.paths import DATA
from aspire.scoring.fusion import METHODS as FUSION_METHODS


@dataclass
class EnsembleMember:
    """One member: a model and a scorer (or `model: bm25`), its weight in the fusion and its options."""

    name: str = ""
    model: str = ""
    scorer: str | None = None
    weight: float = 1.0
    encoding: str = "contextual"
    scorer_options: dict = field(default_factory=dict)  # e.g. {tau: 1.0} for ot, {window: 2} for maxpassage
    encode_options: dict = field(default_factory=dict)  # abstract / independent encodings: max_length, normalize, joiner


@dataclass
class EnsembleConfig:
    fusion: str = "z"
    rrf_k: float = 60.0
    members: list[EnsembleMember] = field(default_factory=list)


def load_ensemble(path: str | Path) -> EnsembleConfig:
    """Read and check an ensemble YAML: two or more members, distinct names, a scorer for each model."""
    config = load_config(EnsembleConfig, path)
    if config.fusion not in FUSION_METHODS:
        raise ValueError(f"{path}: unknown fusion {config.fusion!r}; valid: {', '.join(FUSION_METHODS)}")
    if not config.rrf_k > 0:
        raise ValueError(f"{path}: rrf_k must be > 0, got {config.rrf_k}")
    if len(config.members) < 2:
        raise ValueError(f"{path}: an ensemble needs at least two members, got {len(config.members)}")
    names = [m.name for m in config.members]
    for i, m in enumerate(config.members):
        where = f"{path}: members[{i}] ({m.name or 'no name'})"
        if not m.name or names.count(m.name) > 1:
            raise ValueError(f"{where}: every member needs a distinct name")
        if not m.model:
            raise ValueError(f"{where}: no model")
        if (m.model == "bm25") == (m.scorer is not None):
            raise ValueError(f"{where}: a model needs a scorer; bm25 takes none")
        if not (m.weight >= 0 and m.weight == m.weight):
            raise ValueError(f"{where}: weight must be >= 0, got {m.weight}")
        if not all(isinstance(x, dict) for x in (m.scorer_options, m.encode_options)):
            raise ValueError(f"{where}: scorer_options and encode_options must be mappings")
    return config


def _options(m: EnsembleMember, cache_dir, batch_size: int, device: str | None) -> dict:
    return dict(encoding=m.encoding, scorer_options=dict(m.scorer_options), cache_dir=cache_dir,
                batch_size=batch_size, device=device, encode_options=dict(m.encode_options))


def _fuse(config: EnsembleConfig, members: list[EnsembleMember], runs: list[dict]) -> dict:
    return fuse_runs(runs, [m.weight for m in members], config.fusion, config.rrf_k)


def csfcube_rows(config: EnsembleConfig, members: list[EnsembleMember], data: Path, out: Path, **common) -> list[dict]:
    from aspire.benchmarks.csfcube import (
        FACETS,
        NAME,
        evaluate_csfcube_rankings,
        load_csfcube,
        test_units,
        write_results,
    )
    from aspire.benchmarks.pools import ranked_path, write_ranked
    from aspire.evaluate.csfcube import run_csfcube
    from aspire.evaluate.fuse import read_scored

    exps = [run_csfcube(data, m.model, m.scorer, out / "members" / m.name / "csfcube", **_options(m, **common))
            ["experiment"] for m in members]
    rankings = {}
    for facet in FACETS:
        runs = [{q: list(s.items()) for q, s in read_scored(ranked_path(out / "members" / m.name / "csfcube", NAME,
                                                                        exp, facet)).items()}
                for m, exp in zip(members, exps)]
        fused = _fuse(config, members, runs)
        write_ranked(ranked_path(out / "csfcube", NAME, "ensemble", facet), fused)
        rankings[facet] = {q: [c for c, _ in r] for q, r in fused.items()}
    results, per_query = evaluate_csfcube_rankings(data, rankings)
    write_results(out / "csfcube", data, "ensemble", results, per_query)
    pool_set, note = load_csfcube(data), "members " + ", ".join(m.name for m in members)
    return [_row("csfcube (two-fold test, all)", metric, (u := test_units(pool_set, per_query, metric)).value(),
                 u.bootstrap(), len(u.units), note) for metric in ("MAP", "NDCG%20")]


def reviewer_rows(config: EnsembleConfig, members: list[EnsembleMember], data: Path, out: Path, aggregate: str,
                  **common) -> list[dict]:
    from aspire.benchmarks.reviewers import (
        load_reviewer_set,
        prediction_files,
        read_predictions,
        reviewer_units,
        summarize,
    )
    from aspire.evaluate.reviewer_run import run_reviewers

    rset = load_reviewer_set(data)
    per_member = []
    for m in members:
        folder = out / "members" / m.name / "reviewers"
        run_reviewers(rset, m.model, [m.scorer], folder, m.name, aggregate, **_options(m, **common))
        per_member.append([read_predictions(p) for p in prediction_files(folder / "predictions", m.name, rset)])
    preds = []
    for draw in zip(*per_member):  # each member's {reviewer: {submission: score}} of one draw
        runs = [{r: list(s.items()) for r, s in pred.items()} for pred in draw]
        if any(set(run) != set(runs[0]) for run in runs):
            raise ValueError("ensemble members predicted for different reviewers")
        preds.append({r: dict(ranked) for r, ranked in _fuse(config, members, runs).items()})
    for path, pred in zip(prediction_files(out / "reviewers" / "predictions", "ensemble", rset), preds):
        write_json(path, pred, indent=None)
    res = summarize(*reviewer_units(rset, preds))
    write_json(out / "reviewers" / "results.json", {"benchmark": "reviewer-matching", "experiment": "ensemble",
                                                           "aggregate": aggregate, **res}, indent=None)
    note = f"aggregate {aggregate}; members " + ", ".join(m.name for m in members)
    return [_row("reviewer matching (10 draws)", "loss (lower better)", res["loss"], res["ci95"], res["n_reviewers"], note)]


def context2doc_rows(config: EnsembleConfig, members: list[EnsembleMember], bench, out: Path,
                     **common) -> list[dict]:
    """The fused context2doc figures on `bench` (`aspire.benchmarks.context2doc.load_context2doc`)."""
    from aspire.benchmarks.runs import read_run
    from aspire.evaluate.context2doc_run import METRICS, run_context2doc, score_and_write

    runs = []
    for m in members:
        folder = out / "members" / m.name / "context2doc"
        lexical = m.model == "bm25"
        run_context2doc(bench, folder, m.name, None if lexical else m.model, m.scorer, bm25=lexical,
                        depth=len(bench.candidates), **({} if lexical else _options(m, **common)))
        runs.append(read_run(folder / "run.trec"))
    fused = {q: ranked[:100] for q, ranked in _fuse(config, members, runs).items()}
    res = score_and_write(bench, fused, out / "context2doc", "ensemble", {"members": [m.name for m in members]})
    note = "members " + ", ".join(m.name for m in members)
    return [_row(f"context2doc {bench.split}", m, res["metrics"][m], res["ci95"][m], res["n_queries"], note) for m in METRICS[:4]]


@dataclass(frozen=True)
class EnsembleRunner:
    """How the ensemble suite fuses its members on one registered benchmark: `rows(benchmark, config, members,
    data_dir, out, settings, **common) -> rows`; `lexical`: bm25 members take part (else only model members)."""

    rows: Callable[..., list[dict]]
    lexical: bool = False


# benchmark name (aspire.benchmarks.BENCHMARKS) -> its ensemble runner
ENSEMBLE_RUNNERS: dict[str, EnsembleRunner] = {
    "csfcube": EnsembleRunner(lambda b, config, members, data, out, settings, **common:
                              csfcube_rows(config, members, data, out, **common)),
    "reviewers": EnsembleRunner(lambda b, config, members, data, out, settings, **common:
                                reviewer_rows(config, members, data, out, settings["aggregate"], **common)),
    "context2doc": EnsembleRunner(lambda b, config, members, data, out, settings, **common:
                                  context2doc_rows(config, members, _context2doc_test(data), out, **common), lexical=True),
    **dict.fromkeys(("venue", "year", "same-author"), EnsembleRunner(lambda *args, **common: _probe_rows(*args, **common))),
}


def _probe_rows(*args, **common) -> list[dict]:
    from aspire.evaluate.probes import ensemble_probe_rows  # the SciRepEval formats: members' features side by side

    return ensemble_probe_rows(*args, **common)


def _context2doc_test(data: Path):
    from aspire.benchmarks.context2doc import load_context2doc

    return load_context2doc(data, "test")


def run_ensemble_suite(path: str | Path, out, data: str | Path = DATA, aggregate: str = "max", cache_dir=None,
                       batch_size: int = 32, device: str | None = None) -> dict:
    """Run every member on each registered benchmark that has an ensemble runner, fuse them per benchmark and
    write `out/suite.json`; a benchmark where fewer than two members apply (bm25 members only count where the
    benchmark has text queries) is skipped with the reason."""
    config = load_ensemble(path)
    data, out = Path(data), Path(out)
    common = dict(cache_dir=cache_dir, batch_size=batch_size, device=device)
    settings = {"aggregate": aggregate}
    missing = [name for name in BENCHMARKS if name not in ENSEMBLE_RUNNERS]
    if missing:
        raise ValueError(f"benchmark(s) {missing} have no ensemble runner (aspire.evaluate.ensemble.ENSEMBLE_RUNNERS)")
    rows: list[dict] = []
    timings, skipped = {}, []
    for name, bench in BENCHMARKS.items():
        runner = ENSEMBLE_RUNNERS[name]
        members = config.members if runner.lexical else [m for m in config.members if m.model != "bm25"]
        if len(members) < 2:
            skipped.append(f"{name}: {len(members)} model member(s), bm25 does not apply there")
            continue
        t0 = time.perf_counter()
        rows += runner.rows(bench, config, members, data / bench.folder, out, settings, **common)
        timings[name] = time.perf_counter() - t0
    suite = {"ensemble": to_dict(config), "ensemble_file": str(path), "aggregate": aggregate, "rows": rows,
             "skipped": skipped, "seconds": timings, "command": invocation()}
    write_json(out / "suite.json", suite, indent=None)
    return suite
