"""Round 47 checks of `aspire.index.shards` and `aspire.index.lexical`: a shard encoded twice gives identical files;
the BM25 stored in an index merged from shards (an `include_title` encoder, a blank title) scores as bm25s over each
paper's title + abstract, the same as a one-go build after save/load."""

from __future__ import annotations

import filecmp
import json

import numpy as np
import torch

from aspire.batch import DocBatch
from aspire.index import SentenceIndex
from aspire.index.corpus import encode_corpus
from aspire.index.lexical import index_bm25, stored_bm25
from aspire.index.shards import merge_shards
from aspire.scoring.lexical import BM25Index
from tests.test_index_shards import DIM, HashEncoder
from tests.test_reliability_round30_shards import FLAT, _encode_all_shards


class TitleEncoder(HashEncoder):
    """A HashEncoder that makes a paper's (non-blank) title its sentence 0, as `include_title` encoders do."""

    include_title = True

    def encode(self, papers, batch_size=32, progress=False) -> DocBatch:
        sents = [([p.title] if p.title.strip() else []) + list(p.sentences) for p in papers]
        vectors = [torch.stack([torch.from_numpy(np.random.default_rng(abs(hash((self.tag, s))) % 2**32)
                                                 .standard_normal(DIM)).float() for s in ss]) for ss in sents]
        return DocBatch.from_list(vectors, [p.paper_id for p in papers], sents, torch.stack([v.mean(0) for v in vectors]))


RECS = [{"paper_id": str(i), "title": f"T{i} word{i % 3}" if i != 2 else "",
         "abstract": [f"s{j} topic{i % 4} alpha" for j in range(1 + i % 3)]} for i in range(7)]


def _corpus(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECS))
    return path


def test_a_shard_encoded_twice_gives_identical_files(tmp_path):
    corpus, encoder = _corpus(tmp_path), HashEncoder("h")
    _encode_all_shards(encoder, corpus, tmp_path / "s1", 3)
    _encode_all_shards(encoder, corpus, tmp_path / "s2", 3)
    files = sorted(p.relative_to(tmp_path / "s1") for p in (tmp_path / "s1").rglob("*") if p.is_file())
    assert len(files) == 21  # 7 files a shard, lines.npy among them
    assert all(filecmp.cmp(tmp_path / "s1" / f, tmp_path / "s2" / f, shallow=False) for f in files)


def test_the_stored_bm25_of_a_merged_index_scores_as_bm25s_over_title_and_abstract(tmp_path):
    corpus, encoder = _corpus(tmp_path), TitleEncoder("h")
    read = _encode_all_shards(encoder, corpus, tmp_path / "s", 3)
    merged = merge_shards(tmp_path / "s", tmp_path / "m", FLAT)
    built = SentenceIndex.build(encode_corpus(encoder, read[0], FLAT.encode, progress=False), FLAT,
                                encoder.fingerprint(), include_title=True)
    built.save(tmp_path / "one")
    one = SentenceIndex.load(tmp_path / "one")
    assert merged.include_title is one.include_title is True and merged.paper_ids == one.paper_ids
    texts = [(r["title"] + " " + " ".join(r["abstract"])).strip() for r in RECS]
    queries = ["topic1 alpha word2", "T3 s2", "word0 topic2"]
    ref = BM25Index(texts, [str(i) for i in range(len(texts))]).scores(queries)
    assert ref.max() > 0
    for index in (merged, one):
        assert (index.bm25.k1, index.bm25.b) == (1.25, 0.75)
        np.testing.assert_allclose(index.bm25.scores(queries), ref, rtol=1e-6)
        np.testing.assert_allclose(stored_bm25(index, 1.25, 0.75).scores(queries), ref, rtol=1e-6)
        np.testing.assert_allclose(index_bm25(index).scores(queries), ref, rtol=1e-6)
    other = BM25Index(texts, [str(i) for i in range(len(texts))], k1=1.5, b=0.5).scores(queries)
    np.testing.assert_allclose(stored_bm25(merged, 1.5, 0.5).scores(queries), other, rtol=1e-6)
