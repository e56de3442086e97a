"""Sentence texts of a loaded index kept on disk (aspire.index.texts): the same texts as in memory, the same
search, adding papers and saving again, the size rule of texts="auto", and bad papers files named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aspire.index import IndexFormatError, SentenceIndex
from aspire.index import texts as texts_module
from aspire.index.texts import SentencesOnDisk, read_index_papers
from tests.test_index import config, random_corpus


@pytest.fixture
def saved(tmp_path):
    corpus = random_corpus(30, seed=3)
    corpus.sentences[4] = ["ünïcode — sentence", 'a "quoted" one']  # multi-byte text: byte offsets, not characters
    root = tmp_path / "idx"
    SentenceIndex.build(corpus, config(kind="flat"), "fp").save(root)
    return corpus, root


def test_disk_texts_equal_memory_texts_and_search_is_unchanged(saved):
    corpus, root = saved
    memory = SentenceIndex.load(root, texts="memory")
    disk = SentenceIndex.load(root, texts="disk")
    assert isinstance(disk.sentences, SentencesOnDisk) and isinstance(memory.sentences, list)
    assert list(disk.sentences) == memory.sentences == corpus.sentences
    assert disk.sentences[4] == ["ünïcode — sentence", 'a "quoted" one']
    assert disk.sentences[-1] == corpus.sentences[-1] and disk.sentences[2:5] == corpus.sentences[2:5]
    assert disk.paper_ids == memory.paper_ids and disk.titles == memory.titles
    q = corpus.vectors[:6]
    assert (disk.search_sentences(q, 3)[1] == memory.search_sentences(q, 3)[1]).all()
    with pytest.raises(IndexError, match="out of range for 30 papers"):
        disk.sentences[30]


def test_add_and_save_after_a_disk_load_and_the_old_generation_stays_readable(saved):
    corpus, root = saved
    index = SentenceIndex.load(root, texts="disk")
    old = index.sentences
    more = random_corpus(3, seed=9)
    more.paper_ids = ["n0", "n1", "n2"]
    index.add(more, "fp").save(root)  # the save removes the generation `old` maps
    assert old[7] == corpus.sentences[7]
    loaded = SentenceIndex.load(root, texts="disk")
    assert loaded.n_papers == 33 and list(loaded.sentences) == corpus.sentences + more.sentences


def test_auto_keeps_texts_on_disk_only_above_the_size_limit(saved, monkeypatch):
    _, root = saved
    assert isinstance(SentenceIndex.load(root).sentences, list)  # a small file: texts="auto" reads it in
    monkeypatch.setattr(texts_module, "TEXTS_ON_DISK_BYTES", 100)
    assert isinstance(SentenceIndex.load(root).sentences, SentencesOnDisk)
    with pytest.raises(ValueError, match="unknown texts='ram'"):
        SentenceIndex.load(root, texts="ram")


@pytest.mark.parametrize("line, reason", [
    ('{"paper_id": "x", "title": "t"}', "KeyError"),
    ('{"paper_id": "x", "title": "t", "sentences": [', "JSONDecodeError"),
    ('["x", "t", []]', "TypeError"),
])
def test_a_bad_papers_line_is_named(tmp_path, line, reason):
    path = tmp_path / "papers.jsonl"
    good = json.dumps({"paper_id": "a", "title": "A", "sentences": ["s"]})
    path.write_text(f"{good}\n\n{line}\n", encoding="utf-8")
    with pytest.raises(IndexFormatError, match=rf"papers.jsonl:3: not an index paper record \({reason}"):
        read_index_papers(path, texts="disk")


def test_blank_lines_do_not_shift_the_offsets(tmp_path):
    path = Path(tmp_path / "papers.jsonl")
    records = [{"paper_id": f"p{i}", "title": f"T{i}", "sentences": [f"s{i}"] * (i + 1)} for i in range(3)]
    path.write_text("\n".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")  # blank line between records
    ids, titles, sentences, labels = read_index_papers(path, texts="disk")
    assert ids == ["p0", "p1", "p2"] and titles == ["T0", "T1", "T2"] and labels == [None] * 3
    assert list(sentences) == [r["sentences"] for r in records]
    assert np.asarray(sentences._starts).tolist()[-1] == path.stat().st_size


@pytest.mark.parametrize("rerank", ["ot", "maxpassage"])
def test_re_ranking_a_shortlist_reads_the_texts_of_the_hits_only(saved, monkeypatch, rerank):
    import torch

    from aspire.batch import DocBatch
    from aspire.index import SearchConfig
    from aspire.search import Searcher

    corpus, root = saved
    index = SentenceIndex.load(root, texts="disk")
    reads = []
    original = SentencesOnDisk.__getitem__
    monkeypatch.setattr(SentencesOnDisk, "__getitem__", lambda self, i: reads.append(i) or original(self, i))
    searcher = Searcher(index, SearchConfig(sentence_k=int(corpus.offsets[-1])))
    query = DocBatch.from_list([torch.from_numpy(corpus.vectors[:2].copy())])
    hits = searcher.search(query, k=3, rerank=rerank, shortlist=25)
    hit_positions = {index.positions[h.paper_id] for h in hits}
    assert len(hits) == 3 and sorted(reads) == sorted(hit_positions)  # each hit's texts once; none of the shortlist's
    reads.clear()
    searcher.exhaustive(query, "ot", k=3)  # scores every paper, chunk by chunk
    assert reads == []
