"""Round 25, the encoded-corpus container (`aspire.index.corpus.EncodedCorpus` and its helpers), second sweep.

Checked against brute-force rebuilds from per-paper arrays: `subset`, `concat`, `gather_docbatch` and `paper_rows`
take paper positions as a list does (a negative one counts from the end) and refuse a boolean mask, non-integer or
out-of-range positions (-2 took the last paper's vectors under another paper's id; True / False were read as 1 / 0);
`from_docbatch` keeps the texts of the sentences a narrowed mask selects; an encoder returning its papers in another
order is refused by name (titles and labels are matched by position); `page_ranges` of no range, float offsets, and
the papers-file records of lists of unequal length.
"""

from __future__ import annotations

import mmap
import pickle

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.papers import Paper
from aspire.index.corpus import (
    CorpusPapers,
    EncodedCorpus,
    encode_corpus,
    gather_docbatch,
    index_paper_records,
    page_ranges,
    paper_rows,
)


def _papers(counts, dim=3, seed=0, prefix="p"):
    """Per-paper arrays: ids, vectors (one (n, D) array a paper), texts, labels, whole vectors."""
    rng = np.random.default_rng(seed)
    ids = [f"{prefix}{i}" for i in range(len(counts))]
    vecs = [rng.standard_normal((n, dim)).astype(np.float32) for n in counts]
    texts = [[f"{pid} s{j}" for j in range(n)] for pid, n in zip(ids, counts)]
    labels = [[f"L{j}" for j in range(n)] if i % 2 == 0 else None for i, n in enumerate(counts)]
    whole = rng.standard_normal((len(counts), dim)).astype(np.float32)
    return ids, vecs, texts, labels, whole


def _corpus(ids, vecs, texts, labels, whole, rejected=()):
    counts = [len(v) for v in vecs]
    vectors = np.concatenate(vecs) if vecs else np.zeros((0, whole.shape[1]), np.float32)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return EncodedCorpus(vectors, offsets, list(ids), [f"title {p}" for p in ids], [list(t) for t in texts],
                         list(rejected), list(labels), whole)


def _check_against(corpus: EncodedCorpus, ids, vecs, texts, labels, whole):
    """`corpus` holds exactly these papers, in this order: a rebuild paper by paper."""
    assert corpus.paper_ids == list(ids)
    assert corpus.titles == [f"title {p}" for p in ids]
    assert corpus.sentences == [list(t) for t in texts]
    assert corpus.labels == list(labels)
    assert corpus.offsets.tolist() == np.concatenate([[0], np.cumsum([len(v) for v in vecs])]).tolist()
    for p, v in enumerate(vecs):
        np.testing.assert_array_equal(corpus.vectors[corpus.offsets[p]:corpus.offsets[p + 1]], v)
    np.testing.assert_array_equal(corpus.whole, whole)


# ---- subset: positions as a list takes them ---------------------------------------------------------------------
def test_subset_negative_positions_take_that_papers_own_vectors():
    ids, vecs, texts, labels, whole = _papers([2, 2, 2])  # equal counts: the old mix-up passed every check
    corpus = _corpus(ids, vecs, texts, labels, whole)
    for picks in ([-2], [-1, 0], [-3, -3, 2]):
        got = corpus.subset(picks)
        at = [ids.index(ids[i]) for i in picks]  # python's own reading of the positions
        _check_against(got, [ids[i] for i in at], [vecs[i] for i in at], [texts[i] for i in at],
                       [labels[i] for i in at], whole[at])


def test_subset_refuses_masks_fractions_and_out_of_range_positions():
    corpus = _corpus(*_papers([1, 2, 1]))
    with pytest.raises(ValueError, match="boolean mask"):
        corpus.subset(np.array([True, False, True]))  # was read as positions 1, 0, 1
    with pytest.raises(ValueError, match="integer"):
        corpus.subset([1.7])  # was read as 1
    with pytest.raises(ValueError, match=r"positions \[3\] out of range for 3 papers"):
        corpus.subset([0, 3])
    with pytest.raises(ValueError, match=r"positions \[-4\] out of range"):
        corpus.subset([-4])


def test_subset_repeated_and_empty_positions_match_a_rebuild():
    ids, vecs, texts, labels, whole = _papers([3, 1, 2], seed=1)
    corpus = _corpus(ids, vecs, texts, labels, whole, rejected=[{"paper_id": "x", "reason": "r"}])
    for picks in ([2, 0, 2], [1, 1], []):
        got = corpus.subset(picks)
        _check_against(got, [ids[i] for i in picks], [vecs[i] for i in picks], [texts[i] for i in picks],
                       [labels[i] for i in picks], whole[picks])
        assert got.rejected == corpus.rejected


def test_paper_rows_reads_negative_positions_from_the_end():
    offsets = np.array([0, 2, 3, 6], np.int64)
    rows, lengths = paper_rows(offsets, np.array([-1, 0, -2]))
    assert rows.tolist() == [3, 4, 5, 0, 1, 2] and lengths.tolist() == [3, 2, 1]
    with pytest.raises(ValueError, match="out of range"):
        paper_rows(offsets, np.array([3]))


# ---- gather_docbatch ---------------------------------------------------------------------------------------------
def test_gather_docbatch_negative_positions_match_a_rebuild():
    ids, vecs, texts, labels, whole = _papers([2, 3, 1], dim=4, seed=2)
    corpus = _corpus(ids, vecs, texts, labels, whole)
    picks = [-1, 0, -2]
    batch = gather_docbatch(corpus.vectors, corpus.offsets, np.array(picks), [ids[i] for i in picks],
                            [texts[i] for i in picks], whole=corpus.whole)
    expect = DocBatch.from_list([torch.from_numpy(vecs[i]) for i in picks], [ids[i] for i in picks],
                                [texts[i] for i in picks], torch.from_numpy(whole[picks]))
    assert torch.equal(batch.mask, expect.mask) and torch.equal(batch.emb, expect.emb)
    assert torch.equal(batch.whole, expect.whole)
    with pytest.raises(ValueError, match="boolean mask"):
        gather_docbatch(corpus.vectors, corpus.offsets, np.array([True, False, True]))
    with pytest.raises(ValueError, match="out of range for 3 papers"):
        gather_docbatch(corpus.vectors, corpus.offsets, np.array([3]))
    empty = gather_docbatch(corpus.vectors, corpus.offsets, np.array([], np.int64))
    assert tuple(empty.emb.shape) == (0, 0, 4)


# ---- concat ------------------------------------------------------------------------------------------------------
def test_concat_matches_a_rebuild_with_empty_parts_duplicates_and_rejected():
    a = _papers([2, 1], seed=3, prefix="a")
    b = _papers([1, 3, 2], seed=4, prefix="b")
    parts = [_corpus(*a, rejected=[{"paper_id": "ra", "reason": "r"}]), EncodedCorpus.empty(3),
             _corpus(*b), _corpus(*a)]  # the last part: every id again
    got = EncodedCorpus.concat(parts)
    ids = a[0] + b[0]
    _check_against(got, ids, a[1] + b[1], a[2] + b[2], a[3] + b[3], np.concatenate([a[4], b[4]]))
    assert got.rejected[0] == {"paper_id": "ra", "reason": "r"}
    assert [r["paper_id"] for r in got.rejected[1:]] == a[0]
    assert all("again in this corpus" in r["reason"] for r in got.rejected[1:])
    with pytest.raises(ValueError, match="different dimensions"):
        EncodedCorpus.concat([_corpus(*a), _corpus(*_papers([1], dim=5))])


# ---- from_docbatch: a narrowed mask keeps the selected sentences' texts ---------------------------------------------
def test_from_docbatch_keeps_the_texts_and_labels_of_the_selected_sentences():
    emb = torch.randn(2, 3, 4)
    batch = DocBatch(emb, torch.tensor([[True, True, True], [True, True, False]]), ["a", "b"],
                     [["a0", "a1", "a2"], ["b0", "b1"]])
    chosen = [[1, 2], [1]]
    got = EncodedCorpus.from_docbatch(batch.select_sentences(chosen), ["ta", "tb"],
                                      [["x0", "x1", "x2"], ["y0", "y1"]])
    assert got.sentences == [["a1", "a2"], ["b1"]]  # were a0, a1 and b0: other sentences' texts
    assert got.labels == [["x1", "x2"], ["y1"]]
    expect = np.concatenate([emb[0, [1, 2]].numpy(), emb[1, [1]].numpy()])
    np.testing.assert_array_equal(got.vectors, expect)
    full = EncodedCorpus.from_docbatch(batch, ["ta", "tb"])  # an unselected batch as before
    assert full.sentences == [["a0", "a1", "a2"], ["b0", "b1"]]


# ---- _encoded_part / encode_corpus: papers matched to the encoder's output by id ---------------------------------------
class _ShuffledEncoder:
    """Returns the papers it is given in reverse order, ids and texts with them."""

    dim = 3

    def encode(self, papers, batch_size=32, progress=False) -> DocBatch:
        papers = list(reversed(papers))
        vecs = [torch.full((len(p.sentences), 3), float(len(p.paper_id))) for p in papers]
        return DocBatch.from_list(vecs, [p.paper_id for p in papers], [p.sentences for p in papers])


def test_encoder_returning_papers_in_another_order_is_refused_by_name():
    papers = [Paper("a", "title a", ["one.", "two."], labels=["background", "method"]),
              Paper("bb", "title bb", ["three."], labels=["result"])]
    with pytest.raises(ValueError, match=r"papers \['bb', 'a'\] at positions \[0, 1\] where \['a', 'bb'\]"):
        encode_corpus(_ShuffledEncoder(), papers, progress=False)  # was: a titled "title a" and labelled "result"
    one = encode_corpus(_ShuffledEncoder(), papers[:1], progress=False)  # one paper: no order to get wrong
    assert one.paper_ids == ["a"] and one.titles == ["title a"]


# ---- constructor checks ------------------------------------------------------------------------------------------
def test_float_offsets_and_flat_vectors_are_refused_at_construction():
    with pytest.raises(ValueError, match="offsets must be integers"):
        EncodedCorpus(np.zeros((3, 2), np.float32), np.array([0.0, 1.0, 3.0]), ["a", "b"], ["", ""],
                      [["x"], ["y", "z"]])  # was built, and subset then failed with numpy's cast error
    with pytest.raises(ValueError, match=r"vectors must be \(N, D\)"):
        EncodedCorpus(np.zeros(3, np.float32), np.array([0, 3]), ["a"], [""], [["x", "y", "z"]],
                      whole=np.zeros((1, 3), np.float32))  # was an IndexError from the `whole` check


# ---- page_ranges -------------------------------------------------------------------------------------------------
def _brute_pages(starts, sizes, page):
    """The set of pages (by number) the ranges touch, read byte range by byte range."""
    return {b // page for s, n in zip(starts, sizes) for b in range(s, s + n)}


def test_page_ranges_edges_against_a_brute_force_page_set():
    page = 4096
    assert page_ranges(np.array([], np.int64), np.array([], np.int64), page) == []  # was an IndexError
    cases = [([0], [page]), ([page], [1]), ([0, page], [page, 10]), ([10, page - 1], [5, 2]),
             ([3 * page, 0, page + 7], [1, 8, 4]), ([0, 2 * page], [page, 1])]
    for starts, sizes in cases:
        got = page_ranges(np.array(starts), np.array(sizes), page)
        assert all(lo % page == 0 for lo, _ in got)
        assert all(hi1 < lo2 for (_, hi1), (lo2, _) in zip(got, got[1:]))  # disjoint, sorted, touching ones joined
        covered = {b // page for lo, hi in got for b in range(lo, hi)}
        assert covered == _brute_pages(starts, sizes, page)
        assert all(any(lo <= s and s + n <= hi for lo, hi in got) for s, n in zip(starts, sizes))
    assert page_ranges(np.array([0, page]), np.array([page, 1]), page) == [(0, page + 1)]  # touching: joined
    assert mmap.PAGESIZE > 0


# ---- papers-file records -----------------------------------------------------------------------------------------
def test_index_paper_records_refuse_lists_of_unequal_length():
    with pytest.raises(ValueError, match="2 paper ids, 2 titles, 2 sentence lists and 1 label lists"):
        index_paper_records(["a", "b"], ["", ""], [["x"], ["y"]], [["l"]])  # wrote paper a alone
    with pytest.raises(ValueError, match="2 paper ids, 1 titles"):
        index_paper_records(["a", "b"], [""], [["x"], ["y"]])
    records = list(index_paper_records(["a", "b"], ["ta", "tb"], [["x"], ["y"]], [None, ["l"]]))
    assert records == [{"paper_id": "a", "title": "ta", "sentences": ["x"]},
                       {"paper_id": "b", "title": "tb", "sentences": ["y"], "labels": ["l"]}]


def test_corpus_papers_survive_pickling_and_slicing():
    papers = CorpusPapers([Paper("a", "", ["x."]), Paper("b", "", ["y."]), Paper("c", "", ["z."])], [2, 5, 9])
    back = pickle.loads(pickle.dumps(papers))
    assert [p.paper_id for p in back] == ["a", "b", "c"] and back.lines == [2, 5, 9]
    assert papers[::-1].lines == [9, 5, 2] and papers[1:].lines == [5, 9]
