"""Round 48: building an index in one go (`aspire.index.build`) and its files on disk (`aspire.index.disk`),
checked with a stand-in encoder and tiny corpora built in code."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aspire.data.papers import Paper
from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.build import build_index, prepare_build_dir
from aspire.index.disk import IndexExistsError, IndexFormatError, live_generation, require_live_generation
from tests.test_reliability_round33_indexbuild import StubEncoder, generation_files, write_corpus


def config() -> IndexBuildConfig:
    return IndexBuildConfig(index=IndexConfig(kind="flat"))


def build(tmp_path: Path, out: str = "idx", n: int = 5, encoder: StubEncoder | None = None):
    corpus = tmp_path / f"{out}.jsonl"
    if not corpus.exists():
        write_corpus(corpus, n)
    enc = encoder or StubEncoder()
    return build_index(tmp_path / out, "stub", corpus, config(), load_encoder=lambda name: enc, progress=False)


def test_a_built_index_holds_the_encoders_own_vectors(tmp_path):
    enc = StubEncoder()
    index, gen = build(tmp_path, encoder=enc)
    papers = [Paper(f"p{i}", "a model of text", ["we propose a new method.", f"results {i} improve."])
              for i in range(5)]
    loaded = SentenceIndex.load(tmp_path / "idx")
    assert list(loaded.paper_ids) == [p.paper_id for p in papers]
    mine = StubEncoder().encode(papers)
    for i, p in enumerate(papers):
        lo, hi = int(loaded.offsets[i]), int(loaded.offsets[i + 1])
        got = np.asarray(loaded.vectors[lo:hi])
        want = np.stack([StubEncoder()._vec(s).numpy() for s in p.sentences])
        assert list(loaded.sentences[i]) == list(p.sentences)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert loaded.whole is not None
    np.testing.assert_allclose(np.asarray(loaded.whole), mine.whole.numpy(), rtol=0, atol=1e-6)


def test_building_twice_gives_identical_files(tmp_path):
    build(tmp_path, "a")
    (tmp_path / "b.jsonl").write_bytes((tmp_path / "a.jsonl").read_bytes())
    build(tmp_path, "b")
    a, b = generation_files(tmp_path / "a"), generation_files(tmp_path / "b")
    assert sorted(a) == sorted(b)
    assert {n for n in a if a[n] != b[n]} <= {"manifest.json"}


def test_a_crash_while_writing_keeps_the_old_generation_and_leaves_no_half_files(tmp_path, monkeypatch):
    build(tmp_path)
    root = tmp_path / "idx"
    before = require_live_generation(root)
    old = generation_files(root)

    def boom(self, path):
        np.save(path / "vectors.npy", np.zeros((2, 2)))
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(SentenceIndex, "_write_generation", boom)
    with pytest.raises(RuntimeError, match="killed"):
        build_index(root, "stub", tmp_path / "idx.jsonl", config(), overwrite=True,
                    load_encoder=lambda n: StubEncoder(), progress=False)
    assert require_live_generation(root) == before
    assert generation_files(root) == old
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".lock")) == ["CURRENT", before]
    SentenceIndex.load(root, verify=True)


@pytest.mark.parametrize("damage", ["missing", "no-manifest", "garbage"])
def test_current_naming_a_damaged_or_missing_generation_is_refused_naming_it(tmp_path, damage):
    build(tmp_path)
    root = tmp_path / "idx"
    live = require_live_generation(root)
    if damage == "missing":
        (root / "CURRENT").write_text("gen-000009\n")
        name = "gen-000009"
    elif damage == "no-manifest":
        (root / live / "manifest.json").unlink()
        name = live
    else:
        (root / "CURRENT").write_text("../elsewhere\n")
        name = "../elsewhere"
    with pytest.raises(IndexFormatError, match=name.replace(".", r"\.")):
        SentenceIndex.load(root)
    with pytest.raises(IndexExistsError, match=name.replace(".", r"\.")):
        prepare_build_dir(root)


@pytest.mark.parametrize("how", ["truncate", "rewrite", "rewrite-same-size"])
@pytest.mark.parametrize("name", ["vectors.npy", "offsets.npy"])
def test_a_damaged_array_file_is_refused_naming_it(tmp_path, how, name):
    build(tmp_path)
    root = tmp_path / "idx"
    path = root / require_live_generation(root) / name
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "rewrite":
        np.save(path, np.zeros(3))
    else:
        path.write_bytes(data[:-4] + b"\x00\x00\x80\x7f")
    with pytest.raises(IndexFormatError, match=name):
        SentenceIndex.load(root)


def test_an_empty_corpus_is_refused_naming_the_file(tmp_path):
    corpus = tmp_path / "empty.jsonl"
    corpus.write_text("")
    loads = []
    with pytest.raises(ValueError, match="empty.jsonl"):
        build_index(tmp_path / "idx", "stub", corpus, config(), load_encoder=lambda n: loads.append(n), progress=False)
    assert loads == [] and live_generation(tmp_path / "idx") is None


def test_repeated_ids_are_refused_or_rejected_naming_the_record(tmp_path):
    corpus = write_corpus(tmp_path / "dup.jsonl", 3, [json.dumps({"paper_id": "p1", "title": "t",
                                                                   "abstract": ["another one."]})])
    try:
        index, _ = build_index(tmp_path / "idx", "stub", corpus, config(), load_encoder=lambda n: StubEncoder(),
                               progress=False)
    except ValueError as err:
        assert "p1" in str(err)
        return
    assert list(index.paper_ids) == ["p0", "p1", "p2"]
    assert any(r.get("paper_id") == "p1" for r in index.rejected), index.rejected


def test_a_pointer_linking_out_of_the_index_is_refused_naming_it(tmp_path):
    """The module promises every path read is confined to the index directory: CURRENT linking to a file elsewhere
    (which names the live generation) was read and the index loaded through it."""
    build(tmp_path)
    root = tmp_path / "idx"
    live = require_live_generation(root)
    outside = tmp_path / "elsewhere.txt"
    outside.write_text(live + "\n")
    (root / "CURRENT").unlink()
    (root / "CURRENT").symlink_to(outside)
    with pytest.raises(IndexFormatError, match="CURRENT.*outside the index directory"):
        SentenceIndex.load(root)
    with pytest.raises(IndexExistsError, match="damaged index.*CURRENT"):
        prepare_build_dir(root)
    assert (root / live / "manifest.json").is_file() and outside.read_text() == live + "\n"
    prepare_build_dir(root, overwrite=True)  # the link alone is removed, never the file it pointed at
    assert not (root / "CURRENT").is_symlink() and outside.read_text() == live + "\n"
