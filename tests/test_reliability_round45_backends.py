"""Round 45: the encoding backends against the exact torch model on a tiny random BERT: vectors within tolerance,
batch-size independence, the export cache keyed by the weights, a damaged export rebuilt, unknown names refused."""

from __future__ import annotations

import logging
import shutil

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import backends, load_encoder

PAPERS = [
    Paper("p1", "A new model", ["We propose a new model.", "It improves the results, e.g. on text.", "Fig 2."]),
    Paper("p2", "Citation similarity", ["The document similarity of scientific text is based on citation data."]),
    Paper("p3", "Two", ["Data.", "The paper show results."]),
    Paper("p4", "Aspect", ["We show a method.", "The task is language learning with neural network models."]),
]

CASES = [("onnx", None, 1e-4), ("openvino", None, 1e-4), ("torch", "bf16", None), ("onnx", "int8", None)]


def _need(backend):
    if backend in ("onnx", "openvino"):
        pytest.importorskip("onnxruntime")
    if backend == "openvino":
        pytest.importorskip("openvino")


@pytest.mark.parametrize("backend,quantize,atol", CASES)
def test_fast_backends_match_the_exact_model_and_do_not_depend_on_the_batch(tiny_model_dir, cache, backend, quantize, atol):
    _need(backend)
    exact = load_encoder(tiny_model_dir).encode(PAPERS)
    fast = load_encoder(tiny_model_dir, backend=backend, quantize=quantize)
    got = fast.encode(PAPERS)
    assert got.paper_ids == exact.paper_ids and torch.equal(got.mask, exact.mask)
    if atol is not None:
        torch.testing.assert_close(got.emb, exact.emb, atol=atol, rtol=atol)
        torch.testing.assert_close(got.whole, exact.whole, atol=atol, rtol=atol)
    cos = torch.nn.functional.cosine_similarity(got.emb[got.mask], exact.emb[exact.mask], dim=-1)
    assert cos.min() > 0.99
    assert torch.nn.functional.cosine_similarity(got.whole, exact.whole, dim=-1).min() > 0.99
    one = [fast.encode([p]) for p in PAPERS]  # batch size 1
    for i, single in enumerate(one):
        n = int(single.mask.sum())
        torch.testing.assert_close(single.emb[0, :n], got.emb[i, :n], atol=5e-3 if quantize else 1e-5, rtol=1e-3)


def test_a_changed_weight_gets_a_new_export(tiny_model_dir, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    from transformers import BertModel

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    first = load_encoder(folder, backend="onnx")
    model = BertModel.from_pretrained(folder)
    with torch.no_grad():
        model.encoder.layer[0].output.dense.weight[0, 0] += 0.5
    model.save_pretrained(folder)
    second = load_encoder(folder, backend="onnx")
    exports = sorted((tmp_path / "cache" / "onnx").glob("*.onnx"))
    assert len(exports) == 2
    assert first.fingerprint() != second.fingerprint()
    exact = load_encoder(folder).encode(PAPERS)
    torch.testing.assert_close(second.encode(PAPERS).emb, exact.emb, atol=1e-4, rtol=1e-4)


def test_a_damaged_export_is_rebuilt_naming_the_file(tiny_model_dir, tmp_path, monkeypatch, caplog):
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    exact = load_encoder(tiny_model_dir)
    path = backends.cached_onnx_model(exact, None)
    good = path.read_bytes()
    path.write_bytes(good[:-10] + b"0123456789")
    with caplog.at_level(logging.WARNING, logger="aspire.encoders.backends"):
        again = backends.cached_onnx_model(exact, None)
    assert again == path and path.read_bytes() == good
    assert any(path.name in r.getMessage() and "exporting it again" in r.getMessage() for r in caplog.records)


def test_unknown_backend_and_precision_names_are_refused(tiny_model_dir):
    with pytest.raises(ValueError, match="valid.*torch.*onnx.*openvino"):
        load_encoder(tiny_model_dir, backend="tensorrt")
    with pytest.raises(ValueError, match="valid.*bf16.*int8"):
        load_encoder(tiny_model_dir, backend="onnx", quantize="fp8")
