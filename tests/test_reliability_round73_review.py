"""Round 73, a review of the day's changes. `index encode-shard` defaults to --backend auto since 52f597e, so it reads
`$ASPIRE_BACKEND` as build does; on a machine with CUDA it passed the rank's GPU to `resolve_backend` as if it were a
--device the user gave, so `ASPIRE_BACKEND=onnx` (or openvino) was refused with "got --device cuda:0" (encode-shard
has no --device) while `--backend onnx` encodes there, on the CPU, as `build` does with the same variable. The GPU now
steers only auto's choice (`resolve_backend`'s `torch_device`)."""

from __future__ import annotations

import json

import pytest
import torch

from aspire.encoders.choice import resolve_backend
from tests.test_index_shards import loads, run, write_corpus  # noqa: F401 (loads: a fixture)


@pytest.fixture
def cuda(monkeypatch):
    """A machine where CUDA is available (the stand-in encoder of `loads` goes to any device)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def encode_shard(capsys, tmp_path, name: str, *flags: str) -> tuple[int, str, str]:
    corpus = write_corpus(tmp_path / "c.jsonl", ["a1", "a2", "a3"])
    return run(capsys, "encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards",
               str(tmp_path / name), *flags)


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_aspire_backend_naming_a_fast_backend_encodes_shards_on_a_gpu_machine(tmp_path, capsys, loads, cuda,  # noqa: F811
                                                                               monkeypatch, backend):
    monkeypatch.setenv("ASPIRE_BACKEND", backend)
    status, _, err = encode_shard(capsys, tmp_path, "env")
    assert (status, err) == (0, ""), err  # was: "$ASPIRE_BACKEND=onnx encodes on the CPU; got --device cuda:0"
    assert loads[-1] == {"backend": backend, "quantize": None}
    meta = json.loads(next((tmp_path / "env").glob("shard-*/shard.json")).read_text())
    assert (meta["backend"], meta["quantize"]) == (backend, None)
    monkeypatch.delenv("ASPIRE_BACKEND")  # as the flag encodes there
    assert encode_shard(capsys, tmp_path, "flag", "--backend", backend)[0] == 0
    assert loads[-1] == {"backend": backend, "quantize": None}


def test_auto_still_keeps_the_exact_model_on_the_rank_s_gpu(tmp_path, capsys, loads, cuda, monkeypatch):  # noqa: F811
    monkeypatch.setenv("ASPIRE_BACKEND", "auto")
    assert encode_shard(capsys, tmp_path, "auto")[0] == 0
    assert loads[-1] == {}
    backend, quantize, note = resolve_backend(None, None, "minilm", None, "cuda:0")
    assert (backend, quantize) == ("torch", None) and "on cuda:0" in note


def test_a_gpu_device_the_user_gives_still_refuses_a_fast_aspire_backend(monkeypatch):
    monkeypatch.setenv("ASPIRE_BACKEND", "onnx")
    assert resolve_backend(None, None, "minilm", None, "cuda:0") == ("onnx", None, None)
    with pytest.raises(ValueError, match=r"\$ASPIRE_BACKEND=onnx encodes on the CPU; got --device cuda"):
        resolve_backend(None, None, "minilm", "cuda")
