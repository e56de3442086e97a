"""Round 27, the sentence store's add / save / load and the early index check: `require_live_generation` (the check of
`index add`/`info`, `search` and `serve` before their heavy imports) took a CURRENT naming a generation folder that is
not there, and the error came only after torch and faiss loaded; a sentences.faiss that does not read (a file over
64 MiB is not checksummed at load) raised faiss's RuntimeError, naming no file; a manifest whose `kind` is not the
structure in sentences.faiss loaded, and the search then asked the file with the other kind's settings (an HNSW file
under "flat": faiss's efSearch 16, not the config's 128); files that disagree with each other were named without their
generation. What held: round trips against the in-memory index, adds of indexed ids, empty and float64 adds, and a
save that fails mid-write leaving the old generation live."""

from __future__ import annotations

import json
from pathlib import Path

import faiss
import numpy as np
import pytest

import aspire.index.store as store
from aspire.index import EncodedCorpus, IndexFormatError, SentenceIndex
from aspire.index.disk import require_live_generation
from tests.test_light_commands import probe
from tests.test_reliability_round18_store import cfg, corpus, resum, saved


def _manifest(gen: Path, **edits) -> None:
    manifest = json.loads((gen / "manifest.json").read_text())
    (gen / "manifest.json").write_text(json.dumps({**manifest, **edits}))


def _same(a: SentenceIndex, b: SentenceIndex) -> None:
    """Everything a save keeps, compared field by field (the vectors exactly)."""
    assert a.paper_ids == b.paper_ids and a.titles == b.titles and list(a.sentences) == list(b.sentences)
    assert a.labels == b.labels and a.rejected == b.rejected and a.kind == b.kind
    assert (a.model_fingerprint, a.model_name, a.include_title) == (b.model_fingerprint, b.model_name, b.include_title)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    assert np.asarray(a.vectors).dtype == np.asarray(b.vectors).dtype
    np.testing.assert_array_equal(np.asarray(a.vectors), np.asarray(b.vectors))
    np.testing.assert_array_equal(np.asarray(a.whole), np.asarray(b.whole))
    assert a.faiss_index.ntotal == b.faiss_index.ntotal
    np.testing.assert_array_equal(a.faiss_index.reconstruct_n(0, a.faiss_index.ntotal),
                                  b.faiss_index.reconstruct_n(0, b.faiss_index.ntotal))


# ---- the early check: CURRENT naming a generation folder that is not there -------------------------------------------
def test_require_live_generation_refuses_a_current_naming_a_missing_generation_folder(tmp_path):
    _, root, gen = saved(tmp_path)
    assert require_live_generation(root) == gen.name
    (root / "CURRENT").write_text("gen-000009\n")
    with pytest.raises(IndexFormatError, match=rf"CURRENT names gen-000009, which is not there: no folder "
                                               rf"{root / 'gen-000009'}"):
        require_live_generation(root)
    (root / "gen-000009").write_text("")  # a file by the generation's name is no generation either
    with pytest.raises(IndexFormatError, match="which is not there: no folder"):
        require_live_generation(root)
    with pytest.raises(IndexFormatError, match="CURRENT names gen-000009, which is not there"):
        SentenceIndex.load(root)  # the load's own check says it in the same words


def test_index_info_search_and_serve_refuse_it_before_torch_and_faiss(tmp_path):
    """They once passed the early check and failed only after the heavy imports."""
    root = tmp_path / "idx"
    root.mkdir()
    (root / "CURRENT").write_text("gen-000003\n")
    rows = probe([["index", "info", "--index", str(root)], ["search", "--index", str(root), "--query-id", "p1"],
                  ["serve", "--index", str(root), "--port", "0"],
                  ["index", "add", "--index", str(root), "--corpus", str(tmp_path / "idx" / "CURRENT")]])
    for argv, status, heavy, err in rows:
        assert status != 0 and heavy == [], (argv, heavy, err)
        assert "CURRENT names gen-000003, which is not there" in err and str(root / "gen-000003") in err, (argv, err)


# ---- a damaged sentences.faiss, or one of another kind than the manifest's -------------------------------------------
def test_a_faiss_file_that_does_not_read_is_named(tmp_path):
    """Past the checksum (a file over 64 MiB is checked for its size only; here the checksum is made to match)."""
    _, root, gen = saved(tmp_path)
    path = gen / "sentences.faiss"
    path.write_bytes(b"x" * path.stat().st_size)
    resum(gen, "sentences.faiss")
    with pytest.raises(IndexFormatError, match=rf"{path} does not read as a faiss index \(.*not recognized"):
        SentenceIndex.load(root)


def _hnsw_file(gen: Path, index: SentenceIndex) -> str:
    hnsw = faiss.IndexHNSWFlat(index.dim, 8)
    hnsw.add(np.asarray(index.vectors, dtype=np.float32))
    faiss.write_index(hnsw, str(gen / "sentences.faiss"))
    resum(gen, "sentences.faiss")
    return "IndexHNSWFlat \\(hnsw\\)"


def _ip_file(gen: Path, index: SentenceIndex) -> str:
    flat = faiss.IndexFlatIP(index.dim)
    flat.add(np.asarray(index.vectors, dtype=np.float32))
    faiss.write_index(flat, str(gen / "sentences.faiss"))
    resum(gen, "sentences.faiss")
    return "IndexFlatIP \\(a structure an index never builds\\)"


@pytest.mark.parametrize("damage, kind", [
    (lambda gen, index: (_manifest(gen, kind="hnsw"), "IndexFlatL2 \\(flat\\)")[1], "hnsw"),
    (lambda gen, index: (_manifest(gen, kind="ivf"), "IndexFlatL2 \\(flat\\)")[1], "ivf"),
    (lambda gen, index: (_manifest(gen, kind="exact"), "IndexFlatL2 \\(flat\\)")[1], "exact"),
    (_hnsw_file, "flat"),  # searched as flat: no SearchParametersHNSW, faiss's efSearch 16 for the config's 128
    (_ip_file, "flat"),  # inner products read as squared L2 distances
])
def test_a_manifest_kind_that_is_not_the_faiss_file_s_is_refused(tmp_path, damage, kind):
    index, root, gen = saved(tmp_path)
    held = damage(gen, index)
    with pytest.raises(IndexFormatError, match=rf"{gen}/manifest.json records a '{kind}' index and "
                                               rf"{gen / 'sentences.faiss'} holds a {held}"):
        SentenceIndex.load(root)


@pytest.mark.parametrize("kind", [dict(kind="flat"), dict(kind="hnsw"), dict(kind="ivf", ivf_nlist=4),
                                  dict(kind="ivf", ivf_nlist=2, pq_m=4, pq_nbits=4)])
def test_every_kind_an_index_builds_loads_as_its_kind(tmp_path, kind):
    index, root, _ = saved(tmp_path, **kind)
    assert SentenceIndex.load(root).kind == index.kind == kind["kind"]


def test_files_that_disagree_are_named_with_their_generation(tmp_path):
    """The constructor's checks name the files (offsets.npy, papers.jsonl...); the load adds which generation."""
    index, root, gen = saved(tmp_path)
    fewer = faiss.IndexFlatL2(index.dim)
    fewer.add(np.asarray(index.vectors)[:-1])
    faiss.write_index(fewer, str(gen / "sentences.faiss"))
    resum(gen, "sentences.faiss")
    n = index.n_sentences
    with pytest.raises(IndexFormatError, match=rf"^{gen}: inconsistent index: faiss holds {n - 1} vectors, "
                                               rf"vectors.npy {n}, offsets end at {n}$"):
        SentenceIndex.load(root)


# ---- what held -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("index_cfg", [dict(kind="flat", vector_dtype="float16"), dict(kind="hnsw"),
                                       dict(kind="ivf", ivf_nlist=4)])
@pytest.mark.parametrize("texts", ["memory", "disk"])
def test_save_load_add_save_round_trips_against_the_in_memory_index(tmp_path, index_cfg, texts):
    built = SentenceIndex.build(corpus(12), cfg(**index_cfg), "fp", "m", include_title=False)
    root = tmp_path / "idx"
    built.save(root)
    loaded = SentenceIndex.load(root, texts=texts)
    _same(built, loaded)
    more = corpus(4, start=10, seed=5)  # p10, p11 are indexed already
    more = EncodedCorpus(more.vectors.astype(np.float64), more.offsets, more.paper_ids, more.titles, more.sentences,
                         whole=more.whole.astype(np.float64))  # another float dtype: stored in the index's
    for index in (built, loaded):
        index.add(more, "fp")
        index.add(EncodedCorpus.empty(built.dim, [{"paper_id": "x", "reason": "unreadable"}]), "fp")
        assert index.paper_ids == [f"p{i}" for i in range(14)]
        assert [(r["paper_id"], r["reason"]) for r in index.rejected] == [
            ("p10", "duplicate paper_id (already indexed)"), ("p11", "duplicate paper_id (already indexed)"),
            ("x", "unreadable")]
    want = more.subset([2, 3])
    np.testing.assert_array_equal(np.asarray(loaded.vectors[built.offsets[12]:]),
                                  want.vectors.astype(index_cfg.get("vector_dtype", "float32")))
    _same(built, loaded)
    loaded.save(root)
    again = SentenceIndex.load(root, texts=texts, verify=True)
    _same(built, again)
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["CURRENT", "gen-000002"]


def test_an_add_of_another_dimension_changes_nothing(tmp_path):
    index, _, _ = saved(tmp_path)
    before = (index.n_papers, index.faiss_index.ntotal, len(index.rejected))
    with pytest.raises(ValueError, match="new vectors have dimension 8, the index 16"):
        index.add(corpus(3, start=40, dim=8), "fp")
    assert (index.n_papers, index.faiss_index.ntotal, len(index.rejected)) == before


@pytest.mark.parametrize("where", ["write_index_papers", "write_manifest", "_write_atomic"])
def test_a_save_that_fails_mid_write_leaves_the_old_generation_live(tmp_path, monkeypatch, where):
    index, root, gen = saved(tmp_path)
    old = SentenceIndex.load(root, mmap=False)
    index.add(corpus(3, start=12, seed=4), "fp")
    if where == "_write_atomic":  # the pointer's write: the new generation was renamed into place first
        real = store._write_atomic
        monkeypatch.setattr(store, "_write_atomic", lambda path, text: (_ for _ in ()).throw(KeyboardInterrupt())
                            if path.name == "CURRENT" else real(path, text))
    else:
        monkeypatch.setattr(store, where, lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        index.save(root)
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".l")) == ["CURRENT", gen.name]
    _same(old, SentenceIndex.load(root, verify=True))
    monkeypatch.undo()
    assert index.save(root).name == "gen-000002"  # the number the failed save took is free again
    assert SentenceIndex.load(root).n_papers == 15


def test_an_index_saved_before_checksums_bm25_whole_vectors_and_include_title_loads(tmp_path):
    """The oldest manifest of format version 1 records none of them; it loads, and `verify` refuses it by name."""
    built = SentenceIndex.build(corpus(12, whole=False), cfg(), "fp", "m")
    root = tmp_path / "idx"
    gen = built.save(root)
    manifest = json.loads((gen / "manifest.json").read_text())
    for name in manifest.pop("bm25") and store.BM25_FILES:
        (gen / name).unlink()
        del manifest["files"][name]
    del manifest["sha256"]
    (gen / "manifest.json").write_text(json.dumps(manifest))
    loaded = SentenceIndex.load(root)
    assert loaded.bm25 is None and loaded.whole is None and loaded.include_title is None
    np.testing.assert_array_equal(np.asarray(loaded.vectors), built.vectors)
    assert loaded.paper_ids == built.paper_ids and list(loaded.sentences) == built.sentences
    with pytest.raises(IndexFormatError, match="an index saved before checksums"):
        SentenceIndex.load(root, verify=True)
