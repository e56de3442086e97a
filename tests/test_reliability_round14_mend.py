"""Round 14 mends made outside the helpers' files: each test fails on the code before its fix."""

from __future__ import annotations

import argparse

import pytest

from aspire.cli import evaluate as evaluate_cli
from aspire.cliutil import backend_options


def test_backend_options_reads_cpu_index_as_the_cpu():
    # `cpu:0` is the CPU (`aspire.encoders.choice.on_cpu`); the check refused it as a non-CPU device
    args = argparse.Namespace(backend="onnx", quantize=None, device="cpu:0")
    assert backend_options(args) == {"backend": "onnx", "quantize": None}
    with pytest.raises(ValueError, match="encodes on the CPU; got --device cuda"):
        backend_options(argparse.Namespace(backend="onnx", quantize=None, device="cuda"))


class _Reached(Exception):
    pass


@pytest.mark.parametrize("command, module, runner", [
    ("csfcube", "aspire.evaluate.csfcube", "run_csfcube_search"),
    ("reviewers", "aspire.evaluate.search_run", "run_reviewers_search"),
    ("context2doc", "aspire.evaluate.search_run", "run_search_pipeline"),
])
def test_search_pipeline_runs_on_the_device_given(command, module, runner, monkeypatch, tmp_path, tiny_model_dir):
    # every search runner takes `device=`; the command refused --device beside --search-pipeline (the runners loaded
    # the model on the CPU) and, once they took it, did not pass it on
    seen: dict = {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise _Reached(runner)

    monkeypatch.setattr(f"{module}.{runner}", record)
    with pytest.raises((_Reached, SystemExit)):
        evaluate_cli.main([command, "--model", str(tiny_model_dir), "--search-pipeline", "rerank=minl2",
                           "--device", "cpu", "--out", str(tmp_path / "o")])
    assert seen.get("device") == "cpu", seen


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


def test_the_demo_names_a_data_folder_that_is_not_csfcube_before_any_model_loads(tmp_path, capsys):
    import subprocess
    import sys

    (tmp_path / "evaluation_splits.json").write_text("{}")  # a folder, but not CSFCube's
    code = ("import sys; from aspire import demo; status = demo.main(['--data', sys.argv[1], '--out', sys.argv[2], "
            "'--backend', 'torch']); assert 'torch' not in sys.modules, 'torch loaded'; sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(tmp_path / "out")], capture_output=True,
                          text=True)
    assert done.returncode == 2, done.stderr
    assert "is not a CSFCube folder: it lacks abstracts-csfcube-preds.jsonl, test-pid2anns-csfcube-background.json" \
        in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_shard_write_that_fails_leaves_the_earlier_shard_and_no_folder_beside_it(tmp_path, monkeypatch):
    import errno

    import numpy as np

    from aspire.index import corpus as corpus_module
    from aspire.index.corpus import EncodedCorpus

    def corpus(value: float) -> EncodedCorpus:
        return EncodedCorpus(np.full((3, 4), value, dtype=np.float32), np.array([0, 2, 3]), ["a", "b"], ["A", "B"],
                             [["a0", "a1"], ["b0"]], [], [None, None], None)

    shard = tmp_path / "shards" / "shard-00000-of-00001"
    corpus(1.0).save_shard(shard, {"model_name": "m", "model_fingerprint": "f"})

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(corpus_module, "write_jsonl", disk_full)
    with pytest.raises(OSError, match="No space left"):
        corpus(2.0).save_shard(shard, {"model_name": "m", "model_fingerprint": "f"})
    assert sorted(p.name for p in shard.parent.iterdir()) == [shard.name]  # no half-written folder beside it
    monkeypatch.undo()
    loaded, _ = EncodedCorpus.load_shard(shard)
    assert np.all(loaded.vectors == 1.0)  # the earlier shard, whole


@pytest.mark.parametrize("width", [40, 10, 0, 50.0])
def test_a_ranked_list_narrower_than_its_head_line_is_refused_naming_width(width):
    from aspire.viz import plot_ranked_list

    with pytest.raises(ValueError, match="width must be an integer >= 41"):  # textwrap's 'placeholder too large'
        plot_ranked_list([], width=width)
