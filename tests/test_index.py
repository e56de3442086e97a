"""Sentence index: faiss structures agree with exact search, atomic saves, model/version checks,
adding papers, accounting for every input record, sharded encoding with torchrun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.config import load_config
from aspire.data.papers import Paper
from aspire.index import (
    EncodedCorpus,
    IndexBuildConfig,
    IndexConfig,
    IndexFormatError,
    ModelMismatchError,
    SentenceIndex,
    encode_corpus,
)
from aspire.index.__main__ import main as index_main
from aspire.index.corpus import paper_rows

REPO = Path(__file__).resolve().parents[1]


def random_corpus(n_papers: int, dim: int = 16, seed: int = 0) -> EncodedCorpus:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, size=n_papers)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    vectors = rng.standard_normal((int(offsets[-1]), dim)).astype(np.float32)
    ids = [f"p{i}" for i in range(n_papers)]
    sentences = [[f"p{i} sentence {j}" for j in range(n)] for i, n in enumerate(lengths.tolist())]
    return EncodedCorpus(vectors, offsets, ids, [f"title {i}" for i in ids], sentences)


def config(**index) -> IndexBuildConfig:
    return IndexBuildConfig(index=IndexConfig(**index))


class HashEncoder:
    """A stand-in encoder: each sentence's vector is a fixed random function of its text."""

    def __init__(self, dim: int = 8, tag: str = "hash-v1") -> None:
        self.dim, self.tag = dim, tag

    def fingerprint(self) -> str:
        return self.tag

    def encode(self, papers, batch_size=32, progress=False) -> DocBatch:
        vectors = []
        for p in papers:
            seeds = [abs(hash((self.tag, s))) % 2**32 for s in p.sentences]
            vectors.append(torch.stack([torch.from_numpy(np.random.default_rng(x).standard_normal(self.dim)) for x in seeds]).float())
        return DocBatch.from_list(vectors, [p.paper_id for p in papers], [p.sentences for p in papers])


def exact_neighbours(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    d = ((queries[:, None, :] - vectors[None, :, :]) ** 2).sum(-1)
    return np.argsort(d, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize(
    "index_config",
    [dict(kind="flat"), dict(kind="hnsw", hnsw_ef_search=512), dict(kind="ivf", ivf_nlist=8, ivf_nprobe=8)],
    ids=["flat", "hnsw", "ivf"],
)
def test_faiss_neighbours_equal_exact_search(index_config):
    corpus = random_corpus(150)
    index = SentenceIndex.build(corpus, config(**index_config), "fp")
    queries = np.random.default_rng(1).standard_normal((12, corpus.dim)).astype(np.float32)
    dist, rows = index.search_sentences(queries, 10)
    assert (rows == exact_neighbours(corpus.vectors, queries, 10)).all()
    expected = np.linalg.norm(corpus.vectors[rows] - queries[:, None], axis=-1)
    np.testing.assert_allclose(dist, expected, rtol=1e-4, atol=1e-4)


def test_ivfpq_builds_and_auto_kind_follows_size():
    corpus = random_corpus(400)
    assert SentenceIndex.build(corpus, config(kind="auto"), "fp").kind == "flat"
    assert SentenceIndex.build(corpus, config(kind="auto", flat_max_sentences=10, ivf_nlist=16), "fp").kind == "ivf"
    pq = SentenceIndex.build(corpus, config(kind="ivf", ivf_nlist=4, ivf_nprobe=4, pq_m=4, pq_nbits=4), "fp")
    assert type(pq.faiss_index).__name__ == "IndexIVFPQ"
    _, rows = pq.search_sentences(corpus.vectors[:20], 5)
    assert (rows[:, 0] >= 0).all()
    with pytest.raises(ValueError, match="must divide"):
        SentenceIndex.build(corpus, config(kind="ivf", ivf_nlist=4, pq_m=5), "fp")


def test_offsets_map_rows_to_papers_and_gather_pads():
    corpus = random_corpus(30)
    index = SentenceIndex.build(corpus, config(kind="flat"), "fp")
    rows = np.arange(corpus.offsets[-1])
    owners = np.repeat(np.arange(30), np.diff(corpus.offsets))
    assert (index.sentence_papers(rows) == owners).all()
    assert (index.sentence_papers(np.array([-1])) == -1).all()
    batch = index.gather([5, 2])
    assert batch.paper_ids == ["p5", "p2"]
    for b, p in enumerate([5, 2]):
        n = corpus.offsets[p + 1] - corpus.offsets[p]
        assert int(batch.mask[b].sum()) == n
        assert torch.equal(batch.emb[b, :n], torch.from_numpy(corpus.vectors[corpus.offsets[p] : corpus.offsets[p + 1]]))
        assert (batch.emb[b, n:] == 0).all()
    rows, lengths = paper_rows(corpus.offsets, np.array([3, 0]))
    assert rows.tolist() == list(range(corpus.offsets[3], corpus.offsets[4])) + list(range(corpus.offsets[1]))
    vectors, lengths = index.gather_rows([5, 2], dtype=torch.float64)  # unpadded, paper after paper
    assert lengths.tolist() == [int(batch.mask[0].sum()), int(batch.mask[1].sum())]
    assert vectors.dtype == torch.float64 and torch.equal(vectors, batch.emb[batch.mask].double())


def test_save_load_round_trip(tmp_path):
    corpus = random_corpus(40)
    cfg = config(kind="hnsw", vector_dtype="float16")
    index = SentenceIndex.build(corpus, cfg, "fp-1", "model-a")
    index.save(tmp_path / "idx")
    loaded = SentenceIndex.load(tmp_path / "idx", model_fingerprint="fp-1")
    assert loaded.paper_ids == corpus.paper_ids and loaded.sentences == corpus.sentences
    assert loaded.kind == "hnsw" and loaded.config == cfg and loaded.vectors.dtype == np.float16
    q = corpus.vectors[:5]
    assert (loaded.search_sentences(q, 4)[1] == index.search_sentences(q, 4)[1]).all()
    manifest = SentenceIndex.read_manifest(tmp_path / "idx")
    assert manifest["model_fingerprint"] == "fp-1" and manifest["n_papers"] == 40
    assert load_config(IndexBuildConfig, Path(manifest["path"]) / "config.yaml") == cfg


def test_interrupted_save_leaves_old_index_loadable(tmp_path, monkeypatch):
    root = tmp_path / "idx"
    SentenceIndex.build(random_corpus(20), config(kind="flat"), "fp").save(root)
    bigger = SentenceIndex.build(random_corpus(50, seed=3), config(kind="flat"), "fp")

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-save")

    monkeypatch.setattr("aspire.index.store.write_index_papers", crash)
    with pytest.raises(KeyboardInterrupt):
        bigger.save(root)
    assert not any(p.name.startswith(".tmp-") for p in root.iterdir())  # the half-written generation removed on the way out
    assert SentenceIndex.load(root).n_papers == 20
    monkeypatch.undo()
    bigger.save(root)
    assert SentenceIndex.load(root).n_papers == 50
    assert sorted(p.name for p in root.iterdir() if p.name != ".lock") == ["CURRENT", "gen-000002"]  # leftovers removed


def test_truncated_file_and_missing_index_are_refused(tmp_path):
    root = tmp_path / "idx"
    with pytest.raises(IndexFormatError, match="no CURRENT"):
        SentenceIndex.load(root)
    gen = SentenceIndex.build(random_corpus(20), config(kind="flat"), "fp").save(root)
    with open(gen / "vectors.npy", "r+b") as f:
        f.truncate(100)
    with pytest.raises(IndexFormatError, match="vectors.npy"):
        SentenceIndex.load(root)


def test_model_mismatch_and_version_mismatch_are_refused(tmp_path):
    root = tmp_path / "idx"
    index = SentenceIndex.build(random_corpus(20), config(kind="flat"), "fp-a", "model-a")
    gen = index.save(root)
    with pytest.raises(ModelMismatchError, match="model-a"):
        SentenceIndex.load(root, model_fingerprint="fp-b")
    with pytest.raises(ModelMismatchError):
        index.add(random_corpus(3, seed=9), "fp-b")
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest["format_version"] = 999
    (gen / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="format version 999"):
        SentenceIndex.load(root)


def test_mismatch_message_names_what_differs_and_what_to_leave_out():
    from aspire.index.fingerprint import restate_mismatch

    with pytest.raises(ModelMismatchError) as caught:
        SentenceIndex.build(random_corpus(5), config(kind="flat"), "fp-a", "model-a").check_model("fp-b")
    err = caught.value
    assert err.fingerprints == ("fp-a", "fp-b")

    def advice(built, used):
        restated = restate_mismatch(err, built, used, "this search encodes papers")
        assert restated.fingerprints == err.fingerprints
        message = str(restated)
        assert message.endswith("(fingerprints fp-a, fp-b)"), message
        return message.split(": ", 1)[1]

    assert advice(("model-a", "onnx", None), ("model-b", "onnx", None)).startswith(
        "leave out --model to use the index's")
    assert advice(("model-a", "onnx", None), ("model-a", "onnx", "int8")).startswith(
        "leave out --backend/--quantize to use the index's")
    assert advice(("model-a", "onnx", None), ("model-b", "torch", None)).startswith(
        "leave out --model and --backend/--quantize")
    assert advice(("model-a", None, None), ("model-a", "torch", None)).startswith(
        "give the --backend/--quantize it was built with")
    assert advice(("model-a", "torch", None), ("model-a", "torch", None)).startswith(
        "the same model name and backend with other weights or settings: rebuild the index")


def test_refuses_to_write_into_a_non_index_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(IndexFormatError, match="not empty"):
        SentenceIndex.build(random_corpus(5), config(kind="flat"), "fp").save(tmp_path)


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_add_papers_to_a_saved_index(tmp_path, kind):
    root = tmp_path / "idx"
    first = random_corpus(60, seed=1)
    SentenceIndex.build(first, config(kind=kind, ivf_nlist=4, ivf_nprobe=4), "fp").save(root)
    more = random_corpus(10, seed=2)
    more.paper_ids = [f"new{i}" for i in range(9)] + ["p0"]  # p0 is already indexed
    index = SentenceIndex.load(root, mmap=False).add(more, "fp")
    index.save(root)
    loaded = SentenceIndex.load(root)
    assert loaded.n_papers == 69 and loaded.paper_ids[-1] == "new8"
    assert {"paper_id": "p0", "reason": "duplicate paper_id (already indexed)"} in loaded.rejected
    new_rows = np.arange(more.offsets[0], more.offsets[9])
    _, rows = loaded.search_sentences(more.vectors[new_rows], 1)
    assert (loaded.sentence_papers(rows[:, 0]) == loaded.sentence_papers(first.offsets[-1] + new_rows)).all()


def test_every_input_record_is_indexed_or_rejected(tmp_path):
    lines = [
        json.dumps({"paper_id": "a", "title": "A", "abstract": ["one.", "two."]}),
        "{not json",
        json.dumps({"title": "no id", "abstract": ["x."]}),
        json.dumps({"paper_id": "b", "title": "B", "abstract": []}),
        json.dumps({"paper_id": "a", "title": "A again", "abstract": ["three."]}),
        json.dumps({"paper_id": "c", "title": "C", "abstract": 42}),
        json.dumps({"paper_id": "d", "title": "D", "abstract": ["four.", "five.", "six."]}),
    ]
    path = tmp_path / "papers.jsonl"
    path.write_text("\n".join(lines) + "\n")
    from aspire.index.corpus import read_corpus

    papers, unreadable = read_corpus(path)
    corpus = encode_corpus(HashEncoder(), papers, progress=False)
    assert corpus.paper_ids == ["a", "d"] and corpus.offsets.tolist() == [0, 2, 5]
    rejected = unreadable + corpus.rejected
    assert sorted(r["line"] for r in rejected) == [2, 3, 4, 5, 6]  # every other line, once
    assert all(r["reason"] for r in rejected)
    # papers the reader accepts but the index cannot hold are rejected at encoding time
    more = encode_corpus(HashEncoder(), [Paper("e", "E", []), Paper("a", "A", ["x."]), Paper("f", "F", ["y."]),
                                         Paper("f", "F", ["z."])], skip_ids=["a"], progress=False)
    assert more.paper_ids == ["f"]
    assert sorted((r["paper_id"], r["reason"]) for r in more.rejected) == [
        ("a", "duplicate paper_id (already indexed)"), ("e", "no abstract sentences"),
        ("f", "duplicate paper_id (again in this corpus)")]


def test_cli_build_add_info_and_model_check(tmp_path, tiny_model_dir, capsys):
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": f"p{i}", "title": "a model of text",
                                          "abstract": ["we propose a new method.", f"results {i} improve."]}) + "\n"
                              for i in range(6)) + "{broken\n")
    out = tmp_path / "idx"
    assert index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(out),
                       "encode.batch_size=4", "index.kind=flat"]) == 0
    text = capsys.readouterr().out
    assert "6 papers" in text and "1 record(s) rejected" in text
    assert index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(out)]) == 2
    assert "already holds an index" in capsys.readouterr().err
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"paper_id": "q", "title": "t", "abstract": ["the data."]}) + "\n")
    assert index_main(["add", "--index", str(out), "--corpus", str(more)]) == 0
    text = capsys.readouterr().out  # the build's rejected record is not this add's (it once said "1 record(s) rejected")
    assert "indexed 1 new paper(s)" in text and "rejected" not in text
    index = SentenceIndex.load(out)
    assert index.n_papers == 7 and index.n_sentences == 13 and index.dim == 32
    assert [r["corpus"] for r in index.rejected] == [str(corpus)]
    both = tmp_path / "both.jsonl"
    both.write_text(json.dumps({"paper_id": "s", "title": "t", "abstract": ["new data."]}) + "\n{broken\n")
    assert index_main(["add", "--index", str(out), "--corpus", str(both)]) == 0
    assert "1 record(s) of this corpus rejected (2 in all)" in capsys.readouterr().out
    assert [r["corpus"] for r in SentenceIndex.load(out).rejected] == [str(corpus), str(both)]
    from aspire.encoders import load_encoder
    from aspire.index import model_fingerprint

    assert index.model_fingerprint == model_fingerprint(load_encoder(tiny_model_dir))
    capsys.readouterr()
    live = (out / "CURRENT").read_text()  # adding only what is indexed already: refused, no new generation
    assert index_main(["add", "--index", str(out), "--corpus", str(more), "--quiet"]) == 2  # no note of the backend
    assert capsys.readouterr().err == (f"error: nothing to add: all 1 records of {more} are indexed already or were "
                                       "rejected: paper 'q': indexed already\n")
    assert (out / "CURRENT").read_text() == live
    more.write_text(json.dumps({"paper_id": "r", "title": "t", "abstract": ["more data."]}) + "\n")
    other = tmp_path / "other-model"
    shutil.copytree(tiny_model_dir, other)
    enc = load_encoder(other)
    with torch.no_grad():
        next(enc.model.parameters()).add_(1.0)
    enc.save_pretrained(other)
    capsys.readouterr()
    assert index_main(["add", "--index", str(out), "--corpus", str(more), "--model", str(other), "--quiet"]) == 2
    err = capsys.readouterr().err  # ModelMismatchError, one line naming what differs
    assert err.count("\n") == 1 and "the index was built with model" in err and "leave out --model to use" in err
    with pytest.raises(ModelMismatchError):  # with --log-level DEBUG the exception (and its traceback) shows
        index_main(["add", "--index", str(out), "--corpus", str(more), "--model", str(other), "--log-level", "debug"])


@pytest.mark.slow  # two fresh interpreters importing torch + transformers: ~30 s on 2 cores
def test_torchrun_two_ranks_encode_shards_and_merge(tmp_path, tiny_model_dir):
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": f"p{i}", "title": "title",
                                          "abstract": [f"sentence {j} of paper {i}." for j in range(1 + i % 3)]}) + "\n"
                              for i in range(9)))
    shards, out = tmp_path / "shards", tmp_path / "idx"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29617",
           "-m", "aspire.index", "encode-shard", "--model", str(tiny_model_dir), "--corpus", str(corpus),
           "--shards", str(shards), "--merge-into", str(out), "index.kind=flat"]
    result = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in shards.iterdir()) == ["shard-00000-of-00002", "shard-00001-of-00002"]
    index = SentenceIndex.load(out)
    assert index.paper_ids == [f"p{i}" for i in range(9)]
    # the merged index holds the same vectors as a single-process encoding
    from aspire.encoders import load_encoder
    from aspire.index.corpus import read_corpus

    papers, _ = read_corpus(corpus)
    single = encode_corpus(load_encoder(tiny_model_dir), papers, progress=False)
    np.testing.assert_allclose(np.asarray(index.vectors), single.vectors, atol=1e-5)
    assert index.offsets.tolist() == single.offsets.tolist()


@pytest.mark.parametrize("name", ["index.yaml", "index-large.yaml", "index-bench.yaml", "index-million.yaml"])
def test_shipped_configs_load(name):
    cfg = load_config(IndexBuildConfig, REPO / "configs" / name)
    assert cfg.index.kind in ("auto", "flat", "hnsw", "ivf")
    if name == "index.yaml":
        assert cfg == IndexBuildConfig()  # the file spells out the defaults
