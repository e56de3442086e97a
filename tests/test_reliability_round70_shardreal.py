"""`aspire index encode-shard` under torchrun says the backend `--backend auto` chose in one line, as build does and
its help says, not one identical line a rank (on 400 real ACL abstracts, two ranks wrote "encoding with OpenVINO bf16
..." twice, with no rank named). Rank 0 says it; ranks that would choose otherwise are refused, each named
(`same_backend_on_every_rank`)."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from aspire.index.__main__ import main
from aspire.index.shards import shard_name
from tests.test_index_shards import loads, write_corpus  # noqa: F401 (loads: a fixture)
from tests.test_reliability_round69_shardbackend import OPENVINO, amx_cpu  # noqa: F401 (amx_cpu: a fixture)

NOTE = "encoding with OpenVINO bf16 (this CPU has amx_bf16); --backend torch for the exact model"


@pytest.fixture
def two_ranks(monkeypatch):
    """A started group of two agreeing ranks, whichever this process is told it is ($RANK)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist, "all_gather_object", lambda out, mine: out.__setitem__(slice(None), [mine, mine]))
    monkeypatch.setattr(dist, "barrier", lambda: None)
    monkeypatch.setattr(dist, "destroy_process_group", lambda: None)


@pytest.mark.parametrize("rank", [0, 1])
def test_the_auto_backend_is_said_once_by_rank_0(tmp_path, capsys, loads, amx_cpu, two_ranks, monkeypatch, rank):  # noqa: F811
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    corpus, shards = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(4)]), tmp_path / "shards"
    assert main(["encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards", str(shards)]) == 0
    out, err = capsys.readouterr()
    assert err.count(NOTE) == (1 if rank == 0 else 0), err
    assert loads == [OPENVINO]  # every rank encodes with the choice all the same
    assert out.splitlines() == [f"wrote {shards / shard_name(rank, 2)}"]
