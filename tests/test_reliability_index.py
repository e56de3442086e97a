"""Index directories under faults (issue 29, items 5, 6 and 7).

Item 5: checksums per file, verified on load (sizes and small files always, every file with
`verify=True`), and every path confined to the index directory (the pointer cannot escape).
Item 6: a second writer of one directory fails at once with a clear message (file lock).
Item 7: a build killed at any step leaves a directory the next build uses or cleans up at once,
before encoding anything.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hardening import _die, _in_child_killed
from test_index import HashEncoder, random_corpus
from test_reliability_round3_lock import _hold as hold_lock

from aspire.index import IndexBuildConfig, IndexConfig, IndexFormatError, SentenceIndex
from aspire.index.__main__ import main as index_main
from aspire.index.build import IndexExistsError, build_index
from aspire.index.disk import IndexLockedError, index_lock

FILES = ("config.yaml", "sentences.faiss", "vectors.npy", "offsets.npy", "papers.jsonl", "rejected.jsonl",
         "bm25.data.npy", "bm25.indices.npy", "bm25.indptr.npy", "bm25.vocab.json", "bm25.params.json",
         "manifest.json")
FLAT = IndexBuildConfig(index=IndexConfig(kind="flat"))


def _saved(root: Path, n: int = 12, seed: int = 0) -> Path:
    corpus = random_corpus(n, seed=seed)
    corpus.rejected = [{"paper_id": "bad", "reason": "a reason"}]  # so that no file is empty
    return SentenceIndex.build(corpus, FLAT, "fp", "m").save(root)


# ---- item 5: checksums and confinement --------------------------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(FILES[:-1]), where=st.floats(0, 1, exclude_max=True), flip=st.integers(1, 255))
def test_property_any_corrupted_byte_is_refused_on_load(tmp_path_factory, name, where, flip):
    root = tmp_path_factory.mktemp("idx")
    gen = _saved(root)
    data = bytearray((gen / name).read_bytes())
    data[int(where * len(data))] ^= flip  # one byte changed, size kept
    (gen / name).write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match=rf"{name} is corrupted: its SHA-256 differs"):
        SentenceIndex.load(root)
    with pytest.raises(IndexFormatError, match="corrupted"):
        SentenceIndex.read_manifest(root, verify=True)


def test_fast_path_skips_large_files_and_verify_checks_them(tmp_path, monkeypatch, capsys):
    import aspire.index.disk as disk

    root = tmp_path / "idx"
    gen = _saved(root)
    monkeypatch.setattr(disk, "FAST_VERIFY_BYTES", 100)  # every file but the smallest counts as large
    data = bytearray((gen / "vectors.npy").read_bytes())
    data[-1] ^= 1
    (gen / "vectors.npy").write_bytes(bytes(data))
    assert SentenceIndex.load(root).n_papers == 12  # fast path: sizes only for large files
    with pytest.raises(IndexFormatError, match="vectors.npy is corrupted"):
        SentenceIndex.load(root, verify=True)
    assert index_main(["info", "--index", str(root), "--verify"]) == 2
    assert "vectors.npy is corrupted" in capsys.readouterr().err


def test_info_verify_reports_a_sound_index(tmp_path, capsys):
    _saved(tmp_path / "idx")
    assert index_main(["info", "--index", str(tmp_path / "idx"), "--verify"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["sha256"].keys() == set(FILES[:-1]) and "verified" in out.err


_POINTERS = st.one_of(
    st.sampled_from(["../outside", "/etc", "gen-000001/../../outside", "gen-1", "gen-000001/x", "gen-0000001",
                     "..", ".", "gen-000001\x00", "gen-00000a"]),
    st.text(alphabet="./gen-0123456789x", max_size=14),
)


@given(pointer=_POINTERS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_property_pointer_cannot_name_anything_but_a_generation_inside(tmp_path_factory, pointer):
    root = tmp_path_factory.mktemp("idx")
    _saved(root)
    (root / "CURRENT").write_text(pointer + "\n")
    if pointer.strip() == "gen-000001":  # the real one
        assert SentenceIndex.load(root).n_papers == 12
        return
    with pytest.raises(IndexFormatError):
        SentenceIndex.load(root)


def test_symbolic_links_out_of_the_index_are_refused(tmp_path):
    root = tmp_path / "idx"
    gen = _saved(root)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "gen-000009").mkdir()
    os.symlink(outside / "gen-000009", root / "gen-000009")  # a generation linking out
    (root / "CURRENT").write_text("gen-000009\n")
    with pytest.raises(IndexFormatError, match="outside the index directory"):
        SentenceIndex.load(root)
    (root / "CURRENT").write_text("gen-000001\n")
    (outside / "papers.jsonl").write_bytes((gen / "papers.jsonl").read_bytes())
    (gen / "papers.jsonl").unlink()
    os.symlink(outside / "papers.jsonl", gen / "papers.jsonl")  # a file linking out, same bytes
    with pytest.raises(IndexFormatError, match="outside the index directory"):
        SentenceIndex.load(root)


def test_manifest_naming_other_files_is_refused(tmp_path):
    root = tmp_path / "idx"
    gen = _saved(root)
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest["files"]["../../secret"] = 3
    (gen / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="lists files"):
        SentenceIndex.load(root)
    (gen / "manifest.json").write_text("{half")
    with pytest.raises(IndexFormatError, match="manifest.json is corrupted"):
        SentenceIndex.load(root)


# ---- item 6: one writer at a time -----------------------------------------------------------------------
def test_second_writer_fails_at_once_and_the_lock_dies_with_its_holder(tmp_path, capsys):
    root, corpus = tmp_path / "idx", tmp_path / "papers.jsonl"
    corpus.write_text(json.dumps({"paper_id": "a", "title": "t", "abstract": ["x."]}) + "\n")
    holder = hold_lock(root, tmp_path / "ready", "index")
    loads = []
    try:
        start = time.monotonic()
        with pytest.raises(IndexLockedError, match="being written by another process"):
            build_index(root, "m", corpus, FLAT, load_encoder=lambda m: loads.append(m) or HashEncoder())
        assert index_main(["build", "--model", "minilm", "--corpus", str(corpus), "--out", str(root)]) == 2
        assert "being written by another process" in capsys.readouterr().err
        with pytest.raises(IndexLockedError):
            SentenceIndex.build(random_corpus(3), FLAT, "fp").save(root)
        assert time.monotonic() - start < 5 and loads == []  # at once: no model loaded, nothing encoded
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    index, _ = build_index(root, "m", corpus, FLAT, load_encoder=lambda m: HashEncoder())  # the kernel freed it
    assert index.paper_ids == ["a"]


def test_lock_is_reentrant_within_one_process(tmp_path):
    with index_lock(tmp_path / "idx"):
        gen = SentenceIndex.build(random_corpus(3), FLAT, "fp").save(tmp_path / "idx")  # save takes it again
    assert gen.name == "gen-000001"


# ---- item 7: a build killed at any step ------------------------------------------------------------------
class _DyingEncoder(HashEncoder):
    def encode(self, papers, batch_size=32, progress=False):
        _die()


def _step_patches(store):
    real_write_atomic = store._write_atomic

    def partial_pointer(path, text):
        if path.name == "CURRENT":
            (path.parent / ".CURRENT.deadbeef.tmp").write_text(text[:3])
            _die()
        real_write_atomic(path, text)

    def pointer_unwritten(path, text):
        if path.name == "CURRENT":
            _die()
        real_write_atomic(path, text)

    return {  # step -> (patch the child applies, whether the killed build's index is live afterwards)
        "encoding": (lambda: None, False),
        "writing-generation": (lambda: setattr(store, "write_index_papers", _die), False),
        "writing-bm25": (lambda: setattr(store.BM25Index, "save", _die), False),
        "writing-manifest": (lambda: setattr(store, "file_sha256", _die), False),
        "renamed-not-recorded": (lambda: setattr(store, "_write_atomic", pointer_unwritten), False),
        "pointer-half-written": (lambda: setattr(store, "_write_atomic", partial_pointer), False),
        "recorded-not-cleaned": (lambda: setattr(store, "clear_leftovers", _die), True),
    }


@pytest.mark.parametrize("step", ["encoding", "writing-generation", "writing-bm25", "writing-manifest",
                                  "renamed-not-recorded", "pointer-half-written", "recorded-not-cleaned"])
@pytest.mark.parametrize("existing", [False, True], ids=["first-build", "overwrite"])
def test_build_killed_at_each_step_leaves_a_directory_the_next_build_uses_or_cleans_at_once(tmp_path, step, existing):
    import aspire.index.store as store

    root, corpus = tmp_path / "idx", tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": f"n{i}", "title": "t", "abstract": [f"s {i}.", "x."]}) + "\n"
                              for i in range(5)))
    if existing:
        _saved(root, n=3)
    patch, live_after = _step_patches(store)[step]

    def killed_build():
        patch()
        encoder = _DyingEncoder() if step == "encoding" else HashEncoder()
        build_index(root, "m", corpus, FLAT, overwrite=existing, load_encoder=lambda m: encoder)

    assert _in_child_killed(killed_build) == signal.SIGKILL
    if existing or live_after:  # a live index survives every crash: the old one, or the new one once recorded
        assert SentenceIndex.load(root, verify=True).n_papers == (5 if live_after else 3)
    loads = []

    def counting(m):
        loads.append(m)
        return HashEncoder()

    if existing or live_after:  # refused at once, before any model is loaded
        with pytest.raises(IndexExistsError, match="already holds an index"):
            build_index(root, "m", corpus, FLAT, load_encoder=counting)
        assert loads == []
    index, gen = build_index(root, "m", corpus, FLAT, overwrite=existing or live_after, load_encoder=counting)
    assert loads == ["m"] and index.n_papers == 5
    assert SentenceIndex.load(root, verify=True).paper_ids == [f"n{i}" for i in range(5)]
    assert sorted(p.name for p in root.iterdir()) == [".lock", "CURRENT", gen.name]  # every leftover cleaned


def test_foreign_directory_is_refused_before_encoding(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text(json.dumps({"paper_id": "a", "title": "t", "abstract": ["x."]}) + "\n")
    loads = []
    with pytest.raises(IndexFormatError, match="not empty and holds no index"):
        build_index(tmp_path, "m", corpus, FLAT, load_encoder=lambda m: loads.append(m) or HashEncoder())
    assert loads == [] and (tmp_path / "notes.txt").read_text() == "mine"


def test_damaged_index_is_refused_at_once_and_replaced_with_overwrite(tmp_path):
    root, corpus = tmp_path / "idx", tmp_path / "papers.jsonl"
    corpus.write_text(json.dumps({"paper_id": "a", "title": "t", "abstract": ["x."]}) + "\n")
    gen = _saved(root)
    (gen / "offsets.npy").write_bytes(np.zeros(3, np.int64).tobytes())
    with pytest.raises(IndexExistsError, match="damaged index"):
        build_index(root, "m", corpus, FLAT, load_encoder=lambda m: HashEncoder())
    index, _ = build_index(root, "m", corpus, FLAT, overwrite=True, load_encoder=lambda m: HashEncoder())
    assert SentenceIndex.load(root).paper_ids == ["a"] == index.paper_ids


def test_a_current_pointing_at_a_missing_generation_says_so(tmp_path):
    root = tmp_path / "idx"
    _saved(root)
    (root / "CURRENT").write_text("gen-000009\n")  # once "gen-000009 is incomplete: no manifest.json"
    with pytest.raises(IndexFormatError, match="CURRENT names gen-000009, which is not there"):
        SentenceIndex.load(root)
