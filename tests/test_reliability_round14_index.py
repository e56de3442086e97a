"""Round 14, building and growing the sentence index against references: faiss's exact IndexFlatL2 search, one
build against a build from parts (an empty part, a repeated id), an index grown by `add` and one merged from
shards (the same papers, positions, vectors and answers), and the one NaN/infinity pass over vectors added."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

import aspire.index.ann as ann
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.shards import load_shards
from aspire.index.stream import merge_streaming

DIM = 8


def corpus(ids, seed: int, rejected=()) -> EncodedCorpus:
    """Random sentence vectors (1-4 a paper) and whole vectors for the papers `ids`."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 5, len(ids))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return EncodedCorpus(rng.standard_normal((int(offsets[-1]), DIM)).astype(np.float32), offsets, list(ids),
                         [f"title {i}" for i in ids], [[f"{i} sentence {k}." for k in range(n)] for i, n in zip(ids, lengths)],
                         list(rejected), whole=rng.standard_normal((len(ids), DIM)).astype(np.float32))


def config(kind: str) -> IndexBuildConfig:
    return IndexBuildConfig(index=IndexConfig(kind=kind, ivf_nlist=4, ivf_nprobe=4, ivf_train_size=100))


def count_checked_rows(monkeypatch) -> list[int]:
    """Patch every module's `nonfinite_rows` to count the rows it looks at; returns the counter."""
    checked, real = [0], ann.nonfinite_rows

    def counting(x):
        checked[0] += len(x)
        return real(x)

    for module in ("aspire.index.ann", "aspire.index.store", "aspire.index.stream"):
        monkeypatch.setattr(f"{module}.nonfinite_rows", counting)
    return checked


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_add_checks_the_new_vectors_for_nan_once(monkeypatch, kind):
    index = SentenceIndex.build(corpus([f"p{i}" for i in range(30)], 1), config(kind), "fp")
    more = corpus([f"q{i}" for i in range(20)], 2)
    checked = count_checked_rows(monkeypatch)
    index.add(more, "fp")
    # the sentence vectors once (the store's own pass and then add_vectors' made it twice), and since round 15 the
    # whole-abstract vectors once as stored (`store.unstorable`; never checked before)
    assert checked[0] == len(more.vectors) + len(more.whole)
    assert index.faiss_index.ntotal == index.n_sentences == len(index.vectors)


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_add_still_refuses_nonfinite_vectors_naming_the_papers_and_changes_nothing(kind):
    index = SentenceIndex.build(corpus([f"p{i}" for i in range(30)], 1), config(kind), "fp")
    before = (index.faiss_index.ntotal, index.n_papers, len(index.rejected), np.array(index.vectors))
    more = corpus(["q1", "q2", "q3"], 2, rejected=[{"paper_id": "r", "reason": "unreadable"}])
    more.vectors[more.offsets[1]] = np.nan  # q2's first sentence
    more.vectors[-1, 3] = -np.inf  # q3's last
    with pytest.raises(ValueError, match=r"2 new paper\(s\) have NaN or infinite sentence vectors, e.g. \['q2', 'q3'\]"):
        index.add(more, "fp")
    assert (index.faiss_index.ntotal, index.n_papers, len(index.rejected)) == before[:3]
    np.testing.assert_array_equal(index.vectors, before[3])
    more.vectors[:] = np.nan_to_num(more.vectors, nan=0.5, neginf=-0.5)
    index.add(more, "fp")  # a clean retry adds all three, once
    assert index.paper_ids[-3:] == ["q1", "q2", "q3"] and index.faiss_index.ntotal == index.n_sentences


def test_streamed_merge_checks_each_batch_once_and_names_a_nonfinite_paper(tmp_path, monkeypatch):
    parts = [corpus(["a", "b", "c"], 1), corpus(["d", "e"], 2)]
    for s, part in enumerate(parts):
        part.save_shard(tmp_path / "shards" / f"shard-{s:05d}-of-00002",
                        {"shard": s, "num_shards": 2, "model_name": "m", "model_fingerprint": "fp"})
    checked = count_checked_rows(monkeypatch)
    merge_streaming(tmp_path / "shards", tmp_path / "index", config("flat"))
    # each batch once (it was checked by the merge, then by faiss's add), and each shard's whole vectors once as stored
    assert checked[0] == sum(len(p.vectors) + len(p.whole) for p in parts)
    bad = corpus(["d", "e"], 2)
    bad.vectors[-1, 0] = np.inf
    bad.save_shard(tmp_path / "shards" / "shard-00001-of-00002",
                   {"shard": 1, "num_shards": 2, "model_name": "m", "model_fingerprint": "fp"})
    with pytest.raises(ValueError, match=r"shard-00001-of-00002: the sentence vectors of paper\(s\) \['e'\] hold NaN"):
        merge_streaming(tmp_path / "shards", tmp_path / "index2", config("flat"))


def test_concat_refuses_parts_with_and_without_whole_vectors():
    with_whole, without = corpus(["a", "b"], 1), corpus(["c"], 2)
    without.whole = None
    with pytest.raises(ValueError, match=r"parts \[1\] carry no whole-abstract vectors"):
        EncodedCorpus.concat([with_whole, without])  # it returned whole=None: every paper's were dropped
    # an empty part (all its records rejected) carries none and counts for nothing; all without: none kept
    empty = EncodedCorpus.empty(DIM, [{"paper_id": "x", "reason": "no abstract sentences"}])
    joined = EncodedCorpus.concat([with_whole, empty, corpus(["c"], 2)])
    np.testing.assert_array_equal(joined.whole, np.concatenate([with_whole.whole, corpus(["c"], 2).whole]))
    assert EncodedCorpus.concat([without, empty]).whole is None


def test_one_build_parts_add_and_merged_shards_agree_with_brute_force(tmp_path):
    """The same papers built in one go, from parts (an empty one, an id repeated across parts), grown by `add`
    and merged from shards: the same positions, vectors, whole vectors and manifest record, and every flat index's
    neighbours are faiss IndexFlatL2's over the first occurrences' vectors."""
    parts = [corpus([f"p{i}" for i in range(20)], 1), EncodedCorpus.empty(DIM, [{"paper_id": "x", "reason": "bad"}]),
             corpus(["p5"] + [f"q{i}" for i in range(15)], 2)]  # p5 again: rejected, the first one indexed
    cfg = config("flat")
    joined = EncodedCorpus.concat(parts)
    assert joined.paper_ids == [f"p{i}" for i in range(20)] + [f"q{i}" for i in range(15)]
    one = SentenceIndex.build(joined, cfg, "fp", "m", True)
    grown = SentenceIndex.build(parts[0], cfg, "fp", "m", True).add(parts[1], "fp").add(parts[2], "fp")
    for s, part in enumerate(parts):
        part.save_shard(tmp_path / "shards" / f"shard-{s:05d}-of-00003", {"shard": s, "num_shards": 3, "model_name": "m",
                                                                          "model_fingerprint": "fp", "include_title": True})
    merge_streaming(tmp_path / "shards", tmp_path / "merged", cfg)
    merged = SentenceIndex.load(tmp_path / "merged")
    assert SentenceIndex.build(load_shards(tmp_path / "shards")[0], cfg, "fp").paper_ids == one.paper_ids
    first = np.concatenate([parts[0].vectors, parts[2].vectors[parts[2].offsets[1]:]])  # p5's second copy left out
    reference = faiss.IndexFlatL2(DIM)
    reference.add(first)
    queries = np.random.default_rng(7).standard_normal((12, DIM)).astype(np.float32)
    dist, rows = reference.search(queries, 9)
    for index in (one, grown, merged):
        assert index.paper_ids == one.paper_ids and index.include_title is True
        np.testing.assert_array_equal(index.offsets, one.offsets)
        np.testing.assert_array_equal(index.vectors, first)
        np.testing.assert_array_equal(index.whole, np.concatenate([parts[0].whole, parts[2].whole[1:]]))
        got_dist, got_rows = index.search_sentences(queries, 9)
        np.testing.assert_array_equal(got_rows, rows)
        np.testing.assert_allclose(got_dist, np.sqrt(dist), rtol=1e-5)
        assert {r["paper_id"] for r in index.rejected} == {"x", "p5"}
    one.save(tmp_path / "one")
    grown.save(tmp_path / "grown")
    manifests = [SentenceIndex.read_manifest(tmp_path / name) for name in ("one", "grown", "merged")]
    for key in ("model_fingerprint", "include_title", "n_papers", "n_sentences", "n_rejected", "dim", "kind"):
        assert len({str(m[key]) for m in manifests}) == 1, key
    assert manifests[0]["sha256"]["vectors.npy"] == manifests[1]["sha256"]["vectors.npy"] == manifests[2]["sha256"]["vectors.npy"]


class HalfBlindEncoder:
    """A fake encoder whose tokenizer sees nothing in a paper whose id ends in an odd digit (`unseen_sentences`)."""

    include_title, dim, fingerprint = False, DIM, "fake"

    def unseen_sentences(self, papers, batch_size=32):
        return [[0] if int(p.paper_id[-1]) % 2 else [] for p in papers]

    def encode(self, papers, batch_size=32, progress=False):
        import torch

        from aspire.batch import DocBatch

        S = max(len(p.sentences) for p in papers)
        mask = torch.tensor([[j < len(p.sentences) for j in range(S)] for p in papers])
        emb = torch.randn(len(papers), S, DIM, generator=torch.Generator().manual_seed(0)) * mask[..., None]
        return DocBatch(emb, mask, [p.paper_id for p in papers], [p.sentences for p in papers], emb.sum(1))


def test_build_log_counts_the_papers_encoded_not_the_papers_read(tmp_path, caplog):
    import json
    import logging

    from aspire.index.build import build_index

    lines = [{"paper_id": f"p{i}", "title": "t", "abstract": ["we propose a model.", "results improve."]} for i in range(10)]
    (tmp_path / "papers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="aspire.index.build"):
        index, _ = build_index(tmp_path / "index", "fake", tmp_path / "papers.jsonl", config("flat"),
                               load_encoder=lambda name: HalfBlindEncoder(), progress=False)
    assert index.n_papers == 5 and len(index.rejected) == 5
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("encoded ")]
    assert len(said) == 1 and said[0].startswith("encoded 5 of 10 papers (10 sentence vectors; 5 rejected)"), said
