"""Round 76, `aspire data` from a user's view: an empty records file is named as the cause of an empty ingest."""

from __future__ import annotations

from aspire.data import cocite
from aspire.data.cocite.stages import nothing_left
from tests.test_data_stages import NO_HELD_OUT, _run


def test_run_all_on_an_empty_records_file_names_the_file(tmp_path, capsys):
    """An empty (or blank-only) `--in` once failed with "OUT/1_ingest: no context citing two or more papers is left",
    naming neither the input nor why: nothing was read from it."""
    for name, text in (("empty.jsonl", ""), ("blank.jsonl", "\n  \n")):
        records = tmp_path / name
        records.write_text(text, encoding="utf-8")
        out = tmp_path / f"out_{name}"
        status, err = _run(["run-all", "--in", str(records), "--out", str(out), NO_HELD_OUT,
                            "ingest.exclude_benchmark_papers=false"], capsys)
        assert status == 2
        assert f"{out / '1_ingest'}: its input {records} holds no record (an empty file, or blank lines only)" in err
        assert (out / "1_ingest" / "report.json").is_file()  # its files stay, to be looked at


def test_an_ingest_that_read_something_keeps_its_counted_reasons(tmp_path):
    """Only an input with nothing read, refused or counted gets the empty-input message."""
    records = tmp_path / "empty.jsonl"
    records.write_text("", encoding="utf-8")
    report = cocite.ingest_records(records, tmp_path / "i", cocite.IngestConfig(exclude_benchmark_test=False,
                                                                                exclude_benchmark_papers=False))
    assert nothing_left(report) == f"its input {records} holds no record (an empty file, or blank lines only)"
    skipped = {**report, "bad_lines": 1}  # every line refused under ingest.on_error=skip: its count says why
    assert nothing_left(skipped) == "no context citing two or more papers is left (bad_lines 1)"
    dropped = {**report, "counts": {**report["counts"], "records": 2, "dropped_fewer_than_2_cited": 2}}
    assert nothing_left(dropped) == "no context citing two or more papers is left (dropped_fewer_than_2_cited 2)"
    s2orc = {**report, "input": [str(tmp_path / "pdf_parses.jsonl"), str(tmp_path / "abstracts.jsonl")],
             "counts": {"contexts": 0, "papers_cited": 0}}  # input B: its full-text file is the one read
    assert nothing_left(s2orc) == (f"its input {tmp_path / 'pdf_parses.jsonl'} holds no record (an empty file, or "
                                   "blank lines only)")
