"""`aspire index add` keeps the faiss structure the build chose; it says when the index has outgrown it."""

from __future__ import annotations

import json
import logging

from test_index import HashEncoder

from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.build import add_to_index, build_index


def _write_corpus(path, n: int, start: int = 0) -> None:
    path.write_text("".join(json.dumps({"paper_id": f"n{i}", "title": f"title {i}",
                                        "abstract": [f"word{i} appears here.", "other words."]}) + "\n"
                            for i in range(start, start + n)))


def test_an_add_past_flat_max_sentences_keeps_flat_and_warns(tmp_path, caplog):
    """Under `kind: auto` an index built flat stayed flat when `index add` took it past `flat_max_sentences`,
    where a build makes an IVF index, and nothing said so: every query went on reading every vector."""
    root, corpus = tmp_path / "idx", tmp_path / "papers.jsonl"
    cfg = IndexBuildConfig(index=IndexConfig(kind="auto", flat_max_sentences=8))
    _write_corpus(corpus, 4)  # 4 papers x 2 sentences = 8 vectors: flat
    build_index(root, "m", corpus, cfg, load_encoder=lambda m: HashEncoder(), progress=False)
    assert (SentenceIndex.load(root).kind, SentenceIndex.load(root).n_sentences) == ("flat", 8)
    _write_corpus(corpus, 1, start=10)
    with caplog.at_level(logging.WARNING, logger="aspire.index.build"):
        add_to_index(root, corpus, load_encoder=lambda m: HashEncoder(), progress=False)
    assert SentenceIndex.load(root).kind == "flat"  # the structure is kept ...
    assert "holds 10 sentence vectors, past index.flat_max_sentences (8)" in caplog.text  # ... and said
    caplog.clear()
    root2 = tmp_path / "idx2"
    cfg.index.flat_max_sentences = 100
    _write_corpus(corpus, 4)
    build_index(root2, "m", corpus, cfg, load_encoder=lambda m: HashEncoder(), progress=False)
    _write_corpus(corpus, 1, start=10)
    with caplog.at_level(logging.WARNING, logger="aspire.index.build"):
        add_to_index(root2, corpus, load_encoder=lambda m: HashEncoder(), progress=False)
    assert "outgrown" not in caplog.text and "index add" not in caplog.text  # within the bound: nothing to say


def test_outgrown_ivf_lists():
    """An IVF index trained with few lists (ivf_nlist 0: about 4 sqrt(n)) is named once its size asks for over
    twice as many; a fixed ivf_nlist is the user's choice and is not."""
    import faiss

    from aspire.index.ann import outgrown

    ivf = faiss.IndexIVFFlat(faiss.IndexFlatL2(4), 4, 8)
    assert outgrown(IndexConfig(kind="ivf"), "ivf", ivf, 16) is None  # 4 sqrt(16) = 16 lists: 8 is half
    assert "in the 8 lists trained on its first corpus; a build at this size trains 40" in \
        outgrown(IndexConfig(kind="ivf"), "ivf", ivf, 100)
    assert outgrown(IndexConfig(kind="ivf", ivf_nlist=8), "ivf", ivf, 10_000) is None
    assert outgrown(IndexConfig(kind="flat", flat_max_sentences=1), "flat", faiss.IndexFlatL2(4), 100) is None
