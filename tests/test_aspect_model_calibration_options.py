"""experiments/aspect_model.py: `--calibration-papers` beside `--calibration-file` was dropped without a word (the
file's papers are the sample); it is now refused, as hybrid_weights_context2doc.py refuses it."""

from __future__ import annotations

import sys

import pytest

from tests.test_reliability_round7_hybrid import _script


def test_calibration_papers_beside_a_calibration_file_is_refused(tmp_path, monkeypatch, capsys):
    study = _script("aspect_model")
    monkeypatch.setattr(sys, "argv", ["aspect_model.py", "--calibration-file", str(tmp_path / "cal.jsonl"),
                                      "--calibration-papers", "50", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as exit_info:
        study.main()
    assert exit_info.value.code == 2 and "give one" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_write_calibration_sample_still_takes_the_count(tmp_path, monkeypatch):
    study = _script("aspect_model")
    asked, written = [], []
    monkeypatch.setattr(study, "calibration_sample", lambda n, **kw: asked.append(n) or [f"paper{i}" for i in range(n)])
    monkeypatch.setattr(study, "write_papers", lambda path, papers: written.append((path, list(papers))))
    for extra, n in (([], 200), (["--calibration-papers", "7"], 7)):
        monkeypatch.setattr(sys, "argv", ["aspect_model.py", "--write-calibration-sample", str(tmp_path / "s.jsonl"),
                                          *extra, "--out", str(tmp_path / "out")])
        study.main()
        assert asked[-1] == n and len(written[-1][1]) == n
