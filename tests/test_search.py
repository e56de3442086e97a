"""Search: per-paper min-L2 aggregation, aspect selection, agreement with exhaustive search,
re-ranking with the OT scorer, explanations, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.cli.search import main as search_main
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SearchConfig, SentenceIndex
from aspire.index.config import checked_search_config
from aspire.search import Searcher, aggregate_min_l2


def corpus_from(papers: dict[str, list[list[float]]]) -> EncodedCorpus:
    vectors = np.array([v for vs in papers.values() for v in vs], dtype=np.float32)
    offsets = np.concatenate([[0], np.cumsum([len(vs) for vs in papers.values()])]).astype(np.int64)
    ids = list(papers)
    return EncodedCorpus(vectors, offsets, ids, [f"title of {p}" for p in ids],
                         [[f"{p} sentence {j}" for j in range(len(vs))] for p, vs in papers.items()])


# Query sentence 0 is e0, sentence 1 is e1, sentence 2 is 0.5 from D.1 and far from the rest.
QUERY = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, -3.5, 0]]
PAPERS = {
    "A": [[1.1, 0, 0, 0], [0, 0, 3, 0]],  # A.0 is 0.1 from q0; A is far from q1
    "B": [[0, 0, 0, 3], [0, 1.2, 0, 0], [1.5, 0, 0, 0]],  # B.1 is 0.2 from q1, B.2 0.5 from q0
    "C": [[0, 0, 5, 5]],
    "D": [[0, 0, 4, 0], [0, 0, -4, 0]],
}


def query_batch(selection=None) -> DocBatch:
    q = DocBatch.from_list([torch.tensor(QUERY, dtype=torch.float32)], ["query"],
                           [["q0 text", "q1 text", "q2 text"]])
    return q if selection is None else q.select_sentences([selection])


@pytest.fixture
def searcher() -> Searcher:
    index = SentenceIndex.build(corpus_from(PAPERS), IndexBuildConfig(index=IndexConfig(kind="flat")), "fp")
    return Searcher(index)


def test_aggregate_min_l2_keeps_each_papers_best_pair():
    dist = np.array([[0.5, 0.7, 0.9], [0.2, 0.6, 1.0]])
    rows = np.array([[4, 0, 7], [5, 1, -1]])
    papers = np.array([[1, 0, 2], [1, 0, -1]])
    c = aggregate_min_l2(dist, rows, papers)
    assert c.papers.tolist() == [1, 0, 2]
    np.testing.assert_allclose(c.dist, [0.2, 0.6, 0.9])
    assert c.query_rows.tolist() == [1, 1, 0] and c.hit_rows.tolist() == [5, 1, 7]


def test_search_picks_the_right_paper_and_sentence_pair(searcher):
    hits = searcher.search(query_batch(), k=3)
    assert [h.paper_id for h in hits] == ["A", "B", "D"]
    np.testing.assert_allclose([h.score for h in hits[:2]], [-0.1, -0.2], atol=1e-6)
    best = hits[0].pairs[0]
    assert (best.query_sentence, best.hit_sentence) == (0, 0)
    assert (best.query_text, best.hit_text) == ("q0 text", "A sentence 0")
    assert best.dist == pytest.approx(-hits[0].score)
    b = hits[1].pairs
    assert [(p.query_sentence, p.hit_sentence) for p in b[:2]] == [(1, 1), (0, 2)]
    np.testing.assert_allclose([p.dist for p in b[:2]], [0.2, 0.5], atol=1e-6)


def test_aspect_selection_changes_the_ranking(searcher):
    only_q1 = searcher.search(query_batch([1]), k=2)
    assert [h.paper_id for h in only_q1] == ["B", "A"]
    assert only_q1[0].score == pytest.approx(-0.2, abs=1e-6)
    assert [p.query_sentence for h in only_q1 for p in h.pairs] == [1, 1]  # only selected sentences explain
    only_q0 = searcher.search(query_batch([0]), k=2)
    assert [h.paper_id for h in only_q0] == ["A", "B"]
    assert only_q0[1].score == pytest.approx(-0.5, abs=1e-6)  # B now matched through B.2
    far = searcher.search(query_batch([2]), k=1)
    assert far[0].paper_id == "D" and far[0].score == pytest.approx(-0.5)
    assert (far[0].pairs[0].query_sentence, far[0].pairs[0].hit_sentence) == (2, 1)


def test_query_by_indexed_id_excludes_itself(searcher):
    hits = searcher.search(searcher.query_from_index("B"), k=4)
    assert "B" not in [h.paper_id for h in hits] and len(hits) == 3
    with pytest.raises(KeyError, match="nope"):
        searcher.query_from_index("nope")


def brute_force_min_l2(corpus: EncodedCorpus, query: np.ndarray) -> np.ndarray:
    scores = []
    for p in range(len(corpus)):
        sents = corpus.vectors[corpus.offsets[p] : corpus.offsets[p + 1]]
        scores.append(min(float(np.linalg.norm(q - s)) for q in query for s in sents))
    return np.array(scores)


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_ann_search_equals_exhaustive_single_match(kind):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 8, 200)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    corpus = EncodedCorpus(rng.standard_normal((offsets[-1], 12)).astype(np.float32), offsets,
                           [f"p{i}" for i in range(200)], [""] * 200, [["s"] * n for n in lengths.tolist()])
    cfg = IndexBuildConfig(index=IndexConfig(kind=kind, hnsw_ef_search=2000, ivf_nlist=8, ivf_nprobe=8),
                           search=SearchConfig(sentence_k=int(offsets[-1]), ot_eps=0.2))
    searcher = Searcher(SentenceIndex.build(corpus, cfg, "fp"))
    for seed in range(3):
        q = np.random.default_rng(seed + 10).standard_normal((4, 12)).astype(np.float32)
        expected = brute_force_min_l2(corpus, q)
        hits = searcher.search(DocBatch.from_list([torch.from_numpy(q)]), k=10)
        order = np.argsort(expected, kind="stable")[:10]
        assert [h.paper_id for h in hits] == [f"p{i}" for i in order]
        np.testing.assert_allclose([-h.score for h in hits], expected[order], rtol=1e-4)
        top, scores = searcher.exhaustive(DocBatch.from_list([torch.from_numpy(q)]), "minl2", k=10)
        assert top.tolist() == order.tolist()
        np.testing.assert_allclose(-scores, expected[order], rtol=1e-4)


def test_ot_rerank_prefers_the_paper_matching_every_query_sentence():
    # Y matches q0 exactly but nothing else; X matches both query sentences at distance 0.15.
    papers = {"Y": [[1, 0, 0, 0], [0, 0, 5, 0]], "X": [[1, 0, 0, 0.15], [0, 1, 0, 0.15]], "Z": [[0, 0, 0, 6]]}
    searcher = Searcher(SentenceIndex.build(corpus_from(papers), IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))
    query = DocBatch.from_list([torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])], ["q"], [["q0", "q1"]])
    single = searcher.search(query, k=2, rerank="none")
    assert [h.paper_id for h in single] == ["Y", "X"]
    assert single[0].score == pytest.approx(0.0, abs=1e-6)
    ot = searcher.search(query, k=2, rerank="ot", shortlist=3)
    assert [h.paper_id for h in ot] == ["X", "Y"]
    assert ot[0].score == pytest.approx(-0.15, abs=1e-3)
    assert sorted((p.query_sentence, p.hit_sentence) for p in ot[0].pairs) == [(0, 0), (1, 1)]
    assert all(p.weight > 0.99 and p.dist == pytest.approx(0.15, abs=1e-5) for p in ot[0].pairs)
    # aspect selection: with only q0 selected, Y's exact match wins under OT as well
    only_q0 = searcher.search(query.select_sentences([[0]]), k=1, rerank="ot", shortlist=3)
    assert only_q0[0].paper_id == "Y" and [p.query_sentence for p in only_q0[0].pairs] == [0]


def test_rerank_of_the_whole_corpus_equals_exhaustive_ot():
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 6, 80)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    corpus = EncodedCorpus(rng.standard_normal((offsets[-1], 8)).astype(np.float32), offsets,
                           [f"p{i}" for i in range(80)], [""] * 80, [["s"] * n for n in lengths.tolist()])
    searcher = Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"),
                        SearchConfig(sentence_k=int(offsets[-1]), ot_eps=0.2))
    query = DocBatch.from_list([torch.from_numpy(rng.standard_normal((3, 8)).astype(np.float32))])
    hits = searcher.search(query, k=10, rerank="ot", shortlist=80)
    all_scores = searcher.scorer("ot", searcher.config).score(query, searcher.index.gather(np.arange(80)))[0]
    expected = torch.argsort(all_scores, descending=True)[:10].tolist()
    assert [h.paper_id for h in hits] == [f"p{i}" for i in expected]
    np.testing.assert_allclose([h.score for h in hits], all_scores[expected].numpy(), rtol=1e-5)
    top, scores = searcher.exhaustive(query, "ot", k=10, chunk=16)
    assert top.tolist() == expected
    exact_minl2 = searcher.search(query, k=5, rerank="minl2", shortlist=80)
    top, scores = searcher.exhaustive(query, "minl2", k=5)
    assert [h.paper_id for h in exact_minl2] == [f"p{i}" for i in top.tolist()]


def test_unknown_rerank_is_refused(searcher):
    with pytest.raises(ValueError, match="valid"):
        searcher.search(query_batch(), rerank="bm25")


def test_cli_search_by_id_and_by_file(tmp_path, tiny_model_dir, capsys):
    from aspire.index.__main__ import main as index_main

    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": f"p{i}", "title": "a model of text",
                                          "abstract": ["we propose a new method.", f"results {i} improve the task.",
                                                       "the data is scientific."]}) + "\n" for i in range(8)))
    out = tmp_path / "idx"
    index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(out)])
    capsys.readouterr()
    assert search_main(["--index", str(out), "--query-id", "p3", "--sentences", "0,2", "--k", "3",
                        "--rerank", "ot", "--shortlist", "6", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["query_sentences"] == [0, 2] and len(result["hits"]) == 3
    assert "p3" not in [h["paper_id"] for h in result["hits"]]
    assert {p["query_sentence"] for h in result["hits"] for p in h["pairs"]} <= {0, 2}
    scores = [h["score"] for h in result["hits"]]
    assert scores == sorted(scores, reverse=True)
    query = tmp_path / "query.json"
    query.write_text(json.dumps({"paper_id": "new", "title": "a model of text",
                                 "abstract": ["we propose a new method.", "results 3 improve the task."]}, indent=2))
    assert search_main(["--index", str(out), "--query-file", str(query), "--k", "2"]) == 0
    text = capsys.readouterr().out
    assert text.count("a model of text") == 2 and "q0 <-> s0" in text


def test_encoder_of_another_model_is_refused(searcher):
    from aspire.index import ModelMismatchError

    class OtherEncoder:
        def fingerprint(self) -> str:
            return "another-model"

    with pytest.raises(ModelMismatchError, match="another-model"):
        Searcher(searcher.index, encoder=OtherEncoder())
    with pytest.raises(ValueError, match="needs an encoder"):
        searcher.query_from_paper(None)


def test_cli_bad_queries_get_clear_errors(tmp_path, tiny_model_dir, capsys):
    """A query id absent from the index, sentence indices out of range, a malformed query file."""
    from aspire.index.__main__ import main as index_main

    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": f"p{i}", "title": "a model of text",
                                          "abstract": ["we propose a new method.", "the data is scientific."]}) + "\n"
                              for i in range(4)))
    out = tmp_path / "idx"
    index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(out)])
    capsys.readouterr()

    def error_of(*argv) -> str:
        assert search_main(["--index", str(out), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
        return err

    assert "p99" in error_of("--query-id", "p99")
    msg = error_of("--query-id", "p1", "--sentences", "0,5")
    assert "[5] out of range 0..1" in msg
    assert "-1" in error_of("--query-id", "p1", "--sentences", "-1")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"paper_id": "x", "title": "t", "abstract": ["a sentence."]}\n{not json\n')
    assert "bad.jsonl:2: invalid JSON" in error_of("--query-file", str(bad))


def test_ot_rerank_keeps_the_order_and_scores_of_scoring_the_whole_shortlist(monkeypatch):
    """The OT stage runs Sinkhorn only for the papers that can enter the k best (`aspire.scoring.ot_topk`);
    its hits must be those of the straightforward path: every shortlisted paper scored by the OT scorer."""
    import aspire.scoring.ot_topk as ot_topk
    from aspire.scoring.chunked import score_chunked

    rng = np.random.default_rng(11)
    lengths = rng.integers(1, 13, 400)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    corpus = EncodedCorpus(rng.standard_normal((offsets[-1], 16)).astype(np.float32), offsets,
                           [f"p{i}" for i in range(400)], [""] * 400, [["s"] * n for n in lengths.tolist()])
    searcher = Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))
    solved = []
    sinkhorn = ot_topk.sinkhorn
    monkeypatch.setattr(ot_topk, "sinkhorn", lambda cost, *a, **kw: solved.append(len(cost)) or sinkhorn(cost, *a, **kw))
    for seed, selection, k in [(0, None, 10), (1, [0, 2, 3], 10), (2, None, 1), (3, [4], 25)]:
        query = DocBatch.from_list([torch.from_numpy(np.random.default_rng(seed).standard_normal((6, 16)).astype(np.float32))])
        query = query if selection is None else query.select_sentences([selection])
        shortlist, _, _ = searcher.first_stage(query, checked_search_config(searcher.config, k=k, rerank="ot",
                                                                            shortlist=300), [])
        solved.clear()
        hits = searcher.search(query, k=k, rerank="ot", shortlist=300)
        slow = score_chunked(searcher.scorer("ot", searcher.config), query, searcher.index.gather(shortlist))[0]
        expected = torch.argsort(slow, descending=True, stable=True)[:k]
        assert [h.paper_id for h in hits] == [f"p{i}" for i in shortlist[expected.numpy()]]
        np.testing.assert_allclose([h.score for h in hits], slow[expected].numpy(), rtol=1e-5)
        assert [h.stages["ot"] for h in hits] == [h.score for h in hits]
        assert 0 < sum(solved) < len(shortlist) // 2, solved  # most of the shortlist never reaches Sinkhorn


def test_ids_and_exclusions_given_as_a_user_writes_them(tmp_path):
    """An integer id, one id alone, an id twice or one the index lacks: each once silently wrong (a false "not in the
    index", the query returned as its own hit, one paper too few)."""
    index = SentenceIndex.build(corpus_from({"42": PAPERS["A"], **PAPERS}), IndexBuildConfig(index=IndexConfig(kind="flat")),
                                "fp")
    searcher = Searcher(index)
    query = searcher.query_from_index(42, 0)  # one position, not a list
    assert query.paper_ids == ["42"] and query.mask[0].tolist() == [True, False]
    everyone = ["A", "B", "C", "D"]
    assert sorted(h.paper_id for h in searcher.search(query, k=5)) == everyone  # its own id left out
    for exclude in ("A", ["A", "A"], ["A", "nope"]):
        assert sorted(h.paper_id for h in searcher.search(query, k=5, exclude=exclude)) == ["42", "B", "C", "D"]
        papers, _ = searcher.exhaustive(query, k=5, exclude=exclude)
        assert sorted(index.paper_ids[p] for p in papers) == ["42", "B", "C", "D"]
    assert sorted(h.paper_id for h in searcher.search(query, k=5, exclude=[42])) == everyone
    with pytest.raises(TypeError, match="a paper id is a string or an integer, got float"):
        searcher.search(query, exclude=[4.2])


def test_a_shortlist_shorter_than_k_is_refused_when_given_and_grown_when_configured(searcher):
    from aspire.search import SearchArgumentError

    with pytest.raises(SearchArgumentError, match=r"shortlist \(2\) must be at least k \(3\)"):
        searcher.search(query_batch(), k=3, rerank="ot", shortlist=2)  # once 2 hits, no word said
    searcher.config = checked_search_config(searcher.config, shortlist=2)
    assert len(searcher.search(query_batch(), k=3, rerank="ot")) == 3


@pytest.mark.parametrize("stages", ["ann", "bm25", "ann,bm25"])
def test_every_first_stage_says_when_it_finds_fewer_than_k(searcher, stages, caplog):
    query = searcher.query_from_index("B")
    with caplog.at_level("WARNING", logger="aspire.search"):
        hits = searcher.search(query, k=10, stages=stages)
    assert len(hits) == 3
    said = [r.getMessage() for r in caplog.records]
    assert said == ["found 3 of the k=10 papers asked for: the index holds 3 paper(s) besides the excluded ones"]


def test_open_takes_overrides_as_the_command_line_writes_them(tmp_path):
    index = SentenceIndex.build(corpus_from(PAPERS), IndexBuildConfig(index=IndexConfig(kind="flat")), "fp")
    index.save(tmp_path / "idx")
    assert Searcher.open(tmp_path / "idx", ["search.k=3", "rerank=ot"]).config.k == 3
    assert Searcher.open(tmp_path / "idx", "search.shortlist=7").config.shortlist == 7  # once split into characters
