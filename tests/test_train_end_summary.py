"""`aspire train`'s printed summary says which step its figures are from. It printed the last logged record merged
with the end record: stopped by `train.stop_after=3` with `log_every=2`, step 2's loss, lr and grad_norm stood under
"step": 3, read as the figures of the step the run stopped at."""

from __future__ import annotations

import json

from aspire.train.__main__ import main
from aspire.train.trainer import end_summary
from tests.test_train import REPO, read_metrics

BASE = str(REPO / "configs" / "base.yaml")


def train(model, examples, out, *overrides):
    return main(["--config", BASE, f"model.encoder={model}", f"data.examples_dir={examples}", f"train.out_dir={out}",
                 "model.kind=max", "data.use_dev=false", "train.batch_size=4", "train.max_steps=6",
                 "train.warmup_steps=0", "train.log_every=2", "train.save_every=0", "train.device=cpu",
                 "data.max_sentences=4", "-q", *overrides])


def test_the_printed_summary_says_which_step_its_figures_are_from(tiny_model_dir, examples_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(tiny_model_dir, examples_dir, out, "train.stop_after=3") == 0
    printed = json.loads(capsys.readouterr().out)
    logged = [r for r in read_metrics(out) if "loss" in r]
    assert [r["step"] for r in logged] == [2]
    assert printed["step"] == 3 and printed["event"] == "end"
    assert "loss" not in printed and "lr" not in printed and "grad_norm" not in printed  # step 2's, under step 3
    assert printed["last_logged"]["step"] == 2 and printed["last_logged"]["loss"] == logged[0]["loss"]
    assert train(tiny_model_dir, examples_dir, out, "--resume") == 0  # ends on a logged step: its figures beside it
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["step"] == 6 and "last_logged" not in resumed
    assert resumed["loss"] == [r for r in read_metrics(out) if "loss" in r][-1]["loss"]


def test_end_summary_keeps_the_figures_of_the_end_step_beside_it():
    final = {"event": "end", "step": 4, "weights_digest": ["d"], "best_dev_loss": 0.5}
    assert end_summary({"step": 4, "loss": 1.0}, final) == {"step": 4, "loss": 1.0, "event": "end",
                                                            "weights_digest": ["d"], "best_dev_loss": 0.5}
    assert end_summary({}, final) == final  # a finished run resumed logs nothing
    assert end_summary({"step": 2, "loss": 1.0}, final) == {**final, "last_logged": {"step": 2, "loss": 1.0}}
