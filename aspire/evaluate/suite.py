"""The benchmark suite: CSFCube (two-fold test), reviewer matching and context2doc test in one table.

`run_suite` runs every benchmark of the registry (`aspire.benchmarks.BENCHMARKS`) that has a runner in
`RUNNERS` for one model and scorer (each writing its own folder under `out`), and returns one row per
benchmark figure with its bootstrap 95% interval; `out/suite.json`
keeps the rows, the model's fingerprint and the command. `model="bm25"` runs the lexical baseline
where the benchmark has text queries (context2doc). Encodings are cached by fingerprint, so a second
scorer on the same model re-uses them. The options' `encoder_options` choose the inference backend of every
benchmark's encoder (`{"backend": "onnx", "quantize": "int8"}`; default the exact torch model); the
fast encoder's fingerprint differs from the exact one's, so their cached vectors never mix.

`RUNNERS` is the one table of how each registered benchmark is run: by one model (here), by an ensemble
(`aspire.evaluate.ensemble`) and compared (`aspire.evaluate.compare`); each hook lives in the benchmark's own
module of `aspire.evaluate`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aspire.benchmarks import BENCHMARKS, get_benchmark
from aspire.benchmarks.runs import invocation
from aspire.encoders.pretrained import checkpoint_record
from aspire.evaluate import context2doc_run, csfcube, probes, reviewer_run
from aspire.evaluate.options import EvalOptions, Stages
from aspire.io import read_json, write_json
from aspire.paths import DATA

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runner:
    """How the evaluation tools run one registered benchmark, each hook a function of the benchmark's own module:

    - `rows(benchmark, data_dir, model, scorer, out, settings, options) -> (rows, encoder fingerprint or None)`:
      one model (`aspire evaluate suite`); `options` an `EvalOptions` (None for `model` None);
    - `ensemble(benchmark, data_dir, members, out, settings, fuse) -> rows`: several `Member`s fused by
      `fuse(runs) -> fused run` (`aspire evaluate suite --ensemble`);
    - `compare(a, b, metrics, data, n_perm, seed, docs=None) -> {figure: paired test}`: two of its results folders
      (`aspire evaluate compare`; `docs`: `{spec: results.json content or None}` as the command read them, so a
      hook that needs them does not read them again); None: they hold a TREC run and qrels, compared generically;
    - `lexical`: it also ranks with no model (`model="bm25"`; the model, scorer and options passed as None);
    - `scored`: its rows come from a scorer; False for the SciRepEval formats, which score their own two
      representations (the scorer is passed as None, and the options' encoding and scorer options are not read)."""

    rows: Callable[..., tuple[list[dict], str | None]]
    ensemble: Callable[..., list[dict]]
    compare: Callable[..., dict] | None = None
    lexical: bool = False
    scored: bool = True


# benchmark name (aspire.benchmarks.BENCHMARKS) -> its runner
RUNNERS: dict[str, Runner] = {
    "csfcube": Runner(csfcube.suite_rows, csfcube.ensemble_rows, csfcube.compare_runs),
    "reviewers": Runner(reviewer_run.suite_rows, reviewer_run.ensemble_rows, reviewer_run.compare_runs),
    "context2doc": Runner(context2doc_run.suite_rows, context2doc_run.ensemble_rows, lexical=True),
    **dict.fromkeys(("venue", "year", "same-author"), Runner(probes.probe_rows, probes.ensemble_probe_rows,
                                                                   scored=False)),
}


def get_runner(name: str) -> Runner:
    if name not in RUNNERS:
        raise ValueError(f"benchmark {name!r} has no runner (aspire.evaluate.suite.RUNNERS); valid: {', '.join(RUNNERS)}")
    return RUNNERS[name]


def check_settings(names: Sequence[str], aggregate: str, bm25_alpha: float | None = None) -> None:
    """ValueError for a bad `aggregate` (where `reviewers` is among the benchmarks `names`: it alone reads it) or a
    `bm25_alpha` outside [0, 1], before the first benchmark runs: each was refused only by the one benchmark that
    reads it, after every benchmark before it had run (CSFCube's encoding first)."""
    if "reviewers" in names:
        from aspire.benchmarks.reviewers import parse_aggregate

        parse_aggregate(aggregate)
    if bm25_alpha is not None:
        Stages(bm25=True, alpha=bm25_alpha).checked(has_model=True)


def run_suite(model: str, scorer: str | None, out, data: str | Path = DATA, aggregate: str = "max",
              bm25_alpha: float | None = None, options: EvalOptions | None = None,
              benchmarks: Sequence[str] | None = None) -> dict:
    """Run every registered benchmark (or those named in `benchmarks`, each once however often it is named) that
    applies to `model` (`bm25`: the lexical ones; a named benchmark that is not is skipped with a warning, and
    `skipped` lists it) with `options` and write `out/suite.json`; each benchmark writes its own folder `out/NAME`.
    `bm25_alpha` (the model's weight fused with BM25) needs a lexical benchmark among those run, and `bm25` takes no
    scorer, `bm25_alpha` or model options (ValueError: none would be read); its suite.json records no aggregate and
    no model options. A bad `aggregate` (where reviewer matching runs) or a `bm25_alpha` outside [0, 1] is a ValueError
    before the first benchmark runs (`check_settings`). A training run's folder as `model`: suite.json records the
    checkpoint it stood for as the suite began (`checkpoint_record`), each benchmark's results the one it loaded.
    Each row names its registered benchmark (`registry_name`). An earlier suite.json in `out` with the same settings
    keeps its rows of the benchmarks not run (`keep_earlier`).
    A suite of the SciRepEval formats alone (`Runner.scored` False) takes no scorer: ValueError for one given, as
    for a scorer missing where a benchmark reads it."""
    data, out = Path(data), Path(out)
    names = list(BENCHMARKS) if benchmarks is None else list(dict.fromkeys(get_benchmark(n).name for n in benchmarks))
    missing = [n for n in names if n not in RUNNERS]
    if missing:
        raise ValueError(f"benchmark(s) {missing} have no suite runner (aspire.evaluate.suite.RUNNERS)")
    scored = [n for n in names if RUNNERS[n].scored]
    if model != "bm25" and scorer is None and scored:
        raise ValueError(f"a model needs a scorer ({', '.join(scored)} rank with one)")
    if model != "bm25" and scorer is not None and not scored:  # once required, then recorded beside rows it never made
        raise ValueError(f"{', '.join(names)} score their own two representations: scorer {scorer!r} would not be read")
    lexical = [n for n in names if RUNNERS[n].lexical]
    if model == "bm25" and (scorer is not None or bm25_alpha is not None or (options or EvalOptions()) != EvalOptions()):
        # once accepted, left unread and recorded in suite.json as if they had made the rows
        raise ValueError("model bm25 ranks by BM25 alone: it takes no scorer, bm25_alpha or model options")
    if bm25_alpha is not None and not lexical:  # once recorded beside rows that never read it
        raise ValueError(f"bm25_alpha fuses the model with BM25 on {', '.join(n for n, r in RUNNERS.items() if r.lexical)}"
                         f", which this suite does not run ({', '.join(names)})")
    options = options or EvalOptions()
    if model != "bm25":  # the options as every runner runs them: the abstract scorer's own encoding, not the default
        options = options.checked(scorer, faceted=True) if scored else options
        check_settings(names, aggregate, bm25_alpha)
    settings = {"aggregate": aggregate, "bm25_alpha": bm25_alpha}
    loaded = {} if model == "bm25" else checkpoint_record(model)  # a training run's folder: its checkpoint now
    rows: list[dict] = []
    fingerprint = None
    timings, skipped = {}, []
    for name in names:
        bench, runner = BENCHMARKS[name], RUNNERS[name]
        t0 = time.perf_counter()
        if model == "bm25":
            if not runner.lexical:
                skipped.append(name)
                if benchmarks is not None:
                    log.warning("suite: %s skipped: model bm25 runs only the benchmarks ranked without a model (%s)",
                                name, ", ".join(n for n, r in RUNNERS.items() if r.lexical))
                continue
            found, _ = runner.rows(bench, data / bench.folder, None, None, out / name, {}, None)
        else:
            found, printed = runner.rows(bench, data / bench.folder, model, scorer, out / name, settings, options)
            fingerprint = fingerprint or printed
        rows += [{**row, "registry_name": name} for row in found]
        timings[name] = time.perf_counter() - t0
    # what made the rows: BM25 alone reads no aggregate and no model option (it once recorded `encoding: contextual`)
    used = {"aggregate": aggregate, **options.record()} if model != "bm25" else {"aggregate": None}
    suite = {"model": str(model), **loaded, "scorer": scorer, "encoder_fingerprint": fingerprint, **used,
             "bm25_alpha": bm25_alpha, "rows": rows, "skipped": skipped, "seconds": timings, "command": invocation()}
    suite = keep_earlier(out, suite, names)
    write_json(out / "suite.json", suite, indent=None)
    return suite


# the settings every benchmark's rows read (the model, its encoder and device), and those only some read
_MODEL_KEYS = ("model", "checkpoint", "encoder_fingerprint", "device", "encoder_options")
_SCORER_KEYS = ("scorer", "encoding", "scorer_options", "encode_options", "query_text", "cand_sentences", "facet_code")


def _read_keys(names) -> set[str]:
    """The suite.json settings that the rows of the benchmarks `names` depend on: the model's for all, the scorer's
    and its options' for those ranked by one (`Runner.scored`), `aggregate` for reviewer matching and `bm25_alpha`
    for the lexical ones."""
    keys = set(_MODEL_KEYS)
    if any(RUNNERS[n].scored for n in names):
        keys |= set(_SCORER_KEYS)
    if "reviewers" in names:
        keys.add("aggregate")
    if any(RUNNERS[n].lexical for n in names):
        keys.add("bm25_alpha")
    return keys


def keep_earlier(out: Path, suite: dict, names: Sequence[str]) -> dict:
    """`suite` with the rows of the `out/suite.json` it replaces for the benchmarks it did not run (`names` those it
    ran) whose folders are still there, where the settings both sets of rows read are the same (`_read_keys`: the
    model, checkpoint and encoder fingerprint always; the scorer and its options, the aggregate, the BM25 weight where
    both read them): a re-run of one benchmark (`--benchmarks reviewers`) into a suite's folder once left a suite.json
    of that benchmark alone beside the others' folders. A setting only the kept rows read is recorded as the earlier
    suite recorded it (a re-run of SciRepEval's formats, which takes no scorer, keeps the full suite's `scorer`). A row
    names its registered benchmark (`registry_name`; its `benchmark` is the figure's label). `suite["kept"]` names each
    kept benchmark with the command and seconds that made its rows; the rows stay in the registry's order. Otherwise
    (other settings, an earlier suite.json that cannot be read, or none) nothing is kept and a warning names the
    earlier folders this suite.json does not describe."""
    left = [name for name in BENCHMARKS if name not in names and (out / name).is_dir()]
    if not left:
        return suite
    path, why = out / "suite.json", "there is no earlier suite.json"
    kept_keys, run_keys = _read_keys(left), _read_keys(names)
    if path.is_file():
        try:
            earlier = read_json(path, "the earlier suite", mapping=True)
            rows = [r for r in earlier["rows"] if r.get("registry_name") in left]
            differ = sorted(k for k in kept_keys & run_keys if earlier.get(k) != suite.get(k))
            why = (f"the earlier suite ran other settings ({', '.join(differ)})" if differ else
                   "the earlier suite.json's rows do not name them" if {r["registry_name"] for r in rows} != set(left)
                   else "")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            why = f"the earlier suite.json cannot be read ({e})"
    if why:
        log.warning("suite: %s does not describe the earlier results of %s under %s: %s", path, ", ".join(left), out,
                    why)
        return suite
    kept = {name: earlier.get("kept", {}).get(name) or {"command": earlier.get("command"),
                                                      "seconds": earlier.get("seconds", {}).get(name)}
            for name in left}
    order = {name: i for i, name in enumerate(BENCHMARKS)}
    rows = sorted(rows + suite["rows"], key=lambda r: order.get(r["registry_name"], len(order)))
    from_earlier = {k: earlier[k] for k in kept_keys - run_keys if k in earlier}  # settings only the kept rows read
    return {**suite, **from_earlier, "rows": rows, "kept": kept}


def format_rows(rows: list[dict]) -> list[str]:
    """The suite's table, one line a figure, its name columns as wide as their longest entry."""
    wide = max([len("benchmark"), *(len(r["benchmark"]) for r in rows)])
    metric = max([20, *(len(r["metric"]) for r in rows)])
    lines = [f"{'benchmark':<{wide}} {'metric':<{metric}} {'value':>8}  95% interval        n"]
    for r in rows:
        lo, hi = r["ci95"]
        lines.append(f"{r['benchmark']:<{wide}} {r['metric']:<{metric}} {r['value']:8.4f}  [{lo:7.4f}, {hi:7.4f}]  "
                     f"{r['n']}" + (f"  {r['note']}" if r["note"] else ""))
    return lines


def format_seconds(seconds: dict[str, float]) -> str:
    """One line: each benchmark's seconds (encoding included), as `run_suite` records them."""
    return "seconds: " + ", ".join(f"{name} {s:.0f}" for name, s in seconds.items())
