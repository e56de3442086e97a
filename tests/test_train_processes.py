"""The trainer as separate processes: SIGKILL mid-epoch then --resume, and 2-process torchrun (gloo, CPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_train import REPO, write_examples_dir

from aspire.train import checkpoint as ckpt
from aspire.train.trainer import METRICS

pytestmark = pytest.mark.slow  # training processes, each tens of seconds

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "aspire.train"]


def write_config(path: Path, model_dir: Path, examples_dir: Path, out_dir: Path, kind: str = "cocite_vector",
                 **train) -> Path:
    cfg = {
        "base": str(REPO / "configs" / "base.yaml"),
        "model": {"kind": kind, "encoder": str(model_dir)},
        "data": {"examples_dir": str(examples_dir), "max_sentences": 4},
        "train": {"out_dir": str(out_dir), "batch_size": 4, "lr": 1e-3, "warmup_steps": 2, "max_steps": 8,
                  "log_every": 1, "eval_every": 0, "save_every": 1, "progress": False, "device": "cpu", **train},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def train_cmd(config: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "aspire.train", "--config", str(config), *extra]


def train(cmd: list[str]) -> None:
    """Run a training command to its end; a failure shows the end of its stderr (check=True's error showed none)."""
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def final_record(out_dir: Path) -> dict:
    records = [json.loads(line) for line in (out_dir / METRICS).read_text().splitlines()]
    ends = [r for r in records if r.get("event") == "end"]
    assert len(ends) == 1, ends
    return ends[0]


def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(tiny_model_dir, tmp_path):
    examples = write_examples_dir(tmp_path / "examples")
    straight = write_config(tmp_path / "a.yaml", tiny_model_dir, examples, tmp_path / "a")
    train(train_cmd(straight))

    killed = write_config(tmp_path / "b.yaml", tiny_model_dir, examples, tmp_path / "b")
    log = tmp_path / "killed.stderr"  # a file, not a pipe: a run writing more than a pipe holds would block on it
    with log.open("wb") as stderr:
        proc = subprocess.Popen(train_cmd(killed), env=ENV, stdout=subprocess.DEVNULL, stderr=stderr)
    said = lambda: log.read_text(errors="replace")[-3000:]  # noqa: E731
    deadline = time.time() + 240
    try:
        while proc.poll() is None:
            assert time.time() < deadline, f"the run checkpointed no step >= 3 within 240 s:\n{said()}"
            record = ckpt.read_pointer(tmp_path / "b") if (tmp_path / "b" / ckpt.LATEST).is_file() else None
            if record and record["step"] >= 3:
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.01)
    finally:
        proc.kill()  # a run past the deadline is not left training (nor waited for below)
    assert proc.wait(timeout=60) == -signal.SIGKILL, f"the run should have been killed before finishing:\n{said()}"
    stopped_at = ckpt.read_pointer(tmp_path / "b")["step"]
    assert 3 <= stopped_at < 8  # 7 micro-batches an epoch: killed mid-epoch 1

    train(train_cmd(killed, "--resume"))
    assert final_record(tmp_path / "b")["weights_digest"] == final_record(tmp_path / "a")["weights_digest"]
    losses = lambda d: [(m["step"], m["loss"]) for m in map(json.loads, (d / METRICS).read_text().splitlines()) if "loss" in m]  # noqa: E731
    assert losses(tmp_path / "b") == losses(tmp_path / "a")


def test_torchrun_two_processes_finish_with_equal_weights(tiny_model_dir, tmp_path):
    examples = write_examples_dir(tmp_path / "examples")
    config = write_config(tmp_path / "ddp.yaml", tiny_model_dir, examples, tmp_path / "ddp",
                          max_steps=4, save_every=2, eval_every=4)
    done = subprocess.run([*TORCHRUN, "--config", str(config)], env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    end = final_record(tmp_path / "ddp")
    assert end["step"] == 4
    assert len(end["weights_digest"]) == 2 and end["weights_digest"][0] == end["weights_digest"][1]
    steps = [m["step"] for m in map(json.loads, (tmp_path / "ddp" / METRICS).read_text().splitlines()) if "loss" in m]
    assert steps == [1, 2, 3, 4]  # only rank 0 writes
    state = ckpt.load_state(tmp_path / "ddp" / "checkpoint-000004")
    assert state["world_size"] == 2 and len(state["rng"]) == 2
    assert state["rng"][0]["torch"].tolist() != state["rng"][1]["torch"].tolist()  # each rank's own RNG kept


def test_torchrun_stop_then_resume_matches_uninterrupted(tiny_model_dir, tmp_path):
    # otAspire: the OT loss runs Sinkhorn (and on hard problems its compiled Newton tail) on every rank
    examples = write_examples_dir(tmp_path / "examples")
    finals = {}
    for name, stops in (("straight", [0]), ("stopped", [2, 0])):
        config = write_config(tmp_path / f"{name}.yaml", tiny_model_dir, examples, tmp_path / name, kind="ot",
                              max_steps=4, save_every=2, eval_every=2)
        for i, stop_after in enumerate(stops):
            extra = [f"--train.stop_after={stop_after}"] + (["--resume"] if i else [])
            done = subprocess.run([*TORCHRUN, "--config", str(config), *extra], env=ENV, capture_output=True, text=True,
                                  timeout=300)
            assert done.returncode == 0, done.stderr[-3000:]
        finals[name] = final_record(tmp_path / name)
    assert ckpt.load_state(tmp_path / "stopped" / "checkpoint-000002")["step"] == 2
    assert finals["stopped"]["step"] == finals["straight"]["step"] == 4
    assert finals["stopped"]["weights_digest"] == finals["straight"]["weights_digest"]
    assert len(set(finals["straight"]["weights_digest"])) == 1
