"""Round 68: a sequential mix's stage settings are refused when the training config loads (`aspire.train.config.
sequential_problem`), naming the key: a task of `steps: 0` was found only by `MixSampler`, and a `train.max_steps`
neither 0 nor the tasks' steps together only by `Trainer`, each after the model had loaded and the data been read.
One copy of each rule, used by the sampler and the trainer too."""

from __future__ import annotations

import pytest

from aspire.config import ConfigError, load_config
from aspire.train.config import Config, MixConfig, TaskConfig, TrainConfig
from aspire.train.mixing import MixSampler
from aspire.train.trainer import run
from tests.test_objectives import CROP
from tests.test_train import tiny_config


def _sequential(*steps: int, max_steps: int = 0) -> Config:
    tasks = [TaskConfig(name=name, steps=n, sources=["cocite"]) for name, n in zip(("cocite", "crop", "title"), steps)]
    return Config(tasks=tasks, mix=MixConfig("sequential"), train=TrainConfig(max_steps=max_steps))


def test_a_sequential_task_of_no_steps_is_refused_when_the_config_loads_naming_it():
    with pytest.raises(ConfigError, match=r"^tasks\[1\]\.steps: mix\.mode sequential needs steps >= 1 for every task, "
                                          r"got \[3, 0\]$"):
        _sequential(3, 0)
    with pytest.raises(ConfigError, match=r"^tasks\[0\]\.steps: .*got \[0\]$"):  # a task left on the default steps
        load_config(Config, None, ["mix.mode=sequential", "tasks=[{name: cocite}]"])
    assert [t.steps for t in _sequential(3, 2).tasks] == [3, 2]
    # the sampler keeps the rule for its stage_batches (the steps x train.grad_accum), in the same words
    with pytest.raises(ValueError, match=r"^tasks\[1\]\.steps: mix\.mode sequential needs steps >= 1 for every task"):
        MixSampler([20, 20], [0, 20], "sequential", [1, 1], 4, 0, 0, stage_batches=[6, 0])
    with pytest.raises(ValueError, match=r"stage_batches must be one a task .* got 1 for 2 task\(s\)"):
        MixSampler([20, 20], [0, 20], "sequential", [1, 1], 4, 0, 0, stage_batches=[6])


@pytest.mark.parametrize("max_steps", [1, 4, 6])
def test_max_steps_off_the_sequential_stages_is_refused_when_the_config_loads_naming_it(max_steps):
    with pytest.raises(ConfigError, match=rf"^mix\.mode sequential runs the tasks' steps \(5 in all\); train\.max_steps "
                                          rf"must be 0 or that, got {max_steps}$"):
        _sequential(3, 2, max_steps=max_steps)
    assert _sequential(3, 2, max_steps=5).train.max_steps == 5 and _sequential(3, 2).train.max_steps == 0
    # without the sequential mix max_steps is the run's length, whatever the tasks
    assert Config(tasks=[TaskConfig()], train=TrainConfig(max_steps=max_steps)).train.max_steps == max_steps


def test_the_trainer_still_refuses_a_sequential_config_changed_since_it_loaded(tiny_model_dir, examples_dir, tmp_path):
    tasks = f"tasks=[{{name: cocite, steps: 2}}, {CROP[:-1]}, steps: 2}}]"
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector", tasks, "mix.mode=sequential",
                      "train.max_steps=4")
    cfg.train.max_steps = 6  # set after the config's check: the trainer's, the same rule, names it
    with pytest.raises(ValueError, match=r"tasks' steps \(4 in all\); train\.max_steps must be 0 or that, got 6$"):
        run(cfg)
    assert not list(tmp_path.glob("checkpoint-*"))
