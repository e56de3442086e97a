"""Round 27: a fresh run removes a killed run's half-written checkpoint; the CUDA RNG states of a checkpoint are
restored onto the training device whatever devices are visible, and a damaged `rng` entry is named."""

from __future__ import annotations

import contextlib
import logging
import random

import numpy as np
import pytest
import torch

from aspire.train import checkpoint as ckpt
from aspire.train import process
from aspire.train.process import rng_state, seed_everything, set_rng_state
from aspire.train.trainer import STATE_KEYS, check_state, run
from tests.test_train import read_metrics, tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


# ---- 1. leftover temp checkpoints on a fresh start ------------------------------------------------------------------

def test_a_fresh_run_removes_the_half_written_checkpoint_of_a_killed_first_run(tiny_model_dir, examples_dir, tmp_path):
    """A run killed (SIGKILL: no `except` runs) while writing its first checkpoint leaves `.tmp-checkpoint-000002`
    and no `latest`: a fresh run into the folder is allowed, and the leftover stayed there for good (this run saves
    steps 3 and 4 only), though the checkpoint module says leftovers "are removed on the next start"."""
    out = tmp_path / "run"
    leftover = out / ".tmp-checkpoint-000002" / ckpt.MODEL_DIR
    leftover.mkdir(parents=True)
    (leftover / "weights.bin").write_bytes(b"half")
    run(tiny_config(tiny_model_dir, examples_dir, out, "model.kind=cocite_vector", "train.max_steps=4",
                    "train.save_every=0", "train.eval_every=3"))
    names = sorted(p.name for p in out.iterdir())
    assert not any(n.startswith(".tmp-checkpoint-") for n in names), names
    assert ckpt.read_pointer(out)["step"] == 4
    assert [m["step"] for m in read_metrics(out) if "loss" in m] == [1, 2, 3, 4]


# ---- 2. CUDA RNG states against the visible devices (torch.cuda monkeypatched: no GPU here) ------------------------

class FakeCuda:
    """`n` visible CUDA devices, each generator state a distinct byte tensor; records what is set and seeded."""

    def __init__(self, monkeypatch, n: int, current: int = 0) -> None:
        self.states = [torch.full((16,), 10 + i, dtype=torch.uint8) for i in range(n)]
        self.current, self.seeded, self.active = current, {}, current
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(cuda, "device_count", lambda: n)
        monkeypatch.setattr(cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(cuda, "get_rng_state_all", lambda: [s.clone() for s in self.states])
        monkeypatch.setattr(cuda, "set_rng_state_all", self.set_all)
        monkeypatch.setattr(cuda, "set_rng_state", self.set_one)
        monkeypatch.setattr(cuda, "manual_seed", self.manual_seed)
        monkeypatch.setattr(cuda, "device", self.device)

    def set_one(self, state, device="cuda") -> None:
        index = device if isinstance(device, int) else torch.device(device).index
        index = self.current if index is None else index
        self.states[index] = state.clone()  # the real one: IndexError (tuple index out of range) past the last

    def set_all(self, states) -> None:
        for i, state in enumerate(states):
            self.set_one(state, i)

    def manual_seed(self, seed: int) -> None:
        self.seeded[self.active] = seed

    @contextlib.contextmanager
    def device(self, index: int):
        before, self.active = self.active, index
        try:
            yield
        finally:
            self.active = before


def _byte(tensor: torch.Tensor) -> int:
    return int(tensor[0])


def test_cuda_states_restore_as_before_on_the_same_devices(monkeypatch):
    """Same devices, training device at its saved index: every device's generator as saved (unchanged behaviour)."""
    cuda = FakeCuda(monkeypatch, 2, current=1)
    state = rng_state(torch.device("cuda", 1))
    assert state["cuda_device"] == 1 and [_byte(s) for s in state["cuda"]] == [10, 11]
    cuda.states = [torch.zeros(16, dtype=torch.uint8) for _ in range(2)]
    set_rng_state(state, torch.device("cuda", 1))
    assert [_byte(s) for s in cuda.states] == [10, 11] and cuda.seeded == {}


def test_fewer_visible_devices_restore_the_training_devices_state(monkeypatch, caplog):
    """Written on cuda:1 of 2 GPUs, resumed with one GPU visible (cuda:0): set_rng_state_all set device 1, which
    does not exist (torch: IndexError, tuple index out of range, or later at CUDA's lazy init). Now cuda:0 takes
    the state cuda:1 trained with, and the log says so."""
    FakeCuda(monkeypatch, 2, current=1)
    state = rng_state(torch.device("cuda:1"))
    cuda = FakeCuda(monkeypatch, 1)
    with caplog.at_level(logging.INFO, logger="aspire.train.process"):
        set_rng_state(state, torch.device("cuda:0"))
    assert [_byte(s) for s in cuda.states] == [11]
    assert "cuda:0 takes that state" in caplog.text


def test_another_device_index_restores_the_training_devices_state(monkeypatch):
    """Written training on cuda:1 of 2, resumed training on cuda:0 of 2: by index, cuda:0 got cuda:0's saved (unused)
    state and the training stream was silently lost. Now cuda:0 takes the state cuda:1 trained with."""
    FakeCuda(monkeypatch, 2)
    state = rng_state(torch.device("cuda:1"))
    cuda = FakeCuda(monkeypatch, 2)
    cuda.states = [torch.zeros(16, dtype=torch.uint8) for _ in range(2)]
    set_rng_state(state, torch.device("cuda:0"))
    assert _byte(cuda.states[0]) == 11


def test_a_checkpoint_without_a_record_of_its_device_and_no_state_for_this_one_is_refused(monkeypatch):
    """An older checkpoint (no `cuda_device`) of 1 device, training on cuda:1: no state to give it. A clear error."""
    FakeCuda(monkeypatch, 1)
    state = rng_state()  # no training device given: no `cuda_device`
    assert "cuda_device" not in state
    FakeCuda(monkeypatch, 2)
    with pytest.raises(ValueError, match="does not record which one trained; training on cuda:1"):
        set_rng_state(state, torch.device("cuda:1"))


def test_a_cpu_checkpoint_resumed_on_a_gpu_seeds_the_training_device_and_says_so(monkeypatch, caplog):
    """Written without CUDA, resumed on cuda:0: nothing touched the CUDA generator (every rank left at CUDA's
    default seed), silently. Now it is seeded with the restored torch seed (the run's seed of this rank), with a
    warning; the CPU generators are restored exactly."""
    seed_everything(41)
    state = rng_state()
    straight = (random.random(), np.random.rand(), torch.rand(2).tolist())
    assert "cuda" not in state
    seed_everything(3)
    cuda = FakeCuda(monkeypatch, 1)
    with caplog.at_level(logging.WARNING, logger="aspire.train.process"):
        set_rng_state(state, torch.device("cuda:0"))
    assert cuda.seeded == {0: 41}
    assert "holds no CUDA RNG state" in caplog.text
    monkeypatch.undo()
    assert (random.random(), np.random.rand(), torch.rand(2).tolist()) == straight


def test_a_cpu_run_on_a_gpu_machine_restores_only_the_devices_it_has(monkeypatch):
    """Training on the CPU with fewer GPUs visible than saved: no IndexError for the device that is gone."""
    FakeCuda(monkeypatch, 3)
    state = rng_state(torch.device("cpu"))
    cuda = FakeCuda(monkeypatch, 2)
    cuda.states = [torch.zeros(16, dtype=torch.uint8) for _ in range(2)]
    set_rng_state(state, torch.device("cpu"))
    assert [_byte(s) for s in cuda.states] == [10, 11]


# ---- damaged rng entries ---------------------------------------------------------------------------------------------

def _good_state(world: int = 1) -> dict:
    state = {k: None for k in STATE_KEYS}
    state.update(step=4, epoch=0, position=0, world_size=world, rng=[rng_state() for _ in range(world)], window=None)
    return state


@pytest.mark.parametrize("damage, expect", [
    (lambda s: s["rng"][0].pop("numpy"), "rng of rank 0 is damaged .*no 'numpy' state"),
    (lambda s: s["rng"][0].update(torch=torch.zeros(3, dtype=torch.uint8)), "rng of rank 0 .*'torch' state is not one"),
    (lambda s: s["rng"][0].update(python=(3, (1, 2), None)), "rng of rank 0 .*'python' state is not one"),
    (lambda s: s.update(rng=[]), r"rng must hold one entry per rank \(1\)"),
    (lambda s: s.update(rng=["x"]), "rng of rank 0 is damaged .*not a dict"),
    (lambda s: s["rng"][0].update(cuda=[torch.zeros(2)]), "'cuda' states are not a list of byte tensors"),
    (lambda s: s.update(window=[[1.0]]), "window of rank 0 is damaged"),
    (lambda s: s.update(window=[{"loss": 1.0, "los": 2.0}]), "window of rank 0 is damaged .*'los'"),
])
def test_a_damaged_rng_or_window_entry_is_named_before_anything_is_restored(tmp_path, damage, expect):
    """A trainer state whose `rng` entry lacked a key failed in Trainer._restore with a bare KeyError ('numpy'), an
    empty list with IndexError, a torch state of the wrong size with torch's RuntimeError, naming no file, after
    the python RNG had already been overwritten. check_state names the file and the rank."""
    assert_damage_named(tmp_path, damage, expect)


def assert_damage_named(tmp_path, damage, expect):
    """A good trainer state passes `check_state`; after `damage(state)` it is refused matching `expect`, naming the
    state file."""
    state = _good_state()
    check_state(state, tmp_path / ckpt.STATE_FILE, 4)
    damage(state)
    with pytest.raises(ValueError, match=expect) as err:
        check_state(state, tmp_path / ckpt.STATE_FILE, 4)
    assert str(tmp_path / ckpt.STATE_FILE) in str(err.value)


def test_set_rng_state_refuses_a_damaged_state_before_setting_any_generator():
    seed_everything(5)
    state = rng_state()
    random.random()  # the python state to restore differs from the current one
    state["numpy"] = ("MT19937", np.zeros(3, dtype=np.uint32), 0, 0, 0.0)
    before = random.getstate()
    with pytest.raises(ValueError, match="damaged RNG state: its 'numpy' state is not one"):
        set_rng_state(state)
    assert random.getstate() == before
    assert process.rng_state_problem(rng_state()) is None
    assert process.rng_state_problem({"python": 1}) == "no 'numpy', 'torch' state"
