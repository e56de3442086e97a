"""Process set-up for training, done by the entry point (`aspire.train.trainer.run`), never by a
constructor: the `torchrun` process group, the device, and the global RNGs (seeding, saving and
restoring their states for an exact resume).
"""

from __future__ import annotations

import logging
import os
import random

import numpy as np
import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def init_distributed(device: str = "auto") -> tuple[int, int, int]:
    """(rank, world size, local rank); starts the process group when launched by `torchrun`, its backend the one of
    the training `device` (`train.device`, resolved as the trainer does): NCCL on a CUDA device (made this process's
    current one: its `LOCAL_RANK`), gloo on any other (NCCL cannot all-reduce CPU tensors, CUDA present or not)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if resolve_device(device, local_rank).type == "cuda":
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl")
        else:
            dist.init_process_group("gloo")
    return process_ranks()


def process_ranks() -> tuple[int, int, int]:
    """(rank, world size, local rank) of this process, starting nothing.

    Under `torchrun` the process group must already be started (`init_distributed`).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, 0
    if not dist.is_initialized():
        raise RuntimeError(f"WORLD_SIZE={world} but no process group is started: call "
                           "aspire.train.trainer.init_distributed() first (aspire.train.trainer.run does)")
    return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0"))


def resolve_device(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed % 2**64)  # torch takes seeds below 2**64 (unchanged there); `train.seed` is any int >= 0


def rng_state(device: torch.device | None = None) -> dict:
    """This process's RNG states, for `set_rng_state`: python's (`python`), numpy's (`numpy`), torch's CPU
    generator's (`torch`) and, where CUDA is available, every visible device's CUDA generator by device index
    (`cuda`, a list) with, when the training `device` is a CUDA one, its index (`cuda_device`)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
        if device is not None and device.type == "cuda":
            state["cuda_device"] = _cuda_index(device)
    return state


def _cuda_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


_CUDA_STATE_BYTES = (16, 8)  # torch's CUDA generator: 8-byte seed + 8-byte Philox offset; a seed alone (older)


def rng_state_problem(state) -> str | None:
    """What is damaged in `state` as an `rng_state` (None: nothing). The CPU states are tried on private
    generators, so a state that passes restores; the process's own generators are left alone."""
    if not isinstance(state, dict):
        return f"not a dict of RNG states but {type(state).__name__}"
    missing = [k for k in ("python", "numpy", "torch") if k not in state]
    if missing:
        return f"no {', '.join(repr(k) for k in missing)} state"
    trials = (("python", lambda v: random.Random().setstate(v)), ("numpy", _try_numpy_state),
              ("torch", lambda v: torch.Generator().set_state(v)))
    for key, trial in trials:
        try:
            trial(state[key])
        except Exception as err:  # each library raises its own kinds (TypeError, ValueError, RuntimeError, ...)
            return f"its {key!r} state is not one ({type(err).__name__}: {(str(err).splitlines() or [''])[0]:.100})"
    cuda = state.get("cuda")
    if "cuda" in state and not (isinstance(cuda, (list, tuple))
                                and all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda)):
        return f"its 'cuda' states are not a list of byte tensors ({type(cuda).__name__})"
    for i, t in enumerate(cuda or ()):  # what torch.cuda.set_rng_state takes: a CPU seed and offset (or a seed alone)
        if t.device.type != "cpu" or t.dim() != 1 or t.numel() not in _CUDA_STATE_BYTES:
            return (f"its 'cuda' state {i} is not one ({t.numel()} byte(s) on {t.device.type}; a CUDA generator's state "
                    f"is {' or '.join(map(str, _CUDA_STATE_BYTES))} bytes on the CPU)")
    index = state.get("cuda_device")
    if "cuda_device" in state and not (type(index) is int and 0 <= index < len(cuda or ())):
        return f"its 'cuda_device' {index!r:.40} is not the index of one of its {len(cuda or ())} 'cuda' state(s)"
    return None


def _try_numpy_state(state) -> None:
    """Set `state` on a private RandomState; ValueError when its position is outside 0..624 (numpy takes any C int
    there, and a draw then reads outside the key: wrong numbers, or a crash)."""
    rs = np.random.RandomState()
    rs.set_state(state)
    pos = rs.get_state()[2]
    if not 0 <= pos <= 624:
        raise ValueError(f"its position {pos} is outside 0..624")


def set_rng_state(state: dict, device: torch.device | None = None) -> None:
    """Restore the RNG states `rng_state` returned; ValueError saying what is damaged when `state` is not one
    (`rng_state_problem`, checked before any generator is set). The python, numpy and torch CPU generators are
    restored exactly. The CUDA generators, `device` being the training device (None: the current CUDA device where
    CUDA is available):
      - the same devices visible (as many, the training device's index the saved one's): every one as saved;
      - training on a CUDA device, other devices visible: the training device's generator takes the state saved of
        the checkpoint's training device (`cuda_device`; a checkpoint without it: the same index, with a warning
        where that is a guess), the others are not restored (logged); ValueError when the checkpoint holds no state
        of that index;
      - training on a CUDA device, no CUDA states saved (a checkpoint written on the CPU): the training device's
        generator is seeded with `torch.initial_seed()` (the restored CPU generator's seed: the run's seed of this
        rank), with a warning: the GPU's random stream (dropout) does not continue the checkpoint's;
      - training on the CPU: the saved CUDA states are restored on the devices both have (training uses none).
    """
    problem = rng_state_problem(state)
    if problem:
        raise ValueError(f"damaged RNG state: {problem}")
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if not torch.cuda.is_available():
        return
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    saved, visible = state.get("cuda"), torch.cuda.device_count()
    if device.type != "cuda":
        if saved is not None:
            for i, cuda_state in enumerate(saved[:visible]):
                torch.cuda.set_rng_state(cuda_state, i)
        return
    index = _cuda_index(device)
    if saved is None:
        seed = torch.initial_seed()
        log.warning("the checkpoint holds no CUDA RNG state (written without CUDA): cuda:%d's generator is seeded "
                    "with the restored torch seed %d, so its random stream (dropout) does not continue the "
                    "checkpoint's", index, seed)
        with torch.cuda.device(index):
            torch.cuda.manual_seed(seed)
        return
    source = state.get("cuda_device", index)
    if len(saved) == visible and source == index:
        torch.cuda.set_rng_state_all(saved)
        return
    if source >= len(saved):
        raise ValueError(f"the checkpoint holds the CUDA RNG states of {len(saved)} device(s) and does not record which "
                         f"one trained; training on cuda:{index}, which it holds no state of: resume with the devices "
                         "it was written with visible (CUDA_VISIBLE_DEVICES)")
    if "cuda_device" not in state and len(saved) > 1:
        log.warning("the checkpoint holds the CUDA RNG states of %d device(s), this process sees %d, and it does not "
                    "record which one trained: cuda:%d takes the state saved of cuda:%d (the same index)",
                    len(saved), visible, index, source)
    else:
        log.info("the checkpoint's CUDA RNG states are of %d device(s), training on cuda:%d of them; %d visible now: "
                 "cuda:%d takes that state, the other devices' generators are not restored",
                 len(saved), source, visible, index)
    torch.cuda.set_rng_state(saved[source], index)
