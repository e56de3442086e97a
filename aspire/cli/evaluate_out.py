"""Where an `aspire evaluate` command may write: its `--out` is new, an empty folder, or a results folder of the
same command, benchmark and experiment (re-running replaces it), and never one of the command's own inputs.
Anything else is refused before any work (`check_out`), so one run's results never land beside another's. A re-run
that succeeds removes the files of the earlier run that it did not write again (`remove_unwritten`: a
`crossencoder_scores.json` of a run with `--rerank`, a stage's ranked files, predictions; a suite's, in each benchmark
folder it ran again), so that the folder holds one run's files."""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Collection
from pathlib import Path

from aspire.cliutil import check_folder
from aspire.io import input_under


# what a command's results folder records of it: (marker file, {key: value the folder must hold}); `experiment`
# is checked against the command's experiment name where it is known (`check_out`)
def _out_kind(args, probes: Collection[str]) -> tuple[str, dict]:
    command = args.command
    if command in probes:
        return "results.json", {"format": command, "model": str(args.model)}
    if command == "suite":
        if args.ensemble:  # {} once: an ensemble's run replaced a single model's suite folder (or another ensemble's)
            return "suite.json", {"ensemble_file": str(args.ensemble)}
        return "suite.json", {"model": str(args.model), "scorer": args.scorer}
    if command in ("csfcube", "fuse"):
        return "results.json", {"benchmark": "csfcube"}
    if command == "reviewers":
        return "results.json", {"benchmark": "reviewer-matching"}
    if command == "context2doc":
        return "results.json", {"benchmark": f"context2doc-{args.split}"}
    if command == "pools":
        return "results.json", {"dataset": args.name}
    if command == "fuse-runs":
        return "results.json", {"experiment": "fused"}
    return "results.json", {}


def _inputs(args) -> list[str]:
    """The paths a command reads (those that exist): its data, ranked files, runs, predictions, labels, model."""
    names = ("data", "ranked", "splits", "abstracts", "labels", "compare", "qrels", "ensemble", "model", "rerank")
    paths = [getattr(args, name, None) for name in names]
    paths += [spec.rpartition(":")[0] for spec in getattr(args, "run", None) or []]
    paths += getattr(args, "runs", None) or []
    if getattr(args, "predictions", None):
        paths.append(args.predictions.rpartition(":")[0])
    for spec in (getattr(args, "run_a", None), getattr(args, "run_b", None)):
        if spec:
            paths.append(spec if os.path.exists(spec) else spec.rpartition(":")[0])
    return [p for p in paths if p and os.path.exists(p)]


def _check_not_input(args, out: Path) -> None:
    path = input_under(out, _inputs(args))
    if path is not None:
        raise FileExistsError(f"--out {out} would overwrite this command's input {path}; choose another --out")


def _input_folder_holding(args, out: Path) -> str | None:
    """The first input folder of the command (`_inputs`), or folder of a compared run file (`run_a`, `run_b`: a
    results folder's `run.trec` sits beside its `results.json`), that holds the existing file `out`, at any depth;
    None when `out` is no file or lies in none of them."""
    if not out.is_file():
        return None
    where = out.resolve()
    folders = [path for path in _inputs(args) if os.path.isdir(path)]
    # `compare A/run.trec B/run.trec --out A/results.json` once replaced run A's results with the comparison
    folders += [str(Path(spec).parent) for spec in (getattr(args, "run_a", None), getattr(args, "run_b", None))
                if spec and os.path.isfile(spec)]
    for path in folders:
        if Path(path).resolve() in where.parents:
            return path
    return None


def _is_comparison(path: Path) -> bool:
    """Whether `path` holds what `evaluate compare` writes ({figure: {..., "per_unit_delta": ...}}): an earlier
    comparison, which a re-run replaces."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(doc, dict) and bool(doc)
            and all(isinstance(v, dict) and "per_unit_delta" in v for v in doc.values()))


def _run_recorded(path: Path) -> str:
    """What a run's results file `path` records of its run ("experiment 'x', benchmark 'y'": its experiment, benchmark,
    format, dataset, model, ensemble file); "" for any other file (not JSON, or a JSON recording none of them)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    keys = ("experiment", "benchmark", "format", "dataset", "model", "ensemble_file")
    return ", ".join(f"{k} {doc[k]!r}" for k in keys if k in doc) if isinstance(doc, dict) else ""


def check_out(args, exp: str | None = None, probes: Collection[str] = ()) -> None:
    """Refuse `--out` before any work unless it is new, an empty folder, or a results folder of this command's
    benchmark and experiment (`exp`, where known: re-running replaces it), and never one of the command's inputs.
    `probes`: the commands that are SciRepEval formats (their folders record a `format`, not an experiment).
    `compare --out` is a JSON file: it may not be a folder, one of the compared runs, a file that already exists inside
    an input folder (a compared run's files are read from there) or the folder of a compared run file, or another run's
    results file (a JSON recording its experiment, benchmark, format, dataset, model or ensemble file), unless it holds
    an earlier comparison; any other existing file is the user's to replace. A new `--out` folder must be one that can
    be made (`aspire.cliutil.check_folder`: not under `/proc`, a read-only mount or a file)."""
    if not getattr(args, "out", None):
        return
    out = Path(args.out)
    if args.command == "compare" and out.is_dir():  # first: one holding an input was once "would overwrite ... input"
        raise IsADirectoryError(f"--out {out} is a folder; compare writes one JSON file")
    _check_not_input(args, out)
    if args.command == "compare":
        if not os.path.lexists(out) or (out.is_file() and _is_comparison(out)):
            return
        folder = _input_folder_holding(args, out)
        if folder is not None:  # `--out A/results.json` once replaced run A's results
            raise FileExistsError(f"--out {out} is a file of {folder}, which holds this command's inputs; writing it "
                                  "would replace it: choose a new file, or one outside the compared folders")
        held = _run_recorded(out) if out.is_file() else ""
        if held:  # `--out C/results.json`, C a third run's folder, once replaced run C's results with the comparison
            raise FileExistsError(f"--out {out} holds another run's results ({held}); writing it would replace "
                                  "them: choose a new file")
        return
    if not os.path.lexists(out):  # a folder no one can make (`/proc/y`, read-only) once failed after the work
        check_folder(out, "--out")
        return
    if out.is_dir() and not any(out.iterdir()):
        return
    if not out.is_dir():
        raise FileExistsError(f"--out {out} is a file, not a folder")
    marker, wanted = _out_kind(args, probes)
    if exp is not None and args.command not in probes and args.command != "suite":
        wanted = {**wanted, "experiment": exp}
    try:
        doc = json.loads((out / marker).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict):
        raise FileExistsError(f"--out {out} holds files but no readable {marker}: it is not a results folder of "
                              f"`evaluate {args.command}`; choose a new or empty folder")
    differ = {k: v for k, v in wanted.items() if doc.get(k) != v}
    if args.command == "fuse-runs" and "experiment" not in doc and isinstance(doc.get("fused_from"), list):
        differ.pop("experiment", None)  # a fused folder written before fuse-runs recorded its experiment
    if differ:
        held = ", ".join(f"{k} {doc.get(k)!r}" for k in differ)
        want = ", ".join(f"{k} {v!r}" for k, v in differ.items())
        raise FileExistsError(f"--out {out} holds another run's results ({held}), not this one's ({want}); only a "
                              "run's own folder is replaced: choose a new or empty folder")


# the files an evaluate command writes into its --out folder, by name: in the folder itself, and reviewer matching's
# predictions in its predictions/ (a probe's --compare writes compare.json). A file of another name, one elsewhere (a
# subfolder the user made: a copy of an earlier run's files, a run of its own, `evaluate compare --out A/cmp/x.json`)
# and an `evaluate compare` output named compare.json (`--out A/compare.json`) are the user's, never removed
# (`remove_unwritten`)
RUN_FILES = {".": ("results.json", "run.trec", "qrels.trec", "crossencoder_scores.json", "perq.csv", "compare.json",
                   "test-pid2pool-*-perq.csv", "test-pid2pool-*-ranked.json"),
             "predictions": ("*_ta.json",)}


def run_files(args) -> dict[Path, tuple[int, int]]:
    """The files of an earlier run in the command's `--out` folder (`RUN_FILES`), each with its inode and
    modification time, taken before the command runs; {} where there is no such folder, and for `compare`, which
    writes a file. A suite's folder holds a results folder a benchmark (`out/NAME`, an ensemble's members'
    `out/members/MEMBER/NAME`): their files are taken folder by folder (`--benchmarks` re-runs some of them)."""
    out = Path(args.out) if getattr(args, "out", None) and args.command != "compare" else None
    if out is None or not out.is_dir():
        return {}
    if args.command != "suite":
        return _folder_run_files(out)
    from aspire.benchmarks import BENCHMARKS

    members = out / "members"
    parents = [out] + (sorted(p for p in members.iterdir() if p.is_dir() and not p.is_symlink())
                       if members.is_dir() and not members.is_symlink() else [])
    found = {}
    for parent in parents:
        for name in BENCHMARKS:
            folder = parent / name
            if folder.is_dir() and not folder.is_symlink():
                found.update(_folder_run_files(folder))
    return found


def _folder_run_files(out: Path) -> dict[Path, tuple[int, int]]:
    """`run_files` of one results folder `out`."""
    found = {}
    for sub, names in RUN_FILES.items():
        folder = out / sub
        if sub != "." and (folder.is_symlink() or not folder.is_dir()):  # a linked predictions/ lies outside --out
            continue
        found.update({path: _identity(path) for path in folder.iterdir()
                      if path.is_file() and not path.is_symlink()
                      and any(fnmatch.fnmatchcase(path.name, pattern) for pattern in names)
                      and not (path.name == "compare.json" and _is_comparison(path))})
    return found


def remove_unwritten(args, earlier: dict[Path, tuple[int, int]]) -> list[str]:
    """After a run into `--out` that succeeded: remove the files of `earlier` (`run_files`) that it did not write
    again (the same inode and modification time) and its predictions/ where that leaves it empty, and say which
    (paths relative to `--out`, returned too); nothing from a results folder whose `results.json` the run did not
    write again (it replaced no earlier run there: a suite's benchmark that `--benchmarks` left out)."""
    if not earlier:
        return []
    out = Path(args.out)
    stale = []
    for path, seen in sorted(earlier.items()):
        marker = (path.parent.parent if _predictions(path) else path.parent) / "results.json"
        if (marker in earlier and marker.is_file() and _identity(marker) != earlier[marker]
                and path.is_file() and _identity(path) == seen):
            stale.append(path)
    for path in stale:
        path.unlink()
        if _predictions(path) and not any(path.parent.iterdir()):  # predictions/ of a run that wrote none this time
            path.parent.rmdir()
    names = [path.relative_to(out).as_posix() for path in stale]
    if names:
        print(f"removed from {out} the earlier run's files this run did not write: {', '.join(names)}")
    return names


def _predictions(path: Path) -> bool:
    """Whether `path`, a file of `run_files`, is one of a results folder's predictions/ (not the folder's own)."""
    return any(fnmatch.fnmatchcase(path.name, pattern) for pattern in RUN_FILES["predictions"])


def _identity(path: Path) -> tuple[int, int]:
    """(inode, modification time in ns): a file written again (`aspire.io.atomic_write` renames a new file onto it)
    differs in both."""
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns
