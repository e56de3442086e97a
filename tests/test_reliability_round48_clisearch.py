"""Round 48: `aspire search` (aspire/cli/search.py): --run-out never replaces one of the index's (or the
cross-encoder's) files, refused before the index opens."""

from __future__ import annotations

import pytest

from aspire.cli.search import main as search_main
from tests.test_search_cli import build_labelled_index


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model_dir):
    return build_labelled_index(tmp_path_factory.mktemp("r48-clisearch"), tiny_model_dir)


def test_run_out_onto_a_file_of_the_index_is_refused_before_the_index_opens(index_dir, tmp_path, monkeypatch,
                                                                             capsys):
    """`--run-out IDX/CURRENT` once searched and then replaced the index's live-generation pointer with the run's
    lines: the index no longer opened."""
    def no_open(*args, **kwargs):
        raise AssertionError("the index was opened")

    monkeypatch.setattr("aspire.search.Searcher.open", no_open)
    target = index_dir / "CURRENT"
    before = target.read_bytes()
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--query-id", "p1", "--run-out", str(target), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--run-out {target} is a file of the --index folder" in err, err
    assert target.read_bytes() == before
    cross = tmp_path / "cross"
    cross.mkdir()
    (cross / "config.json").write_text("{}")
    assert search_main(["--index", str(index_dir), "--query-id", "p1", "--cross-encoder", str(cross),
                        "--run-out", str(cross / "config.json"), "--quiet"]) == 2
    assert "is a file of the --cross-encoder folder" in capsys.readouterr().err
    assert (cross / "config.json").read_text() == "{}"


def test_run_out_elsewhere_is_written_and_equals_the_printed_hits(index_dir, tmp_path, capsys):
    import json

    run = tmp_path / "search.run"
    run.write_text("an earlier run\n")  # an earlier run file of one's own is replaced, as before
    capsys.readouterr()
    assert search_main(["--index", str(index_dir), "--query-id", "p1", "--k", "3", "--json",
                        "--run-out", str(run), "--quiet"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    rows = [line.split() for line in run.read_text().splitlines()]
    assert [(r[0], r[2], int(r[3])) for r in rows] == [("p1", h["paper_id"], h["rank"]) for h in hits]
