"""Round 42, the lead's mends: what the round's helpers found outside their files."""

import pytest

from aspire.data.cocite.stages import check_stage_input, nothing_left, stage_of


def test_a_report_that_is_a_folder_is_no_hand_built_folder(tmp_path):
    (tmp_path / "report.json").mkdir()  # not a stage's report: it must not read as "no report" (built by hand)
    assert stage_of(tmp_path) == ""
    with pytest.raises(ValueError, match="names no data stage; filter reads the output of stage 'ingest'"):
        check_stage_input(tmp_path, "filter")
    (tmp_path / "report.json").rmdir()
    (tmp_path / "report.json").symlink_to(tmp_path / "gone.json")  # a broken link is a report that cannot be read
    assert stage_of(tmp_path) == ""
    (tmp_path / "report.json").unlink()
    assert stage_of(tmp_path) is None  # no report at all: built by hand, read as it is
    check_stage_input(tmp_path, "filter")


def test_an_empty_ingest_says_why_without_claiming_a_reason_it_did_not_see():
    report = {"stage": "ingest", "counts": {"contexts": 0, "dropped_benchmark_test": 2}, "bad_lines": 0}
    said = nothing_left(report)
    assert said == "no context citing two or more papers is left (dropped_benchmark_test 2)"
