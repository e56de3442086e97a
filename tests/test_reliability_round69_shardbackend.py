"""`aspire index encode-shard` defaults to `--backend auto`, as `index build` does: a sharded build and a single build
of one corpus on one machine encode with the same backend and record the same fingerprint (encode-shard once kept
torch, so on a CPU with AMX the two disagreed unless `--backend` was given). On a GPU auto keeps the exact model; the
ranks of one run must agree, said before anything is encoded; a re-run meeting finished shards of another backend
names the flags that keep them."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

from aspire.encoders import choice
from aspire.index.__main__ import main
from aspire.index.shards import run_encode_shard, shard_name
from aspire.index.store import SentenceIndex
from tests.test_index_shards import loads, run, write_corpus  # noqa: F401 (loads: a fixture)

OPENVINO = {"backend": "openvino", "quantize": "bf16"}


@pytest.fixture
def amx_cpu(monkeypatch, tmp_path):
    """`--backend auto` on a CPU with AMX and openvino installed, whatever this machine is; $ASPIRE_BACKEND unset."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f amx_bf16 amx_tile\n")
    real = choice.choose_backend
    monkeypatch.setattr(choice, "choose_backend", lambda model=None, device=None: real(
        model, device, cpuinfo=cpuinfo, openvino_installed=True))
    monkeypatch.delenv("ASPIRE_BACKEND", raising=False)


def test_encode_shard_and_build_choose_one_backend_by_default(tmp_path, capsys, loads, amx_cpu):  # noqa: F811
    corpus = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(9)])
    shards, sharded, single = tmp_path / "shards", tmp_path / "sharded", tmp_path / "single"
    assert main(["encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards", str(shards),
                 "--num-shards", "3", "--merge-into", str(sharded), "index.kind=flat"]) == 0
    said = capsys.readouterr().err
    assert "encoding with OpenVINO bf16 (this CPU has amx_bf16); --backend torch for the exact model" in said
    assert loads == [OPENVINO]
    assert main(["build", "--model", "minilm", "--corpus", str(corpus), "--out", str(single), "index.kind=flat",
                 "--quiet"]) == 0
    assert loads == [OPENVINO, OPENVINO]
    a, b = (SentenceIndex.read_manifest(path) for path in (sharded, single))
    assert a["model_fingerprint"] == b["model_fingerprint"] == "hash/openvino/bf16"
    encoded = [SentenceIndex.load(path).config.encode for path in (sharded, single)]
    assert [(e.backend, e.quantize) for e in encoded] == [("openvino", "bf16")] * 2


def test_the_configs_backend_and_a_named_one_still_win_over_auto(tmp_path, capsys, loads, amx_cpu):  # noqa: F811
    corpus = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(4)])
    encode = ["encode-shard", "--model", "minilm", "--corpus", str(corpus)]
    assert run(capsys, *encode, "--shards", str(tmp_path / "s1"), "encode.backend=onnx", "encode.quantize=int8")[0] == 0
    assert run(capsys, *encode, "--shards", str(tmp_path / "s2"), "--backend", "torch")[0] == 0
    assert loads == [{"backend": "onnx", "quantize": "int8"}, {}]  # {}: the exact torch model
    meta = json.loads((tmp_path / "s2" / shard_name(0, 1) / "shard.json").read_text())
    assert (meta["backend"], meta["quantize"], meta["model_fingerprint"]) == ("torch", None, "hash/torch/None")


def test_on_a_gpu_auto_keeps_the_exact_model_on_the_ranks_gpu(tmp_path, capsys, loads, amx_cpu, monkeypatch):  # noqa: F811
    from tests.test_index_shards import HashEncoder

    moved = []
    monkeypatch.setattr(HashEncoder, "to", lambda self, device: moved.append(str(device)) or self)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "1")
    corpus = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(4)])
    assert main(["encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards", str(tmp_path / "s")]) == 0
    assert "encoding with the exact torch model on cuda:1 (the fast backends run on the CPU)" in capsys.readouterr().err
    assert loads == [{}] and moved == ["cuda:1"]


def test_a_rerun_over_shards_of_another_backend_names_the_flags_that_keep_them(tmp_path, capsys, loads, amx_cpu):  # noqa: F811
    """Shards encoded before encode-shard defaulted to auto are torch's: on a CPU with AMX a plain re-run is refused,
    telling the user to give --backend torch, which keeps them."""
    corpus, shards = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(6)]), tmp_path / "shards"
    encode = ["encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards", str(shards), "--num-shards", "2"]
    assert run(capsys, *encode, "--backend", "torch")[0] == 0
    status, out, err = run(capsys, *encode)
    assert status == 2 and out == "" and "with backend torch fp32, this run with backend openvino bf16" in err
    assert err.rstrip().endswith(": give --backend torch to encode as they were, use a new --shards folder, or "
                                 "remove the stale shards")
    status, out, _ = run(capsys, *encode, "--backend", "torch")
    assert status == 0 and out.splitlines() == [f"reused {shards / shard_name(s, 2)}" for s in range(2)]
    # a precision of their own is named too
    other = tmp_path / "int8"
    assert run(capsys, *encode[:-4], "--shards", str(other), "--num-shards", "2", "--backend", "onnx",
               "--quantize", "int8")[0] == 0
    status, _, err = run(capsys, *encode[:-4], "--shards", str(other), "--num-shards", "2", "--backend", "torch")
    assert status == 2 and "give --backend onnx --quantize int8 to encode as they were" in err


def test_ranks_choosing_different_backends_are_refused_before_anything_is_encoded(tmp_path, loads, monkeypatch):  # noqa: F811
    """Machines differ: one rank's auto is OpenVINO bf16, another's the exact model. Every rank says so before the
    model loads, rather than the merge after the whole corpus is encoded."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_initialized", lambda: True)  # the group torchrun's ranks start
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist, "destroy_process_group", lambda: None)
    other = [("torch", None)]

    def all_gather_object(out, mine):
        out[:] = [mine, *other]

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    corpus, shards = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(4)]), tmp_path / "shards"
    with pytest.raises(ValueError, match=r"^the ranks would encode with different backends \(rank 0 openvino bf16, "
                                         r"rank 1 torch fp32; --backend auto chooses on each machine\): give every "
                                         r"rank the same --backend, e.g. --backend torch for the exact model$"):
        run_encode_shard("minilm", corpus, shards, _config(), encoder_options=OPENVINO, progress=False)
    assert loads == [] and not shards.exists()
    other[:] = [("openvino", "bf16")]  # agreeing ranks encode their shards (barriers aside)
    monkeypatch.setattr(dist, "barrier", lambda: None)
    paths = run_encode_shard("minilm", corpus, shards, _config(), encoder_options=OPENVINO, progress=False)
    assert loads == [OPENVINO] and paths == [(shards / shard_name(0, 2), False)]


def _config():
    from aspire.index import IndexBuildConfig

    return IndexBuildConfig()
