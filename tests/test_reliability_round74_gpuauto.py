"""Bulk encoding on a CUDA machine: `aspire index build`, `index add` and `aspire encode` without --device loaded the
exact model with device=None, which leaves it on the CPU (`load_encoder` moves it only when given a device), and
build's `--backend auto` chose as if on the CPU, while encode-shard put it on the rank's GPU. And `index add` said
which backend it encodes with before a refusal that followed (a model mismatch), and with --quantize alone called the
precision the index's. No GPU here: `torch.cuda.is_available` is patched, and the load records the device asked for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aspire.cli.encode import main as encode_main
from aspire.encoders.choice import resolve_backend
from aspire.index.__main__ import main
from tests.test_index_shards import HashEncoder, write_corpus

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def gpu_loads(monkeypatch) -> list[tuple[str | None, dict]]:
    """A CUDA machine with $ASPIRE_BACKEND unset; every model load, as the device and `load_encoder` options it was
    given, gives a HashEncoder of that backend and precision."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("ASPIRE_BACKEND", raising=False)
    seen = []

    def load(name, device=None, **options):
        seen.append((device, options))
        return HashEncoder(f"hash/{options.get('backend', 'torch')}/{options.get('quantize')}")

    monkeypatch.setattr("aspire.encoders.load_encoder", load)
    return seen


def build(capsys, tmp_path, *flags: str) -> tuple[int, str]:
    corpus = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(4)])
    status = main(["build", "--model", "minilm", "--corpus", str(corpus), "--out", str(tmp_path / "idx"),
                   "index.kind=flat", *flags])
    return status, capsys.readouterr().err


def test_build_without_device_encodes_with_the_exact_model_on_the_gpu(tmp_path, capsys, gpu_loads):
    status, err = build(capsys, tmp_path)
    assert status == 0, err
    assert gpu_loads == [("cuda:0", {})]  # was (None, ...): the CPU, or OpenVINO on a CPU with AMX
    assert "encoding with the exact torch model on cuda:0" in err
    assert "backend: torch" in (tmp_path / "idx" / "gen-000001" / "config.yaml").read_text()


def test_build_with_device_cpu_keeps_the_cpu_and_autos_cpu_choice(tmp_path, capsys, gpu_loads):
    status, err = build(capsys, tmp_path, "--device", "cpu")
    assert status == 0, err
    assert [device for device, _ in gpu_loads] == ["cpu"]
    assert "encoding with" in err and "cuda" not in err


@pytest.mark.parametrize("env, device, options", [("torch", "cuda:0", {}),
                                                   ("onnx", None, {"backend": "onnx", "quantize": None})])
def test_build_under_aspire_backend_puts_only_the_torch_model_on_the_gpu(tmp_path, capsys, gpu_loads, monkeypatch,
                                                                        env, device, options):
    monkeypatch.setenv("ASPIRE_BACKEND", env)
    status, err = build(capsys, tmp_path)
    assert status == 0, err  # a fast backend of $ASPIRE_BACKEND is not refused: the user gave no --device
    assert gpu_loads == [(device, options)]


def test_add_without_device_encodes_on_the_gpu_and_says_so(tmp_path, capsys, gpu_loads):
    assert build(capsys, tmp_path, "--backend", "torch")[0] == 0
    assert main(["add", "--index", str(tmp_path / "idx"), "--corpus", str(write_corpus(tmp_path / "m.jsonl",
                                                                                          ["b1"]))]) == 0
    err = capsys.readouterr().err
    assert gpu_loads[-1] == ("cuda:0", {})
    assert "encoding with backend torch fp32 on cuda:0: the backend the index records" in err
    assert main(["add", "--index", str(tmp_path / "idx"), "--corpus", str(write_corpus(tmp_path / "m2.jsonl", ["b2"])),
                 "--device", "cpu"]) == 0
    assert gpu_loads[-1] == ("cpu", {})
    assert "encoding with backend torch fp32: the backend the index records" in capsys.readouterr().err


def test_add_says_its_backend_only_once_the_add_goes_ahead(tmp_path, capsys, gpu_loads):
    assert build(capsys, tmp_path, "--backend", "torch", "--device", "cpu")[0] == 0
    more = write_corpus(tmp_path / "m.jsonl", ["b1"])
    # torch bf16 vectors are not added to an index of fp32 ones: refused, and nothing said of encoding with them
    assert main(["add", "--index", str(tmp_path / "idx"), "--corpus", str(more), "--quantize", "bf16",
                 "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "the index was built with model" in err
    assert "encoding with" not in err


def test_add_with_quantize_alone_says_the_precision_is_the_users(tmp_path, capsys, gpu_loads):
    assert build(capsys, tmp_path, "--backend", "onnx", "--quantize", "int8")[0] == 0
    assert main(["add", "--index", str(tmp_path / "idx"), "--corpus", str(write_corpus(tmp_path / "m.jsonl", ["b1"])),
                 "--quantize", "int8"]) == 0
    err = capsys.readouterr().err
    assert gpu_loads[-1] == (None, {"backend": "onnx", "quantize": "int8"})  # a fast backend stays on the CPU
    assert err.count("encoding with") == 1
    assert ("encoding with backend onnx int8: the backend the index records, at the precision given (--quantize int8; "
            "the index records int8)") in err


def test_encode_without_device_encodes_on_the_gpu(tmp_path, capsys, gpu_loads):
    corpus = write_corpus(tmp_path / "c.jsonl", ["a1", "a2"])
    assert encode_main(["--model", "minilm", "--corpus", str(corpus), "--out", str(tmp_path / "v"), "-q"]) == 0
    assert encode_main(["--model", "minilm", "--corpus", str(corpus), "--out", str(tmp_path / "w"), "-q",
                        "--backend", "onnx"]) == 0
    assert gpu_loads == [("cuda:0", {}), (None, {"backend": "onnx", "quantize": None})]
    assert json.loads((tmp_path / "v" / "shard.json").read_text())["model_fingerprint"] == "hash/torch/None"


def test_the_gpu_is_looked_for_only_when_auto_chooses():
    def no_call():
        raise AssertionError("looked for the GPU")

    assert resolve_backend("torch", None, torch_device=no_call) == ("torch", None, None)
    assert resolve_backend(None, None, device="cpu", torch_device=no_call)[0] in ("torch", "openvino")
    with pytest.raises(ValueError, match="not auto"):
        resolve_backend("auto", "int8", torch_device=no_call)
    backend, quantize, note = resolve_backend("auto", None, torch_device=lambda: "cuda:0")
    assert (backend, quantize) == ("torch", None) and "exact torch model on cuda:0" in note


def test_a_build_argument_error_comes_before_torch_loads(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", ["a1"])
    code = ("import sys; from aspire.index.__main__ import main; status = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'torch loaded'; sys.exit(status)")
    for flags in (["--backend", "auto", "--quantize", "int8"], ["--backend", "torch", "--quantize", "int8"]):
        done = subprocess.run([sys.executable, "-c", code, "build", "--corpus", str(corpus), "--out",
                               str(tmp_path / "idx"), *flags], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "--quantize" in done.stderr and "torch loaded" not in done.stderr
