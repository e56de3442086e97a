"""Round 74 review of the day's GPU defaults: `index add --device cuda` to an index that records a fast backend
(OpenVINO, ONNX), and `aspire search --device cuda` on one, are refused, rightly (the index's vectors are the fast
backend's, which runs on the CPU), but the error said `--backend onnx encodes on the CPU`, naming a flag the user never
gave: the backend was the index's (or, for `index build`, the config's encode.backend). It now names what records
it and says to leave out --device. No GPU here:
`torch.cuda` is patched, as in tests/test_reliability_round74_gpuauto.py."""

from __future__ import annotations

import json

import pytest
import torch

from aspire.cli.search import main as search_main
from aspire.index.__main__ import main
from tests.test_index_shards import write_corpus
from tests.test_reliability_round74_gpuauto import build, gpu_loads  # noqa: F401 (fixture gpu_loads)


@pytest.fixture
def one_gpu(monkeypatch, gpu_loads):  # noqa: F811 (the imported fixture)
    """`gpu_loads`, with `--device cuda` accepted (`aspire.cliutil.device_name` counts the CUDA devices)."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    return gpu_loads


def test_add_with_a_gpu_device_to_a_fast_backend_index_names_the_index_not_a_backend_flag(tmp_path, capsys, one_gpu):
    assert build(capsys, tmp_path, "--backend", "onnx")[0] == 0
    index = tmp_path / "idx"
    more = write_corpus(tmp_path / "m.jsonl", ["b1"])
    assert main(["add", "--index", str(index), "--corpus", str(more), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: the index {index} records backend onnx, which encodes on the CPU; got --device cuda: "
                   "leave out --device\n")  # was "--backend onnx encodes on the CPU", a flag not given
    assert len(one_gpu) == 1  # the build's load only: refused before the model loads
    # the user's own --backend is named as the user's, as before
    assert main(["add", "--index", str(index), "--corpus", str(more), "--device", "cuda", "--backend", "onnx"]) == 2
    assert capsys.readouterr().err == "error: --backend onnx encodes on the CPU; got --device cuda\n"
    assert main(["add", "--index", str(index), "--corpus", str(more)]) == 0  # without --device: onnx on the CPU
    assert one_gpu[-1] == (None, {"backend": "onnx", "quantize": None})


def test_search_with_a_gpu_device_on_a_fast_backend_index_names_the_index(tmp_path, capsys, one_gpu):
    assert build(capsys, tmp_path, "--backend", "onnx", "--quantize", "int8")[0] == 0
    index = tmp_path / "idx"
    query = tmp_path / "query.json"
    query.write_text(json.dumps({"paper_id": "new", "title": "a title", "abstract": ["one sentence.", "two."]}))
    args = ["--index", str(index), "--query-file", str(query), "--quiet", "--device", "cuda"]
    assert search_main(args) == 2
    err = capsys.readouterr().err
    assert err == (f"error: the index {index} records backend onnx, which encodes on the CPU; got --device cuda: "
                   "leave out --device\n")
    assert search_main([*args, "--backend", "onnx"]) == 2  # the user's flag: named as given
    assert capsys.readouterr().err == "error: --backend onnx encodes on the CPU; got --device cuda\n"


def test_build_with_a_gpu_device_and_a_config_naming_a_fast_backend_names_the_config_key(tmp_path, capsys, one_gpu):
    status, err = build(capsys, tmp_path, "encode.backend=onnx", "--device", "cuda")
    assert status == 2
    assert err.endswith("error: the config (encode.backend) records backend onnx, which encodes on the CPU; got "
                        "--device cuda: leave out --device\n")  # was "--backend onnx ...": no such flag was given
    assert one_gpu == []  # refused before the model loads
    status, err = build(capsys, tmp_path, "--backend", "onnx", "--device", "cuda")  # the user's flag: named as given
    assert status == 2 and err.endswith("error: --backend onnx encodes on the CPU; got --device cuda\n")
