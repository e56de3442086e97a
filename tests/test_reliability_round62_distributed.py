"""Round 62: the process group's backend follows the training device.

`init_distributed` chose NCCL whenever CUDA was available, whatever `train.device` said: a multi-process run with
`train.device=cpu` on a GPU machine started an NCCL group that cannot all-reduce its CPU tensors. The backend is now
the one of the device the run trains on (`resolve_device(train.device, LOCAL_RANK)`): NCCL on CUDA, gloo otherwise;
`aspire.train.trainer.run` passes `cfg.train.device`. No GPU here: CUDA is faked present and the group start recorded.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from aspire.train import trainer
from aspire.train.process import init_distributed
from tests.test_train import tiny_config


class FakeGroup:
    """CUDA faked present and `torch.distributed`'s group start recorded, under `torchrun`'s environment (2 ranks,
    this one local rank 1); `start`, when given, is called with the backend as `init_process_group` would be."""

    def __init__(self, monkeypatch, start=None) -> None:
        self.backends, self.devices, self.started, self.start = [], [], False, start
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("LOCAL_RANK", "1")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "set_device", self.devices.append)
        monkeypatch.setattr(dist, "is_initialized", lambda: self.started)
        monkeypatch.setattr(dist, "init_process_group", self.init_process_group)
        if start is None:
            monkeypatch.setattr(dist, "get_rank", lambda: 1)
            monkeypatch.setattr(dist, "get_world_size", lambda: 2)

    def init_process_group(self, backend, **kwargs) -> None:
        self.backends.append(backend)
        if self.start is not None:
            self.start(backend)
        self.started = True


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "mps"])
def test_a_non_cuda_training_device_starts_a_gloo_group_with_cuda_present(monkeypatch, device):
    group = FakeGroup(monkeypatch)
    assert init_distributed(device) == (1, 2, 1)
    assert group.backends == ["gloo"]
    assert group.devices == []  # no CUDA device made current (nor a context made on it) for a run that uses none


@pytest.mark.parametrize("device", ["auto", "cuda", "cuda:1"])
def test_a_cuda_training_device_starts_an_nccl_group_on_the_local_rank(monkeypatch, device):
    group = FakeGroup(monkeypatch)
    assert init_distributed(device) == (1, 2, 1)
    assert group.backends == ["nccl"]
    assert group.devices == [1]  # LOCAL_RANK, as before


def test_auto_without_cuda_starts_a_gloo_group(monkeypatch):
    group = FakeGroup(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert init_distributed() == (1, 2, 1)
    assert group.backends == ["gloo"] and group.devices == []


def test_a_started_group_is_left_alone(monkeypatch):
    group = FakeGroup(monkeypatch)
    group.started = True
    assert init_distributed("cuda") == (1, 2, 1)
    assert group.backends == [] and group.devices == []


class Started(Exception):
    """Stops `run` once its process group is started."""


def test_run_starts_the_group_of_its_train_device(monkeypatch, tiny_model_dir, examples_dir, tmp_path):
    def stop(backend):
        raise Started(backend)

    group = FakeGroup(monkeypatch, start=stop)
    with pytest.raises(Started, match="^gloo$"):
        trainer.run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "cpu"))  # train.device=cpu
    with pytest.raises(Started, match="^nccl$"):
        trainer.run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "auto", "train.device=auto"))
    assert group.backends == ["gloo", "nccl"]
    assert not (tmp_path / "cpu").exists() and not (tmp_path / "auto").exists()


def test_a_cpu_run_with_cuda_present_starts_a_real_gloo_group_that_all_reduces(monkeypatch, tmp_path):
    """The real group start, as one process (world size 1 through a file store), with the backend chosen."""
    real = dist.init_process_group
    group = FakeGroup(monkeypatch, start=lambda backend: real(backend, init_method=f"file://{tmp_path / 'store'}",
                                                              rank=0, world_size=1))
    monkeypatch.setattr(dist, "is_initialized", dist.is_initialized)  # the real one: the group is real
    try:
        assert init_distributed("cpu") == (0, 1, 1)
        assert dist.get_backend() == "gloo" and group.backends == ["gloo"]
        t = torch.tensor([2.0, 3.0])
        dist.all_reduce(t)  # a CPU tensor, which an NCCL group refuses
        assert t.tolist() == [2.0, 3.0]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
