"""BM25 stored beside the faiss index (issue 26, item 1): written by every save into the generation,
listed in the manifest with checksums, loaded with the index, rebuilt when the papers change; an index
saved before it existed still loads and builds its BM25 when first searched, saying so in the log."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from test_index import HashEncoder, random_corpus

from aspire.batch import DocBatch
from aspire.index import IndexBuildConfig, IndexConfig, IndexFormatError, SentenceIndex
from aspire.index.build import build_index
from aspire.index.lexical import index_bm25
from aspire.scoring.lexical import FILES
from aspire.search import Searcher

FLAT = IndexBuildConfig(index=IndexConfig(kind="flat"))
BM25_FILES = sorted(FILES.values())


def _query(text: str, dim: int = 16) -> DocBatch:
    return DocBatch.from_list([torch.ones(1, dim)], ["q"], [[text]])


def _write_corpus(path, n: int, start: int = 0) -> None:
    path.write_text("".join(json.dumps({"paper_id": f"n{i}", "title": f"title {i}",
                                        "abstract": [f"word{i} appears here.", "common text."]}) + "\n"
                            for i in range(start, start + n)))


def test_save_writes_bm25_into_the_generation_with_checksums_and_load_reads_it(tmp_path, caplog):
    index = SentenceIndex.build(random_corpus(12), FLAT, "fp", "m")
    gen = index.save(tmp_path / "idx")
    manifest = json.loads((gen / "manifest.json").read_text())
    assert set(BM25_FILES) <= set(manifest["files"]) and set(BM25_FILES) <= set(manifest["sha256"])
    assert manifest["bm25"] == {"k1": 1.25, "b": 0.75, "stopwords": "en", "normalization": "nfkc", "text": "title + sentences"}
    loaded = SentenceIndex.load(tmp_path / "idx", verify=True)
    assert loaded.bm25 is not None
    fresh = index_bm25(loaded).scores(["p3 sentence", "title p7"])
    np.testing.assert_allclose(loaded.bm25.scores(["p3 sentence", "title p7"]), fresh, rtol=1e-6)
    with caplog.at_level(logging.INFO, logger="aspire.index.lexical"):
        hits = Searcher(loaded).search(_query("title p7"), k=3, stages="bm25")
    assert hits[0].paper_id == "p7" and "building BM25" not in caplog.text  # the stored one was used


def test_index_saved_without_bm25_loads_and_builds_it_at_query_time_with_a_log_line(tmp_path, caplog):
    gen = SentenceIndex.build(random_corpus(12), FLAT, "fp", "m").save(tmp_path / "idx")
    manifest = json.loads((gen / "manifest.json").read_text())
    for name in BM25_FILES:  # what a save before BM25 was stored wrote
        (gen / name).unlink()
        del manifest["files"][name], manifest["sha256"][name]
    del manifest["bm25"]
    (gen / "manifest.json").write_text(json.dumps(manifest))
    old = SentenceIndex.load(tmp_path / "idx", verify=True)
    assert old.bm25 is None
    with caplog.at_level(logging.INFO, logger="aspire.index.lexical"):
        hits = Searcher(old).search(_query("title p7"), k=3, stages="bm25")
    assert hits[0].paper_id == "p7" and "holds no stored BM25" in caplog.text


def test_missing_or_mismatched_bm25_file_is_refused(tmp_path):
    gen = SentenceIndex.build(random_corpus(12), FLAT, "fp", "m").save(tmp_path / "idx")
    (gen / "bm25.indptr.npy").unlink()
    with pytest.raises(IndexFormatError, match="bm25.indptr.npy is missing"):
        SentenceIndex.load(tmp_path / "idx")
    gen = SentenceIndex.build(random_corpus(12), FLAT, "fp", "m").save(tmp_path / "idx2")
    manifest = json.loads((gen / "manifest.json").read_text())
    del manifest["files"]["bm25.vocab.json"]  # a manifest naming only some of the BM25 files
    (gen / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="lists files"):
        SentenceIndex.load(tmp_path / "idx2")


def test_other_k1_b_at_search_builds_bm25_and_says_why(tmp_path, caplog):
    SentenceIndex.build(random_corpus(12), FLAT, "fp", "m").save(tmp_path / "idx")
    searcher = Searcher.open(tmp_path / "idx", ["bm25_k1=2.0"])
    with caplog.at_level(logging.INFO, logger="aspire.index.lexical"):
        searcher.search(_query("title p7"), k=3, stages="bm25")
    assert "the stored BM25 has k1=1.25, b=0.75" in caplog.text


def test_build_k1_b_are_stored_and_overwrite_and_add_rebuild_bm25(tmp_path):
    root, corpus = tmp_path / "idx", tmp_path / "papers.jsonl"
    _write_corpus(corpus, 4)
    cfg = IndexBuildConfig(index=IndexConfig(kind="flat"))
    cfg.search.bm25_k1, cfg.search.bm25_b = 0.9, 0.4
    build_index(root, "m", corpus, cfg, load_encoder=lambda m: HashEncoder(), progress=False)
    index = SentenceIndex.load(root)
    assert (index.bm25.k1, index.bm25.b) == (0.9, 0.4) and len(index.bm25.ids) == 4
    _write_corpus(corpus, 3, start=10)  # --overwrite with other papers: BM25 over those only
    build_index(root, "m", corpus, cfg, overwrite=True, load_encoder=lambda m: HashEncoder(), progress=False)
    index = SentenceIndex.load(root)
    assert len(index.bm25.ids) == 3 and index.bm25.scores(["word0"]).max() == 0 < index.bm25.scores(["word11"]).max()
    from aspire.index.build import add_to_index

    _write_corpus(corpus, 2, start=20)
    add_to_index(root, corpus, load_encoder=lambda m: HashEncoder(), progress=False)
    index = SentenceIndex.load(root)
    scores = index.bm25.scores(["word21"])[0]
    assert len(index.bm25.ids) == 5 and int(np.argmax(scores)) == index.positions["n21"]


def test_corpus_without_a_single_word_indexes_and_scores_zero(tmp_path):
    from aspire.scoring.lexical import BM25Index

    bm25 = BM25Index(["x.", "the a", ""], ["a", "b", "c"])  # bm25s alone fails on this corpus
    assert bm25.scores(["anything at all", "x"]).tolist() == [[0.0] * 3] * 2
    bm25.save(tmp_path)
    assert BM25Index.load(tmp_path, ["a", "b", "c"]).scores(["words"]).tolist() == [[0.0] * 3]
