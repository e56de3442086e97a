"""`aspire index` build, merge, encode-shard --merge-into, info and add: refusals made before the work they spare,
and errors that name the file.

- An IVF index the config asks for that cannot be made over the corpus (more lists than the corpus can give
  sentence vectors, as configs/index-large.yaml's 16,384 lists over a sample; a `pq_m` that does not divide the
  model's dimension) was refused only once the whole corpus had been encoded (`build`, `encode-shard --merge-into`);
  it is refused once the model is loaded, before any encoding.
- `merge` (and `encode-shard --merge-into`) without --overwrite replaced a damaged index (a generation without its
  manifest, a CURRENT naming a generation not there), deleting its generation's files without a word, where `build`
  refuses it; both refuse it now, with the reason, before any work.
- `info` and `add` on an index whose config.yaml fails its schema said the key and not the file
  ("unknown config key(s) ['encode.future_key']"); `search` named the file. All name it now.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.index import EncodedCorpus
from aspire.index.__main__ import main
from aspire.index.disk import require_live_generation

DIM = 8


class CountingEncoder:
    """A stand-in encoder of dimension `DIM`: a sentence's vector a fixed random function of its text, the whole
    vector their mean; `encoded` counts the papers it was asked to encode."""

    def __init__(self) -> None:
        self.dim, self.encoded = DIM, 0

    def fingerprint(self) -> str:
        return "counting"

    def to(self, device):
        return self

    def encode(self, papers, batch_size=32, progress=False) -> DocBatch:
        self.encoded += len(papers)
        vectors = [torch.stack([torch.from_numpy(np.random.default_rng(abs(hash(s)) % 2**32).standard_normal(DIM))
                                .float() for s in p.sentences]) for p in papers]
        return DocBatch.from_list(vectors, [p.paper_id for p in papers], [p.sentences for p in papers],
                                  torch.stack([v.mean(0) for v in vectors]))


def loaded_encoders(monkeypatch, make) -> list:
    """Every encoder the commands load, each `make()` (`aspire.encoders.load_encoder` replaced)."""
    loaded = []

    def load(name, device=None, **options):
        loaded.append(make())
        return loaded[-1]

    monkeypatch.setattr("aspire.encoders.load_encoder", load)
    return loaded


@pytest.fixture
def encoders(monkeypatch) -> list[CountingEncoder]:
    return loaded_encoders(monkeypatch, CountingEncoder)


def write_corpus(path: Path, n: int = 6) -> Path:
    """`n` papers of two abstract sentences each: at most 3 sentence vectors a paper with the title."""
    path.write_text("".join(json.dumps({"paper_id": f"p{i}", "title": f"title {i}",
                                        "abstract": [f"paper {i} proposes a method.", f"it improves task {i}."]}) + "\n"
                            for i in range(n)), encoding="utf-8")
    return path


def run(capsys, *argv: str) -> tuple[int, str]:
    status = main([*argv, "--quiet"])
    return status, capsys.readouterr().err


# ---- 1. an IVF index that cannot be made over the corpus is refused before any encoding --------------------------

@pytest.mark.parametrize("overrides, said", [
    (["index.kind=ivf", "index.ivf_nlist=64"], r"index.ivf_nlist=64: .* the corpus has at most 18;"),
    (["index.kind=ivf", "index.ivf_nlist=2", "index.pq_m=3"], r"index.pq_m=3 must divide the vector dimension 8"),
    (["index.kind=ivf", "index.ivf_nlist=2", "index.pq_m=2"], r"index.pq_nbits=8: .* has at most 18 \(corpus at most 18"),
], ids=["lists", "pq_m", "pq_nbits"])
def test_build_refuses_an_ivf_index_that_cannot_fit_before_encoding(tmp_path, capsys, encoders, overrides, said):
    corpus = write_corpus(tmp_path / "papers.jsonl")
    status, err = run(capsys, "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(tmp_path / "idx"),
                      *overrides)
    assert status == 2 and re.search(said, err), err
    assert len(encoders) == 1 and encoders[0].encoded == 0  # the model loaded (its dimension), nothing encoded
    assert not (tmp_path / "idx" / "CURRENT").exists()


def test_an_ivf_index_that_fits_and_an_auto_index_are_built_as_before(tmp_path, capsys, encoders):
    corpus = write_corpus(tmp_path / "papers.jsonl")
    assert run(capsys, "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(tmp_path / "ivf"),
               "index.kind=ivf", "index.ivf_nlist=4")[0] == 0
    # auto with 64 lists over 12 vectors: flat (the IVF settings are never used), built as before
    assert run(capsys, "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(tmp_path / "auto"),
               "index.ivf_nlist=64", "index.flat_max_sentences=100")[0] == 0
    assert [e.encoded for e in encoders] == [6, 6]
    kinds = [json.loads((tmp_path / name / require_live_generation(tmp_path / name) / "manifest.json").read_text())["kind"]
             for name in ("ivf", "auto")]
    assert kinds == ["ivf", "flat"]
    # between the most the corpus can give (18, with titles) and what it gives (12): refused after encoding, as before
    status, err = run(capsys, "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(tmp_path / "late"),
                      "index.kind=ivf", "index.ivf_nlist=15")
    assert status == 2 and "index.ivf_nlist=15: an IVF index needs at least one sentence vector a list and the " \
                           "corpus has 12;" in err and encoders[-1].encoded == 6


def test_encode_shard_with_merge_into_refuses_an_ivf_index_that_cannot_fit_before_encoding(tmp_path, capsys,
                                                                                          encoders):
    corpus = write_corpus(tmp_path / "papers.jsonl")
    status, err = run(capsys, "encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards",
                      str(tmp_path / "shards"), "--merge-into", str(tmp_path / "idx"), "index.kind=ivf",
                      "index.ivf_nlist=2", "index.pq_m=3")
    assert status == 2 and "index.pq_m=3 must divide the vector dimension 8" in err, err
    assert encoders[0].encoded == 0 and not list((tmp_path / "shards").glob("shard-*"))
    # without --merge-into the index settings are not used: the shards are encoded
    assert run(capsys, "encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards", str(tmp_path / "shards"),
               "index.kind=ivf", "index.ivf_nlist=2", "index.pq_m=3")[0] == 0
    assert encoders[-1].encoded == 6


# ---- 2. merge does not replace a damaged index without --overwrite -----------------------------------------------

def write_shards(root: Path) -> Path:
    shards = root / "shards"
    rng = np.random.default_rng(0)
    part = EncodedCorpus(rng.standard_normal((3, DIM)).astype(np.float32), np.array([0, 1, 3]), ["a", "b"],
                         ["title a", "title b"], [["a one."], ["b one.", "b two."]])
    part.save_shard(shards / "shard-00000-of-00001", {"model_name": "minilm", "model_fingerprint": "fp"})
    return shards


@pytest.mark.parametrize("damage", ["no manifest", "missing generation"])
def test_merge_refuses_a_damaged_index_without_overwrite(tmp_path, capsys, damage):
    shards, out = write_shards(tmp_path), tmp_path / "idx"
    assert run(capsys, "merge", "--shards", str(shards), "--out", str(out))[0] == 0
    gen = out / require_live_generation(out)
    if damage == "no manifest":
        (gen / "manifest.json").unlink()
        reason = f"{gen} is incomplete: no manifest.json"
    else:
        (out / "CURRENT").write_text("gen-000009\n")
        reason = "CURRENT names gen-000009, which is not there"
    kept = sorted(p.name for p in gen.iterdir())
    status, err = run(capsys, "merge", "--shards", str(shards), "--out", str(out))
    assert status == 2 and f"{out} holds a damaged index (" in err and reason in err and "--overwrite" in err, err
    assert sorted(p.name for p in gen.iterdir()) == kept  # its files stay: once deleted by the merge's publish
    assert run(capsys, "merge", "--shards", str(shards), "--out", str(out), "--overwrite")[0] == 0
    assert (out / require_live_generation(out) / "manifest.json").is_file()


def test_encode_shard_merge_into_a_damaged_index_is_refused_before_encoding(tmp_path, capsys, encoders):
    out = tmp_path / "idx"
    (out / "gen-000001").mkdir(parents=True)
    (out / "CURRENT").write_text("gen-000001\n")
    status, err = run(capsys, "encode-shard", "--model", "minilm", "--corpus", str(write_corpus(tmp_path / "papers.jsonl")),
                      "--shards", str(tmp_path / "shards"), "--merge-into", str(out))
    assert status == 2 and "holds a damaged index" in err and "no manifest.json" in err, err
    assert encoders == [] and (out / "gen-000001").is_dir()


# ---- 3. info and add name the config.yaml that fails its schema ---------------------------------------------------

def test_info_and_add_name_a_config_yaml_that_fails_its_schema(tmp_path, capsys, encoders):
    corpus = write_corpus(tmp_path / "papers.jsonl")
    out = tmp_path / "idx"
    assert run(capsys, "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(out), "index.kind=flat")[0] == 0
    gen = out / require_live_generation(out)
    config = gen / "config.yaml"
    config.write_text(config.read_text().replace("  batch_size: 32\n", "  batch_size: 32\n  future_key: 1\n"))
    manifest = json.loads((gen / "manifest.json").read_text())  # as a writer that knows the key records it
    manifest["files"]["config.yaml"] = config.stat().st_size
    manifest["sha256"]["config.yaml"] = hashlib.sha256(config.read_bytes()).hexdigest()
    (gen / "manifest.json").write_text(json.dumps(manifest))
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"paper_id": "new", "title": "t", "abstract": ["a new paper."]}) + "\n")
    for argv in (["info", "--index", str(out)], ["add", "--index", str(out), "--corpus", str(more)]):
        status, err = run(capsys, *argv)
        assert status == 2 and f"{config}: unknown config key(s) ['encode.future_key']" in err, (argv, err)
