"""Round 16, the encoder helpers checked against references: mean pooling of half-precision vectors against a float64
mean (a float16 sum overflowed, a bfloat16 count rounded), CoSentBert's dev retrieval on an empty dev split (as
`split.dev_fraction` 0 writes it), `--backend auto` on a settings file whose `adapter` entry is not an object, and
the 8-bit block recipe on a weight two MatMuls read (onnxruntime's product as the reference)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from aspire.encoders.pooling import masked_mean


# ---- pooling -------------------------------------------------------------------------------------------------------
def test_half_precision_mean_does_not_overflow():
    """512 float16 pieces of 200: their float16 sum (102400) is past float16's 65504, so the mean came out inf."""
    hidden = torch.full((2, 512, 4), 200.0, dtype=torch.float16)
    mask = torch.ones(2, 512, dtype=torch.bool)
    mask[1, 300:] = False
    got = masked_mean(hidden, mask)
    assert got.dtype == torch.float16
    assert torch.equal(got, torch.full((2, 4), 200.0, dtype=torch.float16))


@pytest.mark.parametrize("dtype, half_ulp", [(torch.bfloat16, 2.0 ** -8), (torch.float16, 2.0 ** -11)])
def test_half_precision_mean_is_the_float64_mean_rounded_once(dtype, half_ulp):
    """Values near 1.4 (one ulp: 2**-7 in bfloat16, 2**-10 in float16) over 257 to 1000 pieces: the mean is within
    half an ulp (plus float32's own error) of the float64 mean of the same values, as one rounding leaves it; summed
    and counted in the input's dtype it was 1.2 ulps off in bfloat16 (0.0092) and 0.85 in float16 (0.00083)."""
    gen = torch.Generator().manual_seed(0)
    for length in (257, 301, 509, 1000):
        hidden = (1.4 + 0.1 * torch.randn(2, length, 8, generator=gen)).to(dtype)
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, length - 3:] = 0
        want = torch.stack([hidden[0].double().mean(0), hidden[1, : length - 3].double().mean(0)])
        got = masked_mean(hidden, mask)
        assert got.dtype == dtype
        assert (got.double() - want).abs().max().item() <= half_ulp * 1.01, length


def test_mean_keeps_float32_and_float64_and_their_gradients():
    """The widening changes nothing for float32 (the same sum and count as before) nor float64 (kept, not narrowed),
    and the gradient reaches the kept positions only."""
    gen = torch.Generator().manual_seed(1)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    for dtype in (torch.float32, torch.float64):
        hidden = torch.randn(2, 3, 5, generator=gen, dtype=dtype, requires_grad=True)
        got = masked_mean(hidden, mask)
        assert got.dtype == dtype
        torch.testing.assert_close(got[0], hidden[0, :2].mean(0), rtol=0, atol=0)
        assert torch.equal(got[1], torch.zeros(5, dtype=dtype))
        got.sum().backward()
        assert torch.equal(hidden.grad[0, :2], torch.full((2, 5), 0.5, dtype=dtype))
        assert not hidden.grad[0, 2].any() and not hidden.grad[1].any()
    meta = masked_mean(torch.empty(2, 3, 5, device="meta", dtype=torch.bfloat16), torch.ones(2, 3, device="meta"))
    assert meta.device.type == "meta" and meta.dtype == torch.bfloat16 and meta.shape == (2, 5)


# ---- CoSentBert ----------------------------------------------------------------------------------------------------
def test_an_empty_dev_split_scores_null_not_a_shape_error(tmp_path, tiny_model_dir):
    """`aspire data` writes an empty groups.dev.jsonl with split.dev_fraction 0 (allowed); sentence-transformers
    encodes no text as a (0,) tensor, and `same_set_retrieval` refused it: 'emb must be (N, D) with N = len(labels)
    = 0, got (0,)', after the model had loaded and before training. It scores as a split without a same-set pair."""
    from aspire.encoders.cosentbert import evaluate_contexts, load_sentence_model

    empty = tmp_path / "groups.dev.jsonl"
    empty.write_text("")
    result = evaluate_contexts(load_sentence_model(tiny_model_dir), empty)
    assert result["contexts"] == 0 and result["queries"] == 0
    assert math.isnan(result["acc@1"]) and math.isnan(result["mrr"])


# ---- the backend choice --------------------------------------------------------------------------------------------
def test_auto_choice_on_an_adapter_entry_that_is_not_an_object(tmp_path, tiny_model_dir):
    """A settings file whose `adapter` is a string made `--backend auto` raise AttributeError ('str' object has no
    attribute 'get') before anything loaded; the load itself names the file (`check_adapter_settings`)."""
    import shutil

    from aspire.encoders.adapters import check_adapter_settings
    from aspire.encoders.choice import choose_backend
    from aspire.encoders.pretrained import SETTINGS_FILE

    native = tmp_path / "cpuinfo"
    native.write_text("flags\t\t: fpu avx512_bf16\n")
    for entry in ("lora", ["query"], 3):
        model = tmp_path / f"model-{type(entry).__name__}"
        shutil.copytree(tiny_model_dir, model)
        (model / SETTINGS_FILE).write_text(json.dumps({"adapter": entry}))
        choice = choose_backend(str(model), "cpu", native, openvino_installed=True)
        assert (choice.backend, choice.quantize) == ("openvino", "bf16")
        with pytest.raises(ValueError, match="not an object with names"):
            check_adapter_settings(entry, str(model / SETTINGS_FILE))
    query = tmp_path / "model-query"
    shutil.copytree(tiny_model_dir, query)
    (query / SETTINGS_FILE).write_text(json.dumps({"adapter": {"names": ["query"], "kind": "lora", "scope": "query"}}))
    assert choose_backend(str(query), "cpu", native, openvino_installed=True).backend == "torch"


# ---- the 8-bit block recipe ----------------------------------------------------------------------------------------
def test_a_weight_two_matmuls_read_is_quantized_once(tmp_path):
    """Two MatMuls reading one weight each added a packed initializer of the same name (onnxruntime: 'Duplicate
    initializer ... will use the latest encountered'), and the count returned was of weights (1), not of the MatMuls
    replaced (2) as documented."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from aspire.encoders.onnx_int8 import matmul_nbits

    rng = np.random.default_rng(0)
    w, v = rng.normal(size=(64, 16)).astype(np.float32), rng.normal(size=(64, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y1"], name="m1"), helper.make_node("MatMul", ["x", "w"], ["y2"], name="m2"),
         helper.make_node("MatMul", ["x", "v"], ["y3"], name="m3")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", k]) for name, k in (("y1", 16), ("y2", 16), ("y3", 8))],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(v, "v")],
    )
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    assert matmul_nbits(src, dst) == 3
    model = onnx.load(str(dst))
    names = [t.name for t in model.graph.initializer]
    assert sorted(names) == ["v_q8", "v_scales", "w_q8", "w_scales"]
    assert [n.op_type for n in model.graph.node] == ["MatMulNBits"] * 3
    x = rng.normal(size=(3, 64)).astype(np.float32)
    y1, y2, y3 = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert np.array_equal(y1, y2)
    for got, want in ((y1, x @ w), (y3, x @ v)):
        assert np.abs(got - want).max() < 0.02 * np.abs(want).max()
