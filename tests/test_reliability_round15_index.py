"""Round 15, shards and their merge: which folders are shards (a name with a trailing newline or another script's
digits is not: it once stood in for the real shard), offsets.npy in an unsigned dtype checked as a signed one, and a
finished shard numbered past the last named by its folder."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.shards import finished_shards, load_shards, shard_name
from aspire.index.stream import list_shards, merge_streaming, plan_shards
from tests.test_index_shards import write_encoding

RECORD_KEYS = ("model_name", "model_fingerprint", "backend", "quantize", "corpus", "corpus_bytes", "corpus_sha256",
               "encode", "corpus_papers")


def flat() -> IndexBuildConfig:
    return IndexBuildConfig(index=IndexConfig(kind="flat"))


@pytest.mark.parametrize("stray", ["shard-00001-of-00002\n", "shard-\u0660\u0660\u0660\u0660\u0661-of-00002"])
def test_a_folder_named_like_a_shard_is_no_shard(tmp_path, stray):
    shards = write_encoding(tmp_path, n=8, n_shards=2)
    (shards / shard_name(1, 2)).rename(shards / stray)  # shard 1 lost; a stray folder with its files beside shard 0
    with pytest.raises(ValueError, match=r"shards \[1\] \(of 2\) are missing"):
        list_shards(shards)  # `$` and `\d` took the stray for shard 1, and the merge indexed it unsaid
    assert [p.name for p in list_shards(shards, allow_missing=True)[0]] == [shard_name(0, 2)]
    with pytest.raises(ValueError, match=r"are missing"):
        merge_streaming(shards, tmp_path / "index", flat())
    assert not (tmp_path / "index" / "CURRENT").exists()


def test_a_stray_copy_never_replaces_the_real_shard(tmp_path):
    shards = write_encoding(tmp_path, n=8, n_shards=2)
    stray = shards / "shard-00001-of-00002\n"
    shutil.copytree(shards / shard_name(0, 2), stray)  # shard 0's papers under a name that looked like shard 1's
    paths = list_shards(shards)[0]
    assert [p.name for p in paths] == [shard_name(0, 2), shard_name(1, 2)]
    index = SentenceIndex.load(merge_streaming(shards, tmp_path / "index", flat()).parent)
    assert index.paper_ids == [f"p{i}" for i in range(8)] and index.rejected == []


def test_unsigned_offsets_that_fall_are_refused_naming_the_shard(tmp_path):
    shards = write_encoding(tmp_path, n=12, n_shards=3)
    shard = shards / shard_name(0, 3)
    assert np.load(shard / "offsets.npy").tolist() == [0, 2, 4, 6, 8]
    np.save(shard / "offsets.npy", np.array([0, 2, 6, 4, 8], dtype=np.uint64))  # paper 2 has -2 sentences
    said = f"shard {shard}: offsets.npy does not describe papers of at least one sentence over the 8 rows"
    with pytest.raises(ValueError, match=said):  # was numpy's "repeats may not contain negative values"
        plan_shards(shards)
    with pytest.raises(ValueError, match=said):
        merge_streaming(shards, tmp_path / "index", flat())
    with pytest.raises(ValueError, match=said):
        load_shards(shards)


def test_unsigned_offsets_that_rise_still_merge_as_signed_ones(tmp_path):
    shards = write_encoding(tmp_path, n=12, n_shards=3)
    signed = SentenceIndex.load(merge_streaming(shards, tmp_path / "a", flat()).parent)
    for s in range(3):
        path = shards / shard_name(s, 3) / "offsets.npy"
        np.save(path, np.load(path).astype(np.uint32))
    plans, meta, _ = plan_shards(shards)
    assert all(p.offsets.dtype == np.int64 for p in plans) and meta["dim"] == 8
    unsigned = SentenceIndex.load(merge_streaming(shards, tmp_path / "b", flat()).parent)
    assert unsigned.paper_ids == signed.paper_ids
    np.testing.assert_array_equal(unsigned.offsets, signed.offsets)
    np.testing.assert_array_equal(np.asarray(unsigned.vectors), np.asarray(signed.vectors))


def test_a_finished_shard_numbered_past_the_last_is_named(tmp_path):
    shards = write_encoding(tmp_path, n=12, n_shards=3)
    meta = json.loads((shards / shard_name(0, 3) / "shard.json").read_text())
    record = {key: meta[key] for key in RECORD_KEYS}
    assert finished_shards(shards, 3, record) == {0, 1, 2}
    past = shards / "shard-00007-of-00003"
    shutil.copytree(shards / shard_name(2, 3), past)
    with pytest.raises(ValueError) as err:  # was "shard 7 outside 0..2", naming no folder
        finished_shards(shards, 3, record)
    assert str(err.value) == (f"{past} is numbered past the last shard of a sharding into 3: use a new --shards "
                              "folder, or remove the stale shards")
