"""Round 45: the trainer's resume with gradient accumulation (bit-equal weights, no repeated metrics step), the
accumulated gradient against the mean of the micro-batches' gradients, and bad train settings refused by key."""

from __future__ import annotations

import pytest
import torch

from aspire.config import ConfigError
from aspire.train.data import load_split
from aspire.train.trainer import Trainer, build_model, run
from tests.test_train import read_metrics, tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")

FAST = ("model.kind=cocite_vector", "train.max_steps=4", "train.grad_accum=2", "train.batch_size=2",
        "train.save_every=1", "train.eval_every=2", "train.log_every=1")


def test_a_resumed_accumulating_run_matches_the_straight_run_bit_for_bit(tiny_model_dir, examples_dir, tmp_path):
    straight = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "a", *FAST))
    run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", *FAST, "train.stop_after=1"))
    run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", *FAST, "train.stop_after=2"), resume=True)
    resumed = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", *FAST), resume=True)
    assert resumed["step"] == 4 and resumed["weights_digest"] == straight["weights_digest"]
    strip = lambda recs: [{k: v for k, v in r.items() if k != "triples_per_s"} for r in recs]  # noqa: E731
    a, b = strip(read_metrics(tmp_path / "a")), strip(read_metrics(tmp_path / "b"))
    assert a == b
    train_steps = [r["step"] for r in b if "loss" in r]
    assert train_steps == [1, 2, 3, 4]
    dev_steps = [r["step"] for r in b if "dev_loss" in r]
    assert dev_steps == [2, 4]


def test_the_accumulated_gradient_is_the_mean_of_the_micro_batch_gradients(tiny_model_dir, examples_dir, tmp_path):
    """train.grad_accum: the step's gradient is the mean of the micro-batches' loss gradients (TrainConfig)."""
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "g", *FAST, "train.clip_norm=1e9", "train.lr=1e-3")
    torch.manual_seed(0)
    model = build_model(cfg)
    trainer = Trainer(cfg, model, load_split(cfg.data, "train"))
    sampler = trainer._sampler(0, 0, limit=2)
    batches = list(trainer._loader(trainer.train_data, sampler, 0))
    grads = []
    for i, batch in enumerate(batches):  # the same dropout draws in both passes
        model.zero_grad(set_to_none=True)
        torch.manual_seed(i)
        model(batch)["loss"].backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    model.zero_grad(set_to_none=True)
    for i, batch in enumerate(batches):
        torch.manual_seed(i)
        (model(batch)["loss"] / 2).backward()
    for n, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(p.grad, (grads[0][n] + grads[1][n]) / 2, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("key", ["max_steps=-1", "batch_size=0", "grad_accum=0", "log_every=0", "stop_after=-2"])
def test_bad_train_settings_are_refused_naming_the_key(tiny_model_dir, examples_dir, tmp_path, key):
    with pytest.raises(ConfigError, match=f"train.{key.split('=')[0]}"):
        tiny_config(tiny_model_dir, examples_dir, tmp_path / "x", f"train.{key}")


def _nan_at(train_call: int):
    """A model loader whose `train_call`-th forward in train mode returns a NaN loss."""
    calls = {"n": 0}

    def loader(cfg, path):
        model = build_model(cfg, path)
        forward = model.forward

        def poisoned(*args, **kwargs):
            out = forward(*args, **kwargs)
            calls["n"] += model.training
            if model.training and calls["n"] == train_call:
                out["loss"] = out["loss"] * float("nan")
            return out

        model.forward = poisoned
        return model
    return loader


def test_a_nan_loss_stops_the_run_naming_the_step_before_the_update(tiny_model_dir, examples_dir, tmp_path):
    """Before: a NaN loss at step 3 made every weight NaN (clip_grad_norm_ scales by nan) and the run went on,
    silently: step 4's loss NaN, dev loss NaN, the NaN weights saved as the `latest` checkpoint."""
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "n", "model.kind=cocite_vector", "train.max_steps=4",
                      "train.eval_every=2", "train.save_every=0")
    with pytest.raises(ValueError, match=r"step 3: the gradient norm is nan .*the update was not applied"):
        run(cfg, model_loader=_nan_at(3))
    records = read_metrics(tmp_path / "n")
    assert [r["step"] for r in records if "loss" in r] == [1, 2]
    assert all(r.get("dev_loss") is not None for r in records if "dev_loss" in r)
    # the checkpoint of step 2 is whole and finite: --resume continues from it
    from aspire.train import checkpoint as ckpt
    assert ckpt.read_pointer(tmp_path / "n")["step"] == 2
