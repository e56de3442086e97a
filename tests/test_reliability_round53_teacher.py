"""Round 53: teacher.json records the ACL file as an absolute path, so a distill run started from another working
directory compares the file the teacher really read (a relative name was resolved against the distill run's own
directory: another file there of the same name, same ids, other texts, passed without a word)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from aspire.train.teacher import META, check_source, load_teacher, main
from tests.test_reliability_round49_teacher import _acl as acl_file


def _acl(path: Path, shift: int = 0) -> Path:
    return acl_file(path, shift, n=6)


def test_a_relative_acl_path_is_recorded_absolute_and_compared_from_another_directory(tiny_model_dir, tmp_path,
                                                                                       monkeypatch):
    """The teacher is written in `a/` from `papers.jsonl`; the distill run works in `b/`, whose `papers.jsonl` has the
    same ids and other texts. Before: teacher.json held "papers.jsonl", resolved in `b/` to the task's own file:
    accepted. Now it holds `a/papers.jsonl` and the task's file is refused, naming both."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    _acl(a / "papers.jsonl")
    _acl(b / "papers.jsonl", shift=3)
    monkeypatch.chdir(a)
    assert main(["--teacher", str(tiny_model_dir), "--out", str(tmp_path / "teacher"), "--acl-path", "papers.jsonl",
                 "--benchmarks-dir", "", "--max-papers", "0", "--max-length", "32", "--batch-size", "4"]) == 0
    meta = load_teacher(tmp_path / "teacher").meta
    assert meta["acl_path"] == str(a / "papers.jsonl")
    assert os.path.isabs(json.loads((tmp_path / "teacher" / META).read_text())["acl_path"])
    check_source(meta, tmp_path / "teacher", "papers.jsonl", 0, "distill task")  # from a/: the same file
    monkeypatch.chdir(b)
    with pytest.raises(ValueError, match=r"teacher\.json records acl_path .*a/papers\.jsonl.*the task reads "
                                         r"'papers\.jsonl'"):
        check_source(meta, tmp_path / "teacher", "papers.jsonl", 0, "distill task")
    # the teacher model is recorded for the user (no setting of a distill run names it)
    assert meta["teacher"] == str(tiny_model_dir) and meta["fingerprint"].startswith("v2-")
