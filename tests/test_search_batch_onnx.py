"""The ONNX export's advanced indexing never sees a negative index (issue 45, item 7).

`torch.onnx.export` warns that aten::index (the attention mask's `padding_mask[batch_idx, kv_idx]`) is exported
as flattened Gather arithmetic that is wrong for negative indices. This test runs the exported graph of a tiny
BERT on right-padded batches of many shapes, with every index the graph computes for a Gather exposed as an
output, and checks each is in range; `export_onnx` then silences that one warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def computed_gather_indices(graph) -> list[tuple[str, str]]:
    """(index tensor, data tensor) of each Gather whose indices the graph computes (not an input or a constant)."""
    given = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    given |= {n.output[0] for n in graph.node if n.op_type == "Constant"}
    return [(n.input[1], n.input[0]) for n in graph.node if n.op_type.startswith("Gather") and n.input[1] not in given]


def test_the_exported_graph_computes_no_negative_index(tmp_path, tiny_model_dir):
    from transformers import BertModel

    from aspire.encoders.backends import export_onnx

    model = BertModel.from_pretrained(tiny_model_dir).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export_onnx(model, tmp_path / "m.onnx")
    assert not [w for w in caught if "negative values" in str(w.message)]  # silenced, as this test allows
    graph = onnx.load(str(tmp_path / "m.onnx"))
    computed = computed_gather_indices(graph.graph)
    assert computed, "the export computes no Gather index: the mask indexing this test guards has changed"
    names = [name for name, _ in computed]
    graph.graph.output.extend([onnx.ValueInfoProto(name=name) for name in names])
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch in (1, 2, 3, 5):
        for longest in (1, 2, 7, 20, 64):
            lengths = rng.integers(1, longest + 1, batch)
            lengths[0] = longest  # a group is cut to its longest row (GroupedRows)
            mask = (np.arange(longest)[None, :] < lengths[:, None]).astype(np.int64)  # right-padded
            ids = rng.integers(1, model.config.vocab_size, (batch, longest)) * mask
            outs = session.run(names, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
            hidden = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
            for name, values in zip(names, outs):
                assert values.min() >= 0, f"{name}: negative index {values.min()} (batch {batch}, length {longest})"
            np.testing.assert_allclose(session.run(["last_hidden_state"], {
                "input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0][mask.astype(bool)],
                hidden.detach().numpy()[mask.astype(bool)], atol=1e-4)


def test_openvino_keeps_kernels_for_a_bounded_number_of_input_shapes(tiny_model_dir, monkeypatch):
    """OpenVINO's CPU plugin cached kernels for every input shape (5,000 by default): an index build's memory grew
    to 2.26 GB over 2,000 abstracts and kept growing (search_batch.md). The model is now compiled to keep 200."""
    openvino = pytest.importorskip("openvino")
    from aspire.encoders import load_encoder

    asked = []
    compile_model = openvino.Core.compile_model

    def recording(self, model, device=None, config=None):
        asked.append(dict(config or {}))
        return compile_model(self, model, device, config)

    monkeypatch.setattr(openvino.Core, "compile_model", recording)
    encoder = load_encoder(tiny_model_dir, backend="openvino", quantize="bf16")
    assert [c.get("CPU_RUNTIME_CACHE_CAPACITY") for c in asked] == [200]
    assert len(encoder.encode(["one sentence. and another one."])) == 1  # the plugin takes the setting
