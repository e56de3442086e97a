"""Round 14, the search pipeline: a query that cannot be searched (no selected sentence, vectors of another
dimension than the index's, NaN or infinity) is refused naming it by every stage (BM25 once answered an empty
selection with the first papers in index order, faiss an other-dimension query with a bare AssertionError); the
ANN stage, `exhaustive` and the BM25 stage against references written here (faiss IndexFlatL2 scoring every
sentence, a hand Lucene BM25); query-by-id's re-encoding reads the index's record of the title rule; the command's
one-off, batch and interactive answers agree."""

from __future__ import annotations

import io
import json
import math
import re
from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import faiss
import numpy as np
import pytest
import torch
from test_reliability_round11_search import random_index

from aspire.batch import DocBatch
from aspire.search import Searcher


@pytest.fixture(scope="module")
def searcher() -> Searcher:
    return Searcher(random_index(P=30, D=6, seed=1))


def _unselected(searcher: Searcher, pid: str = "p3") -> DocBatch:
    query = searcher.query_from_index(pid)
    return replace(query, mask=torch.zeros_like(query.mask))


# ---------------------------------------------------------------- queries that cannot be searched


@pytest.mark.parametrize("stages", ["ann", "bm25", "ann,bm25", "whole"])
@pytest.mark.parametrize("rerank", ["none", "minl2"])
def test_a_query_with_no_selected_sentence_is_refused_by_every_stage(searcher, stages, rerank):
    # BM25 read the empty text and answered the first k papers in index order (score 0); 'whole' answered too
    with pytest.raises(ValueError, match="query 'p3' has no selected sentence"):
        searcher.search(_unselected(searcher), k=5, stages=stages, rerank=rerank)


@pytest.mark.parametrize("method", ["minl2", "ot"])
def test_exhaustive_refuses_a_query_with_no_selected_sentence(searcher, method):
    # minl2 failed inside torch: "IndexError: amin(): Expected reduction dim 0 to have non-zero size"
    with pytest.raises(ValueError, match="query 'p3' has no selected sentence"):
        searcher.exhaustive(_unselected(searcher), method, k=3)


@pytest.mark.parametrize("stages", ["ann", "bm25", "whole"])
def test_a_query_of_another_dimension_is_refused_naming_both(searcher, stages):
    # faiss stopped the ANN stage with a bare AssertionError; exhaustive with a matrix-shape RuntimeError
    query = DocBatch.from_list([torch.randn(3, 5)], ["q5"], [["graph text.", "model data.", "citation."]])
    with pytest.raises(ValueError, match=r"query 'q5': its sentence vectors are 5-d and the index's 6-d"):
        searcher.search(query, k=3, stages=stages)
    with pytest.raises(ValueError, match="5-d and the index's 6-d"):
        searcher.exhaustive(query, "minl2", k=3)


@pytest.mark.parametrize("stages, rerank", [("ann", "none"), ("bm25", "none"), ("ann", "minl2"), ("bm25", "minl2")])
def test_a_query_sentence_vector_with_nan_is_refused(searcher, stages, rerank):
    # the ANN stage answered by the other sentence alone, min-L2 re-ranking gave every hit the score NaN
    emb = torch.randn(2, 6)
    emb[1, 2] = float("nan")
    query = DocBatch.from_list([emb], ["qn"], [["graph text.", "model data."]])
    with pytest.raises(ValueError, match=r"query 'qn': sentence vector\(s\) \[1\] hold NaN or infinity"):
        searcher.search(query, k=3, stages=stages, rerank=rerank)


def test_a_whole_vector_with_nan_is_refused(searcher):
    # the 'whole' stage answered no paper, and warned that the index held 29 papers besides the query
    query = searcher.query_from_index("p3")
    query = replace(query, whole=torch.full_like(query.whole, float("nan")))
    with pytest.raises(ValueError, match="query 'p3': its whole-abstract vector holds NaN or infinity"):
        searcher.search(query, k=3, stages="whole")


# ---------------------------------------------------------------- against references


def _faiss_min_l2(index, query) -> dict[int, float]:
    """Every paper's min L2 to the selected query sentences, from faiss IndexFlatL2 over every sentence."""
    vectors = np.asarray(index.vectors, dtype=np.float32)
    flat = faiss.IndexFlatL2(vectors.shape[1])
    flat.add(vectors)
    sq, rows = flat.search(query.emb[0, query.mask[0]].numpy(), len(vectors))
    best: dict[int, float] = {}
    for d, r in zip(sq.reshape(-1), rows.reshape(-1)):
        p = int(index.row_papers[r])
        best[p] = min(best.get(p, math.inf), math.sqrt(max(float(d), 0.0)))
    return best


@pytest.mark.parametrize("pid, selection", [("p3", None), ("p7", [0]), ("p11", [1, 0, 1])])
@pytest.mark.parametrize("exclude_query", [True, False])
def test_ann_stage_and_exhaustive_equal_faiss_flat_over_every_sentence_with_k_beyond_the_corpus(
        searcher, pid, selection, exclude_query):
    s = Searcher(searcher.index, replace(searcher.config, exclude_query=exclude_query))
    query = s.query_from_index(pid, selection)
    best = _faiss_min_l2(s.index, query)
    order = sorted((p for p in best if exclude_query is False or s.index.paper_ids[p] != pid),
                   key=lambda p: (best[p], p))
    hits = s.search(query, k=100, rerank="none", stages="ann")
    assert [h.paper_id for h in hits] == [s.index.paper_ids[p] for p in order]
    np.testing.assert_allclose([h.score for h in hits], [-best[p] for p in order], atol=1e-5)
    assert (hits[0].paper_id == pid) is (not exclude_query)
    papers, scores = s.exhaustive(query, "minl2", k=100)
    assert papers.tolist() == order
    np.testing.assert_allclose(scores, [-best[p] for p in order], atol=1e-4)


def test_bm25_stage_equals_a_hand_lucene_bm25_over_titles_and_sentences(searcher):
    index, k1, b = searcher.index, searcher.config.bm25_k1, searcher.config.bm25_b

    def words(text: str) -> list[str]:  # the words hold no English stop word
        return re.findall(r"(?u)\b\w\w+\b", text.lower())

    docs = [words(index.titles[p] + " " + " ".join(index.sentences[p])) for p in range(index.n_papers)]
    avg, n = sum(map(len, docs)) / len(docs), len(docs)
    df = Counter(w for d in docs for w in set(d))

    def bm25(q: list[str], d: list[str]) -> float:
        tf = Counter(d)
        return sum(math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) * tf[w] / (tf[w] + k1 * (1 - b + b * len(d) / avg))
                   for w in q if w in tf)

    for pid, selection in [("p3", [0]), ("p7", None), ("p11", [1, 2])]:
        query = searcher.query_from_index(pid, selection)
        text = words(" ".join(query.sentences[0][i] for i in query.mask[0].nonzero()[:, 0].tolist()))
        ref = sorted(((p, bm25(text, docs[p])) for p in range(n) if index.paper_ids[p] != pid),
                     key=lambda x: (-x[1], x[0]))[:8]
        hits = searcher.search(query, k=8, stages="bm25")
        assert [h.paper_id for h in hits] == [index.paper_ids[p] for p, _ in ref]
        np.testing.assert_allclose([h.score for h in hits], [x for _, x in ref], rtol=1e-4)


# ---------------------------------------------------------------- query by id, re-encoded


@pytest.mark.parametrize("recorded, first", [(True, 1), (False, 0)])
def test_query_by_id_re_encoding_reads_the_title_rule_the_index_records(recorded, first):
    """The index's record (`SentenceIndex.title_first`, the rule its BM25 reads) decides where the abstract starts,
    not an attribute of the loaded encoder (one without `include_title` stopped the query with AttributeError)."""
    from aspire.cli.search import QueryMaker

    sents = ["One here.", "Two there."]
    stored = ["A title", *sents] if first else sents
    index = SimpleNamespace(titles=["A title"], sentences=[stored], labels=[None], position=lambda pid: 0,
                            include_title=recorded, title_first=lambda i: recorded)
    searcher = SimpleNamespace(index=index, encoder=SimpleNamespace())  # an encoder without the setting
    maker = QueryMaker(searcher, SimpleNamespace(facet_code="none", query_side=True, device=None))
    maker.from_paper = lambda paper, sentences: SimpleNamespace(paper=paper)
    assert maker.from_id("p", None).paper.sentences == sents


@pytest.mark.parametrize("include_title", [False, True])
def test_query_by_id_re_encoded_equals_the_indexed_vectors(tiny_model_dir, include_title):
    from aspire.cli.search import QueryMaker
    from aspire.data.papers import Paper
    from aspire.encoders import load_encoder
    from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
    from aspire.index.corpus import encode_corpus
    from aspire.index.fingerprint import encoder_include_title, model_fingerprint

    encoder = load_encoder(tiny_model_dir, include_title=include_title)
    papers = [Paper("a", "a model", ["we propose a method.", "it works."]), Paper("b", "", ["the data is new."])]
    index = SentenceIndex.build(encode_corpus(encoder, papers, progress=False),
                                IndexBuildConfig(index=IndexConfig(kind="flat")), model_fingerprint(encoder), "tiny",
                                encoder_include_title(encoder))
    maker = QueryMaker(Searcher(index, encoder=encoder),
                       SimpleNamespace(facet_code="none", query_side=True, device=None, model=None))
    for pid in ("a", "b"):
        query, stored = maker.from_id(pid, None).batch, index.gather([index.position(pid)])
        assert query.sentences == stored.sentences
        torch.testing.assert_close(query.emb, stored.emb, atol=1e-5, rtol=0)


# ---------------------------------------------------------------- the command: one-off, batch, interactive


@pytest.fixture(scope="module")
def cli_index(tmp_path_factory, tiny_model_dir):
    from test_search_cli import build_labelled_index

    return build_labelled_index(tmp_path_factory.mktemp("round14-search"), tiny_model_dir)


@pytest.mark.parametrize("rerank, stages", [("none", "ann"), ("ot", "ann,bm25")])
def test_one_off_batch_and_interactive_answers_agree_and_match_the_run_file(cli_index, tmp_path, monkeypatch, capsys,
                                                                           rerank, stages):
    from aspire.cli.search import main as search_main

    common = ["--index", str(cli_index), "--json", "--quiet", "--sentences", "1,2", "--k", "5", "--rerank", rerank,
              "--stages", stages]

    def ranked(answer: dict) -> list[tuple[str, float]]:
        return [(h["paper_id"], round(h["score"], 5)) for h in answer["hits"]]

    one = []
    for pid in ("p1", "p4"):
        capsys.readouterr()
        assert search_main([*common, "--query-id", pid]) == 0
        one.append(ranked(json.loads(capsys.readouterr().out)))
    queries = tmp_path / "q.txt"
    queries.write_text("p1\np4\n")
    run = tmp_path / "q.run"
    assert search_main([*common, "--queries", str(queries), "--run-out", str(run)]) == 0
    batch = [ranked(json.loads(line)) for line in capsys.readouterr().out.splitlines()]
    monkeypatch.setattr("sys.stdin", io.StringIO("p1\np4\np1\n"))
    assert search_main([*common, "--interactive"]) == 0
    inter = [ranked(json.loads(line)) for line in capsys.readouterr().out.splitlines()]
    assert one == batch == inter[:2] and inter[2] == inter[0]
    assert all(len(r) == 5 and "p1" not in [pid for pid, _ in r] for r in one[:1])
    rows = [line.split() for line in run.read_text().splitlines()]
    assert [(r[0], r[2], int(r[3])) for r in rows] == [(q, pid, i + 1) for q, r in zip(("p1", "p4"), batch)
                                                        for i, (pid, _) in enumerate(r)]


def test_exhaustive_refuses_a_batch_of_queries_as_search_does(searcher):
    # it ranked by the batch's first query alone, without a word
    two = searcher.index.gather([0, 1])
    with pytest.raises(ValueError, match="exhaustive takes one query paper, got a batch of 2"):
        searcher.exhaustive(two, "minl2", k=3)
