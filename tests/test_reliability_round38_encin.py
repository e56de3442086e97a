"""Round 38: encoder pieces (pooling, inputs, the int8 recipe) against hand loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aspire.encoders import onnx_int8
from aspire.encoders.pooling import masked_mean


def hand_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(hidden.shape[0], hidden.shape[2], dtype=torch.float64)
    for n in range(hidden.shape[0]):
        rows = [hidden[n, t].double() for t in range(hidden.shape[1]) if bool(mask[n, t])]
        if rows:
            out[n] = torch.stack(rows).sum(0) / len(rows)
    return out


def test_masked_mean_matches_a_hand_loop_with_nan_padding_and_an_empty_row():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(4, 7, 5, generator=g)
    mask = torch.rand(4, 7, generator=g) > 0.4
    mask[2] = False  # an empty row: documented as 0
    want = hand_mean(hidden, mask)
    hidden[~mask] = float("nan")
    got = masked_mean(hidden, mask)
    assert torch.isfinite(got).all()
    assert torch.allclose(got.double(), want, atol=1e-6)
    assert (got[2] == 0).all()


def test_masked_mean_gives_left_out_positions_no_gradient():
    hidden = torch.randn(2, 5, 3)
    hidden[0, 4] = float("inf")
    hidden.requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    masked_mean(hidden, mask).sum().backward()
    want = mask[..., None].float() / mask.sum(1)[:, None, None]
    assert torch.equal(hidden.grad, want.expand_as(hidden))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_masked_mean_low_precision_long_rows_do_not_overflow(dtype):
    hidden = torch.full((1, 600, 3), 200.0, dtype=dtype)
    hidden[0, ::2] = 100.0
    mask = torch.ones(1, 600, dtype=torch.bool)
    mask[0, 590:] = False
    got = masked_mean(hidden, mask)
    assert got.dtype == dtype
    assert torch.allclose(got.double(), hand_mean(hidden, mask), rtol=1e-2)


def test_block_quantize_refuses_non_finite_weights():
    w = np.ones((32, 2), np.float32)
    w[0, 0] = np.inf  # before: the block's scale was inf and its 31 other weights were stored as 0, silently
    with pytest.raises(ValueError, match="NaN or inf"):
        onnx_int8.block_quantize(w)
    w[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        onnx_int8.block_quantize(w)


@pytest.mark.parametrize("shape", [(64,), (2, 32, 4)])
def test_block_quantize_names_a_weight_that_is_not_2d(shape):
    with pytest.raises(ValueError, match="2-D"):
        onnx_int8.block_quantize(np.ones(shape, np.float32))


@pytest.mark.parametrize("bits", [4, 8])
def test_block_quantize_dequantizes_within_half_a_step(bits):
    w = np.random.default_rng(3).normal(size=(40, 3)).astype(np.float32)  # K=40: the last block is padded
    q, scale = onnx_int8.block_quantize(w, bits=bits, block=16)
    if bits == 4:
        q = np.stack([q & 15, q >> 4], -1).reshape(3, 3, 16)
    s = scale.reshape(3, 3)
    back = ((q.astype(np.float32) - 2 ** (bits - 1)) * s[..., None]).reshape(3, 48)[:, :40].T
    for n in range(3):
        for b in range(3):
            rows = slice(16 * b, min(16 * b + 16, 40))
            assert s[n, b] == pytest.approx(np.abs(w[rows, n]).max() / (2 ** (bits - 1) - 1))
            assert np.abs(back[rows, n] - w[rows, n]).max() <= s[n, b] / 2 + 1e-6


def test_matmul_nbits_names_a_non_finite_initializer(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = np.ones((32, 4), np.float32)
    w[3, 1] = np.nan
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w_bad"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], [numpy_helper.from_array(w, "w_bad")])
    src = tmp_path / "f.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    with pytest.raises(ValueError, match="w_bad.*NaN or inf"):
        onnx_int8.matmul_nbits(src, tmp_path / "q.onnx")
    assert not (tmp_path / "q.onnx").exists()


LONG = ("we propose a new approach to document similarity. the model improves the state of the art. "
        "results show that our method is based on scientific text and citation data. "
        "the task is learning sentence similarity with neural network models. we show two results.")


@pytest.mark.parametrize("include_title,code", [(False, None), (True, None), (True, "[TASK]")])
def test_sentence_pooling_and_truncation_records_match_hand_loops(tiny_model_dir, include_title, code):
    from aspire.data import Paper
    from aspire.encoders import ContextualSentenceEncoder

    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, max_length=24, include_title=include_title)
    if code:
        enc.add_codes([code], code)
    papers = [Paper("p0", "a title of the paper", LONG.split(". ")), Paper("p1", "short", ["we show results."])]
    inputs = enc.tokenize(papers)
    if code:  # the code is the second piece of every row, attended and never pooled
        code_piece = enc.tokenizer.convert_tokens_to_ids(code)
        assert (inputs.input_ids[:, 1] == code_piece).all() and (inputs.sent_index[:, 1] == -1).all()
        assert inputs.input_ids.shape[1] <= 24
    # records: hand loop over rows (abstract pieces only; the title, sentence 0 when titled, never listed)
    rows_of = {b: [r for r in range(len(inputs.row_paper)) if int(inputs.row_paper[r]) == b] for b in range(2)}
    want = []
    for b, rows in rows_of.items():
        if len(rows) < 2:
            continue
        title = {0} if inputs.titled[b] else set()
        first = set(inputs.sent_index[rows[0]].tolist()) - {-1} - title
        later = {s for r in rows[1:] for s in inputs.sent_index[r].tolist()} - {-1} - title
        want.append((papers[b].paper_id, sorted(later - first), sorted(later & first)))
    got = [(t.paper_id, t.cut, t.partial) for t in inputs.truncation]
    assert got == want and want and want[0][1]  # p0 overflows with whole sentences cut
    # pooling: each sentence's vector is the mean of exactly its pieces, over every window
    with torch.no_grad():
        batch = enc.forward(inputs)
        hidden = enc.model(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                           token_type_ids=inputs.token_type_ids).last_hidden_state
    for b in range(2):
        for s in range(inputs.n_sentences[b]):
            pieces = [hidden[r, t] for r in rows_of[b] for t in range(hidden.shape[1])
                      if int(inputs.sent_index[r, t]) == s]
            assert pieces, (b, s)
            assert torch.allclose(batch.emb[b, s], torch.stack(pieces).mean(0), atol=1e-5)
        assert not batch.mask[b, inputs.n_sentences[b]:].any()
