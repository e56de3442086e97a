"""Round 10, the index's stored, streamed and grown paths against references: the BM25 of an index whose
encoder stored the title as sentence 0 against BM25 over title + abstract (in RAM and streamed from shards),
an index grown by `add` against one built in one go when the added corpus repeats an indexed paper with
unrankable vectors, and an index whose offsets and papers disagree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aspire.data.papers import abstract_text
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.disk import IndexFormatError
from aspire.index.lexical import index_bm25
from aspire.index.stream import merge_streaming
from aspire.scoring.lexical import BM25Index

FLAT = IndexBuildConfig(index=IndexConfig(kind="flat"))
PAPERS = {  # paper id: (title, abstract sentences)
    "a": ("graph neural network", ["we propose a method.", "results show text."]),
    "b": ("text similarity", ["a graph method for text.", "graph data shows results."]),
    "c": ("citation data", ["neural method of text similarity."]),
    "d": ("", ["a paper without a title on citation graphs."]),
}
QUERIES = ("graph", "text similarity", "citation", "neural method")


def corpus(sentences: dict[str, list[str]], ids=None, dim: int = 4, seed: int = 0) -> EncodedCorpus:
    ids = list(sentences) if ids is None else ids
    lengths = [len(sentences[i]) for i in ids]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    vectors = np.random.default_rng(seed).standard_normal((int(offsets[-1]), dim)).astype(np.float32)
    return EncodedCorpus(vectors, offsets, ids, [PAPERS[i][0] if i in PAPERS else f"title {i}" for i in ids],
                         [sentences[i] for i in ids])


def titled(ids=PAPERS) -> dict[str, list[str]]:
    """Sentences as an encoder with `include_title` stores them: the title first where it is not blank."""
    return {i: ([PAPERS[i][0]] if PAPERS[i][0].strip() else []) + PAPERS[i][1] for i in ids}


def reference_scores(sentences: dict[str, list[str]]) -> np.ndarray:
    """BM25 over each paper's title and the given sentences (`aspire.scoring.lexical.paper_text`)."""
    return BM25Index([abstract_text(PAPERS[i][0], s) for i, s in sentences.items()], list(sentences)).scores(QUERIES)


def test_bm25_of_an_index_storing_the_title_as_sentence_0_reads_the_title_once(tmp_path):
    abstracts = {i: PAPERS[i][1] for i in PAPERS}
    index = SentenceIndex.build(corpus(titled()), FLAT, "fp")
    got = index_bm25(index).scores(QUERIES)
    np.testing.assert_allclose(got, reference_scores(abstracts), rtol=1e-6)
    # the title counted twice ranked b above c for "text similarity"; title + abstract ranks c first
    assert got[1, 2] > got[1, 1]
    # saved and loaded, with the texts on disk, and merged from shards: the same stored BM25
    index.save(tmp_path / "ram")
    for texts in ("memory", "disk"):
        loaded = SentenceIndex.load(tmp_path / "ram", texts=texts)
        np.testing.assert_allclose(loaded.bm25.scores(QUERIES), got, rtol=1e-6)
        np.testing.assert_allclose(index_bm25(loaded).scores(QUERIES), got, rtol=1e-6)
    for s, ids in enumerate((["a", "b"], ["c", "d"])):
        meta = {"shard": s, "num_shards": 2, "model_name": "m", "model_fingerprint": "fp"}
        corpus(titled(ids), ids, seed=s).save_shard(tmp_path / "shards" / f"shard-{s:05d}-of-00002", meta)
    merge_streaming(tmp_path / "shards", tmp_path / "merged", FLAT)
    np.testing.assert_allclose(SentenceIndex.load(tmp_path / "merged").bm25.scores(QUERIES), got, rtol=1e-6)


def test_bm25_of_a_plain_index_keeps_an_abstract_that_opens_with_its_title():
    sentences = {i: PAPERS[i][1] for i in PAPERS}
    sentences["b"] = [PAPERS["b"][0], *PAPERS["b"][1]]  # one abstract repeats its title, the others do not
    index = SentenceIndex.build(corpus(sentences), FLAT, "fp")
    np.testing.assert_allclose(index_bm25(index).scores(QUERIES), reference_scores(sentences), rtol=1e-6)


def test_add_skips_a_rejected_duplicates_vectors_as_a_build_in_one_go_does():
    first = corpus({i: PAPERS[i][1] for i in "abc"})
    more = corpus({"a": ["an unrankable repeat."], "d": PAPERS["d"][1]}, seed=1)
    more.vectors[0] = np.nan  # paper a again, rejected as a duplicate: its vectors are never indexed
    whole = SentenceIndex.build(EncodedCorpus.concat([first, more]), FLAT, "fp")
    grown = SentenceIndex.build(first, FLAT, "fp").add(more, "fp")  # raised ValueError naming paper "a"
    assert grown.paper_ids == whole.paper_ids == ["a", "b", "c", "d"]
    assert (grown.offsets == whole.offsets).all() and np.array_equal(grown.vectors, whole.vectors)
    assert grown.sentences == whole.sentences and np.isfinite(grown.vectors).all()
    assert [r["paper_id"] for r in grown.rejected] == ["a"]
    bad = corpus({"e": ["a new paper."]}, seed=2)
    bad.vectors[0] = np.inf
    with pytest.raises(ValueError, match=r"NaN or infinite.*\['e'\]"):  # a paper that would be indexed still is refused
        grown.add(bad, "fp")
    assert grown.n_papers == 4


def test_an_index_whose_offsets_and_papers_disagree_is_refused(tmp_path: Path):
    good = SentenceIndex.build(corpus({i: PAPERS[i][1] for i in "abc"}), FLAT, "fp")
    args = dict(faiss_index=good.faiss_index, vectors=good.vectors, titles=good.titles, rejected=[], config=FLAT,
                kind="flat", model_fingerprint="fp", model_name="m")
    merged = np.array([0, 4, 5])  # offsets of two papers over the 5 rows of three
    with pytest.raises(IndexFormatError, match="offsets.npy describes 2 papers, papers.jsonl holds 3 ids"):
        SentenceIndex(offsets=merged, paper_ids=good.paper_ids, sentences=good.sentences, **args)
    with pytest.raises(IndexFormatError, match="2 sentence lists"):
        SentenceIndex(offsets=good.offsets, paper_ids=good.paper_ids, sentences=good.sentences[:2], **args)
