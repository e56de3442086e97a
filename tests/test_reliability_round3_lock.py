"""Two runs in one folder (issue 47, item 4): a second `aspire train` into the same `train.out_dir`, fresh or
`--resume`, fails at once naming the first one's process; an index writer's refusal names its holder too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_train import REPO, tiny_config
from test_train_processes import ENV, write_config

from aspire.index.build import build_index
from aspire.index.disk import IndexLockedError
from aspire.storage import HOLDER_FILE, LOCK_FILE
from aspire.train import checkpoint as ckpt
from aspire.train.trainer import METRICS, run


def _hold(folder: Path, ready: Path, lock: str) -> subprocess.Popen:
    """A separate process holding `folder`'s lock (`lock`: "index" or "run") until killed."""
    code = ("import sys, time\n" + ("from aspire.index.disk import index_lock as hold\n" if lock == "index" else
                                    "from aspire.train.checkpoint import run_lock as hold\n")
            + f"with hold({str(folder)!r}):\n"
            f"    open({str(ready)!r}, 'w').close(); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, "--the-holder"], cwd=REPO, env=ENV)
    for _ in range(1200):
        if ready.exists():
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the lock holder did not start")


def test_a_second_run_into_one_out_dir_fails_at_once_naming_the_first(tiny_model_dir, examples_dir, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    holder = _hold(out, tmp_path / "ready", "run")
    try:
        start = time.monotonic()
        with pytest.raises(ckpt.RunLockedError, match=rf"in use by another process \(pid {holder.pid} on .*--the-holder"):
            run(tiny_config(tiny_model_dir, examples_dir, out))
        assert time.monotonic() - start < 10
        assert not (out / METRICS).exists() and not list(out.glob("checkpoint-*"))  # nothing written
    finally:
        holder.kill()
        holder.wait()
    run(tiny_config(tiny_model_dir, examples_dir, out, "train.max_steps=2"))  # the lock died with its holder
    assert ckpt.read_pointer(out)["step"] == 2
    assert not (out / HOLDER_FILE).exists() and (out / LOCK_FILE).exists()  # the record goes with the hold

    holder = _hold(out, tmp_path / "ready2", "run")  # --resume takes the same lock
    try:
        with pytest.raises(ckpt.RunLockedError, match=f"pid {holder.pid}"):
            run(tiny_config(tiny_model_dir, examples_dir, out, "train.max_steps=2"), resume=True)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_two_train_processes_with_one_out_dir_the_second_fails_at_once(tiny_model_dir, tmp_path):
    from test_train import write_examples_dir

    examples = write_examples_dir(tmp_path / "examples")
    out = tmp_path / "run"
    config = write_config(tmp_path / "c.yaml", tiny_model_dir, examples, out, max_steps=5000, save_every=100)
    cmd = [sys.executable, "-m", "aspire.train", "--config", str(config), "--quiet"]
    first = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(2400):  # until the first run holds the folder (a slow machine takes a while to import torch)
            if (out / HOLDER_FILE).exists() or first.poll() is not None:
                break
            time.sleep(0.05)
        assert first.poll() is None, first.stderr.read()
        assert (out / HOLDER_FILE).exists(), f"the first run did not take {out}'s lock within 120 s"
        second = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
        assert first.poll() is None  # the first is still training: the second did not wait for it
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"error: {out} is in use by another process (pid {first.pid} ")
        resumed = subprocess.run([*cmd, "--resume"], env=ENV, capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 2 and f"pid {first.pid} " in resumed.stderr, resumed.stderr
        for _ in range(2400):  # the first run logs a step before it is stopped (a slow machine may not have yet)
            if _logged_steps(out) or first.poll() is not None:
                break
            time.sleep(0.05)
        assert first.poll() is None, first.stderr.read()
        assert _logged_steps(out), f"the first run logged no step in {out / METRICS} within 120 s"
    finally:
        first.kill()
        first.wait()
    steps = _logged_steps(out)
    assert steps and steps == list(range(1, len(steps) + 1))  # one run's log: no second run appended to it


def _logged_steps(out: Path) -> list[int]:
    """The steps in `out`'s metrics log, from whole lines only (the run may be writing, or killed mid-line)."""
    if not (out / METRICS).is_file():
        return []
    whole = (out / METRICS).read_text(encoding="utf-8").split("\n")[:-1]
    return [r["step"] for r in map(json.loads, filter(str.strip, whole)) if "loss" in r]


def test_an_index_writer_refused_by_the_lock_names_the_holder(tmp_path, capsys):
    from test_index import HashEncoder

    from aspire.index import IndexBuildConfig, IndexConfig
    from aspire.index.__main__ import main as index_main

    root, corpus = tmp_path / "idx", tmp_path / "papers.jsonl"
    corpus.write_text(json.dumps({"paper_id": "a", "title": "t", "abstract": ["x."]}) + "\n")
    holder = _hold(root, tmp_path / "ready", "index")
    try:
        with pytest.raises(IndexLockedError, match=rf"being written by another process \(pid {holder.pid} on "):
            build_index(root, "m", corpus, IndexBuildConfig(index=IndexConfig(kind="flat")),
                        load_encoder=lambda m: HashEncoder())
        assert index_main(["build", "--model", "minilm", "--corpus", str(corpus), "--out", str(root)]) == 2
        err = capsys.readouterr().err
        assert f"(pid {holder.pid} on " in err and "--the-holder" in err
    finally:
        holder.kill()
        holder.wait()
    # the holder was killed: its record stays behind, but a live lock is needed to name anyone
    assert (root / HOLDER_FILE).exists()
    index, gen = build_index(root, "m", corpus, IndexBuildConfig(index=IndexConfig(kind="flat")),
                             load_encoder=lambda m: HashEncoder())
    assert index.n_papers == 1 and sorted(p.name for p in root.iterdir()) == [LOCK_FILE, "CURRENT", gen.name]


def test_a_stale_holder_record_is_not_named(tmp_path):
    from aspire.storage import lock_holder

    (tmp_path / HOLDER_FILE).write_text(json.dumps({"pid": 2**22 + 12345, "host": os.uname().nodename,
                                                    "command": "gone", "since": "then"}))
    assert lock_holder(tmp_path) == "a process that has not recorded itself yet"
    (tmp_path / HOLDER_FILE).write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename,
                                                    "command": "me", "since": "now"}))
    assert lock_holder(tmp_path).startswith(f"pid {os.getpid()} on ")
