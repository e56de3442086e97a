"""Sharded encoding (`aspire.index.shards`; `aspire index encode-shard` and `merge`): a re-run keeps a finished
shard only when it was encoded from the same corpus with the same model, backend and reading limits; merge refuses
shards that are not one encoding (corpora, backends, limits, slices that overlap or leave records out) and records
the shards' backend; a damaged shard (whole.npy, shard.json) is one error naming it; an index folder is never
used as a --shards folder."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.__main__ import main
from aspire.index.disk import IndexFormatError, check_index_dir
from aspire.index.shards import shard_name, shard_slice
from aspire.index.stream import merge_streaming

DIM = 8
LIMITS = {"max_sentences": 1000, "max_sentence_chars": 20000, "max_line_bytes": 1 << 20}


class HashEncoder:
    """A stand-in encoder: each sentence's vector a fixed random function of its text and `tag`; the whole-abstract
    vector the mean of a paper's. Its fingerprint is its tag (the backend and precision, as a fast backend's is)."""

    def __init__(self, tag: str) -> None:
        self.tag, self.dim = tag, DIM

    def fingerprint(self) -> str:
        return self.tag

    def to(self, device):
        return self

    def encode(self, papers, batch_size=32, progress=False) -> DocBatch:
        vectors = [torch.stack([torch.from_numpy(np.random.default_rng(abs(hash((self.tag, s))) % 2**32)
                                                 .standard_normal(DIM)).float() for s in p.sentences]) for p in papers]
        return DocBatch.from_list(vectors, [p.paper_id for p in papers], [p.sentences for p in papers],
                                  torch.stack([v.mean(0) for v in vectors]))


@pytest.fixture
def loads(monkeypatch) -> list[dict]:
    """Every model load, as the `load_encoder` options it was given; each gives a HashEncoder of that backend."""
    seen = []

    def load(name, device=None, **options):
        seen.append(options)
        return HashEncoder(f"hash/{options.get('backend', 'torch')}/{options.get('quantize')}")

    monkeypatch.setattr("aspire.encoders.load_encoder", load)
    return seen


def write_corpus(path: Path, ids: list[str]) -> Path:
    path.write_text("".join(json.dumps({"paper_id": i, "title": f"title {i}",
                                        "abstract": [f"{i} says {j} about topic {j}." for j in range(1 + len(i) % 3)]})
                            + "\n" for i in ids))
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main([*argv, "--quiet"])
    out, err = capsys.readouterr()
    return status, out, err


def stamps(shards: Path) -> dict[str, int]:
    return {p.parent.name: p.stat().st_mtime_ns for p in shards.glob("shard-*/shard.json")}


def test_a_rerun_reuses_only_the_shards_of_the_same_corpus_and_settings(tmp_path, capsys, loads):
    first, other = [f"a{i}" for i in range(20)], [f"b{i}" for i in range(10)]
    corpus, shards = write_corpus(tmp_path / "c20.jsonl", first), tmp_path / "shards"
    encode = ["encode-shard", "--model", "minilm", "--shards", str(shards), "--num-shards", "3"]
    status, out, _ = run(capsys, *encode, "--corpus", str(corpus))
    assert status == 0 and out.splitlines() == [f"wrote {shards / shard_name(s, 3)}" for s in range(3)]
    kept = stamps(shards)
    status, out, _ = run(capsys, *encode, "--corpus", str(corpus))
    assert status == 0 and out.splitlines() == [f"reused {shards / shard_name(s, 3)}" for s in range(3)]
    copy = shutil.copy(corpus, tmp_path / "elsewhere.jsonl")  # the same bytes read from another path: the same corpus
    assert run(capsys, *encode, "--corpus", str(copy))[1].startswith("reused")
    assert stamps(shards) == kept

    # another corpus, the same corpus grown, other reading limits, another shard count, another backend: refused
    # before anything is encoded, naming the shard and what differs; the finished shards stay as they are
    refused = {
        "another corpus": ((write_corpus(tmp_path / "c10b.jsonl", other),), "from corpus"),
        "other limits": ((corpus, "encode.max_sentences=5"), "encode.max_sentences=1000"),
        "another count": ((corpus, "--num-shards", "4"), "is a shard of 3; this run cuts the corpus into 4"),
        "another backend": ((corpus, "--backend", "onnx", "--quantize", "int8"), "was encoded with model"),
    }
    for what, ((path, *more), said) in refused.items():
        status, out, err = run(capsys, *encode, "--corpus", str(path), *more)
        assert status == 2 and out == "" and said in err, what
        assert err.startswith(f"error: {shards / shard_name(0, 3)} was encoded") or "is a shard of" in err, what
        assert err.rstrip().endswith("use a new --shards folder, or remove the stale shards") and err.count("\n") == 1
        assert stamps(shards) == kept and len(list(shards.iterdir())) == 3, what
    status, _, err = run(capsys, *encode, "--corpus", str(corpus), "encode.max_sentences=5")
    assert "encode.max_sentences=5" in err

    # the corpus grew after a shard was lost: the re-run does not encode the missing shard over a new slicing
    shutil.rmtree(shards / shard_name(1, 3))
    with corpus.open("a") as f:
        f.write(write_corpus(tmp_path / "more.jsonl", other).read_text())
    status, _, err = run(capsys, *encode, "--corpus", str(corpus))
    assert status == 2 and "this run from corpus" in err and not (shards / shard_name(1, 3)).exists()
    assert all(options.get("backend", "torch") in ("torch", "onnx") for options in loads)


def test_encode_shard_refuses_a_folder_holding_an_index(tmp_path, capsys, loads):
    corpus, shards = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(6)]), tmp_path / "shards"
    assert run(capsys, "encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards", str(shards),
               "--merge-into", str(tmp_path / "idx"))[0] == 0
    index, before, n_loads = tmp_path / "idx", sorted(p.name for p in (tmp_path / "idx").iterdir()), len(loads)
    status, out, err = run(capsys, "encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards", str(index))
    assert status == 2 and err == (f"error: --shards {index} holds an index (CURRENT, {before[-1]}); shards are written "
                                   "into a folder of their own: give another --shards folder\n")
    assert sorted(p.name for p in index.iterdir()) == before and len(loads) == n_loads  # no model loaded
    status, _, err = run(capsys, "encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards",
                         str(tmp_path / "new"), "--merge-into", str(tmp_path / "new"))
    assert status == 2 and "is the --shards folder" in err and not (tmp_path / "new").exists()
    # an index folder with a foreign entry is said to hold an index and that entry, not to hold none
    (index / "notes.txt").write_text("mine")
    said = "holds an index and also entries an index never writes (['notes.txt'])"
    with pytest.raises(IndexFormatError, match=re.escape(said)):
        check_index_dir(index)
    (index / "CURRENT").unlink()
    shutil.rmtree(index / before[-1])
    with pytest.raises(IndexFormatError, match=re.escape("is not empty and holds no index (found ['notes.txt'])")):
        check_index_dir(index)


def test_merge_records_the_backend_the_shards_were_encoded_with(tmp_path, capsys, loads):
    corpus, shards = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(8)]), tmp_path / "shards"
    assert run(capsys, "encode-shard", "--model", "minilm", "--backend", "onnx", "--quantize", "int8", "--corpus",
               str(corpus), "--shards", str(shards), "--num-shards", "2", "encode.max_sentences=50")[0] == 0
    assert run(capsys, "merge", "--shards", str(shards), "--out", str(tmp_path / "idx"), "index.kind=flat")[0] == 0
    encode = SentenceIndex.load(tmp_path / "idx").config.encode
    assert (encode.backend, encode.quantize, encode.max_sentences) == ("onnx", "int8", 50)
    more = write_corpus(tmp_path / "more.jsonl", ["b1", "b2"])
    status, out, err = run(capsys, "add", "--index", str(tmp_path / "idx"), "--corpus", str(more))
    assert (status, err) == (0, "") and "indexed 2 new paper(s)" in out
    assert loads[-1] == {"backend": "onnx", "quantize": "int8"}  # `add` encoded as the shards were
    # shards that record no backend (written before it was recorded) merge as before: the index records none
    for path in shards.glob("shard-*/shard.json"):
        meta = json.loads(path.read_text())
        path.write_text(json.dumps({k: v for k, v in meta.items() if k not in ("backend", "quantize")}))
    assert run(capsys, "merge", "--shards", str(shards), "--out", str(tmp_path / "old"), "index.kind=flat")[0] == 0
    assert SentenceIndex.load(tmp_path / "old").config.encode.backend is None


# ---- merge: shards that are not one encoding, damaged shards ---------------------------------------------------
def write_encoding(root: Path, n: int = 12, n_shards: int = 3) -> Path:
    """The `n_shards` shards of one encoding of a corpus of `n` papers, recorded as `encode-shard` records them."""
    shards = root / "shards"
    for s in range(n_shards):
        lo, hi = shard_slice(s, n_shards, n)
        ids = [f"p{i}" for i in range(lo, hi)]
        rng, rows = np.random.default_rng(s), 2 * len(ids)  # two sentences a paper
        part = EncodedCorpus(rng.standard_normal((rows, DIM)).astype(np.float32), np.arange(0, rows + 1, 2), ids,
                             [f"title {i}" for i in ids], [[f"{i} one.", f"{i} two."] for i in ids],
                             whole=rng.standard_normal((len(ids), DIM)).astype(np.float32))
        part.save_shard(shards / shard_name(s, n_shards),
                        {"shard": s, "num_shards": n_shards, "model_name": "m", "model_fingerprint": "fp",
                         "backend": "torch", "quantize": None, "corpus": "/data/c.jsonl", "corpus_bytes": 100,
                         "corpus_sha256": "ab" * 32, "encode": LIMITS, "corpus_papers": n, "slice": [lo, hi]})
    return shards


def edit(shard: Path, **changes) -> None:
    """Change keys of `shard`'s shard.json (None: remove the key)."""
    meta = json.loads((shard / "shard.json").read_text())
    meta.update(changes)
    (shard / "shard.json").write_text(json.dumps({k: v for k, v in meta.items() if v is not None}))


OLD = dict(backend=None, quantize=None, corpus_bytes=None, corpus_sha256=None, encode=None, corpus_papers=None)
NOT_ONE_ENCODING = {  # shard 1's change -> what the error says
    "corpus": (dict(corpus="/data/other.jsonl", corpus_sha256="cd" * 32),
               "shards were encoded from different corpora: shard-00000-of-00003, shard-00002-of-00003 from corpus "
               "/data/c.jsonl (100 bytes, SHA-256 abababababababab); shard-00001-of-00003 from corpus /data/other"),
    "backend": (dict(backend="onnx", quantize="int8"),
                "shards were encoded with different backends: shard-00000-of-00003, shard-00002-of-00003 with backend "
                "torch fp32; shard-00001-of-00003 with backend onnx int8"),
    "limits": (dict(encode={**LIMITS, "max_sentences": 5}), "shards were encoded with different reading limits"),
    "model": (dict(model_fingerprint="other"), "shards were encoded with different models"),
    "overlap": (dict(OLD, slice=[2, 8]), "shard-00000-of-00003 holds records [0, 4) and shard-00001-of-00003 [2, 8): "
                                         "they overlap"),
    "gap": (dict(OLD, slice=[5, 8]), "shard-00000-of-00003 holds records [0, 4) and shard-00001-of-00003 [5, 8): "
                                     "records [4, 5) are in neither"),
    "end": (dict(corpus_papers=13), "the last shard shard-00002-of-00003 holds records [8, 12) of a corpus of 13 "
                                     "records: records [12, 13) are in no shard"),
}


@pytest.mark.parametrize("what", list(NOT_ONE_ENCODING))
def test_merge_refuses_shards_that_are_not_one_encoding(tmp_path, what):
    shards = write_encoding(tmp_path)
    change, said = NOT_ONE_ENCODING[what]
    if what in ("overlap", "gap"):  # shards written before the corpus was recorded: their slices are still checked
        for s in (0, 2):
            edit(shards / shard_name(s, 3), **OLD)
    if what == "end":  # every shard agrees on a corpus of 13 records, but the slices end at 12
        for s in (0, 2):
            edit(shards / shard_name(s, 3), corpus_papers=13)
    edit(shards / shard_name(1, 3), **change)
    with pytest.raises(ValueError, match=re.escape(said)):
        merge_streaming(shards, tmp_path / "idx", IndexBuildConfig(index=IndexConfig(kind="flat")))
    assert not (tmp_path / "idx" / "CURRENT").exists()


def test_merge_of_one_encoding_keeps_every_record_and_a_missing_shard_only_when_allowed(tmp_path):
    shards, config = write_encoding(tmp_path), IndexBuildConfig(index=IndexConfig(kind="flat"))
    merge_streaming(shards, tmp_path / "all", config)
    index = SentenceIndex.load(tmp_path / "all")
    assert index.paper_ids == [f"p{i}" for i in range(12)] and index.whole.shape == (12, DIM)
    shutil.rmtree(shards / shard_name(1, 3))  # the records of shard 1 are missing, not a gap between 0 and 2
    merge_streaming(shards, tmp_path / "part", config, allow_missing=True)
    assert SentenceIndex.load(tmp_path / "part").paper_ids == ["p0", "p1", "p2", "p3"] + [f"p{i}" for i in range(8, 12)]


def _damage(shard: Path, what: str) -> None:
    if what == "missing":
        (shard / "whole.npy").unlink()
    elif what == "rows":
        np.save(shard / "whole.npy", np.zeros((1, DIM), np.float32))
    elif what == "truncated":
        os.truncate(shard / "whole.npy", 200)
    elif what == "key":
        edit(shard, model_fingerprint=None)


DAMAGE = {
    "missing": "error: {shards}: shard-00001-of-00003 lacks whole.npy, which shard-00000-of-00003, shard-00002-of-00003 "
               "hold: a damaged shard; encode it again",
    "rows": "error: shard {shard}: whole.npy holds float32 of shape (1, 8), not one vector of dimension 8 for each of "
            "its 4 papers",
    "truncated": "error: shard {shard}: whole.npy does not read as an array (mmap length is greater than file size)",
    "key": "error: {shard}/shard.json lacks 'model_fingerprint': a damaged shard; encode it again",
}


@pytest.mark.parametrize("what", list(DAMAGE))
def test_a_damaged_shard_is_one_error_naming_the_shard_and_file(tmp_path, capsys, what):
    shards = write_encoding(tmp_path)
    _damage(shards / shard_name(1, 3), what)
    assert main(["merge", "--shards", str(shards), "--out", str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err
    assert err == DAMAGE[what].format(shards=shards, shard=shards / shard_name(1, 3)) + "\n"


def test_shards_without_whole_vectors_merge_into_an_index_without_them(tmp_path):
    shards = write_encoding(tmp_path)
    for s in range(3):  # an encoding from before the one-pass encoding: no shard holds whole vectors
        (shards / shard_name(s, 3) / "whole.npy").unlink()
    merge_streaming(shards, tmp_path / "idx", IndexBuildConfig(index=IndexConfig(kind="flat")))
    index = SentenceIndex.load(tmp_path / "idx")
    assert index.n_papers == 12 and index.whole is None
