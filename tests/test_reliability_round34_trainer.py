"""Round 34: the trainer state read on --resume (a checkpoint without a `window`, unknown keys, a float step, a
`best_dev_loss` that is no number or NaN, a window entry that is no number); the best checkpoint by the dev loss,
ties keeping the earlier; the train records' loss, lr and grad_norm against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from aspire.train import checkpoint as ckpt
from aspire.train.data import load_split
from aspire.train.state import linear_schedule
from aspire.train.trainer import Trainer, build_model, check_state, run
from tests.test_reliability_round27_trainer import _good_state, assert_damage_named
from tests.test_train import read_metrics, tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")

FAST = ("model.kind=cocite_vector", "train.max_steps=4", "train.save_every=2", "train.eval_every=0")


def _damage_and_resume(tiny_model_dir, examples_dir, out, damage):
    """Stop a 4-step run at step 2, change its trainer state with `damage`, then --resume it."""
    run(tiny_config(tiny_model_dir, examples_dir, out, *FAST, "train.stop_after=2"))
    path = out / "checkpoint-000002" / ckpt.STATE_FILE
    state = torch.load(path, weights_only=False)
    damage(state)
    torch.save(state, path)
    return run(tiny_config(tiny_model_dir, examples_dir, out, *FAST), resume=True), path


# ---- 1. a checkpoint written before the metrics window was saved -------------------------------------------------

def test_check_state_takes_a_state_without_a_window_key():
    """The trainer resumes such a checkpoint with a fresh window (`state.get("window")`), but check_state read
    `state["window"]`: a bare KeyError: 'window', naming no file, for every checkpoint written before the window was."""
    state = _good_state()
    del state["window"]
    check_state(state, "x/" + ckpt.STATE_FILE, 4)


def test_a_checkpoint_without_a_window_resumes_to_the_straight_runs_weights(tiny_model_dir, examples_dir, tmp_path):
    straight = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "a", *FAST))
    resumed, _ = _damage_and_resume(tiny_model_dir, examples_dir, tmp_path / "b", lambda s: s.pop("window"))
    assert resumed["step"] == 4 and resumed["weights_digest"] == straight["weights_digest"]


# ---- 2. unknown keys, a float step, a damaged window entry -------------------------------------------------------

@pytest.mark.parametrize("damage, expect", [
    (lambda s: s.update(best_dev=0.5), r"unknown key\(s\) 'best_dev'"),
    (lambda s: s.update(windows=None, extra=1), r"unknown key\(s\) 'extra', 'windows'"),
    (lambda s: s.update(step=4.0), "of step 4.0, its checkpoint's pointer says 4"),
    (lambda s: s.update(window=[{"loss": "x"}]), r"window of rank 0 is damaged \(its 'loss' is 'x', not a number\)"),
    (lambda s: s.update(window=[{"micro": 1.5}]), "its 'micro' is 1.5, not a count"),
    (lambda s: s.update(window=[{"task_loss": 1.0}]), "its 'task_loss' is 1.0, not a list of numbers"),
])
def test_check_state_refuses_what_the_trainer_never_writes(tmp_path, damage, expect):
    """Before: an unknown key (a typo'd `windows`, another program's state) passed silently; a step of 4.0 equalled
    the pointer's 4 and failed naming the next checkpoint (format code 'd' for float); a window's 'x' loss was a bare
    TypeError from torch.tensor. Now each is refused naming the file."""
    assert_damage_named(tmp_path, damage, expect)


# ---- 3. best_dev_loss ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expect", [
    (float("nan"), "NaN, which no dev loss beats"), ("0.5", "not a number but str '0.5'"),
    (None, "not a number but NoneType"), (True, "not a number but bool"),
])
def test_resume_refuses_a_best_dev_loss_that_is_no_number(value, expect, tiny_model_dir, examples_dir, tmp_path):
    """Before: NaN resumed and no later dev loss ever became the best (`x < nan` is False: the best pointer stayed
    put whatever the dev loss); '0.5' or None trained on and failed at the first evaluation (TypeError: '<' not
    supported). Now refused naming the file, before training and before the metrics log is trimmed."""
    out = tmp_path / "r"
    before = None
    with pytest.raises(ValueError, match=f"best_dev_loss is {expect}") as err:
        def damage(state):
            nonlocal before
            before = (out / "metrics.jsonl").read_text()
            state["best_dev_loss"] = value
        _damage_and_resume(tiny_model_dir, examples_dir, out, damage)
    assert str(out / "checkpoint-000002" / ckpt.STATE_FILE) in str(err.value)
    assert (out / "metrics.jsonl").read_text() == before and ckpt.read_pointer(out)["step"] == 2


def test_the_trainer_refuses_a_nan_best_dev_loss_handed_to_it(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", *FAST)
    trainer = Trainer(cfg, build_model(cfg), load_split(cfg.data, "train"), None)
    state = trainer._state()
    state["best_dev_loss"] = float("nan")
    with pytest.raises(ValueError, match="best_dev_loss is NaN"):
        Trainer(cfg, build_model(cfg), load_split(cfg.data, "train"), None, state)
    state["best_dev_loss"] = float("inf")  # no dev loss taken yet: fine
    assert Trainer(cfg, build_model(cfg), load_split(cfg.data, "train"), None, state).best_dev == math.inf


# ---- 4. checks: the best checkpoint, the train records (passed before this round too) ----------------------------

def test_the_best_checkpoint_is_the_lowest_dev_loss_a_tie_keeping_the_earlier(tiny_model_dir, examples_dir, tmp_path,
                                                                            monkeypatch):
    values = iter([3.0, 2.0, 2.0, 2.5, 2.0])
    monkeypatch.setattr(Trainer, "dev_loss", lambda self: next(values))
    out = tmp_path / "r"
    final = run(tiny_config(tiny_model_dir, examples_dir, out, "model.kind=cocite_vector", "train.max_steps=5",
                            "train.eval_every=1", "train.keep_checkpoints=0"))
    best = ckpt.read_pointer(out, ckpt.BEST)
    assert (best["step"], best["dev_loss"], best["checkpoint"]) == (2, 2.0, "checkpoint-000002")
    assert final["best_dev_loss"] == 2.0
    assert [m["dev_loss"] for m in read_metrics(out) if "dev_loss" in m] == [3.0, 2.0, 2.0, 2.5, 2.0]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-000002", "checkpoint-000005"]


def test_train_records_equal_hand_computations(tiny_model_dir, examples_dir, tmp_path):
    """Each record's loss is the mean of its window's micro-batch losses (log_every=3 steps x grad_accum=2), lr the
    schedule's rate of the step's update, grad_norm the norm of the step's (unclipped) gradient."""
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", "model.kind=cocite_vector", "train.grad_accum=2",
                      "train.batch_size=2", "train.max_steps=7", "train.log_every=3", "train.eval_every=0",
                      "train.save_every=0", "data.use_dev=false", "train.clip_norm=1e9", "train.warmup_steps=2")
    model = build_model(cfg)
    trainer = Trainer(cfg, model, load_split(cfg.data, "train"), None)
    losses, norms = [], []
    forward = model.forward
    model.forward = lambda batch: (lambda out: losses.append(float(out["loss"].detach())) or out)(forward(batch))
    trainer.optimizer.register_step_pre_hook(lambda *_: norms.append(float(torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters() if p.grad is not None])))))
    trainer.train()
    records = [m for m in read_metrics(tmp_path / "r") if "loss" in m]
    assert [r["step"] for r in records] == [3, 6, 7] and len(losses) == 14 and len(norms) == 7
    windows = [losses[0:6], losses[6:12], losses[12:14]]
    factor = linear_schedule(2, 7)
    for record, window in zip(records, windows):
        step = record["step"]
        assert record["loss"] == pytest.approx(sum(window) / len(window), rel=1e-6)
        assert record["lr"] == pytest.approx(cfg.train.lr * factor(step - 1), rel=1e-12)
        assert record["grad_norm"] == pytest.approx(norms[step - 1], rel=1e-5)
