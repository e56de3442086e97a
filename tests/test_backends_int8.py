"""The int8 recipe of the ONNX backend (aspire.encoders.onnx_int8) on a tiny random BERT and tiny graphs."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

from aspire.encoders import backends, load_encoder, onnx_int8


def op_counts(path) -> collections.Counter:
    import onnx

    return collections.Counter(node.op_type for node in onnx.load(str(path)).graph.node)


@pytest.mark.parametrize("bits", [8, 4])
def test_block_quantize_rounds_each_weight_to_its_block_scale(bits):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(70, 5)).astype(np.float32)  # K=70: the last block of 32 is padded
    w[:32, 1] = 0.0  # an all-zero block keeps a usable scale
    q, scale = onnx_int8.block_quantize(w, bits=bits, block=32)
    assert q.dtype == np.uint8 and q.shape == (5, 3, 32 * bits // 8) and scale.shape == (15,)
    if bits == 4:  # unpack: low nibble first
        q = np.stack([q & 0xF, q >> 4], axis=-1).reshape(5, 3, 32)
    back = (q.astype(np.float32) - 2 ** (bits - 1)) * scale.reshape(5, 3, 1)  # (N, blocks, block)
    back = back.reshape(5, 96)[:, :70].T  # (K, N)
    step = np.repeat(scale.reshape(5, 3), 32, axis=1)[:, :70].T
    assert np.all(np.abs(back - w) <= step / 2 + 1e-7)
    assert np.all(back[:32, 1] == 0.0)
    assert np.abs(back).max() == pytest.approx(np.abs(w).max(), rel=1e-6)  # the block maximum is exact


def test_block_quantize_refuses_other_widths():
    with pytest.raises(ValueError, match="bits must be 4 or 8, got 3"):
        onnx_int8.block_quantize(np.ones((4, 4), np.float32), bits=3)


def test_matmul_nbits_replaces_constant_weights_and_keeps_the_product(tmp_path):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    w1, w2 = rng.normal(size=(64, 48)).astype(np.float32), rng.normal(size=(48, 16)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2"),
         helper.make_node("MatMul", ["y", "x2"], ["z"], name="mm_of_two_inputs")],  # no constant weight
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64]),
              helper.make_tensor_value_info("x2", TensorProto.FLOAT, [16, "m"])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", "m"])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    assert onnx_int8.matmul_nbits(src, dst) == 2
    assert op_counts(dst) == {"MatMulNBits": 2, "MatMul": 1, "Relu": 1}
    assert {t.name for t in onnx.load(str(dst)).graph.initializer}.isdisjoint({"w1", "w2"})  # fp32 weights gone
    feed = {"x": rng.normal(size=(3, 64)).astype(np.float32), "x2": np.eye(16, dtype=np.float32)}
    want = np.maximum(feed["x"] @ w1, 0) @ w2
    (got,) = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, feed)
    assert np.abs(got - want).max() < 0.02 * np.abs(want).max()


def test_int8_graph_is_fused_and_quantized_but_the_down_projections(tiny_model_dir, cache):
    exact = load_encoder(tiny_model_dir)
    attention = exact.model.config._attn_implementation
    path = backends.cached_onnx_model(exact, "int8")
    assert onnx_int8.RECIPE in path.name and backends.INT8_RECIPE == onnx_int8.RECIPE
    ops = op_counts(path)
    assert ops["SkipLayerNormalization"] == 4 and ops["EmbedLayerNormalization"] == 1
    assert ops["QAttention"] == 2 and "Attention" not in ops
    assert ops["MatMulInteger"] == 4  # per layer: the attention output and the feed-forward input projection
    assert ops["MatMul"] == 2 and "MatMulNBits" not in ops  # per layer: the feed-forward output projection, fp32
    assert exact.model.config._attn_implementation == attention  # the export used a copy
    assert not list(path.parent.glob(".*"))  # no temporary file or folder left behind


def test_fused_int8_graph_honours_the_attention_mask_of_a_padded_batch(tiny_model_dir, cache):
    exact = load_encoder(tiny_model_dir)
    fast = load_encoder(tiny_model_dir, backend="onnx", quantize="int8")
    texts = ["a model", "the document similarity of scientific text is based on citation data"]
    enc = exact.tokenizer(texts, padding=True, return_tensors="pt")  # row 0 padded
    assert not enc["attention_mask"][0].all()
    (got,) = fast.model.session.run(["last_hidden_state"], {k: v.numpy() for k, v in enc.items()})
    (alone,) = fast.model.session.run(["last_hidden_state"], {k: v[:1, :4].numpy() for k, v in enc.items()})
    with torch.inference_mode():
        want = exact.model(**enc).last_hidden_state
    real = enc["attention_mask"].bool()
    cos = torch.nn.functional.cosine_similarity(torch.from_numpy(got)[real], want[real], dim=-1)
    assert cos.min() > 0.99
    # the padded row equals the same row run unpadded (the padding is masked out, not attended to)
    np.testing.assert_allclose(got[0, :4], alone[0], atol=3e-3)  # 4e-4 measured; 1.7e-2 with the mask ignored
