"""Process set-up for training, done by the entry point (`aspire.train.trainer.run`), never by a
constructor: the `torchrun` process group, the device, and the global RNGs (seeding, saving and
restoring their states for an exact resume).
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch
import torch.distributed as dist


def init_distributed() -> tuple[int, int, int]:
    """(rank, world size, local rank); starts the process group when launched by `torchrun`."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
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


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
