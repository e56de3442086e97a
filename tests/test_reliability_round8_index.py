"""Round 8, the search index against independent references: faiss search against brute-force numpy search
(ids and the true distances of what comes back), the paper-level ranking against brute-force min-L2 over papers
(selected sentences, the query excluded once), BM25 against its Lucene definition, an index grown by `add`, saved
and loaded against one built in one go, and a paper id repeated in the corpus an index is built or extended from."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SearchConfig, SentenceIndex
from aspire.index.lexical import index_bm25
from aspire.search import Searcher


def random_corpus(n_papers: int, dim: int = 16, seed: int = 0, start: int = 0) -> EncodedCorpus:
    """Papers of 1 to 6 sentences (ids p{start}, p{start + 1}, ...) with Gaussian sentence vectors."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, size=n_papers)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = [f"p{start + i}" for i in range(n_papers)]
    sentences = [[f"{pid} sentence {j}" for j in range(n)] for pid, n in zip(ids, lengths.tolist())]
    vectors = rng.standard_normal((int(offsets[-1]), dim)).astype(np.float32)
    return EncodedCorpus(vectors, offsets, ids, [f"title {pid}" for pid in ids], sentences)


def config(**index) -> IndexBuildConfig:
    return IndexBuildConfig(index=IndexConfig(**index))


def exact_l2(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(n, N) float64 L2 distances, computed pair by pair (no |x|^2 + |y|^2 - 2xy cancellation)."""
    diff = queries[:, None, :].astype(np.float64) - vectors[None, :, :].astype(np.float64)
    return np.sqrt((diff**2).sum(-1))


def brute_min_l2(corpus: EncodedCorpus, query: np.ndarray) -> np.ndarray:
    """(P,) each paper's minimum L2 over (query sentence, paper sentence) pairs."""
    d = exact_l2(corpus.vectors, query).min(0)  # (N,) nearest query sentence per row
    return np.minimum.reduceat(d, corpus.offsets[:-1])


# ---- faiss against exact search -------------------------------------------------------------------------------
@pytest.mark.parametrize("index_config", [dict(kind="flat"), dict(kind="ivf", ivf_nlist=12, ivf_nprobe=12)],
                         ids=["flat", "ivf-all-lists"])
def test_exact_settings_return_the_exact_top_k_with_true_distances(index_config):
    corpus = random_corpus(200, seed=1)
    corpus.vectors = corpus.vectors * 4 + 3  # large norms: |x|^2 + |y|^2 - 2xy loses digits
    index = SentenceIndex.build(corpus, config(**index_config), "fp")
    queries = np.random.default_rng(2).standard_normal((30, corpus.dim)).astype(np.float32) * 4 + 3  # >= 20: BLAS
    dist, rows = index.search_sentences(queries, 10)
    ref = exact_l2(corpus.vectors, queries)
    order = np.argsort(ref, axis=1, kind="stable")[:, :10]
    assert np.array_equal(rows, order)
    np.testing.assert_allclose(dist, np.take_along_axis(ref, order, 1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("index_config", [dict(kind="hnsw", hnsw_m=8, hnsw_ef_search=16),
                                          dict(kind="ivf", ivf_nlist=12, ivf_nprobe=2)], ids=["hnsw", "ivf-2-lists"])
def test_approximate_settings_return_true_distances_of_the_rows_they_return(index_config):
    corpus = random_corpus(200, seed=3)
    index = SentenceIndex.build(corpus, config(**index_config), "fp")
    queries = np.random.default_rng(4).standard_normal((25, corpus.dim)).astype(np.float32)
    dist, rows = index.search_sentences(queries, 10)
    ref = exact_l2(corpus.vectors, queries)
    found = rows >= 0
    assert found.mean() > 0.9
    true = np.take_along_axis(ref, np.maximum(rows, 0), 1)
    np.testing.assert_allclose(dist[found], true[found], rtol=1e-5, atol=1e-4)
    assert (np.diff(np.where(found, dist, np.inf), axis=1) >= 0).all()  # nearest first


# ---- the paper-level ranking against brute force over papers -------------------------------------------------
@pytest.mark.parametrize("k", [1, 7, 119, 120, 500])
def test_paper_ranking_equals_brute_force_min_l2_with_the_query_excluded_once(k):
    corpus = random_corpus(120, seed=5)
    index = SentenceIndex.build(corpus, config(kind="flat"), "fp")
    searcher = Searcher(index, SearchConfig(k=k, sentence_k_min=1))
    for qp, selection in ((4, None), (17, "last"), (60, "first-last")):
        n = int(corpus.offsets[qp + 1] - corpus.offsets[qp])
        chosen = {"last": [n - 1], "first-last": sorted({0, n - 1})}.get(selection)
        query = searcher.query_from_index(f"p{qp}", chosen)
        rows = corpus.offsets[qp] + np.asarray(chosen if chosen is not None else range(n))
        ref = brute_min_l2(corpus, corpus.vectors[rows])
        ref[qp] = np.inf
        want = np.argsort(ref, kind="stable")[: min(k, 119)]
        hits = searcher.search(query)
        assert [h.paper_id for h in hits] == [f"p{p}" for p in want.tolist()]
        np.testing.assert_allclose([-h.score for h in hits], ref[want], rtol=1e-5, atol=1e-5)


# ---- BM25 against its definition -------------------------------------------------------------------------------
def test_index_bm25_equals_the_lucene_bm25_definition():
    bm25s = pytest.importorskip("bm25s")
    rng = np.random.default_rng(0)
    words = ["graph", "neural", "network", "protein", "fold", "attention", "citation", "the", "of", "a", "x", "model"]
    corpus = random_corpus(40, dim=4, seed=6)
    corpus.sentences = [[" ".join(rng.choice(words, rng.integers(1, 9))) for _ in s] for s in corpus.sentences]
    corpus.titles = [" ".join(rng.choice(words, 3)) for _ in corpus.titles]
    index = SentenceIndex.build(corpus, config(kind="flat"), "fp")
    k1, b = 1.25, 0.75
    bm25 = index_bm25(index, k1, b)
    stop = set(bm25s.stopwords.STOPWORDS_EN)

    def tokens(text: str) -> list[str]:  # bm25s: lower-cased words of 2+ characters, English stop words out
        return [w for w in re.findall(r"(?u)\b\w\w+\b", text.lower()) if w not in stop]

    docs = [tokens(t + " " + " ".join(s)) for t, s in zip(corpus.titles, corpus.sentences)]
    avg = np.mean([len(d) for d in docs])
    for query in ("graph neural network", "protein protein fold", "attention x"):
        ref = np.zeros(len(docs))
        for w in tokens(query):
            df = sum(w in d for d in docs)
            if df:
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                ref += [idf * d.count(w) / (d.count(w) + k1 * (1 - b + b * len(d) / avg)) for d in docs]
        np.testing.assert_allclose(bm25.scores([query])[0], ref, rtol=1e-5, atol=1e-6)


# ---- built in one go against grown by add, saved and loaded -----------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_index_grown_by_add_and_reloaded_equals_one_built_in_one_go(tmp_path, dtype):
    corpus = random_corpus(90, seed=7)
    whole = SentenceIndex.build(corpus, config(kind="flat", vector_dtype=dtype, store_bm25=False), "fp")
    grown = SentenceIndex.build(corpus.subset(range(50)), config(kind="flat", vector_dtype=dtype, store_bm25=False), "fp")
    grown.save(tmp_path / "index")
    grown = SentenceIndex.load(tmp_path / "index")
    grown.add(corpus.subset(range(50, 90)), "fp")
    grown.save(tmp_path / "index")
    grown = SentenceIndex.load(tmp_path / "index", texts="disk")
    assert grown.paper_ids == whole.paper_ids and np.array_equal(grown.offsets, whole.offsets)
    assert np.asarray(grown.vectors).tobytes() == np.asarray(whole.vectors).tobytes()
    assert [grown.sentences[p] for p in range(90)] == corpus.sentences
    queries = np.random.default_rng(8).standard_normal((6, corpus.dim)).astype(np.float32)
    (d1, r1), (d2, r2) = whole.search_sentences(queries, 20), grown.search_sentences(queries, 20)
    assert np.array_equal(r1, r2) and np.array_equal(d1, d2)
    owner = np.repeat(np.arange(90), np.diff(corpus.offsets))  # row -> paper, by brute force
    assert np.array_equal(grown.sentence_papers(r2), owner[r2])


# ---- a paper id repeated in the corpus ---------------------------------------------------------------------------
def test_add_keeps_the_first_of_a_paper_id_the_new_corpus_repeats(tmp_path):
    index = SentenceIndex.build(random_corpus(5, seed=9), config(kind="flat"), "fp")
    new = random_corpus(3, seed=10, start=5)
    new.paper_ids = ["n1", "n1", "n2"]
    first = new.vectors[new.offsets[0] : new.offsets[1]].copy()
    index.add(new, "fp")
    assert index.paper_ids == ["p0", "p1", "p2", "p3", "p4", "n1", "n2"]
    assert {"paper_id": "n1", "reason": "duplicate paper_id (again in this corpus)"} in index.rejected
    p = index.position("n1")
    np.testing.assert_array_equal(index.vectors[index.offsets[p] : index.offsets[p + 1]], first)
    index.save(tmp_path / "index")
    loaded = SentenceIndex.load(tmp_path / "index")  # a repeated id in papers.jsonl does not load
    assert loaded.paper_ids == index.paper_ids and loaded.faiss_index.ntotal == loaded.n_sentences


def test_build_keeps_the_first_of_a_paper_id_the_corpus_repeats(tmp_path):
    corpus = random_corpus(6, seed=11)
    corpus.paper_ids[3] = "p1"
    index = SentenceIndex.build(corpus, config(kind="flat"), "fp")
    assert index.paper_ids == ["p0", "p1", "p2", "p4", "p5"]
    assert index.rejected == [{"paper_id": "p1", "reason": "duplicate paper_id (again in this corpus)"}]
    assert index.n_sentences == len(corpus.vectors) - int(corpus.offsets[4] - corpus.offsets[3])
    index.save(tmp_path / "index")
    assert SentenceIndex.load(tmp_path / "index").paper_ids == index.paper_ids
