"""Round 51: a run-all stage killed before its report.json is replaced on rerun (logged); a folder of other files
in its place is still refused. Stage names, report reading and replaceability checked on hand-made folders."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from aspire.data import cocite
from aspire.data.cocite import stages
from aspire.data.cocite.config import CociteConfig, IngestConfig
from tests.test_data_stages import _records

CFG = CociteConfig(ingest=IngestConfig(exclude_benchmark_test=False))


def _killed_at(out: Path, k: int) -> None:
    """Turn the finished run in `out` into one killed while stage k (0-based) was writing: its report gone, a
    temporary file left, the later stages and the pipeline report never written."""
    (out / stages.PIPELINE_REPORT).unlink()
    for name in stages.STAGE_DIRS[k + 1:]:
        shutil.rmtree(out / name)
    folder = out / stages.STAGE_DIRS[k]
    (folder / "report.json").unlink()
    (folder / ".abstracts.jsonl.0123456789ab.tmp").write_text("{\"half\": ")  # every stage writes abstracts.jsonl


@pytest.fixture()
def run(tmp_path) -> tuple[Path, Path]:
    records, out = _records(tmp_path / "r.jsonl"), tmp_path / "cc"
    cocite.run_all(records, out, CFG)
    return records, out


@pytest.mark.parametrize("k", [0, 2, 4])
def test_run_all_replaces_a_stage_killed_before_its_report(run, k, caplog):
    records, out = run
    finished = (out / "5_examples" / "examples.train.jsonl").read_bytes()
    _killed_at(out, k)
    with caplog.at_level(logging.WARNING, logger=stages.__name__):
        cocite.run_all(records, out, CFG)
    assert (out / stages.PIPELINE_REPORT).is_file()
    assert (out / "5_examples" / "examples.train.jsonl").read_bytes() == finished
    assert not list((out / stages.STAGE_DIRS[k]).glob(".*.tmp"))
    assert str(out / stages.STAGE_DIRS[k]) in caplog.text and "replaced" in caplog.text


def test_run_all_still_refuses_a_stage_folder_with_other_files(run):
    records, out = run
    _killed_at(out, 2)
    (out / "3_group" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="3_group"):
        cocite.run_all(records, out, CFG)
    assert (out / "3_group" / "notes.txt").read_text() == "keep me"
    (out / "3_group" / "notes.txt").unlink()
    (out / "3_group" / "sub").mkdir()  # a sub-folder: not a stage's
    with pytest.raises(FileExistsError, match="3_group"):
        cocite.run_all(records, out, CFG)
    assert (out / "3_group" / "sub").is_dir() and (out / "1_ingest" / "report.json").is_file()


def test_run_all_refuses_a_partial_stage_in_a_folder_that_is_not_a_run(tmp_path):
    out = tmp_path / "mine"
    (out / "1_ingest").mkdir(parents=True)
    (out / "1_ingest" / "contexts.jsonl").write_text("")
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="pipeline_report.json"):
        stages.check_run_all_out(out)


def test_partial_stage_only_for_the_stages_own_files(tmp_path):
    f = tmp_path / "f"
    assert not stages.partial_stage(f, "group")  # absent
    f.mkdir()
    assert not stages.partial_stage(f, "group")  # empty: replaceable anyway, nothing partial
    (f / "groups.jsonl").write_text("")
    (f / ".report.json.abcdef012345.tmp").write_text("")
    assert stages.partial_stage(f, "group")
    assert not stages.partial_stage(f, "ingest")  # not ingest's file
    (f / "report.json").write_text('{"stage": "group"}')
    assert not stages.partial_stage(f, "group")  # finished
    (f / "report.json").unlink()
    (f / ".groups.jsonl.XYZ.tmp").write_text("")  # not atomic_write's temporary name
    assert not stages.partial_stage(f, "group")


def test_a_single_stage_still_refuses_a_folder_without_report(tmp_path):
    # a folder holding a stage's file names but no report cannot be told from one built by hand (a stage's input)
    f = tmp_path / "f"
    f.mkdir()
    (f / "contexts.jsonl").write_text("")
    with pytest.raises(FileExistsError, match="no report.json"):
        stages.check_stage_out(f, "filter")


def test_stage_of_and_report_reading(tmp_path):
    f = tmp_path / "f"
    f.mkdir()
    assert stages.stage_of(f) is None and stages.stage_report(f) is None
    for text, want in [('{"stage": "split"}', "split"), ('{"loss": 1}', ""), ("[1]", ""), ("{bad", ""),
                       ('{"stage": 3}', "")]:
        (f / "report.json").write_text(text)
        assert stages.stage_of(f) == want, text
    (f / "report.json").unlink()
    (f / "report.json").mkdir()
    assert stages.stage_of(f) == "" and stages.stage_report(f) is None
    (f / "report.json").rmdir()
    (f / "report.json").symlink_to(tmp_path / "nowhere")
    assert stages.stage_of(f) == ""
