"""Round 77: `aspire index build/encode-shard --quantize int8` (no --backend) with a config naming `encode.backend: onnx`
was refused as "--backend torch --quantize int8 and the config's encode.backend onnx encode.quantize None disagree: give
one of them", naming a --backend the user never typed; it now names the flags as given, what the config records, and
the flags that match it. `load_search_encoder` recorded {} for a given encoder, though it carries the checkpoint a
training run's folder loaded (`loaded_checkpoint`). Tiny random models, no network."""

from __future__ import annotations

import pytest
from test_reliability_round43_indexcli import write_corpus
from test_reliability_round74_provenance import _loaded, _run_folder

from aspire.index.__main__ import main as index_main


class Reached(Exception):
    """Raised by a stand-in for the runner: the command got past its checks."""


@pytest.fixture
def reached(monkeypatch):
    """The (backend, quantize) the build or the shards' encoding would have run with, once they are reached."""
    seen: dict = {}

    def record(*args, **kwargs):  # both take the config fourth
        seen["encode"] = (args[3].encode.backend, args[3].encode.quantize)
        raise Reached

    monkeypatch.setenv("ASPIRE_BACKEND", "torch")
    monkeypatch.setattr("aspire.index.build.build_index", record)
    monkeypatch.setattr("aspire.index.shards.run_encode_shard", record)
    monkeypatch.setattr("aspire.index.__main__.load_encoder", lambda *a, **k: pytest.fail("a model was loaded"))
    return seen


def _argv(command: str, tmp_path, tiny_model_dir) -> list[str]:
    corpus = write_corpus(tmp_path / "papers.jsonl", 2)
    where = ["--out", str(tmp_path / "idx")] if command == "build" else ["--shards", str(tmp_path / "shards")]
    return [command, "--model", str(tiny_model_dir), "--corpus", str(corpus), *where, "--quiet"]


@pytest.mark.parametrize("command", ["build", "encode-shard"])
@pytest.mark.parametrize("config, flags, message, match", [
    (["encode.backend=onnx"], ["--quantize", "int8"],
     "--quantize int8 (no --backend: --quantize alone keeps torch) and the config's encode.backend onnx (no "
     "encode.quantize) disagree: leave out --quantize int8 to encode as the config says, or give --backend onnx to "
     "match it", ["--backend", "onnx"]),
    (["encode.backend=onnx", "encode.quantize=int8"], ["--backend", "onnx"],
     "--backend onnx and the config's encode.backend onnx encode.quantize int8 disagree: leave out --backend onnx to "
     "encode as the config says, or give --backend onnx --quantize int8 to match it",
     ["--backend", "onnx", "--quantize", "int8"]),
    (["encode.quantize=bf16"], ["--backend", "openvino", "--quantize", "bf16"],
     "--backend openvino --quantize bf16 and the config's encode.quantize bf16 (no encode.backend: torch) disagree: "
     "leave out --backend openvino --quantize bf16 to encode as the config says, or give --backend torch --quantize "
     "bf16 to match it", ["--backend", "torch", "--quantize", "bf16"])])
def test_a_disagreement_with_the_configs_backend_names_the_flags_as_given(
        tmp_path, tiny_model_dir, capsys, reached, command, config, flags, message, match):
    argv = [*_argv(command, tmp_path, tiny_model_dir), *config]
    assert index_main([*argv, *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "None" not in err
    assert not reached
    # both ways out the message gives are taken: the config's backend, as the flags that match it or alone
    for given in (match, []):
        with pytest.raises(Reached):
            index_main([*argv, *given])
        expected = (match[1], match[3] if len(match) > 2 else None)
        assert reached.pop("encode") == expected


def test_a_given_encoder_records_the_checkpoint_it_loaded(tmp_path, tiny_model_dir, monkeypatch):
    from aspire.encoders import load_encoder
    from aspire.evaluate.search_run import load_search_encoder

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    run = _run_folder(tmp_path, tiny_model_dir)
    encoder = load_encoder(run)
    for device in (None, "cpu"):
        given, loaded = load_search_encoder(str(run), encoder, None, device)
        assert given is encoder and loaded == {"checkpoint": _loaded(run, 1)}
    loaded_here = load_search_encoder(str(run), None, None, None)[1]  # as the same model loaded here records it
    assert loaded_here == {"checkpoint": _loaded(run, 1)}
    assert load_search_encoder(str(tiny_model_dir), load_encoder(tiny_model_dir), None, None)[1] == {}
