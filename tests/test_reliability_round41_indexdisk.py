"""Round 41: an index directory on disk (`aspire.index.disk`) and building/extending it safely
(`aspire.index.build`), checked with temp dirs and a stand-in encoder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.build import add_to_index, build_index, prepare_build_dir
from aspire.index.disk import IndexExistsError, IndexFormatError, IndexLockedError, index_lock
from tests.test_reliability_round33_indexbuild import StubEncoder, write_corpus

CONFIG = IndexBuildConfig(index=IndexConfig(kind="flat"))


def built(tmp_path: Path, n: int = 2) -> Path:
    out = tmp_path / "idx"
    build_index(out, "stub", write_corpus(tmp_path / "c.jsonl", n), CONFIG, load_encoder=lambda _: StubEncoder(),
                progress=False)
    return out


def test_a_pointer_linking_to_nothing_is_refused_and_the_generation_kept(tmp_path):
    """A CURRENT that is a link to nothing once passed `prepare_build_dir` as "no index": the build then removed
    the index's generation without --overwrite."""
    out = built(tmp_path)
    (out / "CURRENT").unlink()
    os.symlink(tmp_path / "nowhere", out / "CURRENT")
    with pytest.raises(IndexExistsError, match="damaged index.*CURRENT is a link to nothing"):
        prepare_build_dir(out)
    assert (out / "gen-000001" / "manifest.json").is_file()
    assert prepare_build_dir(out, overwrite=True) == ["gen-000001"]  # --overwrite replaces it wholesale
    assert not (out / "CURRENT").is_symlink() and not (out / "CURRENT").exists()


def test_a_damaged_checksum_is_refused_naming_the_file(tmp_path):
    out = built(tmp_path)
    manifest = out / "gen-000001" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["sha256"]["offsets.npy"] = "0" * 64
    manifest.write_text(json.dumps(data))
    with pytest.raises(IndexFormatError, match=r"offsets\.npy is corrupted"):
        SentenceIndex.load(out)


def test_a_crash_inside_add_leaves_the_old_generation_live(tmp_path, monkeypatch):
    out = built(tmp_path)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-add")

    monkeypatch.setattr("aspire.index.store.write_manifest", crash)
    with pytest.raises(KeyboardInterrupt):
        add_to_index(out, write_corpus(tmp_path / "more.jsonl", 4), load_encoder=lambda _: StubEncoder(),
                     progress=False)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".lock")) == ["CURRENT", "gen-000001"]
    assert SentenceIndex.load(out, verify=True).paper_ids == ["p0", "p1"]


def test_clean_up_removes_only_crash_leftovers(tmp_path):
    out = built(tmp_path)
    (out / ".tmp-gen-000002-abcd").mkdir()
    (out / ".CURRENT.0123.tmp").write_text("gen-000002\n")
    (out / "gen-000003").mkdir()  # a generation no pointer names
    assert sorted(prepare_build_dir(out, overwrite=True)) == [".CURRENT.0123.tmp", ".tmp-gen-000002-abcd",
                                                               "gen-000003"]
    assert SentenceIndex.load(out, verify=True).paper_ids == ["p0", "p1"]  # the live one kept
    (out / "notes.txt").write_text("mine")
    with pytest.raises(IndexFormatError, match="notes.txt"):  # someone else's file: nothing removed
        prepare_build_dir(out, overwrite=True)
    assert (out / "notes.txt").is_file() and (out / "gen-000001").is_dir()


def test_a_second_writer_is_refused_while_the_lock_is_held(tmp_path):
    out = built(tmp_path)
    import threading

    errors = []
    with index_lock(out):
        def other():
            try:
                build_index(out, "stub", tmp_path / "c.jsonl", CONFIG, True, lambda _: StubEncoder(), progress=False)
            except IndexLockedError as err:
                errors.append(err)
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert len(errors) == 1 and "being written" in str(errors[0])
    assert SentenceIndex.load(out).paper_ids == ["p0", "p1"]
