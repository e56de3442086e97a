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
