"""A fast backend loaded from its cached export (issue 44): the load record written by the first load, read by the
next one without building the torch model; the same fingerprint and vectors; anything changed loads the model."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import backends, load_encoder
from aspire.encoders.choice import choose_backend, resolve_backend

PAPERS = [
    Paper("p1", "A new model", ["We propose a new model.", "It improves the results, e.g. on text.", "Fig 2."]),
    Paper("p2", "Citation similarity", ["The document similarity of scientific text is based on citation data."]),
]
FAST = [("onnx", None), ("onnx", "int8"), ("openvino", None), ("openvino", "bf16")]


@pytest.fixture()
def model_dir(tiny_model_dir, tmp_path):
    """A private copy of the tiny model: the tests change its files."""
    return shutil.copytree(tiny_model_dir, tmp_path / "tiny")


@pytest.mark.parametrize("backend, quantize", FAST)
def test_second_load_reads_the_record_without_the_torch_model(model_dir, cache, backend, quantize):
    first = load_encoder(model_dir, backend=backend, quantize=quantize)
    assert first.model.exact is not None
    record = backends.load_record_path(model_dir, backend, quantize, {})
    assert record.is_file()
    second = load_encoder(model_dir, backend=backend, quantize=quantize)
    assert second.model.exact is None  # no torch weights built
    assert second.fingerprint() == first.fingerprint()  # what indexes and vector caches are keyed by
    assert second.model.backend_tag == first.model.backend_tag and second.settings() == first.settings()
    assert second.dim == first.dim and second.device == torch.device("cpu")
    a, b = first.encode(PAPERS), second.encode(PAPERS)
    assert torch.equal(a.emb, b.emb) and torch.equal(a.mask, b.mask) and torch.equal(a.whole, b.whole)
    with pytest.raises(ValueError, match="backend='torch' to save"):
        second.save_pretrained(model_dir.parent / "saved")
    with pytest.raises(RuntimeError, match="inference only"):
        second.train()


def test_settings_given_key_their_own_record(model_dir, cache):
    plain = load_encoder(model_dir, backend="onnx")
    titled = load_encoder(model_dir, backend="onnx", include_title=True)
    again = load_encoder(model_dir, backend="onnx", include_title=True)
    assert again.model.exact is None and again.include_title and again.fingerprint() == titled.fingerprint()
    assert titled.fingerprint() != plain.fingerprint()


def test_a_changed_model_file_loads_the_torch_model(model_dir, cache):
    first = load_encoder(model_dir, backend="onnx")
    stat = (model_dir / "config.json").stat()
    os.utime(model_dir / "config.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    again = load_encoder(model_dir, backend="onnx")
    assert again.model.exact is not None and again.fingerprint() == first.fingerprint()


def test_a_damaged_graph_is_not_read_from_the_record(model_dir, cache, caplog):
    first = load_encoder(model_dir, backend="onnx")
    record = json.loads(backends.load_record_path(model_dir, "onnx", None, {}).read_text())
    graph = cache / "onnx" / record["graph"]
    graph.write_bytes(graph.read_bytes()[:-1] + b"\0")
    with caplog.at_level(logging.INFO, logger="aspire.encoders.backends"):
        again = load_encoder(model_dir, backend="onnx")
    assert again.model.exact is not None and again.fingerprint() == first.fingerprint()
    assert "SHA-256 differs" in caplog.text  # the record's check, then the export's own: exported again
    assert torch.equal(again.encode(PAPERS).emb, first.encode(PAPERS).emb)


def test_an_unreadable_record_loads_the_torch_model(model_dir, cache, caplog):
    load_encoder(model_dir, backend="onnx")
    backends.load_record_path(model_dir, "onnx", None, {}).write_text("{not json")
    with caplog.at_level(logging.INFO, logger="aspire.encoders.backends"):
        again = load_encoder(model_dir, backend="onnx")
    assert again.model.exact is not None and "not used" in caplog.text


def test_recorded_load_imports_no_transformers(model_dir, cache):
    load_encoder(model_dir, backend="openvino", quantize="bf16")  # writes the record
    code = (
        "import sys\n"
        "from aspire.encoders import load_encoder\n"
        f"enc = load_encoder({str(model_dir)!r}, backend='openvino', quantize='bf16')\n"
        "assert enc.model.exact is None\n"
        "heavy = [m for m in sys.modules if m.startswith(('transformers', 'torch._dynamo', 'peft', 'sympy'))]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "ASPIRE_CACHE": str(cache)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---- --backend auto (aspire.encoders.choice) -------------------------------------------------------------
def cpuinfo(tmp_path, flags: str):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 avx512f {flags}\n\nprocessor\t: 1\nflags\t\t: fpu {flags}\n")
    return path


@pytest.mark.parametrize("flags, installed, backend, says", [
    ("amx_bf16 avx512_bf16", True, "openvino", "OpenVINO bf16 (this CPU has amx_bf16, avx512_bf16)"),
    ("avx512_bf16", True, "openvino", "this CPU has avx512_bf16"),
    ("avx512_vnni", True, "torch", "this CPU has no AMX or AVX512-BF16"),
    ("amx_bf16", False, "torch", "OpenVINO is not installed"),
])
def test_auto_chooses_openvino_bf16_only_where_it_is_fast(tmp_path, flags, installed, backend, says):
    choice = choose_backend(cpuinfo=cpuinfo(tmp_path, flags), openvino_installed=installed)
    assert choice.backend == backend and says in choice.note
    assert choice.quantize == ("bf16" if backend == "openvino" else None)
    assert choice.options() == ({"backend": "openvino", "quantize": "bf16"} if backend == "openvino" else {})
    if backend == "torch":
        assert "exact torch model" in choice.note  # a fallback is said, never silent


def test_auto_keeps_torch_off_the_cpu_and_without_cpu_flags(tmp_path):
    assert choose_backend(device="cuda", cpuinfo=cpuinfo(tmp_path, "amx_bf16"), openvino_installed=True).backend == "torch"
    unread = choose_backend(cpuinfo=tmp_path / "none", openvino_installed=True)
    assert unread.backend == "torch" and "cannot be read" in unread.note


def test_auto_keeps_torch_for_a_query_adapter(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "aspire_encoder.json").write_text(json.dumps({"base": "minilm", "adapter": {"scope": "query"}}))
    choice = choose_backend(str(model), cpuinfo=cpuinfo(tmp_path, "amx_bf16"), openvino_installed=True)
    assert choice.backend == "torch" and "query adapter" in choice.note


def test_resolve_backend_reads_the_environment_and_keeps_named_backends(monkeypatch):
    monkeypatch.setenv("ASPIRE_BACKEND", "torch")
    assert resolve_backend(None, None) == ("torch", None, None)
    assert resolve_backend("onnx", "int8") == ("onnx", "int8", None)
    assert resolve_backend(None, "bf16") == ("torch", "bf16", None)  # --quantize alone: torch's bf16, as before
    monkeypatch.setenv("ASPIRE_BACKEND", "auto")
    backend, _, note = resolve_backend(None, None)
    assert note and backend == choose_backend().backend
    monkeypatch.setenv("ASPIRE_BACKEND", "tensorflow")
    with pytest.raises(ValueError, match="ASPIRE_BACKEND='tensorflow' is not a backend"):
        resolve_backend(None, None)
    with pytest.raises(ValueError, match="not auto"):
        resolve_backend("auto", "bf16")


def test_index_build_records_the_auto_backend_and_says_it(tmp_path, tiny_model_dir, cache, monkeypatch, caplog):
    from aspire.encoders import choice
    from aspire.index.__main__ import main as index_main

    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": p.paper_id, "title": p.title, "abstract": p.sentences}) + "\n"
                              for p in PAPERS))
    monkeypatch.delenv("ASPIRE_BACKEND")
    monkeypatch.setattr(choice, "native_bf16_flags", lambda *a: ["amx_bf16"])
    with caplog.at_level(logging.INFO, logger="aspire"):
        assert index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out",
                           str(tmp_path / "idx")]) == 0
    assert "encoding with OpenVINO bf16" in caplog.text
    config = (tmp_path / "idx" / "gen-000001" / "config.yaml").read_text()
    assert "backend: openvino" in config and "quantize: bf16" in config
    fast = load_encoder(tiny_model_dir, backend="openvino", quantize="bf16")
    manifest = json.loads((tmp_path / "idx" / "gen-000001" / "manifest.json").read_text())
    assert manifest["model_fingerprint"] == fast.fingerprint()  # the query encoder search loads fits the index
    monkeypatch.setattr(choice, "native_bf16_flags", lambda *a: [])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="aspire"):
        assert index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out",
                           str(tmp_path / "idx2")]) == 0
    assert "encoding with the exact torch model: this CPU has no AMX or AVX512-BF16" in caplog.text
    assert "backend: torch" in (tmp_path / "idx2" / "gen-000001" / "config.yaml").read_text()


@pytest.mark.parametrize("argv, flags, options, says", [
    ([], ["amx_bf16"], {"backend": "openvino", "quantize": "bf16"}, "encoding with OpenVINO bf16"),
    ([], [], {}, "encoding with the exact torch model: this CPU has no AMX or AVX512-BF16"),
    (["--backend", "torch"], ["amx_bf16"], {}, None),
])
def test_demo_says_its_backend_and_passes_it_on(tmp_path, monkeypatch, capsys, argv, flags, options, says):
    from aspire import demo
    from aspire.encoders import choice
    from aspire.evaluate import csfcube

    seen = []

    def fake_run(root, model, scorer, out, options):
        seen.append(options.encoder_options)
        return {"test": {g: {"MAP": 1.0, "NDCG%20": 2.0} for g in demo.SPECTER},
                "timings_s": {"load_model": 0.1, "encode": 0.2, "score": 0.3, "encode_from_cache": False}}

    monkeypatch.delenv("ASPIRE_BACKEND")
    monkeypatch.setattr(choice, "native_bf16_flags", lambda *a: flags)
    monkeypatch.setattr(csfcube, "run_csfcube", fake_run)
    from aspire.benchmarks.csfcube import FILES

    for name in FILES:  # the folder the demo checks for before any run (the runs themselves are faked)
        (tmp_path / name).touch()
    assert demo.main(["--data", str(tmp_path), "--out", str(tmp_path / "out"), *argv]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert seen == [options] * (len(demo.RUNS) + len(demo.ASPECT_RUNS))  # the aspect model on the same choice
    if says is None:  # a named backend: nothing to say
        assert not printed[0].startswith("encoding with")
    else:
        assert printed[0].startswith(says)  # one line, before any run
        assert sum(says in line for line in printed) == 1  # not said again for the aspect model (the same choice)
    assert sum(line.startswith("| minilm ") for line in printed) == len(demo.RUNS)
    assert sum(line.startswith("| aspire-minilm ") for line in printed) == len(demo.ASPECT_RUNS)
    assert any(line.startswith("seconds: model load / encoding") for line in printed)
    assert demo.main(["--data", str(tmp_path), "--out", str(tmp_path / "out"), "--aspect-model", "none", *argv]) == 0
    assert not any(line.startswith("| aspire-minilm ") for line in capsys.readouterr().out.splitlines())


def test_an_adapted_model_exports_with_its_token_types(tiny_model_dir, tmp_path, cache):
    """peft's forward takes **kwargs: the export asks the base model whether it reads token_type_ids (it left
    them out before, and an adapted model's fast vectors drifted: sentence cosine 0.88 for aspire-minilm)."""
    import onnx
    from test_hybrid import trained_adapter  # LoRA's B starts at 0: an untrained adapter would change nothing

    from aspire.encoders.backends import cached_onnx_model

    trained_adapter(tiny_model_dir, tmp_path / "adapted")
    exact = load_encoder(tmp_path / "adapted")
    assert exact.segment_ids
    assert not torch.allclose(exact.encode(PAPERS).emb, load_encoder(tiny_model_dir).encode(PAPERS).emb, atol=1e-2)
    for backend in ("onnx", "openvino"):
        fast = load_encoder(tmp_path / "adapted", backend=backend)
        a, b = exact.encode(PAPERS), fast.encode(PAPERS)
        assert torch.allclose(a.emb, b.emb, atol=1e-4), backend
    def products(encoder) -> int:  # the graph's matrix products
        graph = onnx.load(str(cached_onnx_model(encoder, None)), load_external_data=False).graph
        return sum(node.op_type in ("MatMul", "Gemm") for node in graph.node)

    # exported with the adapter folded in: the base's products, none for the LoRA branches beside them
    assert products(exact) == products(load_encoder(tiny_model_dir)) > 0
    assert torch.allclose(exact.encode(PAPERS).emb, load_encoder(tmp_path / "adapted", quantize="bf16").encode(PAPERS).emb,
                          atol=0.05)



# ---- the recorded tokenizer (aspire.encoders.recorded_tokenizer) -----------------------------------------
def test_recorded_tokenizer_encodes_as_transformers_does(tiny_model_dir):
    from aspire.encoders import ContextualSentenceEncoder
    from aspire.encoders.recorded_tokenizer import RecordedTokenizer, rebuild, record_spec

    exact = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    spec = record_spec(exact.tokenizer)
    assert spec is not None and spec["settings"]["size"] == len(exact.tokenizer)
    light = ContextualSentenceEncoder(exact.model, rebuild(spec), **exact.settings())
    assert isinstance(light.tokenizer, RecordedTokenizer) and len(light.tokenizer) == len(exact.tokenizer)
    for pair in (False, True):  # the encoder's shortest window counts them
        assert light.tokenizer.num_special_tokens_to_add(pair) == exact.tokenizer.num_special_tokens_to_add(pair)
    long = Paper("long", "A long abstract", [" ".join(["The document similarity of text is based on data."] * 12)] * 3)
    papers = [*PAPERS, long]
    a, b = exact.tokenize(papers), light.tokenize(papers)
    assert len(a.input_ids) > len(papers)  # overflow windows
    for field in ("input_ids", "attention_mask", "sent_index", "row_paper", "token_type_ids"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert a.truncation == b.truncation and a.sentences == b.sentences
    assert torch.equal(exact.embed_texts(["a text", "another text here"]), light.embed_texts(["a text", "another text here"]))
    with pytest.raises(TypeError, match="batches"):
        light.tokenizer("one text")
    with pytest.raises(TypeError, match="unsupported"):
        light.tokenizer(["a"], padding="max_length")


def test_no_recorded_tokenizer_when_it_would_differ(tiny_model_dir, monkeypatch):
    from aspire.encoders import ContextualSentenceEncoder, recorded_tokenizer

    exact = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    assert recorded_tokenizer.record_spec(object()) is None  # no Rust tokenizer inside
    monkeypatch.setattr(recorded_tokenizer, "_same_encodings", lambda *a: False)
    assert recorded_tokenizer.record_spec(exact.tokenizer) is None


def test_a_model_with_control_codes_records_transformers_tokenizer(model_dir, cache):
    from aspire.encoders import ContextualSentenceEncoder

    coded = ContextualSentenceEncoder.from_pretrained(model_dir)
    coded.add_codes(["[BACKGROUND]"], "[BACKGROUND]")
    coded.save_pretrained(model_dir.parent / "coded")
    first = load_encoder(model_dir.parent / "coded", backend="onnx")
    record = json.loads(backends.load_record_path(model_dir.parent / "coded", "onnx", None, {}).read_text())
    assert record["tokenizer"]["recorded"] is None
    again = load_encoder(model_dir.parent / "coded", backend="onnx")
    assert again.model.exact is None and again.code == "[BACKGROUND]" and again.fingerprint() == first.fingerprint()
    assert torch.equal(again.encode(PAPERS).emb, first.encode(PAPERS).emb)



def test_prepare_exports_and_records_the_auto_backend_once(model_dir, cache, monkeypatch):
    from aspire.encoders import choice

    monkeypatch.setenv("ASPIRE_BACKEND", "torch")
    assert "nothing to export" in choice.prepare(str(model_dir))
    assert not backends.load_record_path(model_dir, "openvino", "bf16", {}).is_file()
    monkeypatch.delenv("ASPIRE_BACKEND")
    monkeypatch.setattr(choice, "native_bf16_flags", lambda *a: ["amx_bf16"])
    said = choice.prepare(str(model_dir))
    assert said.startswith(f"{model_dir}: encoding with OpenVINO bf16") and "exported and recorded" in said
    assert backends.load_record_path(model_dir, "openvino", "bf16", {}).is_file()
    assert load_encoder(model_dir, backend="openvino", quantize="bf16").model.exact is None  # the demo's first load
