"""Streaming merge of shards (`aspire.index.stream`) against the in-RAM build, the torch coarse
quantizer (`aspire.index.ann`), read-ahead of memory-mapped rows, and an index without stored BM25."""

from __future__ import annotations

import json
from pathlib import Path

import faiss
import numpy as np
import pytest
import torch

from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.ann import assign_nearest, kmeans
from aspire.index.corpus import gather_docbatch, page_ranges
from aspire.index.shards import load_shards, merge_shards
from aspire.index.stream import merge_streaming

GEN_FILES = ("config.yaml", "sentences.faiss", "vectors.npy", "offsets.npy", "papers.jsonl", "rejected.jsonl")


def corpus(n_papers: int, start: int, dim: int = 16, seed: int = 0, labels: bool = False) -> EncodedCorpus:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 6, size=n_papers)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = [f"p{start + i}" for i in range(n_papers)]
    sentences = [[f"{pid} says {j} about topic {j % 3}" for j in range(n)] for pid, n in zip(ids, lengths.tolist())]
    return EncodedCorpus(rng.standard_normal((int(offsets[-1]), dim)).astype(np.float32), offsets, ids,
                         [f"title of {pid}" for pid in ids], sentences,
                         labels=[["background"] * n if labels and i % 2 else None for i, n in enumerate(lengths.tolist())])


def write_shards(root: Path, sizes=(30, 1, 45), fingerprint: str = "fp") -> Path:
    """Shards of one sharding; shard 2 repeats paper p3 of shard 0 and shard 0 reports a rejected record."""
    shards, start = root / "shards", 0
    for s, n in enumerate(sizes):
        part = corpus(n, start, seed=s, labels=s == 0)
        if s == 2:
            part.paper_ids[0] = "p3"  # a duplicate: the first one (shard 0) wins
        if s == 0:
            part.rejected = [{"line": 7, "paper_id": "bad", "reason": "no abstract sentences"}]
        meta = {"shard": s, "num_shards": len(sizes), "model_name": "tiny", "model_fingerprint": fingerprint}
        part.save_shard(shards / f"shard-{s:05d}-of-{len(sizes):05d}", meta)
        start += n
    return shards


def cfg(**index) -> IndexBuildConfig:
    return IndexBuildConfig(index=IndexConfig(**index))


def live(root: Path) -> Path:
    return Path(SentenceIndex.read_manifest(root)["path"])


CONFIGS = {
    "flat": dict(kind="flat"),
    "ivf-sampled": dict(kind="ivf", ivf_nlist=6, ivf_nprobe=2, ivf_train_size=100, seed=3),
    "ivfpq-float16": dict(kind="ivf", ivf_nlist=4, ivf_nprobe=4, pq_m=4, pq_nbits=4, vector_dtype="float16"),
    "flat-no-bm25": dict(kind="flat", store_bm25=False),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_streamed_merge_writes_the_files_of_the_in_ram_build(tmp_path, monkeypatch, name):
    shards = write_shards(tmp_path)
    config = cfg(**CONFIGS[name])
    whole, meta = load_shards(shards)
    SentenceIndex.build(whole, config, meta["model_fingerprint"], meta["model_name"], meta.get("include_title")).save(tmp_path / "ram")
    batches = []
    real_add = __import__("aspire.index.stream", fromlist=["add_vectors"]).add_vectors
    monkeypatch.setattr("aspire.index.stream.ADD_BATCH", 7)  # several batches a shard, none across shards
    monkeypatch.setattr("aspire.index.stream.add_vectors", lambda index, x: (batches.append(len(x)), real_add(index, x)))
    gen = merge_streaming(shards, tmp_path / "streamed", config)
    assert gen == live(tmp_path / "streamed") and max(batches) == 7 and sum(batches) == len(whole.vectors)
    a, b = live(tmp_path / "ram"), gen
    names = GEN_FILES + (("bm25.data.npy", "bm25.indices.npy", "bm25.indptr.npy", "bm25.vocab.json", "bm25.params.json")
                         if config.index.store_bm25 else ())
    assert sorted(p.name for p in b.iterdir()) == sorted(names + ("manifest.json",))
    for file in names:
        assert (a / file).read_bytes() == (b / file).read_bytes(), file
    ma, mb = (json.loads((g / "manifest.json").read_text()) for g in (a, b))
    assert {k: v for k, v in ma.items() if k != "saved_utc"} == {k: v for k, v in mb.items() if k != "saved_utc"}
    loaded = SentenceIndex.load(tmp_path / "streamed", verify=True)
    assert "p3" in loaded.paper_ids and loaded.paper_ids.count("p3") == 1 and loaded.n_papers == 75
    assert [r["paper_id"] for r in loaded.rejected] == ["bad", "p3"]
    assert loaded.labels[1] == ["background"] * int(loaded.offsets[2] - loaded.offsets[1])


def test_streamed_hnsw_and_ivf_search_equal_exact_search(tmp_path):
    shards = write_shards(tmp_path)
    whole, _ = load_shards(shards)
    queries = np.random.default_rng(9).standard_normal((8, 16)).astype(np.float32)
    d = ((queries[:, None] - whole.vectors[None]) ** 2).sum(-1)
    exact = np.argsort(d, axis=1, kind="stable")[:, :5]
    for name, config in {"hnsw": cfg(kind="hnsw", hnsw_ef_search=400), "ivf": cfg(kind="ivf", ivf_nlist=6, ivf_nprobe=6)}.items():
        index = merge_shards(shards, tmp_path / name, config)
        assert (index.search_sentences(queries, 5)[1] == exact).all(), name


def test_merge_cli_streams_and_summarises_from_the_manifest(tmp_path, capsys):
    from aspire.index.__main__ import main

    shards = write_shards(tmp_path)
    assert main(["merge", "--shards", str(shards), "--out", str(tmp_path / "idx"), "index.kind=flat"]) == 0
    out = capsys.readouterr().out
    assert "75 papers" in out and "flat faiss index" in out and "2 record(s) rejected" in out
    # a second merge into the same folder replaces the live index only when asked
    before = live(tmp_path / "idx")
    assert main(["merge", "--shards", str(shards), "--out", str(tmp_path / "idx"), "index.kind=flat"]) == 2
    assert capsys.readouterr().err == (f"error: {tmp_path / 'idx'} already holds an index; give --overwrite to "
                                       "replace it with the shards' index, or another directory\n")
    assert live(tmp_path / "idx") == before
    assert main(["merge", "--shards", str(shards), "--out", str(tmp_path / "idx"), "--overwrite", "-q"]) == 0
    assert live(tmp_path / "idx") != before and SentenceIndex.load(tmp_path / "idx").n_papers == 75
    # as is rank 0's merge after a sharded encoding: refused before anything is encoded
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("")
    assert main(["encode-shard", "--corpus", str(corpus), "--shards", str(tmp_path / "more"), "--merge-into",
                 str(tmp_path / "idx"), "--model", "minilm"]) == 2
    assert "already holds an index" in capsys.readouterr().err and not (tmp_path / "more").exists()


def _break(shards: Path, what: str) -> str:
    """Damage shard 1 (or 2) of `write_shards`; returns the text the error must hold."""
    one = shards / "shard-00001-of-00003"
    if what == "rows":
        np.save(one / "vectors.npy", np.zeros((9, 16), np.float32))
        return "shard-00001-of-00003: offsets.npy"
    if what == "dim":
        meta = json.loads((one / "shard.json").read_text())
        (one / "shard.json").write_text(json.dumps({**meta, "dim": 8}))
        return "shard-00001-of-00003: shard.json says"
    if what == "texts":
        two = shards / "shard-00002-of-00003"
        lines = (two / "papers.jsonl").read_text().splitlines()
        record = json.loads(lines[4])
        lines[4] = json.dumps({**record, "sentences": record["sentences"] + ["one too many"]})
        (two / "papers.jsonl").write_text("\n".join(lines) + "\n")
        return f"shard-00002-of-00003: paper {record['paper_id']!r} has"
    if what == "model":
        meta = json.loads((one / "shard.json").read_text())
        (one / "shard.json").write_text(json.dumps({**meta, "model_fingerprint": "other"}))
        return "different models"
    if what == "version":
        (one / "shard.json").write_text(json.dumps({"shard_format_version": 99}))
        return "shard-00001-of-00003 has format version 99"
    raise AssertionError(what)


@pytest.mark.parametrize("what", ["rows", "dim", "texts", "model", "version"])
def test_a_bad_shard_is_named_and_the_previous_index_stays_live(tmp_path, what):
    shards = write_shards(tmp_path)
    merge_streaming(shards, tmp_path / "idx", cfg(kind="flat"))
    before = live(tmp_path / "idx")
    expected = _break(shards, what)
    with pytest.raises(ValueError, match=expected.replace("(", r"\(")):
        merge_streaming(shards, tmp_path / "idx", cfg(kind="flat"))
    assert live(tmp_path / "idx") == before and SentenceIndex.load(tmp_path / "idx", verify=True).n_papers == 75
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == [".lock", "CURRENT", before.name]  # nothing left over


def test_missing_shards_are_an_error_unless_allowed(tmp_path):
    shards = write_shards(tmp_path)
    import shutil

    shutil.rmtree(shards / "shard-00001-of-00003")
    with pytest.raises(ValueError, match=r"shards \[1\] \(of 3\) are missing"):
        merge_streaming(shards, tmp_path / "idx", cfg(kind="flat"))
    index = merge_shards(shards, tmp_path / "idx", cfg(kind="flat"), allow_missing=True)
    assert index.n_papers == 74 and "p30" not in index.paper_ids


def test_kmeans_converges_to_a_fixed_point_and_assignment_equals_faiss():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 8)).astype(np.float32)
    found = kmeans(x, 6, seed=1, iters=50)
    lists = assign_nearest(found, x)
    for c in range(6):  # Lloyd's fixed point: every centroid is the mean of the points nearest to it
        np.testing.assert_allclose(found[c], x[lists == c].mean(0), atol=1e-4)
    distinct = rng.standard_normal((7, 8)).astype(np.float32)  # k = n: the centroids are the points
    assert sorted(map(tuple, kmeans(distinct, 7, seed=0).tolist())) == sorted(map(tuple, distinct.tolist()))
    c = rng.standard_normal((50, 8)).astype(np.float32)
    q = rng.standard_normal((300, 8)).astype(np.float32)
    flat = faiss.IndexFlatL2(8)
    flat.add(c)
    assert (assign_nearest(c, q) == flat.search(q, 1)[1][:, 0]).all()
    with pytest.raises(ValueError, match="at least"):
        kmeans(x[:3], 5, seed=0)


def test_kmeans_splits_a_centroid_left_without_points():
    x = np.array([[0.0, 0.0]] * 10 + [[10.0, 0.0]] * 10 + [[0.0, 10.0]], dtype=np.float32)
    centroids = kmeans(x, 3, seed=0, iters=5)  # starting at duplicate rows leaves one empty at first
    assert len({tuple(np.round(c, 3)) for c in centroids}) == 3


def test_page_ranges_cover_every_byte_once():
    starts = np.array([9000, 100, 5000, 4096, 20000, 150])
    sizes = np.array([500, 40, 100, 10, 8, 10])
    ranges = page_ranges(starts, sizes, page=4096)
    assert ranges == [(0, 160), (4096, 5100), (8192, 9500), (16384, 20008)]
    covered = np.zeros(21000, bool)
    for lo, hi in ranges:
        assert lo % 4096 == 0 and not covered[lo:hi].any()
        covered[lo:hi] = True
    assert all(covered[s : s + n].all() for s, n in zip(starts, sizes))


def test_gather_from_a_memory_map_equals_gather_from_ram(tmp_path):
    vectors = np.random.default_rng(2).standard_normal((500, 24)).astype(np.float16)
    np.save(tmp_path / "v.npy", vectors)
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")
    offsets = np.arange(0, 501, 5)
    papers = np.array([99, 0, 37, 38, 37])
    a, b = gather_docbatch(mapped, offsets, papers), gather_docbatch(vectors, offsets, papers)
    assert torch.equal(a.emb, b.emb) and torch.equal(a.mask, b.mask)


def test_re_rank_rows_of_a_memory_mapped_index_are_prefetched_at_once(tmp_path, monkeypatch):
    import aspire.index.store as store

    shards = write_shards(tmp_path)
    merge_streaming(shards, tmp_path / "idx", cfg(kind="flat", store_bm25=False))
    mapped, in_ram = SentenceIndex.load(tmp_path / "idx", mmap=True), SentenceIndex.load(tmp_path / "idx", mmap=False)
    asked = []
    monkeypatch.setattr(store, "prefetch_rows", lambda v, starts, lengths: asked.append((v, starts.tolist(), lengths.tolist())))
    papers = np.array([7, 2, 30])
    (a, la), (b, lb) = mapped.gather_rows(papers), in_ram.gather_rows(papers)
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert asked[0][0] is mapped.vectors and isinstance(mapped.vectors, np.memmap)
    assert asked[0][1] == mapped.offsets[papers].tolist() and asked[0][2] == la.tolist()


def test_index_without_stored_bm25_loads_and_builds_it_when_asked(tmp_path):
    from aspire.search import Searcher

    shards = write_shards(tmp_path)
    merge_streaming(shards, tmp_path / "idx", cfg(kind="flat", store_bm25=False))
    manifest = SentenceIndex.read_manifest(tmp_path / "idx")
    assert "bm25" not in manifest and not any(n.startswith("bm25") for n in manifest["files"])
    searcher = Searcher(SentenceIndex.load(tmp_path / "idx"))
    assert searcher.index.bm25 is None
    hits = searcher.search(searcher.query_from_index("p40"), stages="bm25", k=3)
    assert hits[0].paper_id != "p40" and len(hits) == 3  # p40 itself is excluded; its words find others


def test_ivfpq_loads_without_precomputed_tables_and_searches_the_same(tmp_path):
    whole = corpus(300, 0, dim=32)
    index = SentenceIndex.build(whole, cfg(kind="ivf", ivf_nlist=8, ivf_nprobe=3, pq_m=8, pq_nbits=6), "fp")
    index.save(tmp_path / "idx")
    loaded = SentenceIndex.load(tmp_path / "idx")
    assert loaded.faiss_index.precomputed_table.size() == 0
    q = whole.vectors[:20]
    before, after = index.search_sentences(q, 10), loaded.search_sentences(q, 10)
    assert (before[1] == after[1]).all()
    np.testing.assert_allclose(before[0], after[0], rtol=1e-5)


def test_a_full_disk_during_a_streamed_merge_is_one_error_and_the_previous_index_stays_live(tmp_path, monkeypatch):
    """`aspire index merge` meeting a full disk: one DiskFullError naming the index folder, the temporary
    generation removed, the live one untouched (it was a raw faiss traceback before)."""
    import errno

    import faiss

    from aspire.storage import DiskFullError

    shards = write_shards(tmp_path)
    merge_streaming(shards, tmp_path / "idx", cfg(kind="flat"))
    before = live(tmp_path / "idx")

    def full(index, path):
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(faiss, "write_index", full)
    with pytest.raises(DiskFullError, match="the disk filled up while writing a new index generation") as err:
        merge_streaming(shards, tmp_path / "idx", cfg(kind="flat"))
    assert str(tmp_path / "idx") in str(err.value)
    assert live(tmp_path / "idx") == before and SentenceIndex.load(tmp_path / "idx", verify=True).n_papers == 75
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == [".lock", "CURRENT", before.name]
