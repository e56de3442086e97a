"""Stage folders: which stage wrote a folder, what each stage reads, where it may write, and when its output
leaves nothing for the stages after it.

Every stage writes `report.json` last, naming itself (`"stage": "filter"`), so a folder's report says what
it holds. A stage reads only the output of the stage before it (`NEEDS`; a folder without a report, such as
one built by hand, is read as it is) and writes only into a new or empty folder or one it wrote before
(`check_stage_out`); `run_all` writes only into a new or empty folder or an earlier run's, finished or not
(`check_run_all_out`), where a stage folder that a killed run left without its report (`partial_stage`) is
replaced too, with a warning on the log. Anything else is refused before anything is read or written, and left as it is.

Before its first file a stage writes `STAGE_MARKER` (`.stage-started`, holding its name) and removes an earlier
report (`begin_stage`); after its report it removes the marker (`end_stage`). A folder holding the marker and no
report is that stage's output, stopped before it finished: the same stage may replace it (`check_stage_out`, with a
warning), no other stage reads or replaces it, and a folder built by hand (no marker) is never replaced.

A stage whose output is empty (the filters removed every context; no example has a negative) leaves its
files and report in place, and `nothing_left` says why no later stage can use them.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Collection
from pathlib import Path

from aspire.data.cocite.config import REPORT
from aspire.io import write_text
from aspire.storage import check_replaceable

PIPELINE_REPORT = "pipeline_report.json"  # run_all's report, written once every stage has finished
PIPELINE = ("ingest", "filter", "group", "split", "examples")  # the stages run_all chains, in order
STAGE_DIRS = ("1_ingest", "2_filter", "3_group", "4_split", "5_examples")  # their folders under run_all's output
NEEDS = {"filter": ("ingest",), "group": ("filter",), "split": ("group",), "examples": ("split",),
         "align": ("examples",), "hard-negatives": ("examples", "align")}  # stage -> the stages it reads
STAGE_FILES = {"ingest": ("contexts.jsonl", "abstracts.jsonl"), "filter": ("contexts.jsonl", "abstracts.jsonl"),
               "group": ("groups.jsonl", "abstracts.jsonl"),
               "split": ("groups.train.jsonl", "groups.dev.jsonl", "abstracts.jsonl"),
               "examples": ("examples.train.jsonl", "examples.dev.jsonl", "abstracts.jsonl", "groups.train.jsonl",
                            "groups.dev.jsonl"),
               "align": ("examples.train.jsonl", "examples.dev.jsonl", "abstracts.jsonl", "groups.train.jsonl",
                         "groups.dev.jsonl"),
               "hard-negatives": ("hard_negatives.jsonl",)}  # the files each stage writes before its report
STAGE_MARKER = ".stage-started"  # a stage's name, written before its first file, removed after its report
_TEMP = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{12}\.tmp")  # `aspire.io.atomic_write`'s temporary name for NAME

log = logging.getLogger(__name__)


def stage_report(folder: str | Path) -> dict | None:
    """`folder/report.json` as an object, or None when it is missing, unreadable or not an object."""
    try:
        report = json.loads((Path(folder) / REPORT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def stage_of(folder: str | Path) -> str | None:
    """The stage named by `folder/report.json`: None when there is no report, "" when it names no stage (it is
    unreadable, not a file, or another tool's report)."""
    if not os.path.lexists(Path(folder) / REPORT):
        return None
    stage = (stage_report(folder) or {}).get("stage")
    return stage if isinstance(stage, str) else ""


def started_stage(folder: str | Path) -> str | None:
    """The stage named by `folder/STAGE_MARKER` when `folder` holds no report (a stage stopped before it
    finished): None when there is a report or no marker, "" when the marker is unreadable or not a file."""
    path = Path(folder)
    if os.path.lexists(path / REPORT) or not os.path.lexists(path / STAGE_MARKER):
        return None
    try:
        return (path / STAGE_MARKER).read_text(encoding="utf-8").strip() if (path / STAGE_MARKER).is_file() else ""
    except (OSError, ValueError):
        return ""


def check_finished(folder: str | Path, setting: str) -> None:
    """ValueError naming `setting` (the training setting that reads `folder`) when `folder` holds the output of a
    stage stopped before it finished (`started_stage`): its files are partial or not written yet."""
    stage = started_stage(folder)
    if stage is not None:
        raise ValueError(f"{setting}: {folder} holds the output of stage {stage!r} stopped before it finished "
                         f"(a {STAGE_MARKER} and no {REPORT}); rerun that stage into it before training on it")


def begin_stage(folder: str | Path, stage: str) -> None:
    """Before `stage` writes its first file into `folder`: `STAGE_MARKER` naming it, then an earlier report
    removed (a rerun stopped half-way is never read as the earlier, finished output), and the temporary files an
    earlier run of it left (`_TEMP`, of `STAGE_FILES[stage]` or the report) removed."""
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    write_text(path / STAGE_MARKER, stage + "\n")
    (path / REPORT).unlink(missing_ok=True)
    remove_temporaries(path, {*STAGE_FILES.get(stage, ()), REPORT, STAGE_MARKER})


def remove_temporaries(folder: str | Path, names: Collection[str]) -> None:
    """The temporary files (`_TEMP`, plain files) that a writer of one of `names` killed before its rename left in
    `folder` removed; nothing else."""
    for entry in Path(folder).iterdir():
        temp = _TEMP.fullmatch(entry.name)
        if temp is not None and temp["name"] in names and entry.is_file() and not entry.is_symlink():
            entry.unlink()


def end_stage(folder: str | Path) -> None:
    """After a stage's report is written into `folder`: its `STAGE_MARKER` removed."""
    (Path(folder) / STAGE_MARKER).unlink(missing_ok=True)


def _described(stage: str | None) -> str:
    return f"the output of stage {stage!r}" if stage else f"a {REPORT} that names no data stage"


def check_stage_input(folder: str | Path, stage: str) -> None:
    """ValueError unless `folder` is a folder that `stage` reads: the output of a stage in `NEEDS[stage]`, or
    a folder without a report (built by hand). A run-all's folder, finished (`PIPELINE_REPORT`) or stopped early
    (ingest's output in its first stage folder), is refused, naming the stage folder inside it to read."""
    needs = " or ".join(repr(s) for s in NEEDS[stage])
    path = Path(folder)
    if not path.is_dir():
        raise ValueError(f"{path} is not a folder; {stage} reads the output folder of stage {needs}")
    found = stage_of(path)
    started = started_stage(path)
    if found is None and started is not None:
        raise ValueError(f"{path} holds the output of stage {started!r} stopped before it finished (a "
                         f"{STAGE_MARKER} and no {REPORT}); rerun that stage into it, then {stage} reads it")
    if found is None and ((path / PIPELINE_REPORT).is_file() or stage_of(path / STAGE_DIRS[0]) == PIPELINE[0]):
        inside = [path / name for s, name in zip(PIPELINE, STAGE_DIRS) if s in NEEDS[stage]]
        raise ValueError(f"{path} is run-all's folder; {stage} reads the output of stage {needs}"
                         + (f": {inside[0]}" if inside else ""))
    if found is not None and found not in NEEDS[stage]:
        raise ValueError(f"{path} holds {_described(found)}; {stage} reads the output of stage {needs}")


def check_stage_out(folder: str | Path, stage: str) -> None:
    """FileExistsError unless `folder` is absent, an empty folder or an earlier output of `stage` (its report
    names `stage`), or the output of `stage` stopped before its report (`STAGE_MARKER` naming `stage`, no report,
    nothing in it but the stage's files and their temporary files; logged as to be replaced), which `stage` may
    replace. A folder without report and marker (built by hand) is refused. Nothing is removed here."""
    started = started_stage(folder)
    if started is not None and not Path(folder).is_symlink():
        if started != stage:
            raise FileExistsError(f"{folder} holds the output of stage {started!r} stopped before it finished (its "
                                  f"{STAGE_MARKER}), not of {stage!r}; it is left as it is: choose a new or empty "
                                  "folder")
        if stage in STAGE_FILES and not _only_stage_files(Path(folder), stage):  # the marker read once, above
            raise FileExistsError(f"{folder} holds stage {stage!r}'s {STAGE_MARKER} but also files the stage does not "
                                  "write; it is left as it is: choose a new or empty folder")
        log.warning("%s holds stage %r's %s but no %s (the stage was stopped before it finished): it is replaced",
                    folder, stage, STAGE_MARKER, REPORT)
        return
    check_replaceable(folder, REPORT, f"an earlier output of stage {stage!r}")
    found = stage_of(folder)
    if found is not None and found != stage:
        raise FileExistsError(f"{folder} holds {_described(found)}, not of {stage!r}; it is left as it is: choose "
                              "a new or empty folder")


def partial_stage(folder: str | Path, stage: str) -> bool:
    """Whether `folder` is what `stage` (a key of `STAGE_FILES`) leaves when it is killed before its report: a folder
    (not a link) without a report, holding at least one file and nothing but plain files the stage writes
    (`STAGE_FILES[stage]`), its `STAGE_MARKER` (which must name `stage`) and the temporary files of those and of
    its report. Anything else in it (a file of another name, a sub-folder, a link) makes it not one."""
    path = Path(folder)
    if path.is_symlink() or not path.is_dir() or os.path.lexists(path / REPORT):
        return False
    return started_stage(path) in (None, stage) and _only_stage_files(path, stage)


def _only_stage_files(path: Path, stage: str) -> bool:
    """Whether the folder `path` holds at least one entry and nothing but plain files that `stage` writes, its
    `STAGE_MARKER` and the temporary files of those and of its report (`partial_stage` less its other checks)."""
    names = {*STAGE_FILES[stage], REPORT, STAGE_MARKER}
    entries = list(path.iterdir())
    for entry in entries:
        temp = _TEMP.fullmatch(entry.name)
        if entry.is_symlink() or not entry.is_file() or (entry.name if temp is None else temp["name"]) not in names:
            return False
    return bool(entries)


def check_run_all_out(folder: str | Path, *, warn: bool = True) -> None:
    """FileExistsError unless `folder` is absent, empty or an earlier run's: it holds `PIPELINE_REPORT` (a
    finished run), ingest's output in its first stage folder, or nothing but stage folders (a run that stopped
    early); and each stage folder in it must be that stage's output (`check_stage_out`) or, in an earlier run's
    folder, the partial output of a stage killed before its report (`partial_stage`; logged as to be replaced, unless
    `warn` is off: the CLI checks before `run_all`, which checks again and logs it, once).
    Nothing is removed here; other files in an earlier run's folder (an align output, say) are left alone."""
    path = Path(folder)
    earlier_run = path.is_dir() and not path.is_symlink() and (
        stage_of(path / STAGE_DIRS[0]) == PIPELINE[0] or all(e.name in STAGE_DIRS for e in path.iterdir()))
    if not earlier_run:
        check_replaceable(path, PIPELINE_REPORT, "an earlier run-all's folder")
    for stage, name in zip(PIPELINE, STAGE_DIRS):
        if path.is_dir() and not path.is_symlink() and partial_stage(path / name, stage):
            if warn:
                log.warning("%s holds stage %r's files but no %s (the stage was stopped before it finished): it is "
                            "replaced", path / name, stage, REPORT)
            continue
        check_stage_out(path / name, stage)


def _counted(parts: dict[str, int]) -> str:
    """The non-zero counts as ' (name n, ...)', or '' when there are none."""
    named = ", ".join(f"{name} {n}" for name, n in parts.items() if n)
    return f" ({named})" if named else ""


def nothing_left(report: dict) -> str | None:
    """Why a stage's output (its `report`) leaves the later stages nothing to work on (training needs a
    train example), or None when it does not."""
    stage = report.get("stage")
    if stage == "ingest" and not report["counts"].get("contexts"):
        if not report["bad_lines"] and not any(report["counts"].values()):  # nothing read, refused or counted
            source = report.get("input")  # input B's is [full text, abstracts]: the full text is the one read
            source = source[0] if isinstance(source, list) and source else source
            return f"its input {source} holds no record (an empty file, or blank lines only)"
        dropped = {k: v for k, v in report["counts"].items() if k.startswith("dropped")}
        return f"no context citing two or more papers is left{_counted({**dropped, 'bad_lines': report['bad_lines']})}"
    if stage == "filter" and not report["contexts_out"]:
        if not report["contexts_in"]:
            return "its input holds no contexts"
        removed = {row["filter"]: row["removed"] for row in report["removed_in_order"]}
        return f"the filters removed all {report['contexts_in']} contexts{_counted(removed)}"
    if stage == "group" and not report["sets"]:
        return "its input holds no contexts, so there is no co-cited set"
    if stage == "split" and not report["train"]["sets"]:
        n = report["train"]["sets"] + report["dev"]["sets"]
        return (f"no co-cited set is left for train (split.dev_fraction={report['config']['dev_fraction']} "
                f"put all {n} in dev)" if n else "its input holds no co-cited sets")
    if stage == "examples" and not report["train"].get("examples"):
        dropped = report["train"].get("dropped_no_negative", 0)
        if dropped:
            return (f"no train example: all {dropped} train pairs were dropped, each having fewer than "
                    f"examples.num_negatives={report['config']['num_negatives']} possible negatives")
        return "no train example: its input has no co-cited set in train"
    return None


def check_something_left(report: dict, out_dir: str | Path) -> None:
    """ValueError naming `out_dir` and the reason when `nothing_left(report)`; the stage's files stay."""
    problem = nothing_left(report)
    if problem:
        raise ValueError(f"{out_dir}: {problem}; no later stage can use it (counts in its {REPORT})")
