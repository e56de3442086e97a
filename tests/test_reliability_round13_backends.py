"""Round 13 correctness sweep of the fast encoder backends' invariance to batching: the int8 ONNX graph quantizes
its activations with one scale per session run, so it runs one row a run (`backends.onnx_transformer`), tagged
`/per-row` apart from the vectors of length groups; the fp32 tags stay as they were."""

from __future__ import annotations

import json

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import backends, load_encoder
from aspire.encoders.backends import InferenceEncoder

# papers of very different lengths: in one batch their rows fall into several length groups
PAPERS = [Paper(f"p{i}", f"Paper {i} on citation data", ["We propose a new model for scientific text."] * (1 + 3 * i)
                + ["It improves the results, e.g. on citation data."] * (i % 3)) for i in range(7)]


@pytest.fixture(scope="module")
def int8(tiny_model_dir, cache) -> InferenceEncoder:
    return load_encoder(tiny_model_dir, backend="onnx", quantize="int8")


def grouped(encoder: InferenceEncoder, tiny_model_dir) -> InferenceEncoder:
    """The same int8 graph run in length groups, as the backend did before."""
    exact = load_encoder(tiny_model_dir)
    path = backends.cached_onnx_model(exact, "int8")
    fast = backends.OnnxTransformer(exact.model, backends.onnx_session(path), "grouped")
    return InferenceEncoder(fast, encoder.tokenizer, name=encoder.name, **encoder.settings())


def test_int8_vectors_are_the_same_in_every_batch_and_order(int8, tiny_model_dir):
    alone = [int8.encode([p]) for p in PAPERS]  # one paper a batch
    for batch_size in (2, 3, 7):
        for papers in (PAPERS, PAPERS[::-1]):
            got = int8.encode(papers, batch_size=batch_size)
            for row, p in enumerate(papers):
                want = alone[PAPERS.index(p)]
                n = want.emb.shape[1]
                assert torch.equal(got.emb[row, :n], want.emb[0]) and torch.equal(got.whole[row], want.whole[0]), \
                    (p.paper_id, batch_size)
    # the papers are ones where length groups move the vectors: the check above can fail
    old = grouped(int8, tiny_model_dir)
    assert not torch.equal(old.encode(PAPERS, batch_size=1).emb, old.encode(PAPERS, batch_size=7).emb)


def test_int8_rows_run_alone_side_by_side(int8, monkeypatch):
    """Every session run holds one row cut to its length; the rows run on torch's threads, results in order."""
    fast = int8.model
    assert fast.per_row and fast.streams == torch.get_num_threads()
    assert fast.session.get_session_options().intra_op_num_threads == 1
    shapes = []
    run = fast.run_rows
    monkeypatch.setattr(fast, "run_rows", lambda feed: shapes.append(tuple(feed["input_ids"].shape)) or run(feed))
    batch = int8.tokenize(PAPERS)
    lengths = batch.attention_mask.sum(1).tolist()
    monkeypatch.setattr(fast, "streams", 3)
    side_by_side = int8.forward(batch)
    assert sorted(shapes) == sorted((1, n) for n in lengths)
    monkeypatch.setattr(fast, "streams", 1)
    assert torch.equal(int8.forward(batch).emb, side_by_side.emb)


def test_int8_tag_says_per_row_and_the_fp32_tags_do_not_change(int8, tiny_model_dir):
    """Vector caches and indexes key on the fingerprint, which hashes the tag: int8 vectors of length groups (tagged
    without `/per-row`) are not mixed with these; ONNX fp32's tag (and so its caches) is as before."""
    exact = load_encoder(tiny_model_dir)
    path = backends.cached_onnx_model(exact, "int8")
    assert int8.model.backend_tag == f"onnx-opset17-int8-{backends.INT8_RECIPE}-{backends.file_digest(path)}/per-row"
    fp32 = load_encoder(tiny_model_dir, backend="onnx")
    fp32_path = backends.cached_onnx_model(exact, None)
    assert fp32.model.backend_tag == f"onnx-opset17-fp32-{backends.file_digest(fp32_path)}"
    assert not fp32.model.per_row and fp32.model.streams == 1
    before = InferenceEncoder(backends.OnnxTransformer(exact.model, backends.onnx_session(path),
                                                       int8.model.backend_tag.removesuffix("/per-row")),
                              exact.tokenizer, name=exact.name, **exact.settings())
    assert before.fingerprint() != int8.fingerprint()


def test_int8_loaded_from_its_record_runs_one_row_a_run(tiny_model_dir, int8):
    again = load_encoder(tiny_model_dir, backend="onnx", quantize="int8")
    assert again.model.exact is None  # from the load record
    assert again.model.per_row and again.model.backend_tag == int8.model.backend_tag
    assert again.fingerprint() == int8.fingerprint()
    assert torch.equal(again.encode(PAPERS, batch_size=7).emb, int8.encode(PAPERS, batch_size=1).emb)


def test_a_load_record_of_the_grouped_int8_backend_is_not_used(tiny_model_dir, int8):
    """A record written when the int8 graph ran in length groups holds that backend's tag and fingerprint: a load
    that reads it would key caches and indexes with the grouped vectors' fingerprint."""
    record = backends.load_record_path(tiny_model_dir, "onnx", "int8", {})
    content = json.loads(record.read_text())
    content["backend_tag"] = content["backend_tag"].removesuffix("/per-row")
    content["fingerprint"] = "0123456789abcdef"
    record.write_text(json.dumps(content))
    assert backends.load_recorded(record, "onnx", "int8") is None
    again = load_encoder(tiny_model_dir, backend="onnx", quantize="int8")
    assert again.fingerprint() == int8.fingerprint() != "0123456789abcdef"
