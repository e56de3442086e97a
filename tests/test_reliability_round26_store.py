"""Round 26, positions and metadata in the sentence store: `SentenceIndex.gather` / `gather_rows` take paper positions
as `paper_positions` does (a boolean mask was read as positions 1 / 0 and 1.7 as 1); `EncodedCorpus.save_shard`
refuses a meta whose counts are not the corpus's (they replaced the true ones in shard.json) and `load_shard` compares
shard.json's counts with the files and names the file of a damaged shard; `CorpusPapers` keeps `lines` in step with
the papers under in-place edits, or refuses those that put in papers without a line, and still pickles and copies.
"""

from __future__ import annotations

import copy
import json
import pickle
import re

import numpy as np
import pytest

from aspire.data.papers import Paper
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.corpus import CorpusPapers, encode_corpus
from aspire.index.stream import plan_shards
from tests.test_reliability_round18_store import corpus

META = {"model_name": "m", "model_fingerprint": "fp"}


def _index(n: int = 6) -> SentenceIndex:
    return SentenceIndex.build(corpus(n, dim=4), IndexBuildConfig(index=IndexConfig(kind="flat")), "fp", "m")


def _paper_vectors(index: SentenceIndex, p: int) -> np.ndarray:
    """Brute force: paper p's rows of the exact vectors."""
    return np.asarray(index.vectors[index.offsets[p]:index.offsets[p + 1]])


# ---- SentenceIndex.gather / gather_rows -------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["gather", "gather_rows"])
@pytest.mark.parametrize("papers, said", [
    ([True, False, True, False, True, False], "a boolean mask"),
    (np.array([1.7, 0.0]), "1-d float64 positions"),
    ([0.5], "1-d float64 positions"),
    ([[0, 1]], "2-d"),
])
def test_gather_refuses_a_mask_and_non_integer_positions_by_name(method, papers, said):
    """The cast `np.asarray(papers, dtype=np.int64)` read the mask as positions [1, 0, 1, 0, 1, 0] and 1.7 as 1, and
    returned those papers without a word."""
    index = _index()
    with pytest.raises(ValueError, match=rf"SentenceIndex\.{method} takes a 1-d sequence of integer paper positions, "
                                         rf"got {said}"):
        getattr(index, method)(papers)


@pytest.mark.parametrize("method", ["gather", "gather_rows"])
def test_gather_refuses_out_of_range_positions_by_name(method):
    index = _index()
    with pytest.raises(ValueError, match=rf"SentenceIndex\.{method}: paper positions \[6, -7\] out of range for 6"):
        getattr(index, method)([0, 6, -7])


def test_gather_and_gather_rows_take_integer_and_negative_positions_as_a_list_does():
    """Checked against a brute-force rebuild paper by paper; -1 is the last paper in both (gather_rows asked the page
    cache for rows from the offsets' other end for a negative one)."""
    index = _index()
    asked = [4, -1, 0, np.int32(2)]
    want = [4, 5, 0, 2]
    batch = index.gather(asked)
    assert batch.paper_ids == [index.paper_ids[p] for p in want]
    assert batch.sentences == [index.sentences[p] for p in want]
    for c, p in enumerate(want):
        n = int(index.offsets[p + 1] - index.offsets[p])
        np.testing.assert_array_equal(batch.emb[c, :n].numpy(), _paper_vectors(index, p))
        assert batch.mask[c].sum().item() == n
        np.testing.assert_array_equal(batch.whole[c].numpy(), index.whole[p])
    vectors, lengths = index.gather_rows(np.array(asked, dtype=np.int64))
    np.testing.assert_array_equal(vectors.numpy(), np.concatenate([_paper_vectors(index, p) for p in want]))
    assert lengths.tolist() == [len(_paper_vectors(index, p)) for p in want]
    empty = index.gather([], texts=False)
    assert empty.emb.shape[0] == 0 and index.gather_rows([])[1].tolist() == []


# ---- save_shard's meta and load_shard's checks ----------------------------------------------------------------------
@pytest.mark.parametrize("key, value", [("n_papers", 99), ("n_sentences", 1), ("dim", 8),
                                        ("shard_format_version", 0), ("n_papers", 3.0)])
def test_save_shard_refuses_a_meta_whose_counts_are_not_the_corpus_s(tmp_path, key, value):
    """`{..., **meta}` let the meta's n_papers replace the true count: a shard.json of 99 papers over 3."""
    c = corpus(3)
    with pytest.raises(ValueError, match=rf"meta records {key} {value!r} \(this corpus: .*leave them out of meta"):
        c.save_shard(tmp_path / "s", {**META, key: value})
    assert not (tmp_path / "s").exists()


def test_save_shard_takes_a_loaded_shard_s_meta_and_writes_the_true_counts(tmp_path):
    c = corpus(3)
    c.save_shard(tmp_path / "a", {**META, "shard": 0})
    loaded, meta = EncodedCorpus.load_shard(tmp_path / "a")
    loaded.save_shard(tmp_path / "b", meta)  # the same counts: taken
    back, again = EncodedCorpus.load_shard(tmp_path / "b")
    assert again == meta and back.paper_ids == c.paper_ids
    info = json.loads((tmp_path / "b" / "shard.json").read_text())
    assert (info["n_papers"], info["n_sentences"], info["dim"]) == (3, len(c.vectors), 16)
    with pytest.raises(ValueError, match=r"n_papers 3 \(this corpus: 2\), n_sentences"):
        loaded.subset([0, 1]).save_shard(tmp_path / "c", meta)


def test_save_shard_refuses_a_meta_without_the_model_a_shard_must_record(tmp_path):
    """Written, then refused by `load_shard` ("lacks 'model_fingerprint': a damaged shard")."""
    with pytest.raises(ValueError, match=r"meta lacks 'model_fingerprint', which every shard records"):
        corpus(2).save_shard(tmp_path / "s", {"model_name": "m"})
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("key, value, said", [("n_papers", 5, "n_papers 5 (the files hold 3)"),
                                               ("n_sentences", 1, "n_sentences 1 (the files hold "),
                                               ("dim", 7, "dim 7 (the files hold 16)")])
def test_load_shard_compares_shard_json_s_counts_with_its_files(tmp_path, key, value, said):
    """`load_shard` never read the counts: a shard.json saying 5 papers loaded with 3 (the streamed merge refused
    the same shard)."""
    path = corpus(3).save_shard(tmp_path / "shard-00000-of-00001", META)
    info = json.loads((path / "shard.json").read_text())
    info[key] = value
    (path / "shard.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match=re.escape(f"shard {path}: shard.json records {said}")):
        EncodedCorpus.load_shard(path)
    with pytest.raises(ValueError, match=r"shard\.json says"):  # the merge's own check, for reference
        plan_shards(tmp_path)


def test_load_shard_names_the_shard_and_file_of_a_damaged_array_or_mismatched_files(tmp_path):
    path = corpus(3).save_shard(tmp_path / "s", META)
    good = (path / "offsets.npy").read_bytes()
    (path / "offsets.npy").write_bytes(good[:-8])  # cut short
    with pytest.raises(ValueError, match=re.escape(f"shard {path}: offsets.npy does not read as an array (")):
        EncodedCorpus.load_shard(path)
    (path / "offsets.npy").write_bytes(good)
    np.save(path / "whole.npy", np.zeros((2, 16), np.float32))  # one paper short
    with pytest.raises(ValueError, match=re.escape(f"shard {path}: whole vectors (2, 16) do not match 3 papers") + ".*damaged shard"):
        EncodedCorpus.load_shard(path)


# ---- CorpusPapers -------------------------------------------------------------------------------------------------
def _papers() -> CorpusPapers:
    return CorpusPapers([Paper("c", "", ["z."]), Paper("a", "", ["x."]), Paper("b", "", ["y."])], [9, 2, 5])


def _pairs(papers: CorpusPapers) -> list[tuple[str, int]]:
    return [(p.paper_id, line) for p, line in zip(papers, papers.lines)]


def test_corpus_papers_moves_lines_with_the_papers_it_reorders_or_drops():
    """`sort`, `reverse`, `pop`, `del`, `remove` moved the papers and left `lines` where they were."""
    start = _pairs(_papers())
    papers = _papers()
    papers.sort(key=lambda p: p.paper_id)
    assert _pairs(papers) == sorted(start)
    papers.sort(key=lambda p: p.paper_id, reverse=True)
    assert _pairs(papers) == sorted(start, reverse=True)
    papers.reverse()
    assert _pairs(papers) == sorted(start)
    assert papers.pop(0).paper_id == "a" and _pairs(papers) == [("b", 5), ("c", 9)]
    papers = _papers()
    del papers[1]
    assert _pairs(papers) == [("c", 9), ("b", 5)]
    papers = _papers()
    papers.remove(papers[0])
    assert _pairs(papers) == [("a", 2), ("b", 5)]
    papers = _papers()
    del papers[::2]
    assert _pairs(papers) == [("a", 2)]
    papers *= 2
    assert _pairs(papers) == [("a", 2), ("a", 2)]
    papers.clear()
    assert papers == [] and papers.lines == []


@pytest.mark.parametrize("edit", [
    lambda p: p.append(Paper("d", "", ["w."])),
    lambda p: p.extend([Paper("d", "", ["w."])]),
    lambda p: p.insert(0, Paper("d", "", ["w."])),
    lambda p: p.__iadd__([Paper("d", "", ["w."])]),
    lambda p: p.__setitem__(0, Paper("d", "", ["w."])),
    lambda p: p.__setitem__(slice(0, 1), [Paper("d", "", ["w."])]),
])
def test_corpus_papers_refuses_edits_that_put_in_papers_without_a_line(edit):
    """`append` left `lines` one short: `encode_corpus` refused the list, and an insert named every later paper's
    rejection by its neighbour's line."""
    papers = _papers()
    with pytest.raises(TypeError, match=r"without an input line .*CorpusPapers\(papers, lines\)"):
        edit(papers)
    assert _pairs(papers) == [("c", 9), ("a", 2), ("b", 5)]


def test_corpus_papers_reversed_then_encoded_names_each_rejected_paper_s_own_line():
    """End to end: a reversed list's rejected records named the lines in the old order (paper d as line 1)."""
    papers = CorpusPapers([Paper(pid, "", []) for pid in "abcd"], [1, 4, 6, 8])  # no sentences: all rejected
    papers.reverse()

    class NoEncoder:
        def encode(self, chunk, **kw):  # never reached: no paper has a sentence
            raise AssertionError

    got = encode_corpus(NoEncoder(), papers, progress=False)
    assert [(r["line"], r["paper_id"]) for r in got.rejected] == [(8, "d"), (6, "c"), (4, "b"), (1, "a")]
    papers.pop(1)  # c
    got = encode_corpus(NoEncoder(), papers, progress=False)
    assert [(r["line"], r["paper_id"]) for r in got.rejected] == [(8, "d"), (4, "b"), (1, "a")]


def test_corpus_papers_pickles_and_copies_with_its_lines():
    papers = _papers()
    for back in (pickle.loads(pickle.dumps(papers)), copy.copy(papers), copy.deepcopy(papers), papers.copy()):
        assert type(back) is CorpusPapers and _pairs(back) == _pairs(papers)
        assert back.lines is not papers.lines
    deep = copy.deepcopy(papers)
    assert deep[0] == papers[0] and deep[0] is not papers[0]
    back = pickle.loads(pickle.dumps(papers))
    back.reverse()  # a copy's edits are its own
    assert _pairs(papers) == [("c", 9), ("a", 2), ("b", 5)] and _pairs(back) == [("b", 5), ("a", 2), ("c", 9)]
