"""Round 30: sharded indexes (`aspire.index.shards`), stored paper texts (`aspire.index.texts`) and the search runs
(`aspire.evaluate.search_run`) against independent references: an unsharded build of the same corpus, the bytes
written, and a brute-force min-L2 ranking over the encoder's own vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from aspire.data.papers import Paper
from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.corpus import encode_corpus, in_line_order, read_corpus
from aspire.index.disk import IndexFormatError
from aspire.index.shards import encode_shard, load_shards, merge_shards, shard_record
from aspire.index.texts import read_index_papers
from tests.test_index_shards import HashEncoder

FLAT = IndexBuildConfig(index=IndexConfig(kind="flat"))


class UnseenEncoder(HashEncoder):
    """A HashEncoder whose tokenizer sees nothing in paper "d": `encode_corpus` rejects it (an encoding rejection,
    not the reader's)."""

    def unseen_sentences(self, papers, batch_size=32):
        return [[0] if p.paper_id == "d" else [] for p in papers]


def _encode_all_shards(encoder, corpus, shards, n_shards):
    read = read_corpus(corpus, FLAT.encode)
    record = shard_record(encoder, corpus, FLAT, len(read[0]))
    for s in range(n_shards):
        encode_shard(encoder, corpus, shards, FLAT, s, n_shards, read=read, record=record, progress=False)
    return read


def _unsharded(encoder, read) -> SentenceIndex:
    corpus = encode_corpus(encoder, read[0], FLAT.encode, progress=False)
    corpus.rejected = in_line_order(read[1] + corpus.rejected)
    return SentenceIndex.build(corpus, FLAT, encoder.fingerprint())


def test_load_shards_lists_rejected_records_in_line_order_as_the_merge_does(tmp_path):
    """Shard 0 holds the reader's rejections (lines 2, 6), shard 1 an encoding rejection (line 5, paper d):
    `load_shards` joined them in shard order (lines 2, 6, 5) while the merge and an unsharded build record line order
    (2, 5, 6), so `SentenceIndex.build(load_shards(...))` saved another rejected.jsonl than the merge."""
    lines = [{"paper_id": "a", "title": "", "abstract": ["one"]}, "bad", {"paper_id": "b", "title": "", "abstract": ["b"]},
             {"paper_id": "c", "title": "", "abstract": ["c"]}, {"paper_id": "d", "title": "", "abstract": ["d"]},
             "bad again", {"paper_id": "e", "title": "", "abstract": ["e"]}]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines))
    encoder = UnseenEncoder("h")
    read = _encode_all_shards(encoder, corpus, tmp_path / "shards", 2)
    merged = merge_shards(tmp_path / "shards", tmp_path / "merged", FLAT)
    joined, _ = load_shards(tmp_path / "shards")
    expected = [r["line"] for r in _unsharded(encoder, read).rejected]
    assert expected == [2, 5, 6]
    assert [r["line"] for r in merged.rejected] == expected
    assert [r["line"] for r in joined.rejected] == expected
    assert SentenceIndex.build(joined, FLAT, "h").rejected == merged.rejected


@pytest.mark.parametrize("n_shards", [1, 3, 9])
def test_a_merge_of_shards_equals_an_unsharded_build_and_its_search(tmp_path, n_shards):
    """More shards than papers (empty shards), a duplicate id, an empty abstract, an unreadable line, unicode and
    newlines in texts, an empty title: the merged index holds the unsharded build's papers, texts, vectors and
    rejections, and its top-k (rerank none and minl2, k past a shard's size) equals a brute-force min-L2 ranking."""
    recs = [{"paper_id": "a", "title": "", "abstract": ["héllo wörld\u2028x", "line\nbreak"]},
            {"paper_id": "b", "title": "T b", "abstract": ["b one", "b two", "b three"]},
            {"paper_id": "a", "title": "dup", "abstract": ["dup text"]},
            {"paper_id": "c", "title": "T c", "abstract": []},
            {"paper_id": "d", "title": "T d", "abstract": ["d one"]},
            {"paper_id": "e", "title": "日本", "abstract": ["中文 sentence", "e2"]}]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs) + "not json\n", encoding="utf-8")
    encoder = HashEncoder("h")
    read = _encode_all_shards(encoder, corpus, tmp_path / "shards", n_shards)
    merged, one = merge_shards(tmp_path / "shards", tmp_path / "merged", FLAT), _unsharded(encoder, read)
    assert merged.paper_ids == one.paper_ids == ["a", "b", "d", "e"]
    assert merged.titles == ["", "T b", "T d", "日本"]
    assert list(merged.sentences) == [r["abstract"] for r in (recs[0], recs[1], recs[4], recs[5])]
    assert np.array_equal(np.asarray(merged.vectors), np.asarray(one.vectors))
    named = [{**r, "corpus": str(corpus.resolve())} for r in one.rejected]  # a merge's name their corpus, as a build's
    assert merged.rejected == named and [r["line"] for r in merged.rejected] == [3, 4, 7]

    from aspire.search import Searcher

    query = encoder.encode([Paper("q", "", ["b two", "e2"])])
    vectors, offsets = np.asarray(merged.vectors, dtype=np.float64), np.asarray(merged.offsets)
    q = query.emb[0].double().numpy()
    brute = sorted(((min(np.linalg.norm(q[:, None] - vectors[None, offsets[p]:offsets[p + 1]], axis=-1).min(1)), pid)
                    for p, pid in enumerate(merged.paper_ids)))
    for rerank in ("none", "minl2"):
        hits = Searcher(merged).search(query, k=4, rerank=rerank, shortlist=4, exclude=[])
        assert [h.paper_id for h in hits] == [pid for _, pid in brute], rerank


def test_a_form_feed_line_is_refused_naming_it_in_memory_and_on_disk(tmp_path):
    """A line holding a form feed was skipped as blank (`bytes.strip`) by the reader, then read by `SentencesOnDisk`
    as part of the paper before it: texts="memory" loaded, texts="disk" failed at the first lookup of that paper
    with a bare JSONDecodeError ("Extra data"). Both now refuse the file naming the line."""
    path = tmp_path / "papers.jsonl"
    head = json.dumps({"paper_id": "a", "title": "", "sentences": ["x"]})
    path.write_bytes((head + "\n\x0c\n" + json.dumps({"paper_id": "b", "title": "t", "sentences": ["y"]}) + "\n").encode())
    for texts in ("memory", "disk"):
        with pytest.raises(IndexFormatError, match=f"{path}:2: not an index paper record"):
            read_index_papers(path, texts)


def test_texts_read_back_exactly_in_memory_and_on_disk_with_blank_lines(tmp_path):
    """Unicode (line and paragraph separators, NEL, astral), escaped newlines, an empty title, a paper of no sentence
    and JSON-whitespace lines between records read back as written, the same in memory and on disk."""
    papers = [("α", "", ["x\ny\r\n", "é\u2028\u2029\x85z", "𝔸 emoji 🙂"], None), ("b", "t", [], None),
              ("c", "C", ["one", "two"], ["l1", "l2"])]
    rows = [json.dumps({"paper_id": i, "title": t, "sentences": s, **({"labels": lab} if lab else {})},
                       ensure_ascii=ascii_) for (i, t, s, lab), ascii_ in zip(papers, (False, True, False))]
    path = tmp_path / "papers.jsonl"
    path.write_bytes((rows[0] + "\n \t\r\n\n" + rows[1] + "\n" + rows[2]).encode())  # no final newline
    for texts in ("memory", "disk"):
        ids, titles, sentences, labels = read_index_papers(path, texts)
        assert ids == ["α", "b", "c"] and titles == ["", "t", "C"] and labels == [None, None, ["l1", "l2"]]
        assert [sentences[i] for i in range(3)] == [s for _, _, s, _ in papers] and sentences[-1] == ["one", "two"]


def test_the_search_run_of_a_pool_equals_a_brute_force_min_l2_ranking(tmp_path, tiny_model_dir):
    """`_search_all` (each pool its own flat index, ranked whole) against a brute-force min-L2 over the same encoded
    vectors: the same order (ties by candidate order) and the score the negated distance; an empty pool is empty."""
    from aspire.encoders import load_encoder
    from aspire.evaluate.search_run import _search_all, _searchable, pipeline_config

    encoder = load_encoder(str(tiny_model_dir))
    papers = [Paper(f"p{i}", f"title {i}", [f"the model of text {w}." for w in words.split()])
              for i, words in enumerate(["neural data", "task", "neural data", "method result learning", "data"])]
    batch = _searchable(encoder.encode(papers, progress=False), papers)
    row, titles = {p.paper_id: i for i, p in enumerate(papers)}, {p.paper_id: p.title for p in papers}
    candidates = ["p3", "p2", "p0", "p1"]  # p0 and p2 are copies: an exact tie, broken by candidate order
    for pipeline in (["rerank=none"], ["rerank=minl2"]):
        ranked = _search_all(batch, row, titles, batch.index([row["p4"]]), candidates, pipeline_config(pipeline),
                             "fp", "query p4", False)
        q = batch.emb[row["p4"], : int(batch.lengths[row["p4"]])].double()
        dist = {c: torch.cdist(q, batch.emb[row[c], : int(batch.lengths[row[c]])].double()).min().item()
                for c in candidates}
        brute = sorted(candidates, key=lambda c: (round(dist[c], 5), candidates.index(c)))
        assert [pid for pid, _ in ranked[0]] == brute, pipeline
        assert [s for _, s in ranked[0]] == pytest.approx([-dist[c] for c in brute], abs=1e-4), pipeline
        assert _search_all(batch, row, titles, batch.index([0]), [], pipeline_config(pipeline), "fp", "q", False) == [[]]
