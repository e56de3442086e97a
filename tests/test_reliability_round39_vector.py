"""Round 39: the whole-abstract cosine (`aspire.scoring.vector`) against a float64 hand computation (scores and
gradients, float16 / bfloat16, padding, zero vectors) and the sharded encoding (`aspire.index.shards`): slices that
cover every paper once in order for every shard count, and shards of another model refused at merge by name."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.index.corpus import read_corpus
from aspire.index.shards import encode_shard, merge_shards, shard_record, shard_slice
from aspire.scoring.vector import VectorCosine
from tests.test_index_shards import HashEncoder
from tests.test_reliability_round30_shards import FLAT, _unsharded


def _batch(emb: torch.Tensor, ids: list[str] | None = None, mask: torch.Tensor | None = None) -> DocBatch:
    mask = torch.ones(emb.shape[:2], dtype=torch.bool) if mask is None else mask
    return DocBatch(emb=emb, mask=mask, paper_ids=ids or [])


def _cosine64(q: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """All-pairs cosine of (Bq, D) and (Bc, D) in float64, one pair at a time."""
    q, c = q.double(), c.double()
    return torch.tensor([[float(a @ b / (a.norm() * b.norm())) for b in c] for a in q], dtype=torch.float64)


def test_scores_and_gradients_match_a_float64_hand_computation():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 1, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    c = torch.randn(4, 1, 5, generator=gen, dtype=torch.float64)
    scorer = VectorCosine()
    dist = scorer.dist(_batch(q), _batch(c))
    assert torch.allclose(dist, 1 - _cosine64(q[:, 0].detach(), c[:, 0]), atol=1e-12)
    dist.sum().backward()
    # d/dq sum_c (1 - cos(q, c)) = -sum_c (c_hat - cos * q_hat) / |q|
    qd, cd = q.detach()[:, 0], c[:, 0]
    q_hat, c_hat = qd / qd.norm(dim=-1, keepdim=True), cd / cd.norm(dim=-1, keepdim=True)
    cos = q_hat @ c_hat.T
    expected = -((c_hat.sum(0)[None] - cos.sum(1, keepdim=True) * q_hat) / qd.norm(dim=-1, keepdim=True))
    assert torch.allclose(q.grad[:, 0], expected, atol=1e-10)
    pair = scorer.pairwise_dist(_batch(q.detach()[:3]), _batch(c[:3]))
    assert torch.allclose(pair, 1 - _cosine64(q.detach()[:3, 0], c[:3, 0]).diagonal(), atol=1e-12)


def test_a_zero_vector_scores_distance_one_with_a_bounded_gradient():
    """An all-zero paper vector (cosine undefined) is scored as documented, cosine 0 / distance 1, but its gradient
    through F.normalize's 1e-12 floor was 1e12 times the other side's unit vector (~1e11 a component): one such paper
    put ~1e11 into every weight. It is now 0; the other papers' scores and gradients are unchanged."""
    gen = torch.Generator().manual_seed(1)
    good = torch.randn(1, 1, 4, generator=gen)
    q = torch.cat([torch.zeros(1, 1, 4), good]).requires_grad_(True)
    c = torch.randn(3, 1, 4, generator=gen)
    for dist in (VectorCosine().dist(_batch(q), _batch(c)), VectorCosine().pairwise_dist(_batch(q), _batch(c[:2]))):
        q.grad = None
        assert torch.equal(dist[0], torch.ones_like(dist[0]))
        dist.sum().backward()
        assert torch.isfinite(q.grad).all()
        assert q.grad[0].abs().max() == 0
    # the nonzero paper's gradient is the hand computation's
    q.grad = None
    VectorCosine().dist(_batch(q), _batch(c))[1].sum().backward()
    g = good[0, 0].double()
    g_hat, c_hat = g / g.norm(), c[:, 0].double() / c[:, 0].double().norm(dim=-1, keepdim=True)
    expected = -(c_hat.sum(0) - (c_hat @ g_hat).sum() * g_hat) / g.norm()
    assert torch.allclose(q.grad[1, 0].double(), expected, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_scores_agree_with_float64_and_keep_their_dtype(dtype):
    gen = torch.Generator().manual_seed(2)
    q = (torch.randn(3, 1, 64, generator=gen) * 300).to(dtype)  # |q|^2 ~ 6e6: past float16's range if summed there
    c = torch.randn(2, 1, 64, generator=gen).to(dtype)
    score = VectorCosine().score(_batch(q), _batch(c))
    assert score.dtype == dtype
    tol = 2e-3 if dtype == torch.float16 else 2e-2
    assert torch.allclose(score.double(), _cosine64(q[:, 0], c[:, 0]), atol=tol)
    zero = VectorCosine().score(_batch(torch.zeros(1, 1, 64, dtype=dtype)), _batch(c))
    assert torch.equal(zero, torch.zeros_like(zero))


def test_padding_and_several_vectors_a_paper_are_refused_by_name():
    c = torch.randn(2, 1, 4)
    with pytest.raises(ValueError, match=r"\['b'\] of the candidates"):
        VectorCosine().score(_batch(torch.randn(1, 1, 4)),
                             _batch(c, ["a", "b"], torch.tensor([[True], [False]])))
    with pytest.raises(ValueError, match=r"\(B, 1, D\)"):
        VectorCosine().score(_batch(torch.randn(1, 2, 4)), _batch(c))


@pytest.mark.parametrize("n", [0, 1, 2, 5, 7, 13])
def test_shard_slices_cover_every_record_once_in_order(n):
    for n_shards in range(1, 2 * n + 4):  # more shards than records too
        slices = [shard_slice(s, n_shards, n) for s in range(n_shards)]
        assert [i for lo, hi in slices for i in range(lo, hi)] == list(range(n))
        sizes = [hi - lo for lo, hi in slices]
        assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="outside"):
        shard_slice(3, 3, n)


def test_merge_refuses_a_shard_of_another_model_naming_it(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": p, "title": "", "abstract": [f"{p} one", f"{p} two"]}) + "\n"
                              for p in "abcde"))
    read = read_corpus(corpus, FLAT.encode)
    for s, tag in enumerate(["m1", "m2", "m1"]):
        encoder = HashEncoder(tag)
        record = shard_record(encoder, corpus, FLAT, len(read[0]), model_name=tag)
        encode_shard(encoder, corpus, tmp_path / "shards", FLAT, s, 3, tag, read=read, record=record, progress=False)
    with pytest.raises(ValueError, match=r"shard-00001-of-00003 with model 'm2'"):
        merge_shards(tmp_path / "shards", tmp_path / "merged", FLAT)
    assert not (tmp_path / "merged").exists() or not any((tmp_path / "merged").iterdir())


def _corpus(tmp_path):
    corpus = tmp_path / "c.jsonl"
    lines = [json.dumps({"paper_id": "a", "title": "", "abstract": ["a one", "a two"]}), "bad",
             json.dumps({"paper_id": "b", "title": "", "abstract": ["b one"]}),
             json.dumps({"paper_id": "c", "title": "", "abstract": ["c x", "c y", "c z"]})]
    corpus.write_text("\n".join(lines) + "\n")
    return corpus


def test_more_shards_than_papers_merge_into_the_unsharded_index(tmp_path):
    """7 shards over 3 readable papers (shard 0 empty but holding the reader's rejection): the merge equals an
    unsharded build, paper for paper and vector for vector."""
    corpus = _corpus(tmp_path)
    encoder = HashEncoder("h")
    read = read_corpus(corpus, FLAT.encode)
    record = shard_record(encoder, corpus, FLAT, len(read[0]))
    for s in range(7):
        encode_shard(encoder, corpus, tmp_path / "shards", FLAT, s, 7, read=read, record=record, progress=False)
    merged = merge_shards(tmp_path / "shards", tmp_path / "merged", FLAT)
    alone = _unsharded(encoder, read)
    assert merged.paper_ids == alone.paper_ids == ["a", "b", "c"]
    assert np.array_equal(np.asarray(merged.offsets), np.asarray(alone.offsets))
    assert np.allclose(np.asarray(merged.vectors), np.asarray(alone.vectors))
    assert [r["line"] for r in merged.rejected] == [r["line"] for r in alone.rejected] == [2]


def test_merge_refuses_a_shard_of_other_reading_limits_naming_it(tmp_path):
    corpus = _corpus(tmp_path)
    encoder = HashEncoder("h")
    other = dataclasses.replace(FLAT, encode=dataclasses.replace(FLAT.encode, max_sentences=2))
    for s, config in enumerate([FLAT, other]):
        read = read_corpus(corpus, config.encode)
        record = shard_record(encoder, corpus, config, len(read[0]))
        encode_shard(encoder, corpus, tmp_path / "shards", config, s, 2, read=read, record=record, progress=False)
    with pytest.raises(ValueError, match=r"shard-00001-of-00002 with reading limits \(encode.max_sentences=2"):
        merge_shards(tmp_path / "shards", tmp_path / "merged", FLAT)
