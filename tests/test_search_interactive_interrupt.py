"""`aspire search --interactive --run-out FILE` ended with Ctrl-C (a common way out of a prompt) said "interrupted" and
wrote no run: every query answered in the session was lost. The run of the answered queries is now written, and said."""

from __future__ import annotations

from test_reliability_round11_search import random_index

from aspire.cli.search import main as search_main


class InterruptedStdin:
    """A stdin whose reader presses Ctrl-C after `lines` (a text stream without a binary buffer)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def __iter__(self):
        yield from self.lines
        raise KeyboardInterrupt


def test_ctrl_c_keeps_the_run_of_the_answered_queries(tmp_path, monkeypatch, capsys):
    random_index().save(tmp_path / "index")
    run = tmp_path / "session.run"
    monkeypatch.setattr("sys.stdin", InterruptedStdin(["p1 0\n", "nope\n", "p3\n"]))
    capsys.readouterr()
    args = ["--index", str(tmp_path / "index"), "--interactive", "--k", "2", "--quiet", "--run-out", str(run)]
    assert search_main(args) == 130  # still the status of an interrupted command
    err = capsys.readouterr().err
    assert f"interrupted: the run of the 2 queries answered is written to {run}" in err
    assert err.rstrip().endswith("interrupted")
    assert [row.split()[0] for row in run.read_text().splitlines()] == ["p1", "p1", "p3", "p3"]  # k=2 each


def test_ctrl_c_before_any_query_writes_an_empty_run_and_without_run_out_nothing(tmp_path, monkeypatch, capsys):
    random_index().save(tmp_path / "index")
    run = tmp_path / "session.run"
    args = ["--index", str(tmp_path / "index"), "--interactive", "--quiet"]
    monkeypatch.setattr("sys.stdin", InterruptedStdin([]))
    assert search_main([*args, "--run-out", str(run)]) == 130 and run.read_text() == ""
    assert "the run of the 0 queries answered" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", InterruptedStdin(["p1 0\n"]))
    assert search_main(args) == 130
    out = capsys.readouterr()
    assert "p1" not in out.err and "written" not in out.err and out.out.startswith("query p1")
