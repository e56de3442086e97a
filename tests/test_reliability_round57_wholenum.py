"""Round 57: one whole-number check (`aspire.config.is_whole`) behind the hand-written ones that remained: the
context2doc depth (`check_depth`), a sampler's resume position and rank (`check_position`), a sequential mix's steps
and a checkpoint's trainer-state counters (`check_state`, which refused numpy integers that every sampler takes, with
the message "must be an integer >= 0, got 3"). Each place accepts and refuses the same values as `is_whole`, naming
the argument; a checkpoint whose counters are numpy integers resumes to the straight run's weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from aspire.config import is_whole
from aspire.evaluate.context2doc_run import check_depth
from aspire.train import checkpoint as ckpt
from aspire.train.mixing import MixSampler, check_position
from aspire.train.trainer import check_state, run
from tests.test_reliability_round27_trainer import _good_state
from tests.test_reliability_round34_trainer import FAST, _damage_and_resume
from tests.test_reliability_round41_c2drun import tiny_text_bench
from tests.test_train import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")

# the same count in each kind: a whole number (int, numpy integers) or none (bool, floats of a whole value, text, None)
KINDS = [int, np.int64, np.int32, np.uint8, bool, float, np.float64, str, lambda n: None]


def _depth(n):
    check_depth(tiny_text_bench(), n)


def _position(n):
    check_position(n, 5, 0, 2, "test epoch")


def _rank(n):
    check_position(0, 5, n, 2, "test epoch")


def _steps(n):
    MixSampler([20, 20], [0, 20], "sequential", [1, 1], 4, 0, 0, stage_batches=[n, 2])


def _state(key):
    def check(n):
        state = _good_state()
        state[key] = n
        check_state(state, "x/" + ckpt.STATE_FILE, n if key == "step" else 4)
    return check


# (place, the count it is given, what a refusal names)
PLACES = [pytest.param(_depth, len(tiny_text_bench().candidates), "context2doc depth must be a whole number",
                       id="depth"),
          pytest.param(_position, 1, "micro-batch to start from must be an integer", id="start"),
          pytest.param(_rank, 1, "rank must be an integer", id="rank"),
          pytest.param(_steps, 3, "mix.mode sequential needs steps >= 1", id="stage_batches"),
          *(pytest.param(_state(key), 4 if key == "step" else 1, named, id=f"state-{key}")
            for key, named in (("step", "the trainer state is of step"),
                               ("epoch", "the trainer state's epoch must be an integer"),
                               ("position", "the trainer state's position must be an integer"),
                               ("world_size", "the trainer state's world_size must be an integer")))]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: getattr(k, "__name__", "none"))
@pytest.mark.parametrize("place, count, named", PLACES)
def test_every_place_accepts_and_refuses_what_is_whole_does(place, count, named, kind):
    """Before: `check_state` refused numpy integers (its own `type(x) is int`), which is_whole, the samplers and the
    depth check take; the others held copies of is_whole's test, each its own way."""
    value = kind(count)
    if is_whole(value, 0):
        place(value)
    else:
        with pytest.raises(ValueError, match=named):
            place(value)


def test_is_whole_reads_the_same_values_with_and_without_a_minimum():
    for value in (3, np.int64(3), -2, np.int16(-2)):
        assert is_whole(value) and is_whole(value, -2) and not is_whole(value, 4)
    for value in (True, np.bool_(True), 2.0, np.float32(2.0), "2", None, torch.tensor(2)):
        assert not is_whole(value) and not is_whole(value, 0)


def test_a_checkpoint_whose_counters_are_numpy_integers_resumes_to_the_straight_runs_weights(
        tiny_model_dir, examples_dir, tmp_path):
    """Before: refused at --resume as "the trainer state's epoch must be an integer >= 0, got 0". Restored as ints,
    the run's next checkpoint and its pointers are written as a straight run's are (a numpy step reaching
    `save_checkpoint` would be refused there: its pointer is JSON)."""
    straight = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "a", *FAST))

    def numpy_counters(state):
        for key in ("step", "epoch", "position", "world_size"):
            state[key] = np.int64(state[key])

    resumed, _ = _damage_and_resume(tiny_model_dir, examples_dir, tmp_path / "b", numpy_counters)
    assert resumed["step"] == 4 and resumed["weights_digest"] == straight["weights_digest"]
    pointer = json.loads((tmp_path / "b" / ckpt.LATEST).read_text())
    assert pointer == {"checkpoint": "checkpoint-000004", "step": 4}
    state = ckpt.load_state(tmp_path / "b" / "checkpoint-000004")
    assert all(type(state[k]) is int for k in ("step", "epoch", "position", "world_size"))
