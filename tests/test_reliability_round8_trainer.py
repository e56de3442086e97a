"""Correctness of the training loop's state across a stop and a --resume: the metrics log of a resumed run is the
straight run's (the unlogged window's sums travel in the checkpoint), a run stopped between its `best` and `latest`
pointer writes still ends with the straight run's best checkpoint, and a changed weight decay, which the optimizer's
saved state would silently override, is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aspire.train import checkpoint as ckpt
from aspire.train.trainer import run
from tests.test_train import read_metrics, tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
# logged every 4 steps of 6: a stop at step 3 falls inside the window of step 4
SETTINGS = ("model.kind=cocite_vector", "train.log_every=4")


@pytest.fixture(scope="module")
def straight(tiny_model_dir, examples_dir, tmp_path_factory) -> Path:
    """6 steps in one go (dev loss at steps 3 and 6, checkpoints at 2, 3, 4, 6)."""
    out = tmp_path_factory.mktemp("runs") / "straight"
    run(tiny_config(tiny_model_dir, examples_dir, out, *SETTINGS))
    return out


@pytest.fixture(scope="module")
def stopped(tiny_model_dir, examples_dir, tmp_path_factory) -> Path:
    """The same run stopped after step 3."""
    out = tmp_path_factory.mktemp("runs") / "stopped"
    run(tiny_config(tiny_model_dir, examples_dir, out, *SETTINGS, "train.stop_after=3"))
    assert ckpt.read_pointer(out)["step"] == 3
    return out


def records(out: Path) -> list[dict]:
    """The metrics log without the timing figure (throughput differs from run to run)."""
    return [{k: v for k, v in r.items() if k != "triples_per_s"} for r in read_metrics(out)]


def test_a_resumed_run_logs_the_metrics_of_the_straight_run(straight, stopped, tiny_model_dir, examples_dir, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(stopped, out)
    run(tiny_config(tiny_model_dir, examples_dir, out, *SETTINGS), resume=True)
    logged = records(out)
    assert [r["step"] for r in logged if "loss" in r] == [4, 6]
    # step 4's loss is the mean over steps 1-4, as in the straight run, not over step 4 alone
    assert logged == records(straight)


def test_a_run_stopped_between_its_best_and_latest_pointers_keeps_its_best(straight, tiny_model_dir, examples_dir,
                                                                          tmp_path, monkeypatch):
    best = ckpt.read_pointer(straight, ckpt.BEST)
    assert best["step"] == 3  # the dev loss of step 6 is worse: the case where a lost pointer shows
    out = tmp_path / "run"
    written, real = [], ckpt.write_pointer

    def stop_at_the_second_pointer_of_step_3(folder, name, record):
        if record.get("step") == 3 and 3 in written:
            raise RuntimeError("stopped between the two pointer writes")
        written.append(record.get("step"))
        real(folder, name, record)

    monkeypatch.setattr(ckpt, "write_pointer", stop_at_the_second_pointer_of_step_3)
    with pytest.raises(RuntimeError, match="between the two pointer"):
        run(tiny_config(tiny_model_dir, examples_dir, out, *SETTINGS))
    monkeypatch.setattr(ckpt, "write_pointer", real)
    final = run(tiny_config(tiny_model_dir, examples_dir, out, *SETTINGS), resume=True)
    assert final["weights_digest"] == read_metrics(straight)[-1]["weights_digest"]
    assert ckpt.read_pointer(out, ckpt.BEST) == best


def test_save_checkpoint_refuses_a_best_record_of_another_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="does not name checkpoint checkpoint-000004"):
        ckpt.save_checkpoint(tmp_path, 4, lambda p: None, {"step": 4},
                             best={"checkpoint": "checkpoint-000003", "step": 3, "dev_loss": 0.5})
    assert not list(tmp_path.iterdir())  # refused before anything is written


def test_resume_refuses_a_changed_weight_decay(stopped, tiny_model_dir, examples_dir, tmp_path):
    # the optimizer's saved param groups would keep the old decay while config.yaml recorded the new one
    out = tmp_path / "run"
    shutil.copytree(stopped, out)
    with pytest.raises(ValueError, match=r"train\.weight_decay: 0\.01 -> 0\.5"):
        run(tiny_config(tiny_model_dir, examples_dir, out, *SETTINGS, "train.weight_decay=0.5"), resume=True)
    assert ckpt.read_pointer(out)["step"] == 3
