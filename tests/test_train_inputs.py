"""What a researcher gives `aspire train` and gets back: resumed settings, finished runs, the last step's dev loss,
checkpoint pruning, a dead run's metrics, config sections, overrides after options and hard-negative files.
Each case once went wrong without a word (tiny random BERT, the examples of tests/test_train.py)."""

from __future__ import annotations

import json

import pytest

from aspire.cliutil import Parser
from aspire.config import ConfigError, load_config
from aspire.train import checkpoint as ckpt
from aspire.train.config import Config
from aspire.train.trainer import METRICS, Trainer, run
from tests.test_train import read_metrics, tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


def test_resume_refuses_a_changed_model_setting_it_would_not_use(tiny_model_dir, examples_dir, tmp_path):
    """The model comes from the checkpoint: a changed ot_eps was written into the new config.yaml, never used."""
    run(tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=ot", "train.stop_after=2"))
    with pytest.raises(ValueError, match=r"model.ot_eps: 0.05 -> 0.5; model.include_title: False -> True"):
        run(tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=ot", "model.ot_eps=0.5",
                        "model.include_title=true"), resume=True)


def test_a_finished_run_resumed_trains_evaluates_and_saves_nothing_more(tiny_model_dir, examples_dir, tmp_path, caplog):
    done = run(tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector"))
    before = [m for m in read_metrics(tmp_path) if "dev_loss" in m]
    stamp = (tmp_path / ckpt.checkpoint_name(6)).stat().st_mtime_ns
    with caplog.at_level("INFO", logger="aspire.train.trainer"):
        again = run(tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector"), resume=True)
    assert again["weights_digest"] == done["weights_digest"] and again["step"] == 6
    assert [m for m in read_metrics(tmp_path) if "dev_loss" in m] == before  # no second dev loss of step 6
    assert (tmp_path / ckpt.checkpoint_name(6)).stat().st_mtime_ns == stamp
    assert "is finished (step 6 of 6): nothing to train" in caplog.text


def test_the_last_step_is_evaluated_when_only_save_every_lands_on_it(tiny_model_dir, examples_dir, tmp_path):
    run(tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector", "train.eval_every=4",
                    "train.save_every=3"))
    assert [m["step"] for m in read_metrics(tmp_path) if "dev_loss" in m] == [4, 6]


def test_checkpoints_past_keep_are_pruned_once_best_moves_on(tiny_model_dir, examples_dir, tmp_path, monkeypatch):
    """Pruning ran before `best` moved on, so the old best outlived `keep_checkpoints` (three kept for two)."""
    falling = iter(range(100, 0, -1))
    monkeypatch.setattr(Trainer, "dev_loss", lambda self: float(next(falling)))  # every evaluation a new best
    run(tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector", "train.eval_every=1",
                    "train.keep_checkpoints=1"))
    assert [p.name for p in tmp_path.glob("checkpoint-*")] == [ckpt.checkpoint_name(6)]
    assert ckpt.read_pointer(tmp_path, ckpt.BEST)["checkpoint"] == ckpt.checkpoint_name(6)


def test_a_fresh_run_replaces_the_metrics_of_a_run_killed_before_its_first_checkpoint(tiny_model_dir, examples_dir,
                                                                                    tmp_path):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / METRICS).write_text(json.dumps({"step": 5, "loss": 9.0}) + "\n")  # what the dead run logged
    run(tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector", "train.max_steps=2"))
    assert [m.get("loss") for m in read_metrics(tmp_path) if m.get("step") == 5] == []


@pytest.mark.parametrize("override, said", [
    ("train.out_dir=", "train.out_dir: must name a directory, got an empty value"),  # once trained into the cwd
    ("train.device=gpu0", "train.device: unknown device 'gpu0'"),  # once a traceback from inside torch
])
def test_train_settings_that_cannot_work_are_config_errors(override, said):
    with pytest.raises(ConfigError, match=said):
        load_config(Config, None, [override])


def test_an_empty_or_listed_section_is_refused_not_laid_over_the_base(tmp_path):
    """`train:` with its keys commented out dropped base.yaml's train section whenever an override filled it."""
    base = tmp_path / "base.yaml"
    base.write_text("train:\n  epochs: 3\n  eval_every: 200\n")
    for body, said in (("train:\n  # epochs: 1\n", "train: a section with nothing under it"),
                       ("train: [1, 2]\n", "train: expected a mapping of its keys, got list")):
        child = tmp_path / "child.yaml"
        child.write_text("base: base.yaml\n" + body)
        for overrides in ([], ["train.max_steps=2"]):
            with pytest.raises(ConfigError, match=f"^{child}: {said}"):
                load_config(Config, child, overrides)
    child.write_text("base: base.yaml\ntrain:\n  epochs: 1\n")
    merged = load_config(Config, child, ["train.max_steps=2"]).train
    assert (merged.epochs, merged.eval_every, merged.max_steps) == (1, 200, 2)


def test_overrides_after_an_option_join_the_overrides():
    parser = Parser(prog="x")
    parser.add_argument("-q", action="store_true")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(["a.b=1", "-q", "c.d=2"])  # once "unrecognized arguments: c.d=2"
    assert args.q and args.overrides == ["a.b=1", "c.d=2"]
    with pytest.raises(SystemExit):
        parser.parse_args(["a.b=1", "-q", "stray"])


def test_a_hard_negatives_file_of_other_papers_is_refused_naming_it(tiny_model_dir, examples_dir, tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"paper_id": "ZZZ", "negatives": ["p1_0"]}) + "\n")  # trained with none, silently
    with pytest.raises(ValueError, match=f"data.hard_negatives {other}: none of its 1 papers is an anchor"):
        run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "a", f"data.hard_negatives={other}"))
    assert not (tmp_path / "a").exists()  # the refused run's folder held only its lock: once left behind
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(json.dumps({"paper_id": "p0_0", "negatives": ["NOPE-1"]}) + "\n")  # once blamed the examples
    with pytest.raises(ValueError, match=f"paper 'NOPE-1', a hard negative of 'p0_0' in the hard negatives file "
                                         f"{unknown}, has no abstract"):
        run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", f"data.hard_negatives={unknown}"))


def test_a_warmup_longer_than_the_run_and_an_unscored_dev_tail_are_said(tiny_model_dir, examples_dir, tmp_path,
                                                                        caplog):
    with caplog.at_level("INFO", logger="aspire.train.trainer"):
        run(tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector", "train.max_steps=2",
                        "train.warmup_steps=5", "train.batch_size=4"))
    assert "train.warmup_steps 5 >= the run's 2 steps: the rate never reaches train.lr 0.001" in caplog.text
    dev = sum(1 for _ in (examples_dir / "examples.dev.jsonl").open()) * 2  # both directions
    assert dev % 4 and f"the dev loss scores {dev - dev % 4} of the {dev} examples of the dev split" in caplog.text
