"""Round 38: the training entry point and process set-up (aspire/train/__main__.py, aspire/train/process.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from aspire.train import process
from aspire.train.__main__ import main


def test_override_without_equals_is_a_usage_error_naming_it(capsys):
    # was: a ValueError traceback out of main (normalize_overrides ran outside the argument error handling)
    with pytest.raises(SystemExit) as exc:
        main(["--config", "configs/ts_aspire.yaml", "train.lr"])
    assert exc.value.code == 2
    assert "'train.lr' must look like section.key=value" in capsys.readouterr().err


def _draws():
    return (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(), np.random.randn(),
            torch.rand(3).tolist(), torch.randn(2).tolist())


def test_restored_states_draw_what_an_unbroken_run_draws():
    saved_np = np.random.get_state()
    try:
        process.seed_everything(11)
        _draws()
        state = process.rng_state()
        unbroken = _draws()
        process.seed_everything(99)
        _draws()
        process.set_rng_state(state)
        assert _draws() == unbroken
    finally:
        np.random.set_state(saved_np)


@pytest.mark.parametrize("pos", [625, 10**6, -1])
def test_numpy_state_position_out_of_range_is_refused(pos):
    # was: accepted; numpy then reads outside the key (pos 625: draws like 6e-10; others crash the process)
    saved_np = np.random.get_state()
    try:
        process.seed_everything(3)
        state = process.rng_state()
        name, key, _, has_gauss, gauss = state["numpy"]
        bad = dict(state, numpy=(name, key, pos, has_gauss, gauss))
        problem = process.rng_state_problem(bad)
        assert problem is not None and "'numpy'" in problem and str(pos) in problem
        before = np.random.get_state()
        with pytest.raises(ValueError, match="damaged RNG state: its 'numpy' state"):
            process.set_rng_state(bad)
        after = np.random.get_state()
        assert after[2] == before[2] and np.array_equal(after[1], before[1])  # nothing was set
        as_dict = np.random.get_state(legacy=False)
        as_dict["state"]["pos"] = 700
        assert "'numpy'" in process.rng_state_problem(dict(state, numpy=as_dict))
        assert process.rng_state_problem(dict(state, numpy=np.random.get_state(legacy=False))) is None
    finally:
        np.random.set_state(saved_np)


@pytest.mark.parametrize("cuda, what", [([torch.zeros(0, dtype=torch.uint8)], "0 byte(s)"),
                                        ([torch.zeros(16, dtype=torch.uint8), torch.zeros(5, dtype=torch.uint8)],
                                         "'cuda' state 1 is not one (5 byte(s)"),
                                        ([torch.zeros(2, 8, dtype=torch.uint8)], "16 byte(s)")])
def test_cuda_state_of_a_wrong_size_is_refused_before_any_generator_is_set(cuda, what):
    # was: accepted; with CUDA, torch.cuda.set_rng_state then failed ("RNG state is wrong size", a RuntimeError naming
    # no file) after the CPU generators had been restored, and the checkpoint's check (`rng_state_problem`) passed it
    state = process.rng_state()
    problem = process.rng_state_problem(dict(state, cuda=cuda))
    assert problem is not None and what in problem
    good = [torch.zeros(16, dtype=torch.uint8), torch.zeros(8, dtype=torch.uint8)]  # a seed+offset; a seed alone
    assert process.rng_state_problem(dict(state, cuda=good, cuda_device=1)) is None


def test_a_checkpoint_with_a_damaged_numpy_position_is_refused_naming_its_file(tmp_path):
    from aspire.train.trainer import check_state

    good = process.rng_state()
    name, key, _, has_gauss, gauss = good["numpy"]
    state = {"optimizer": {}, "scheduler": {}, "step": 4, "epoch": 0, "position": 0, "best_dev_loss": 1.0,
             "world_size": 1, "rng": [dict(good, numpy=(name, key, 625, has_gauss, gauss))]}
    path = tmp_path / "trainer_state.pt"
    with pytest.raises(ValueError, match=f"{path}: the trainer state's rng of rank 0 is damaged .*'numpy'.*625"):
        check_state(state, path, 4)
    state["rng"] = [good]
    check_state(state, path, 4)  # the undamaged state passes
