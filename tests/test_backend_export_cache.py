"""The exported graph cache (`aspire.encoders.backends.cached_onnx_model`) shared by processes loading one model at
once (the ranks of `aspire index encode-shard` on one machine, a demo started while `index build` exports)."""

from __future__ import annotations

import logging
import os

from aspire.storage import check_record


def test_a_load_the_moment_the_graph_is_renamed_into_place_reads_it_recorded(tiny_model_dir, tmp_path, monkeypatch,
                                                                              caplog):
    """The graph was renamed into place before its record was written: a process loading the model in between found
    it unrecorded, warned, removed it and exported again, and the exporter's record of a removed file failed with a
    FileNotFoundError (`aspire index build --backend onnx`: `error: [Errno 2] No such file or directory`)."""
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path))
    from aspire.encoders import backends

    exact = backends.load_encoder(tiny_model_dir)
    exports, loaded = [], []
    real_export, real_replace = backends.export_onnx, os.replace

    def export(model, path):
        exports.append(path)
        real_export(model, path)

    def replace(src, dst):
        real_replace(src, dst)
        if str(dst).endswith(".onnx") and not loaded:  # another process loads the model the moment the graph is there
            loaded.append("loading")  # once: its own export, if it made one, is not loaded again
            loaded[0] = backends.cached_onnx_model(exact, None)

    monkeypatch.setattr(backends, "export_onnx", export)
    monkeypatch.setattr(backends.os, "replace", replace)
    with caplog.at_level(logging.WARNING, logger="aspire"):
        path = backends.cached_onnx_model(exact, None)
    assert loaded == [path] and len(exports) == 1
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert check_record(path) is None


def test_the_exported_graph_is_readable_by_the_caches_other_users(tiny_model_dir, tmp_path, monkeypatch):
    """The graph kept mkstemp's owner-only mode (0o600) while the records and vectors follow the umask: in a cache
    shared by several users each found the others' graph unreadable, removed it and exported again."""
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path))
    from aspire.encoders import backends

    mask = os.umask(0o022)
    try:
        path = backends.cached_onnx_model(backends.load_encoder(tiny_model_dir), None)
    finally:
        os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o644
    assert not list(path.parent.glob(".*.tmp"))  # no temporary file left beside it
