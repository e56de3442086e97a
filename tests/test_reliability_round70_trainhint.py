"""Round 70, training's config messages: a missing `data.examples_dir`, refused before a model loads
(`aspire.train.config.check_inputs`), lost the reader's hint on how to build it (`aspire data run-all`); `MixSampler`
called its micro-batches (each task's steps x `train.grad_accum`) the tasks' steps; and a task named `author` read
"a author task"."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from aspire.config import ConfigError
from aspire.train.config import Config, DataConfig, MixConfig, TaskConfig, TrainConfig, check_inputs
from aspire.train.data import load_split
from aspire.train.mixing import MixSampler
from aspire.train.trainer import Trainer
from tests.test_reliability_round46_trainproc import _no_model
from tests.test_reliability_round66_trainerr import train
from tests.test_reliability_round68_seqrules import _sequential

HINT = "build it with `aspire data run-all`"


# ---- 1. a missing examples folder says how to build it, before a model loads -----------------------------------------
def test_a_missing_examples_folder_says_how_to_build_it_before_a_model_loads(tmp_path, monkeypatch, capsys):
    _no_model(monkeypatch)  # a model loaded fails the test
    missing = tmp_path / "6_aligned"
    assert train(missing, tmp_path / "run") == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: No such folder (data.examples_dir): {missing}; {HINT}"
    with pytest.raises(FileNotFoundError) as early:  # an OSError naming the setting, as before
        check_inputs(Config(data=DataConfig(examples_dir=str(missing))))
    with pytest.raises(FileNotFoundError) as late:  # the reader's own check: the same words, one copy of the hint
        load_split(DataConfig(examples_dir=str(missing)), "train")
    assert str(early.value) == str(late.value) == err.removeprefix("error: ")


def test_an_examples_path_that_is_a_file_is_not_told_to_be_built(tmp_path):
    (tmp_path / "file").write_text("x")
    for check in (lambda cfg: check_inputs(Config(data=cfg)), lambda cfg: load_split(cfg, "train")):
        with pytest.raises(NotADirectoryError, match=r"Not a folder \(data\.examples_dir\)") as err:
            check(DataConfig(examples_dir=str(tmp_path / "file")))
        assert err.value.filename == str(tmp_path / "file") and "run-all" not in str(err.value)


# ---- 2. the sampler's stage errors name micro-batches as micro-batches ------------------------------------------------
def _sampler(steps: list[int], grad_accum: int) -> MixSampler:
    """The trainer's `MixSampler` for a sequential run of tasks of `steps`, 20 examples each."""
    tasks = [SimpleNamespace(steps=n, ratio=1.0) for n in steps]
    data = SimpleNamespace(sizes=[20] * len(steps), offsets=[20 * t for t in range(len(steps))], tasks=tasks,
                           names=[f"t{t}" for t in range(len(steps))])
    trainer = SimpleNamespace(tc=TrainConfig(batch_size=4, grad_accum=grad_accum), train_data=data, tasks=tasks,
                              cfg=SimpleNamespace(mix=MixConfig("sequential")), rank=0, world=1)
    return Trainer._sampler(trainer, 0, 0)


def test_the_samplers_steps_error_calls_its_numbers_micro_batches():
    assert len(_sampler([3, 2], grad_accum=2)) == 10  # a stage is its task's steps x grad_accum micro-batches
    with pytest.raises(ValueError) as err:  # a task's steps set to 0 after its config's check
        _sampler([3, 0], grad_accum=2)
    message = str(err.value)
    assert message.startswith("tasks[1].steps: mix.mode sequential needs steps >= 1 for every task")
    got = re.search(r"got (\[[^]]*\]) (.*)$", message)  # the numbers given, and what the message calls them
    assert got and got.group(1) == "[6, 0]" and got.group(2).startswith("micro-batches ")
    assert "steps x train.grad_accum" in got.group(2)
    # the config's own check reads the real steps: its message is unchanged
    with pytest.raises(ConfigError) as cfg_err:
        _sequential(3, 0)
    assert str(cfg_err.value) == "tasks[1].steps: mix.mode sequential needs steps >= 1 for every task, got [3, 0]"


def test_stage_batches_off_the_sequential_mix_are_not_called_steps():
    with pytest.raises(ValueError, match=r"stage_batches are read by mix\.mode sequential only, got \[6, 2\] "
                                         r"micro-batches \(") as err:
        MixSampler([20, 20], [0, 20], "mixed", [1, 1], 4, 0, 0, stage_batches=[6, 2])
    assert "the tasks' steps" not in str(err.value)


# ---- 3. "an author task" ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, said", [("author", "an author task"), ("cocite", "a cocite task"),
                                        ("crop", "a crop task"), ("distill", "a distill task")])
def test_a_task_is_named_with_its_article(name, said):
    with pytest.raises(ConfigError, match=rf"^tasks\[\]: {said} does not read data_dir "):  # read by context2doc only
        TaskConfig(name=name, data_dir="elsewhere")


def test_an_author_task_given_max_papers_without_the_acl_source_reads_right():
    with pytest.raises(ConfigError, match=r"with tasks\[\]\.sources=\['cocite'\]: an author task reads acl_path and "
                                          r"max_papers for the acl source only") as err:
        TaskConfig(name="author", sources=["cocite"], max_papers=5)
    assert "a author" not in str(err.value)
