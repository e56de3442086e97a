"""Round 49: `EncodedCorpus.from_docbatch` refuses label lists that do not match a paper's sentence texts (labels past
them were dropped unsaid), and checks of the corpus and the streamed merge against brute-force references."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.index import EncodedCorpus, SentenceIndex
from aspire.index.shards import load_shards
from aspire.index.stream import merge_streaming, plan_shards, read_rows
from tests.test_index_stream import cfg, write_shards


def _batch() -> DocBatch:
    emb = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[True, True, True], [True, True, False]])
    return DocBatch(emb, mask, ["a", "b"], [["a0", "a1", "a2"], ["b0", "b1"]])


def test_from_docbatch_equals_the_batch_row_by_row():
    batch = _batch()
    got = EncodedCorpus.from_docbatch(batch, ["ta", "tb"], [["x0", "x1", "x2"], None])
    assert got.paper_ids == ["a", "b"] and got.titles == ["ta", "tb"]
    assert got.sentences == [["a0", "a1", "a2"], ["b0", "b1"]]
    assert got.labels == [["x0", "x1", "x2"], None]
    expect = np.stack([batch.emb[b, s].numpy() for b in range(2) for s in range(3) if batch.mask[b, s]])
    np.testing.assert_array_equal(got.vectors, expect)
    assert got.offsets.tolist() == [0, 3, 5]


@pytest.mark.parametrize("labels", [
    [["x0", "x1", "x2", "x3"], None],  # one label past paper a's 3 sentences: was dropped unsaid
    [None, ["y0", "y1", "y2"]],        # paper b: 3 labels for 2 sentences
])
def test_from_docbatch_refuses_more_labels_than_sentences_naming_the_paper(labels):
    with pytest.raises(ValueError, match=r"paper (a|b): 3 labels|paper a: 4 labels"):
        EncodedCorpus.from_docbatch(_batch(), ["ta", "tb"], labels)


def test_from_docbatch_refuses_fewer_labels_than_sentences_under_a_narrowed_mask():
    # paper a has 3 sentence texts and 2 labels; the mask selects sentences 0 and 1, so the cut took both and the
    # short label list was accepted
    narrowed = _batch().select_sentences([[0, 1], [0]])
    with pytest.raises(ValueError, match="paper a: 2 labels for the 3 sentence texts"):
        EncodedCorpus.from_docbatch(narrowed, ["ta", "tb"], [["x0", "x1"], None])


def test_from_docbatch_refuses_a_label_list_per_paper_count_mismatch():
    with pytest.raises(ValueError, match="1 label lists for 2 papers"):
        EncodedCorpus.from_docbatch(_batch(), ["ta", "tb"], [["x0", "x1", "x2"]])


def test_read_rows_returns_exactly_the_requested_rows(tmp_path):
    shards = write_shards(tmp_path)  # shard 2 repeats p3: its first paper's rows are left out
    plans, meta, rejected = plan_shards(shards)
    merged = load_shards(shards)[0]
    assert [r["paper_id"] for r in rejected] == ["bad", "p3"]
    n = sum(len(p.rows) for p in plans)
    assert n == len(merged.vectors)
    rows = np.random.default_rng(1).permutation(n)[:40]
    rows = np.concatenate([rows, rows[:5], [0, n - 1]])  # repeats and both ends
    np.testing.assert_array_equal(read_rows(plans, rows, meta["dim"]), merged.vectors[rows])


def test_streamed_merge_equals_one_go_build_and_searches_the_same(tmp_path):
    shards = write_shards(tmp_path)
    merge_streaming(shards, tmp_path / "streamed", cfg(kind="flat"))
    streamed = SentenceIndex.load(tmp_path / "streamed")
    whole, meta = load_shards(shards)
    built = SentenceIndex.build(whole, cfg(kind="flat"), meta["model_fingerprint"], meta["model_name"])
    assert streamed.paper_ids == built.paper_ids == whole.paper_ids
    np.testing.assert_array_equal(streamed.offsets, whole.offsets)
    np.testing.assert_array_equal(np.asarray(streamed.vectors), whole.vectors)
    assert [list(s) for s in streamed.sentences] == whole.sentences and streamed.labels == whole.labels
    q = np.random.default_rng(2).standard_normal((3, whole.dim)).astype(np.float32)
    d1, i1 = streamed.faiss_index.search(q, 10)
    d2, i2 = built.faiss_index.search(q, 10)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(d1, d2, rtol=1e-5)


def test_missing_shard_refused_unless_allowed_and_then_left_out(tmp_path):
    shards = write_shards(tmp_path)
    shutil.rmtree(shards / "shard-00001-of-00003")
    with pytest.raises(ValueError, match=r"shards \[1\] \(of 3\) are missing"):
        plan_shards(shards)
    plans, meta, _ = plan_shards(shards, allow_missing=True)
    assert meta["missing_shards"] == [1] and meta["num_shards"] == 3
    assert [p.path.name for p in plans] == ["shard-00000-of-00003", "shard-00002-of-00003"]
