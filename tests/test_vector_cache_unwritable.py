"""A vector cache folder this user may not write (another user's `--cache-dir`, a read-only home under the default
`~/.cache/aspire/vectors`) leaves the run uncached, with one warning naming it, as a full disk does: the run once
ended there with `error: [Errno 13] Permission denied`, after every paper was encoded, and wrote no results."""

from __future__ import annotations

import errno
import json
import logging

import pytest

from aspire.cli import main


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS])
def test_evaluate_goes_on_uncached_when_the_cache_cannot_be_written(small_csfcube, tiny_model_dir, tmp_path,
                                                                    monkeypatch, caplog, code):
    from aspire.evaluate import cache

    def refused(path, *args, **kwargs):  # as opening the entry's temporary file in such a folder is refused
        raise OSError(code, __import__("os").strerror(code), str(path))

    monkeypatch.setattr(cache, "atomic_write", refused)
    folder = tmp_path / "shared-vectors"
    argv = ["evaluate", "csfcube", "--model", str(tiny_model_dir), "--data", str(small_csfcube), "--scorer", "minl2",
            "--cache-dir", str(folder), "--out", str(tmp_path / "out"), "-q"]
    with caplog.at_level(logging.WARNING, logger="aspire"):
        assert main(argv) == 0
    said = [r.getMessage() for r in caplog.records if "not cached" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"vectors not cached: {folder}/") and "cannot be written" in said[0]
    results = list((tmp_path / "out").rglob("results.json"))
    assert len(results) == 1 and json.loads(results[0].read_text())["run_record"]["encoded"][0]["cache_entry"] is None
