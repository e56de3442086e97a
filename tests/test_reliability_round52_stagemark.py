"""Round 52: a single co-citation stage killed before its report.json is rerun into its folder. Each stage writes
`stages.STAGE_MARKER` (naming itself) before its first file and removes it after its report; `check_stage_out`
replaces a folder holding that marker and no report (with a warning), and still refuses a folder built by hand (no
marker, left as it is) and the marker of another stage. Checked against a clean run of the same stage."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from aspire.cli.data import main
from aspire.data import cocite
from aspire.data.cocite import stages
from aspire.data.cocite.config import CociteConfig, IngestConfig
from tests.test_data_stages import _records

CFG = CociteConfig(ingest=IngestConfig(exclude_benchmark_test=False, exclude_benchmark_papers=False))
NO_BENCHMARK = ["ingest.exclude_benchmark_test=false", "ingest.exclude_benchmark_papers=false"]
COMMAND = {"ingest": "cocite-from-records"}


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _argv(stage: str, src: Path, out: Path) -> list[str]:
    return [COMMAND.get(stage, stage), "--in", str(src), "--out", str(out),
            *(NO_BENCHMARK if stage == "ingest" else []), "--quiet"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("run")
    records, out = _records(tmp / "r.jsonl"), tmp / "cc"
    cocite.run_all(records, out, CFG)
    return records, out


def _input(run, k: int) -> Path:
    records, out = run
    return records if k == 0 else out / stages.STAGE_DIRS[k - 1]


def _killed(folder: Path, stage: str, finished: Path) -> None:
    """`folder` as `stage` leaves it when killed after writing its files: its marker, a stale file, a temporary
    file, no report."""
    shutil.copytree(finished, folder)
    (folder / "report.json").unlink()
    (folder / stages.STAGE_MARKER).write_text(stage + "\n")
    (folder / "abstracts.jsonl").write_text('{"paper_id": "stale"}\n')  # every stage writes abstracts.jsonl
    (folder / ".abstracts.jsonl.0123456789ab.tmp").write_text("{\"half\": ")


@pytest.mark.parametrize("k", range(5))
def test_a_single_stage_killed_before_its_report_is_rerun_like_a_clean_run(run, k, tmp_path, caplog):
    stage, src = stages.PIPELINE[k], _input(run, k)
    clean = tmp_path / "clean"
    assert main(_argv(stage, src, clean)) == 0
    assert not (clean / stages.STAGE_MARKER).exists()  # removed once the report is written
    killed = tmp_path / "killed"
    _killed(killed, stage, clean)
    with caplog.at_level(logging.WARNING, logger=stages.__name__):
        assert main(_argv(stage, src, killed)) == 0
    assert _files(killed) == _files(clean)
    assert str(killed) in caplog.text and "replaced" in caplog.text


def test_a_folder_built_by_hand_is_still_refused_and_left_as_it_is(run, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "contexts.jsonl").write_text('{"mine": 1}\n')
    (mine / "abstracts.jsonl").write_text('{"mine": 2}\n')
    before = _files(mine)
    assert main(_argv("filter", _input(run, 1), mine)) != 0
    with pytest.raises(FileExistsError, match="no report.json"):
        stages.check_stage_out(mine, "filter")
    assert _files(mine) == before


def test_the_marker_of_another_stage_is_refused_and_left_as_it_is(run, tmp_path):
    other = tmp_path / "other"
    _killed(other, "ingest", run[1] / "1_ingest")
    before = _files(other)
    with pytest.raises(FileExistsError, match="'ingest'.*not of 'filter'"):
        stages.check_stage_out(other, "filter")
    assert main(_argv("filter", _input(run, 1), other)) != 0
    assert _files(other) == before


def test_a_marked_folder_with_other_files_is_refused(run, tmp_path):
    f = tmp_path / "f"
    _killed(f, "filter", run[1] / "2_filter")
    (f / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="does not write"):
        stages.check_stage_out(f, "filter")
    assert (f / "notes.txt").read_text() == "keep me"


def test_a_killed_stage_with_its_marker_is_no_later_stages_input(run, tmp_path):
    f = tmp_path / "f"
    _killed(f, "filter", run[1] / "2_filter")
    with pytest.raises(ValueError, match="stopped before it finished"):
        cocite.check_stage_input(f, "group")
    assert main(["group", "--in", str(f), "--out", str(tmp_path / "g"), "--quiet"]) != 0
    assert not (tmp_path / "g").exists()


def test_run_all_replaces_a_stage_folder_holding_its_marker(tmp_path):
    records, out = _records(tmp_path / "r.jsonl"), tmp_path / "cc"
    cocite.run_all(records, out, CFG)
    assert not list(out.glob(f"*/{stages.STAGE_MARKER}"))
    finished = _files(out / "5_examples")
    (out / stages.PIPELINE_REPORT).unlink()
    for name in stages.STAGE_DIRS[3:]:
        shutil.rmtree(out / name)
    (out / "3_group" / "report.json").unlink()
    (out / "3_group" / stages.STAGE_MARKER).write_text("group\n")
    assert stages.partial_stage(out / "3_group", "group")
    assert not stages.partial_stage(out / "3_group", "filter")
    cocite.run_all(records, out, CFG)
    assert _files(out / "5_examples") == finished
    assert not (out / "3_group" / stages.STAGE_MARKER).exists()


def test_begin_stage_marks_the_folder_unfinished(run, tmp_path):
    f = tmp_path / "f"
    shutil.copytree(run[1] / "3_group", f)
    (f / ".groups.jsonl.0123456789ab.tmp").write_text("")
    (f / ".notes.txt.0123456789ab.tmp").write_text("")  # not a temporary file of the stage's: kept
    stages.begin_stage(f, "group")
    # a rerun stopped from here on is never read as the earlier finished output (new files under its old report)
    assert not (f / "report.json").exists() and stages.started_stage(f) == "group"
    assert sorted(p.name for p in f.glob(".*.tmp")) == [".notes.txt.0123456789ab.tmp"]
    stages.end_stage(f)
    assert not (f / stages.STAGE_MARKER).exists()
