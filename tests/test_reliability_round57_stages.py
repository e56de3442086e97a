"""Round 57: `run-all` replacing a killed stage warns once (the CLI's early check is silent, `run_all`'s logs it);
a rerun removes the temporary file of a pipeline report whose writer was killed; `check_stage_out` reads a
folder's `STAGE_MARKER` once."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from aspire.cli.data import main
from aspire.data import cocite
from aspire.data.cocite import stages
from tests.test_reliability_round51_stages import _killed_at
from tests.test_reliability_round52_stagemark import CFG, NO_BENCHMARK, _killed
from tests.test_reliability_round52_stagemark import run as finished  # noqa: F401 (a fixture: a finished run-all)

PIPELINE_TEMP = f".{stages.PIPELINE_REPORT}.0123456789ab.tmp"  # `atomic_write`'s temporary name for the report


@pytest.fixture()
def run(finished, tmp_path) -> tuple[Path, Path]:  # noqa: F811 (the fixture)
    records, out = finished
    shutil.copytree(out, tmp_path / "cc")
    return records, tmp_path / "cc"


def _replaced(caplog, folder: Path) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and str(folder) in r.getMessage() and "replaced" in r.getMessage()]


@pytest.mark.parametrize("k", [0, 3])
def test_cli_run_all_warns_once_of_a_killed_stage_it_replaces(run, k, caplog):
    records, out = run
    _killed_at(out, k)
    with caplog.at_level(logging.WARNING, logger=stages.__name__):
        assert main(["run-all", "--in", str(records), "--out", str(out), *NO_BENCHMARK, "--quiet"]) == 0
    assert len(_replaced(caplog, out / stages.STAGE_DIRS[k])) == 1, caplog.text
    assert (out / stages.PIPELINE_REPORT).is_file()


def test_run_all_from_python_still_warns_once(run, caplog):
    records, out = run
    _killed_at(out, 2)
    with caplog.at_level(logging.WARNING, logger=stages.__name__):
        cocite.run_all(records, out, CFG)
    assert len(_replaced(caplog, out / "3_group")) == 1, caplog.text


def test_the_silent_check_still_refuses(run):
    records, out = run
    _killed_at(out, 2)
    (out / "3_group" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="3_group"):
        stages.check_run_all_out(out, warn=False)


@pytest.mark.parametrize("cli", [False, True])
def test_a_rerun_removes_the_temporary_file_of_a_killed_pipeline_report(run, cli):
    records, out = run
    (out / stages.PIPELINE_REPORT).unlink()
    (out / PIPELINE_TEMP).write_text('{"config": ')  # killed while writing its report, after every stage
    (out / ".mine.json.0123456789ab.tmp").write_text("not run-all's")
    if cli:
        assert main(["run-all", "--in", str(records), "--out", str(out), *NO_BENCHMARK, "--quiet"]) == 0
    else:
        cocite.run_all(records, out, CFG)
    assert (out / stages.PIPELINE_REPORT).is_file()
    assert not (out / PIPELINE_TEMP).exists()
    assert (out / ".mine.json.0123456789ab.tmp").read_text() == "not run-all's"  # another writer's, left alone


def _marker_reads(monkeypatch, folder: Path) -> list[Path]:
    """The reads of `folder/STAGE_MARKER` through `Path.read_text` from now on."""
    reads, read_text = [], Path.read_text

    def counted(self, *args, **kwargs):
        if self == folder / stages.STAGE_MARKER:
            reads.append(self)
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    return reads


def test_check_stage_out_reads_the_marker_once(finished, tmp_path, monkeypatch, caplog):  # noqa: F811
    f = tmp_path / "f"
    _killed(f, "filter", finished[1] / "2_filter")
    reads = _marker_reads(monkeypatch, f)
    with caplog.at_level(logging.WARNING, logger=stages.__name__):
        stages.check_stage_out(f, "filter")
    assert len(reads) == 1
    assert len(_replaced(caplog, f)) == 1
    (f / "notes.txt").write_text("keep me")
    reads.clear()
    with pytest.raises(FileExistsError, match="does not write"):
        stages.check_stage_out(f, "filter")
    assert len(reads) == 1
    assert not stages.partial_stage(f, "filter")  # partial_stage as before: not with another file in it
    (f / "notes.txt").unlink()
    assert stages.partial_stage(f, "filter") and not stages.partial_stage(f, "ingest")  # its marker names filter
