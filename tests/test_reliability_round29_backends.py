"""Round 29: the exported backends on a model in half precision (fp16; transformers 5 loaded an fp16 checkpoint in
fp16, which the exact path now widens to fp32): the export is fp32 (as its file name and tag say) and runs in ONNX Runtime and OpenVINO; a cached fp16 graph
(exported before) is exported again with a warning."""

from __future__ import annotations

import logging
import shutil

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import backends, load_encoder
from aspire.storage import write_record

PAPERS = [
    Paper("p1", "A new model", ["We propose a new model.", "It improves the results, e.g. on text.", "Fig 2."]),
    Paper("p2", "Citation similarity", ["The document similarity of scientific text is based on citation data."]),
    Paper("p3", "Two", ["Data.", "The paper show results."]),
]


@pytest.fixture(scope="module")
def fp16_dir(tiny_model_dir, tmp_path_factory):
    """The tiny BERT's folder with its weights saved in float16."""
    from transformers import BertModel

    folder = tmp_path_factory.mktemp("tiny-bert-fp16") / "model"
    shutil.copytree(tiny_model_dir, folder)
    BertModel.from_pretrained(tiny_model_dir).half().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def exact_fp16(fp16_dir, cache):
    """The exact encoder of the fp16 checkpoint narrowed back to fp16 (loading widens it to fp32): a half-precision
    model as a user narrows one, or as transformers 5 loaded the checkpoint before the widening."""
    encoder = load_encoder(fp16_dir)
    assert encoder.model.dtype == torch.float32
    encoder.model.half()
    return encoder


def upcast_vectors(encoder, papers):
    """The exact encoder's vectors with its model's (fp16) weights computed in fp32: what an fp32 graph gives."""
    model = encoder.model
    encoder.model = model.float()
    try:
        return encoder.encode(papers)
    finally:
        encoder.model = model.half()


def test_export_of_a_half_precision_model_is_an_fp32_graph(tiny_model_dir, tmp_path):
    pytest.importorskip("onnxruntime")
    import onnx
    from transformers import BertModel

    model = BertModel.from_pretrained(tiny_model_dir).half().eval()
    path = tmp_path / "graph.onnx"
    backends.export_onnx(model, path)  # the old export: an fp16 graph ONNX Runtime refuses to load
    output = onnx.load(str(path)).graph.output[0]
    assert output.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert model.dtype == torch.float16  # the model itself is left as it is
    ids = torch.tensor([[2, 10, 11, 12, 3], [2, 13, 3, 0, 0]])
    mask = (ids != 0).long()
    (got,) = backends.onnx_session(path).run(
        ["last_hidden_state"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                                "token_type_ids": torch.zeros_like(ids).numpy()})
    with torch.inference_mode():
        want = model.float()(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(torch.from_numpy(got)[real], want[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("backend,quantize,atol", [("onnx", None, 1e-4), ("openvino", None, 1e-4), ("onnx", "int8", None)])
def test_a_float16_checkpoint_runs_on_the_exported_backends(fp16_dir, exact_fp16, backend, quantize, atol):
    pytest.importorskip("onnxruntime")
    if backend == "openvino":
        pytest.importorskip("openvino")
    fast = load_encoder(fp16_dir, backend=backend, quantize=quantize)  # the old export: a load error from the runtime
    got = fast.encode(PAPERS)
    want = upcast_vectors(exact_fp16, PAPERS)
    assert got.paper_ids == want.paper_ids and torch.equal(got.mask, want.mask)
    if atol is not None:  # fp32 graph: the upcast weights' function, to the runtime's arithmetic
        torch.testing.assert_close(got.emb, want.emb, atol=atol, rtol=atol)
    # and close to the exact fp16 model's own vectors (its fp16 arithmetic; int8's quantization)
    exact = exact_fp16.encode(PAPERS)
    cosines = torch.nn.functional.cosine_similarity(got.emb[got.mask], exact.emb[exact.mask], dim=-1)
    assert cosines.min() > 0.99
    assert fast.model.backend_tag.startswith(f"{backend}-") and "fp16" not in fast.model.backend_tag


def test_fp16_and_fp32_checkpoints_have_different_exports(tiny_model_dir, exact_fp16, cache):
    exact_fp32 = load_encoder(tiny_model_dir)
    assert backends.onnx_model_path(exact_fp16.fingerprint(), None) != backends.onnx_model_path(exact_fp32.fingerprint(), None)


def test_a_cached_fp16_graph_is_exported_again(fp16_dir, exact_fp16, monkeypatch, tmp_path, caplog):
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    # the graph an earlier export left: the fp16 model traced as it is, with a valid record and config hash
    path = backends.onnx_model_path(exact_fp16.fingerprint(), None)
    path.parent.mkdir(parents=True)
    ids = torch.tensor([[2, 10, 11, 3], [2, 12, 3, 0]])
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad():
        torch.onnx.export(backends._LastHiddenState(exact_fp16.model).eval(), (ids, (ids != 0).long(), torch.zeros_like(ids)),
                          str(path), input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]},
                          opset_version=backends.OPSET, dynamo=False)
    write_record(path, {backends.CONFIG_KEY: backends.model_digest(exact_fp16.model)})
    with caplog.at_level(logging.WARNING, logger="aspire.encoders.backends"):
        got = backends.cached_onnx_model(exact_fp16, None)  # the half model's graph, as its fast backend asks for it
    assert got == path
    assert any("float16 or bfloat16 weights" in r.getMessage() and "exporting it again" in r.getMessage() for r in caplog.records)
    import onnx

    weights = {t.data_type for t in onnx.load(str(path)).graph.initializer if t.data_type != onnx.TensorProto.INT64}
    assert weights == {onnx.TensorProto.FLOAT}
    # and the checkpoint itself loads widened, its fast backend agreeing with the fp16 weights computed in fp32
    fast = load_encoder(fp16_dir, backend="onnx")
    torch.testing.assert_close(fast.encode(PAPERS).emb, upcast_vectors(exact_fp16, PAPERS).emb, atol=1e-4, rtol=1e-4)


def test_an_fp16_checkpoint_loads_widened_to_fp32_with_the_fp32_save_s_vectors_and_fingerprint(fp16_dir, tmp_path):
    """transformers 5 kept the checkpoint's fp16: the "exact" torch path ran in half precision on the CPU (vectors
    ~1e-3 from the same weights in fp32). Widened on load, it equals the same weights saved in fp32, bit for bit."""
    from transformers import BertModel

    wide_dir = tmp_path / "wide"
    shutil.copytree(fp16_dir, wide_dir)
    BertModel.from_pretrained(fp16_dir).float().save_pretrained(wide_dir)
    narrow, wide = load_encoder(fp16_dir), load_encoder(wide_dir)
    assert narrow.model.dtype == torch.float32
    assert narrow.fingerprint() == wide.fingerprint()
    a, b = narrow.encode(PAPERS), wide.encode(PAPERS)
    assert torch.equal(a.emb, b.emb) and torch.equal(a.whole, b.whole)
