"""Round 14 mends made outside the helpers' files: each test fails on the code before its fix."""

from __future__ import annotations

import argparse

import pytest

from aspire.cli import evaluate as evaluate_cli
from aspire.cli.evaluate_options import refuse_unused_by_search
from aspire.cliutil import backend_options


def test_backend_options_reads_cpu_index_as_the_cpu():
    # `cpu:0` is the CPU (`aspire.encoders.choice.on_cpu`); the check refused it as a non-CPU device
    args = argparse.Namespace(backend="onnx", quantize=None, device="cpu:0")
    assert backend_options(args) == {"backend": "onnx", "quantize": None}
    with pytest.raises(ValueError, match="encodes on the CPU; got --device cuda"):
        backend_options(argparse.Namespace(backend="onnx", quantize=None, device="cuda"))


def _search_args(device: str):
    parser = evaluate_cli.build_parser()
    args = parser.parse_args(["csfcube", "--model", "minilm", "--search-pipeline", "rerank=minl2",
                              "--out", "/tmp/unused"])
    args.device = device  # as an API caller passes it, past `device_name`'s normalisation
    return args.command_parser, args


def test_search_runner_accepts_cpu_index_where_it_accepts_cpu():
    parser, args = _search_args("cpu:0")
    refuse_unused_by_search(parser, args)  # the runner loads the model on the CPU anyway: nothing unread
    parser, args = _search_args("cuda")
    with pytest.raises(SystemExit):
        refuse_unused_by_search(parser, args)


def test_a_damaged_weights_file_is_named_by_its_folder(tiny_model_dir, tmp_path):
    import shutil

    from aspire.encoders.contextual import ContextualSentenceEncoder

    folder = tmp_path / "damaged"
    shutil.copytree(tiny_model_dir, folder)
    weights = next(folder.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a copy cut short
    with pytest.raises(ValueError, match=f"{folder}: its weights file does not load"):
        ContextualSentenceEncoder.from_pretrained(folder)
    ContextualSentenceEncoder.from_pretrained(tiny_model_dir)  # the whole copy loads


@pytest.mark.parametrize("tops, weights", [([], [0.5]), ([10], [])])
def test_a_rerank_sweep_of_no_setting_is_refused_naming_the_grid(tops, weights):
    from aspire.evaluate.context2doc_rerank import sweep

    with pytest.raises(ValueError, match="at least one top N and one weight"):
        sweep(None, {}, {}, tops, weights)  # refused before the benchmark is read
