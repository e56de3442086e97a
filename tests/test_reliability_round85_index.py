"""`aspire index` merge and saving a generation: what a user meets running them.

- A merged index's rejected.jsonl held its shards' records without the `corpus` a built or extended index's records
  carry, and its duplicate paper ids (met in two shards, or twice in an encoded corpus) without `line` or `corpus`;
  every rejected record has the same keys now: `line`, `paper_id`, `reason`, `corpus`.
- When CURRENT could not be written and CURRENT was no file (a folder, say), the clean-up's own IndexFormatError
  replaced the error that stopped the write and the new generation stayed behind; the write's error is raised now and
  the new generation removed.
"""

from __future__ import annotations

import json

import pytest

from aspire.index.config import IndexBuildConfig
from aspire.index.disk import IndexFormatError, require_live_generation
from aspire.index.shards import encode_shard, load_shards
from aspire.index.store import begin_generation, publish_generation
from aspire.io import read_jsonl
from tests.test_reliability_round83_index import CountingEncoder, encoders, run, write_corpus  # noqa: F401 (a fixture)

# ---- 1. a merged index's rejected records have a build's keys ----------------------------------------------------


def corpus_with_a_bad_record_and_duplicates(path):
    """p0..p3 (lines 1-4), an unreadable record (line 5), p0 again (line 6: in the second of two shards, p0 in the
    first), p4 (line 7) and p4 again (line 8: both in the second shard)."""
    write_corpus(path, 4)
    again = lambda pid: json.dumps({"paper_id": pid, "title": "t", "abstract": [f"{pid} once more."]})  # noqa: E731
    p4 = json.dumps({"paper_id": "p4", "title": "t", "abstract": ["paper 4."]})
    path.write_text(path.read_text() + "{not json\n" + again("p0") + "\n" + p4 + "\n" + again("p4") + "\n")
    return path.resolve()


@pytest.mark.usefixtures("encoders")  # the commands load a CountingEncoder
def test_a_merged_index_s_rejected_records_name_their_line_and_corpus_as_a_build_s(tmp_path, capsys):
    corpus = corpus_with_a_bad_record_and_duplicates(tmp_path / "papers.jsonl")
    built = tmp_path / "built"
    assert run(capsys, "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(built), "index.kind=flat")[0] == 0
    want = read_jsonl(built / require_live_generation(built) / "rejected.jsonl")
    assert [(r["line"], r["paper_id"]) for r in want] == [(5, None), (6, "p0"), (8, "p4")], want
    assert all(list(r) == ["line", "paper_id", "reason", "corpus"] and r["corpus"] == str(corpus) for r in want), want
    shards, config = tmp_path / "shards", IndexBuildConfig()
    for shard in range(2):
        encode_shard(CountingEncoder(), corpus, shards, config, shard, 2, "minilm", progress=False)
    merged = tmp_path / "merged"
    assert run(capsys, "merge", "--shards", str(shards), "--out", str(merged), "index.kind=flat")[0] == 0
    assert read_jsonl(merged / require_live_generation(merged) / "rejected.jsonl") == want
    assert load_shards(shards)[0].rejected == want  # the corpus joined in RAM records the merge's

# ---- 2. a failed pointer write raises its own error and removes the new generation -------------------------------


@pytest.mark.parametrize("how", ["folder in CURRENT's place", "full disk, then a folder"])
def test_a_failed_pointer_write_raises_its_error_and_removes_the_new_generation(tmp_path, monkeypatch, how):
    root = tmp_path / "idx"
    root.mkdir()
    tmp = begin_generation(root)
    (tmp / "vectors.npy").write_bytes(b"filled")
    if how == "full disk, then a folder":
        def full(path, text):
            (root / "CURRENT").mkdir()  # what else happened meanwhile: CURRENT, no file, names no generation
            raise OSError(28, "No space left on device")

        monkeypatch.setattr("aspire.index.store._write_atomic", full)
        expected = "No space left on device"
    else:
        (root / "CURRENT").mkdir()
        expected = "Is a directory"
    with pytest.raises(OSError, match=expected) as raised:
        publish_generation(root, tmp)
    assert not isinstance(raised.value, IndexFormatError)
    assert sorted(p.name for p in root.iterdir()) == ["CURRENT"], sorted(p.name for p in root.iterdir())
