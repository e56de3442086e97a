"""Choose among CSFCube runs by the two-fold protocol and report the choice's test figures.

CSFCube's folds are two halves of one query set: `fold1_dev` is `fold2_test` and `fold2_dev` is
`fold1_test`. The evaluator's `dev` figure (the fold1_dev mean, as in the published script) thus
scores half of the test queries, and choosing on it chooses on test. Here the run best on
`foldK_dev` is scored on `foldK_test`, for each K; the test figure is the mean of the two folds'
test means, each from the run chosen on its own fold's dev half (the two choices may differ). Runs tied on a
dev figure go to the one given first (`choose`, the CLI: the first folder in sorted order), and a warning names
the runs tied: the tie decides which run's test half is reported.

With `--per-facet` each facet gets its own choice (the facet of a query is known when it is
asked): for each fold, the run best on the facet's `foldK_dev` queries ranks that facet's
`foldK_test` queries, and `all` is the mean over every test query, read from the runs' per-query
CSVs.

The candidates must have been scored on one judged set: each `results.json` records the fingerprint of the
queries, judgments and folds it was scored on (`judged_set`), and candidates that differ are refused; a run
written before that was recorded is named in a warning, since its queries cannot be checked.

    python -m aspire.evaluate.two_fold --candidate 'runs/csfcube/sweep-abstract-*/w*' --candidate runs/csfcube/X
    python -m aspire.evaluate.two_fold --candidate 'runs/csfcube/*' --per-facet --out choice.json

Library: `select_two_fold(candidates)` and `select_per_facet(candidates, per_query)` on loaded
`results.json` documents (`load`, `load_per_query`); `choose(folders, ...)` does both from folders.
(`experiments/select_two_fold.py` runs this CLI.)
"""

from __future__ import annotations

import csv
import glob
import logging
import math
from pathlib import Path

from aspire.benchmarks.csfcube import FACETS, GROUPS, format_table
from aspire.cliutil import add_common_options, command_parser, setup_logging
from aspire.io import loads_unique, write_json

log = logging.getLogger(__name__)

FOLDS = ("fold1", "fold2")
TEST_FOLDS = tuple(f"{fold}_test" for fold in FOLDS)
REPORTED = ("MAP", "NDCG%20")
PER_QUERY_TOLERANCE = 1e-3  # percent; the per-query file rounds each figure to 4 decimals


def load(folder: str | Path) -> dict:
    """The folder's `results.json`; ValueError naming the folder when it is not a CSFCube run's (no per-fold
    figures: another benchmark's results, or a file of another shape, or not JSON: a key twice in one object or a
    bare NaN / Infinity included, which `write_json` never writes)."""
    path = Path(folder) / "results.json"
    try:
        doc = loads_unique(path.read_text(encoding="utf-8"), finite=True)  # write_json wrote it: a bare NaN is damage
    except ValueError as err:  # invalid JSON or text, a key twice, a bare NaN / Infinity
        raise ValueError(f"{path}: not a results file ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("folds"), dict):
        named = f" (benchmark {doc['benchmark']!r})" if isinstance(doc, dict) and "benchmark" in doc else ""
        raise ValueError(f"{folder}: results.json is not a CSFCube run's{named}: it has no per-fold figures")
    return doc


def load_per_query(folder: str | Path) -> dict[str, dict]:
    """`{query key: {"facet", "test_fold", metric: percent}}` from the folder's one `*-perq.csv`; ValueError
    naming the file and line of a missing column, a query listed twice, a facet or test fold not CSFCube's,
    or a figure that is not a number (an undefined one is written empty)."""
    found = sorted(Path(folder).glob("*-perq.csv"))
    if len(found) != 1:
        raise ValueError(f"{folder}: expected one *-perq.csv, found {len(found)}")
    out: dict[str, dict] = {}
    with open(found[0], encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        absent = [c for c in ("query", "facet", "test_fold", *REPORTED) if c not in (reader.fieldnames or [])]
        if absent:
            raise ValueError(f"{found[0]}: no column {absent[0]!r}: not a CSFCube per-query file")
        for row in reader:
            where = f"{found[0]}:{reader.line_num}: query {row['query']!r}"
            if row["query"] in out:
                raise ValueError(f"{where} is listed twice")
            if row["facet"] not in FACETS or row["test_fold"] not in TEST_FOLDS:
                raise ValueError(f"{where}: facet {row['facet']!r} and test fold {row['test_fold']!r} must be one "
                                 f"of {list(FACETS)} and of {list(TEST_FOLDS)}")
            try:
                figures = {m: float(row[m]) for m in REPORTED}
            except (TypeError, ValueError):
                figures = {}
            if len(figures) != len(REPORTED) or not all(math.isfinite(v) for v in figures.values()):  # nan, inf
                raise ValueError(f"{where}: {', '.join(REPORTED)} must be numbers, got "
                                 f"{[row[m] for m in REPORTED]}")
            out[row["query"]] = {"facet": row["facet"], "test_fold": row["test_fold"], **figures}
    return out


def _check_figures(candidates: dict[str, dict], wanted) -> None:
    """ValueError naming the candidate and key when a figure the choice reads (`wanted`: (group, split, metric)
    triples of `results.json`'s `folds`) is missing or not a finite number (NaN, or an infinity, which JSON's
    `Infinity` reads as: it would win every choice)."""
    for name, doc in candidates.items():
        for key in wanted:
            value = doc.get("folds")
            for part in key:
                value = value.get(part) if isinstance(value, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
                raise ValueError(f"{name}: results.json has no figure folds.{'.'.join(key)} (got {value!r}): every "
                                 "candidate needs each fold's figures")


def _check_per_query(candidates: dict[str, dict], per_query: dict[str, dict[str, dict]]) -> None:
    """ValueError naming the candidate whose per-query figures do not average to its `results.json` test halves,
    facet by facet (a per-query file that misses queries, or another run's: its queries would be left out of, or
    wrongly counted in, the per-facet test figures)."""
    for name, doc in candidates.items():
        for facet in FACETS:
            for fold in FOLDS:
                rows = [r for r in per_query.get(name, {}).values()
                        if r["facet"] == facet and r["test_fold"] == f"{fold}_test"]
                for m in REPORTED:
                    want = doc["folds"][facet][f"{fold}_test"][m]
                    got = sum(r[m] for r in rows) / len(rows) if rows else None
                    if got is None or abs(got - want) > PER_QUERY_TOLERANCE:
                        raise ValueError(
                            f"{name}: its per-query file gives {facet} {fold}_test {m} "
                            f"{'no queries' if got is None else f'{got:.4f} over {len(rows)} queries'}, its "
                            f"results.json {want:.4f}: the file misses queries or is another run's")


def _check_judged_set(candidates: dict[str, dict]) -> None:
    """ValueError naming two candidates whose `results.json` record different judged sets (`judged_set`: the
    queries, judgments and folds they were scored on, `PoolSet.fingerprint`); a warning naming the candidates
    that record none (runs written before it was recorded), whose queries cannot be checked."""
    recorded = [(name, doc["judged_set"]) for name, doc in candidates.items() if "judged_set" in doc]
    other = next(((name, seen) for name, seen in recorded[1:] if seen != recorded[0][1]), None)
    if other is not None:
        raise ValueError(f"{recorded[0][0]} and {other[0]} were scored on different queries, judgments or folds "
                         f"(judged set {recorded[0][1]} and {other[1]}): choose among runs of one CSFCube copy")
    unknown = sorted(set(candidates) - {name for name, _ in recorded})
    if unknown and len(candidates) > 1:
        log.warning("%d candidate(s) record no judged set (written before it was recorded), so their queries cannot "
                    "be checked against the others': %s", len(unknown),
                    ", ".join(unknown[:3]) + (" ..." if len(unknown) > 3 else ""))


def _best(candidates: dict[str, dict], group: str, split: str, metric: str) -> str:
    """The candidate with the highest figure `folds[group][split][metric]`; of tied ones, the first in `candidates`'
    order, with a warning naming the tied candidates (the tie decides which run's test half is reported)."""
    value = {name: doc["folds"][group][split][metric] for name, doc in candidates.items()}
    best = max(value, key=value.get)
    tied = [name for name in value if value[name] == value[best]]
    if len(tied) > 1:
        log.warning("%d candidates tie on %s %s %s (%s): %s, given first, is chosen", len(tied), split, group, metric,
                    ", ".join(tied[:5]) + (" ..." if len(tied) > 5 else ""), best)
    return best


def select_two_fold(candidates: dict[str, dict], group: str = "all", metric: str = "MAP") -> dict:
    """{fold: chosen label} and the cross-fitted test figures {group: {metric: value}}. Candidates scored on
    different queries, judgments or folds are a ValueError naming two (`_check_judged_set`); runs tied on a fold's
    dev figure go to the one first in `candidates` (with a warning naming them: `_best`)."""
    if not candidates:
        raise ValueError("no candidate runs to choose from")
    _check_judged_set(candidates)
    _check_figures(candidates, [(group, f"{fold}_dev", metric) for fold in FOLDS]
                   + [(g, f"{fold}_test", m) for g in GROUPS for fold in FOLDS for m in REPORTED])
    chosen = {fold: _best(candidates, group, f"{fold}_dev", metric) for fold in FOLDS}
    test = {g: {m: sum(candidates[chosen[fold]]["folds"][g][f"{fold}_test"][m] for fold in FOLDS) / len(FOLDS)
                for m in REPORTED} for g in GROUPS}
    return {"chosen": chosen, "test": test}


def select_per_facet(candidates: dict[str, dict], per_query: dict[str, dict[str, dict]], metric: str = "MAP") -> dict:
    """Per fold and facet, the run best on the facet's dev half ranks its test half.

    `per_query` holds each candidate's `load_per_query`. Returns `{"chosen": {fold: {facet:
    label}}, "test": {group: {metric: value}}}`; `all` is the mean over every test query of a fold
    (each ranked by its facet's choice), then over the two folds, as the evaluator computes it. A candidate
    whose per-query figures do not average to its `results.json` test halves is a ValueError naming it. Ties on a
    dev figure go to the candidate first in `candidates` (`_best`).
    """
    if not candidates:
        raise ValueError("no candidate runs to choose from")
    _check_judged_set(candidates)
    _check_figures(candidates, [(f, f"{fold}_dev", metric) for f in FACETS for fold in FOLDS]
                   + [(f, f"{fold}_test", m) for f in FACETS for fold in FOLDS for m in REPORTED])
    _check_per_query(candidates, per_query)
    chosen = {fold: {f: _best(candidates, f, f"{fold}_dev", metric) for f in FACETS} for fold in FOLDS}
    fold_means: dict[str, dict[str, dict[str, float]]] = {g: {} for g in GROUPS}
    for fold in FOLDS:
        rows = {g: [] for g in GROUPS}
        for facet in FACETS:
            for row in per_query[chosen[fold][facet]].values():
                if row["facet"] == facet and row["test_fold"] == f"{fold}_test":
                    rows[facet].append(row)
                    rows["all"].append(row)
        for g in GROUPS:
            if not rows[g]:
                raise ValueError(f"no {g} queries in {fold}_test")
            fold_means[g][fold] = {m: sum(r[m] for r in rows[g]) / len(rows[g]) for m in REPORTED}
    test = {g: {m: sum(fold_means[g][fold][m] for fold in FOLDS) / len(FOLDS) for m in REPORTED} for g in GROUPS}
    return {"chosen": chosen, "test": test}


def choose(folders: list[str | Path], select: str = "all:MAP", per_facet: bool = False) -> dict:
    """Load each folder's `results.json` (and per-query CSV with `per_facet`) and choose among them.

    `select` is `GROUP:METRIC`; per facet, where each facet is its own group, `METRIC` or `all:METRIC` (another
    GROUP is a ValueError: it would not be read). Returns the `select_two_fold` / `select_per_facet` result; a
    folder without `results.json` raises FileNotFoundError naming it.
    """
    missing = [str(f) for f in folders if not (Path(f) / "results.json").is_file()]
    if missing:
        raise FileNotFoundError(f"no results.json in {', '.join(missing)}")
    group, _, metric = select.rpartition(":") if per_facet else select.partition(":")
    if per_facet and group not in ("", "all"):  # once recorded in the choice beside choices it never made
        raise ValueError(f"--per-facet chooses for each facet on its own queries: --select's group {group!r} would "
                         f"not be read; give the metric alone ({metric})")
    group = group or "all"
    if group not in GROUPS or metric not in REPORTED:
        raise ValueError(f"--select must be GROUP:METRIC with GROUP in {list(GROUPS)} and METRIC in "
                         f"{list(REPORTED)}, got {select!r}")
    candidates = {str(f): load(f) for f in folders}
    if per_facet:
        return select_per_facet(candidates, {str(f): load_per_query(f) for f in folders}, metric)
    return select_two_fold(candidates, group, metric)


def unique_folders(paths) -> list[str]:
    """`paths` sorted, each folder once however it is spelled (`x`, `./x`, `/abs/x`: the first spelling, in
    sorted order, names it)."""
    seen: dict[Path, str] = {}
    for path in sorted(paths):
        seen.setdefault(Path(path).resolve(), path)
    return sorted(seen.values())


def _read_by(folders: list[str], out: Path) -> str | None:
    """The candidate file that `out` names (a folder's `results.json` or `*-perq.csv`, however spelled), said as
    "the results.json of candidate DIR"; None when it names none."""
    where = out.resolve()
    for folder in folders:
        for path in [Path(folder) / "results.json", *Path(folder).glob("*-perq.csv")]:
            if path.resolve() == where:
                return f"the {path.name} of candidate {folder}"
    return None


EXAMPLES = """\
  aspire two-fold --candidate 'runs/csfcube/sweep-abstract-*/w*' --candidate runs/csfcube/X
  python -m aspire.evaluate.two_fold --candidate 'runs/csfcube/*' --per-facet --out choice.json
"""


def main(argv: list[str] | None = None, prog: str = "python -m aspire.evaluate.two_fold") -> int:
    ap = command_parser(prog, __doc__, EXAMPLES)
    ap.add_argument("--candidate", action="append", required=True,
                    help="a folder holding results.json, or a glob of such folders")
    ap.add_argument("--select", help="GROUP:METRIC of each dev fold to maximise (default all:MAP; with --per-facet "
                                     "the METRIC alone, default MAP)")
    ap.add_argument("--per-facet", action="store_true",
                    help="choose for each facet on its own dev queries (by the METRIC of --select)")
    ap.add_argument("--out", type=Path, help="write the choice and figures here as JSON")
    add_common_options(ap)
    args = ap.parse_args(argv)
    setup_logging(args)
    if args.out is not None and args.out.is_dir():
        ap.error(f"--out {args.out} is a folder; give a JSON file to write")
    folders = unique_folders(f for spec in args.candidate for f in (glob.glob(spec) or [spec]))
    read = _read_by(folders, args.out) if args.out is not None else None
    if read is not None:  # `--out A/results.json` once replaced run A's results with the choice, after reading them
        ap.error(f"--out {args.out} is {read}, which this command reads; choose another file")
    try:
        select = args.select or ("MAP" if args.per_facet else "all:MAP")
        result = choose(folders, select, args.per_facet)
    except (FileNotFoundError, ValueError) as err:
        if args.log_level == "DEBUG":  # as every command: DEBUG shows the traceback of an error
            raise
        ap.error(str(err))
    if args.per_facet:
        for fold in FOLDS:
            print(f"chosen on {fold}_dev per facet: " + "; ".join(f"{k}: {v}" for k, v in result["chosen"][fold].items()))
    else:
        print(f"{len(folders)} candidates; chosen on fold1_dev: {result['chosen']['fold1']}; "
              f"on fold2_dev: {result['chosen']['fold2']}")
    print("test (mean of the two folds' test halves, each with its own fold's choice), MAP / NDCG%20:")
    print(format_table(result, "test"))
    if args.out:
        select = select.rpartition(":")[2] if args.per_facet else select  # per facet: the metric it read
        write_json(args.out, {"candidates": folders, "select": select, "per_facet": args.per_facet, **result},
                   indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
