"""Round 44, the lead's mends: what the round's helpers found outside their files."""

import shutil

from aspire.cli.data import main as data_main
from tests.test_data_stages import _records

SETTINGS = ["ingest.exclude_benchmark_test=false", "ingest.exclude_benchmark_papers=false"]


def test_run_all_refuses_an_input_inside_a_stage_folder_it_replaces(tmp_path, capsys):
    out = tmp_path / "cc"
    assert data_main(["run-all", "--in", str(_records(tmp_path / "records.jsonl")), "--out", str(out), *SETTINGS,
                      "-q"]) == 0
    inside = out / "1_ingest" / "mine.jsonl"  # the user's file, kept beside the stage's output
    shutil.copy(tmp_path / "records.jsonl", inside)
    before = inside.read_bytes()
    capsys.readouterr()
    assert data_main(["run-all", "--in", str(inside), "--out", str(out), *SETTINGS, "-q"]) == 2
    err = capsys.readouterr().err
    assert f"--in {inside} lies in {(out / '1_ingest').resolve()}, which run-all replaces in --out {out}" in err
    assert inside.read_bytes() == before  # once removed with the folder, then "No such file or directory"


def test_a_max_cited_below_two_is_refused_at_load(tmp_path, capsys):
    import pytest

    from aspire.config import ConfigError
    from aspire.data import cocite

    for bound in (0, 1):  # every context cites two or more papers: the filter stage once removed them all, late
        with pytest.raises(ConfigError, match=f"filter.max_cited: must be >= 2, got {bound}"):
            cocite.load_cocite_config(None, [f"filter.max_cited={bound}"])
    assert cocite.load_cocite_config(None, ["filter.max_cited=2"]).filter.max_cited == 2
    assert cocite.load_cocite_config(None, ["filter.max_cited=null"]).filter.max_cited is None
