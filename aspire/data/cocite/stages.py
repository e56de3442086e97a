"""Stage folders: which stage wrote a folder, what each stage reads, where it may write, and when its output
leaves nothing for the stages after it.

Every stage writes `report.json` last, naming itself (`"stage": "filter"`), so a folder's report says what
it holds. A stage reads only the output of the stage before it (`NEEDS`; a folder without a report, such as
one built by hand, is read as it is) and writes only into a new or empty folder or one it wrote before
(`check_stage_out`); `run_all` writes only into a new or empty folder or an earlier run's, finished or not
(`check_run_all_out`), where a stage folder that a killed run left without its report (`partial_stage`) is
replaced too, with a warning on the log. Anything else is refused before anything is read or written, and left as it is.

A stage whose output is empty (the filters removed every context; no example has a negative) leaves its
files and report in place, and `nothing_left` says why no later stage can use them.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from aspire.data.cocite.config import REPORT
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
                            "groups.dev.jsonl")}  # the files each of run_all's stages writes before its report
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
    if found is None and ((path / PIPELINE_REPORT).is_file() or stage_of(path / STAGE_DIRS[0]) == PIPELINE[0]):
        inside = [path / name for s, name in zip(PIPELINE, STAGE_DIRS) if s in NEEDS[stage]]
        raise ValueError(f"{path} is run-all's folder; {stage} reads the output of stage {needs}"
                         + (f": {inside[0]}" if inside else ""))
    if found is not None and found not in NEEDS[stage]:
        raise ValueError(f"{path} holds {_described(found)}; {stage} reads the output of stage {needs}")


def check_stage_out(folder: str | Path, stage: str) -> None:
    """FileExistsError unless `folder` is absent, an empty folder or an earlier output of `stage` (its report
    names `stage`), which `stage` may replace. Nothing is removed here."""
    check_replaceable(folder, REPORT, f"an earlier output of stage {stage!r}")
    found = stage_of(folder)
    if found is not None and found != stage:
        raise FileExistsError(f"{folder} holds {_described(found)}, not of {stage!r}; it is left as it is: choose "
                              "a new or empty folder")


def partial_stage(folder: str | Path, stage: str) -> bool:
    """Whether `folder` is what `stage` (one of `PIPELINE`) leaves when it is killed before its report: a folder
    (not a link) without a report, holding at least one file and nothing but plain files the stage writes
    (`STAGE_FILES[stage]`) and the temporary files of those and of its report. Anything else in it (a file of
    another name, a sub-folder, a link) makes it not one."""
    path = Path(folder)
    if path.is_symlink() or not path.is_dir() or os.path.lexists(path / REPORT):
        return False
    names = {*STAGE_FILES[stage], REPORT}
    entries = list(path.iterdir())
    for entry in entries:
        temp = _TEMP.fullmatch(entry.name)
        if entry.is_symlink() or not entry.is_file() or (entry.name if temp is None else temp["name"]) not in names:
            return False
    return bool(entries)


def check_run_all_out(folder: str | Path) -> None:
    """FileExistsError unless `folder` is absent, empty or an earlier run's: it holds `PIPELINE_REPORT` (a
    finished run), ingest's output in its first stage folder, or nothing but stage folders (a run that stopped
    early); and each stage folder in it must be that stage's output (`check_stage_out`) or, in an earlier run's
    folder, the partial output of a stage killed before its report (`partial_stage`; logged as to be replaced).
    Nothing is removed here; other files in an earlier run's folder (an align output, say) are left alone."""
    path = Path(folder)
    earlier_run = path.is_dir() and not path.is_symlink() and (
        stage_of(path / STAGE_DIRS[0]) == PIPELINE[0] or all(e.name in STAGE_DIRS for e in path.iterdir()))
    if not earlier_run:
        check_replaceable(path, PIPELINE_REPORT, "an earlier run-all's folder")
    for stage, name in zip(PIPELINE, STAGE_DIRS):
        if path.is_dir() and not path.is_symlink() and partial_stage(path / name, stage):
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
