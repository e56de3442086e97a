"""ANN settings that do not fit the corpus or that faiss cannot take, non-finite vectors and stray shards (round 4):
each is refused with an error naming the `index.` key, the paper or the shard, where it once crashed the process
(hnsw_m < 2), built an index that never searched or loaded (ivf_nprobe 0, pq_nbits 0), failed inside faiss with a
traceback, or left papers out of every ranking unsaid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_index import exact_neighbours, random_corpus
from test_index_stream import write_shards

from aspire.config import ConfigError, load_config
from aspire.index import IndexBuildConfig, IndexConfig, IndexFormatError, SentenceIndex
from aspire.index.__main__ import main as index_main
from aspire.index.ann import build_faiss, new_faiss
from aspire.index.stream import merge_streaming


def config(**index) -> IndexBuildConfig:
    return IndexBuildConfig(index=IndexConfig(**index))


# each of these once passed: hnsw_m 0 / 1 crashed the build (segmentation fault), ivf_nprobe 0 built an index every
# search of which failed in faiss, pq_nbits 0 one that faiss cannot read back, a negative pq_m was IVF-Flat unsaid,
# a negative seed failed in numpy after the encoding
OUT_OF_RANGE = [("ivf_nprobe", 0), ("hnsw_m", 1), ("hnsw_m", 0), ("pq_nbits", 0), ("pq_nbits", 25), ("pq_m", -4),
                ("ivf_nlist", -1), ("ivf_train_size", 0), ("hnsw_ef_search", 0), ("hnsw_ef_construction", 0),
                ("flat_max_sentences", -1), ("seed", -1), ("seed", 2**31)]


@pytest.mark.parametrize("key,value", OUT_OF_RANGE, ids=[f"{k}={v}" for k, v in OUT_OF_RANGE])
def test_index_settings_faiss_cannot_take_are_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=f"^index.{key}: must be"):
        load_config(IndexBuildConfig, None, [f"index.{key}={value}"])
    with pytest.raises(ConfigError, match=f"^index.{key}: must be"):  # a config made in Python: checked before faiss
        settings = {"kind": "hnsw" if key.startswith("hnsw") else "ivf", "ivf_nlist": 4, "pq_m": 4, key: value}
        new_faiss(IndexConfig(**settings), 64, 16)


def test_cli_build_with_nprobe_zero_is_refused_before_encoding(tmp_path, tiny_model_dir, capsys):
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text(json.dumps({"paper_id": "p", "title": "t", "abstract": ["the model.", "the data."]}) + "\n")
    assert index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "idx"),
                       "index.kind=ivf", "index.ivf_nprobe=0", "-q"]) == 2
    assert capsys.readouterr().err == "error: index.ivf_nprobe: must be >= 1, got 0\n"
    assert not (tmp_path / "idx" / "CURRENT").exists()


@pytest.mark.parametrize("n_papers", [1, 3])
def test_ivf_with_the_automatic_list_count_indexes_a_tiny_corpus_and_searches_exactly(n_papers):
    """nlist 0 (automatic) was about 4 * sqrt(n) lists, more than n below 16 vectors: one paper of a few sentences
    could not be indexed with index.kind=ivf ("IVF index with nlist=8 needs at least that many vectors, got 4")."""
    corpus = random_corpus(n_papers, seed=5)
    index = SentenceIndex.build(corpus, config(kind="ivf"), "fp")
    n = index.n_sentences
    assert n < 16 and index.faiss_index.nlist == n
    queries = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    assert (index.search_sentences(queries, n)[1] == exact_neighbours(corpus.vectors, queries, n)).all()


def test_automatic_list_count_fits_the_training_sample():
    vectors = np.random.default_rng(0).standard_normal((400, 8)).astype(np.float32)
    index, kind = build_faiss(vectors, IndexConfig(kind="ivf", ivf_train_size=20, ivf_nprobe=1000))
    assert kind == "ivf" and index.nlist == 20
    queries = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    assert (index.search(queries, 10)[1] == exact_neighbours(vectors, queries, 10)).all()  # every list probed: exact


@pytest.mark.parametrize("settings,message", [
    (dict(ivf_nlist=500), r"^index.ivf_nlist=500: an IVF index needs at least one sentence vector a list and the corpus has 300"),
    (dict(ivf_nlist=16, ivf_train_size=10), r"^index.ivf_nlist=16: .* index.ivf_train_size=10 samples 10"),
    (dict(ivf_nlist=4, pq_m=4, pq_nbits=9), r"^index.pq_nbits=9: IVF-PQ trains 2\^9 = 512 centroids .* has 300"),
    (dict(ivf_nlist=4, pq_m=5), r"^index.pq_m=5 must divide the vector dimension 16"),
], ids=["lists-over-vectors", "lists-over-training-sample", "pq-centroids-over-training-sample", "pq_m-not-dividing"])
def test_ivf_settings_that_do_not_fit_the_corpus_name_the_key(settings, message):
    vectors = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
    with pytest.raises(ValueError, match=message):  # pq_nbits once failed inside faiss's PQ training (RuntimeError)
        build_faiss(vectors, IndexConfig(kind="ivf", **settings))


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_sentence_vectors_are_refused_not_left_out_of_every_ranking(kind, bad):
    """faiss never returns a NaN / infinite vector (its paper was never found), and one in an IVF training sample
    made every search come back empty."""
    corpus = random_corpus(40, seed=2)
    corpus.vectors[7, 3] = bad
    with pytest.raises(ValueError, match=r"sentence vector\(s\) of .* hold NaN or infinite values \(rows \[7\]\)"):
        SentenceIndex.build(corpus, config(kind=kind, ivf_nlist=4, ivf_nprobe=4), "fp")


def test_add_refuses_papers_with_nonfinite_vectors_naming_them_and_changes_nothing():
    """`SentenceIndex.add` (`aspire index add`) called faiss itself, past the build's check: the paper was added
    and never found."""
    index = SentenceIndex.build(random_corpus(10, seed=2), config(kind="flat", store_bm25=False), "fp")
    new = random_corpus(4, seed=3)
    new.paper_ids[:] = [f"n{i}" for i in range(4)]
    new.vectors[new.offsets[2], 0] = np.nan
    with pytest.raises(ValueError, match=r"1 new paper\(s\) have NaN or infinite sentence vectors, e\.g\. \['n2'\]"):
        index.add(new, "fp")
    assert len(index.paper_ids) == 10 and index.faiss_index.ntotal == len(index.vectors) and not index.rejected


def _poison(shards: Path, shard: int, row: int) -> str:
    """NaN into sentence `row` of shard `shard` of `write_shards`; returns the id of its paper."""
    path = shards / f"shard-{shard:05d}-of-00003"
    vectors, offsets = np.load(path / "vectors.npy"), np.load(path / "offsets.npy")
    vectors[row] = np.nan
    np.save(path / "vectors.npy", vectors)
    paper = int(np.searchsorted(offsets, row, side="right") - 1)
    return json.loads((path / "papers.jsonl").read_text().splitlines()[paper])["paper_id"]


@pytest.mark.parametrize("kind", ["flat", "ivf"])  # ivf: met in the training sample, before any add
def test_streamed_merge_names_the_shard_and_paper_with_nonfinite_vectors(tmp_path, kind):
    shards = write_shards(tmp_path)
    pid = _poison(shards, 2, 6)  # shard 2's first paper (5 rows) repeats one of shard 0: row 6 is a kept paper's
    with pytest.raises(ValueError, match=rf"shard .*shard-00002-of-00003: the sentence vectors of paper\(s\) "
                                         rf"\['{pid}'\] hold NaN"):
        merge_streaming(shards, tmp_path / "idx", config(kind=kind, ivf_nlist=4))
    assert not (tmp_path / "idx" / "CURRENT").exists()


def test_streamed_merge_skips_nonfinite_rows_of_a_duplicate_paper(tmp_path):
    shards = write_shards(tmp_path)
    assert _poison(shards, 2, 0) == "p3"  # the duplicate of shard 0's p3: its rows are not indexed
    merge_streaming(shards, tmp_path / "idx", config(kind="flat"))
    assert SentenceIndex.load(tmp_path / "idx").n_papers == 75


def test_a_shard_numbered_past_the_count_is_refused_not_left_out(tmp_path):
    shards = write_shards(tmp_path)
    shutil.copytree(shards / "shard-00002-of-00003", shards / "shard-00003-of-00003")  # renamed by hand, say
    with pytest.raises(ValueError, match="shard-00003-of-00003 numbered past the last shard of a sharding into 3"):
        merge_streaming(shards, tmp_path / "idx", config(kind="flat"))


@pytest.mark.parametrize("key,value", [("files", None), ("files", ["config.yaml"]), ("sha256", None),
                                       ("sha256", "config.yaml vectors.npy")])
def test_a_manifest_with_damaged_file_tables_is_an_index_format_error(tmp_path, key, value, capsys):
    """`files` or `sha256` that is not a mapping once failed with a TypeError traceback (`index info` too)."""
    root = tmp_path / "idx"
    SentenceIndex.build(random_corpus(6), config(kind="flat", store_bm25=False), "fp").save(root)
    manifest_path = Path(SentenceIndex.read_manifest(root)["path"]) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest[key] = value
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match=rf"{manifest_path}.* is damaged: its `files` .* and `sha256`"):
        SentenceIndex.load(root)
    assert index_main(["info", "--index", str(root)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {manifest_path} is damaged")
