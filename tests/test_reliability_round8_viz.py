"""What users see of alignments, checked against the scorers and the searcher: aspire.viz's matrices, plans and
pairs, and the page's hits, grids and facet labels, for a title encoded as sentence 0, a partial query selection
and one-sentence papers."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from serve_support import PAPERS, L, build_index

from aspire.batch import DocBatch
from aspire.data.papers import Paper, write_papers
from aspire.encoders import load_encoder
from aspire.scoring import get_scorer
from aspire.search import Searcher
from aspire.serve import open_service, read_labels
from aspire.viz import pair_alignment

ONE = Paper("one", "a single sentence paper", ["we propose a neural parser for documents."], [L[1]])
CORPUS = [*PAPERS, ONE]


@pytest.fixture(scope="module")
def titled(tiny_model_dir, tmp_path_factory) -> Path:
    """A flat index whose encoder makes the title sentence 0 (`include_title`), with its corpus file beside it."""
    root = tmp_path_factory.mktemp("titled")
    write_papers(root / "papers.jsonl", CORPUS)
    return build_index(load_encoder(tiny_model_dir, include_title=True), CORPUS, root / "index", str(tiny_model_dir))


# ---- the page's facet labels from a corpus file -------------------------------------------------------------
def test_labels_from_a_file_follow_a_title_encoded_as_sentence_zero(titled):
    searcher = Searcher.open(titled)
    labels, counts = read_labels(titled.parent / "papers.jsonl", searcher.index.paper_ids, searcher.index.sentences)
    assert counts["labelled"] == len(CORPUS) and counts["mismatched"] == 0
    assert labels["q"] == ["title", L[0], L[1], L[2]]
    assert labels["one"] == ["title", L[1]]
    service = open_service(titled, ["rerank=ot"], titled.parent / "papers.jsonl")
    shown = service.paper("q")["sentences"]
    assert [s["text"] for s in shown] == [PAPERS[0].title, *PAPERS[0].sentences]
    assert [s["facet"] for s in shown] == [None, "background", "method", "result"]  # as the index's own labels
    assert [s["label"] for s in shown] == searcher.index.labels[searcher.index.position("q")]


def test_labels_of_a_paper_whose_sentences_differ_are_left_out_and_named(tmp_path, caplog):
    other = Paper("a", PAPERS[1].title, ["results are new.", "we use data."], [L[2], L[1]])  # as many sentences
    write_papers(tmp_path / "p.jsonl", [other, PAPERS[2]])
    indexed = [p.sentences for p in PAPERS]  # an index without the title as a sentence
    with caplog.at_level(logging.WARNING, logger="aspire.serve.service"):
        labels, counts = read_labels(tmp_path / "p.jsonl", [p.paper_id for p in PAPERS], indexed)
    assert sorted(labels) == ["b"] and counts["mismatched"] == 1  # once: "a" labelled result, method
    assert labels["b"] == PAPERS[2].labels
    assert any(r.getMessage().endswith("left unlabelled: a") for r in caplog.records)  # the paper named


# ---- aspire.viz against the scorers and the ranking ---------------------------------------------------------
def test_pair_alignment_equals_the_ranking_with_a_title_and_a_partial_selection(titled):
    searcher = Searcher.open(titled, ["rerank=ot", "k=5", "shortlist=10"])
    index = searcher.index
    query = searcher.query_from_index("q", [0, 2])  # the title (sentence 0) and the method sentence
    hits = searcher.search(query)
    assert "one" in [h.paper_id for h in hits]  # a one-sentence paper among those drawn
    for hit in hits:
        cand = index.gather([index.position(hit.paper_id)])
        al = pair_alignment(query, cand, {"tau": 1.0, "eps": 0.05})
        assert al.query_texts == [PAPERS[0].title, *PAPERS[0].sentences]  # q0 is the title
        assert al.cand_texts == index.sentences[index.position(hit.paper_id)]
        assert al.query_mask.tolist() == [True, False, True, False]
        brute = torch.cdist(query.emb[0].double(), cand.emb[0].double()).numpy()  # (S, T)
        np.testing.assert_allclose(al.cost, brute, atol=1e-5)
        i, j = al.pair
        assert al.query_mask[i] and al.minl2_dist == pytest.approx(brute[[0, 2]].min(), abs=1e-5)
        assert brute[i, j] == pytest.approx(brute[[0, 2]].min(), abs=1e-5)
        plan = al.plans[0].plan
        assert plan[[1, 3]].sum() == 0 and plan.sum() == pytest.approx(1.0, abs=1e-3)
        assert -al.plans[0].dist == pytest.approx(hit.score, abs=1e-4)  # the distance the ranking used
        best = {p.query_sentence: p.hit_sentence for p in hit.pairs}  # the hit's pairs follow the plan drawn
        assert sorted(best) == [0, 2] and all(plan[q].argmax() == s for q, s in best.items())


def test_pair_alignment_of_a_query_without_texts_draws_no_padding_rows():
    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(2, 8, generator=g), torch.randn(4, 8, generator=g)
    batch = DocBatch.from_list([q, c], ["q", "c"])  # no texts: the query row is padded to 4
    query, cand = batch.index([0]).select_sentences([[1]]), batch.index([1])
    al = pair_alignment(query, cand)
    assert al.cost.shape == (2, 4) and al.query_mask.tolist() == [False, True]
    assert al.query_texts == ["sentence 0", "sentence 1"] and al.plans[0].plan.shape == (2, 4)
    np.testing.assert_allclose(al.cost, torch.cdist(q, c).numpy(), atol=1e-5)
    assert al.pair[0] == 1 and al.plans[0].plan[0].sum() == 0


# ---- the page against `aspire search` ----------------------------------------------------------------------
@pytest.mark.parametrize("rerank", ["ot", "minl2", "none"])
def test_page_hits_and_grids_equal_the_searcher_with_a_title(titled, rerank):
    service = open_service(titled, ["k=4", "shortlist=10"])
    out = service.search({"paper_id": "q", "sentences": [2, 0], "k": 4, "rerank": rerank})
    assert out["plan_rows"] == [0, 2]
    searcher = Searcher.open(titled, ["k=4", "shortlist=10", f"rerank={rerank}"])
    query = searcher.query_from_index("q", [0, 2])
    expected = searcher.search(query)
    assert [h["paper_id"] for h in out["hits"]] == [h.paper_id for h in expected]
    np.testing.assert_allclose([h["score"] for h in out["hits"]], [h.score for h in expected], rtol=1e-6)
    for hit, want in zip(out["hits"], expected):
        cand = searcher.index.gather([searcher.index.position(hit["paper_id"])])
        assert [s["text"] for s in hit["sentences"]] == searcher.index.sentences[searcher.index.position(hit["paper_id"])]
        brute = torch.cdist(query.emb[0, [0, 2]].double(), cand.emb[0].double()).numpy()  # grid rows: q0, q2
        np.testing.assert_allclose(np.array(hit["dist"]), brute, atol=1e-4)
        assert [(p["query_sentence"], p["hit_sentence"]) for p in hit["pairs"]] == \
            [(p.query_sentence, p.hit_sentence) for p in want.pairs]
        if rerank == "ot":
            ot = get_scorer("ot").pairwise_dist_details(query, cand)
            np.testing.assert_allclose(np.array(hit["plan"]), ot.plan[0, [0, 2]].numpy(), atol=1e-3)
        else:
            m = get_scorer("minl2").pairwise_dist_details(query, cand)
            row = [0, 2].index(int(m.query_sent[0]))
            assert np.unravel_index(np.argmin(hit["dist"]), brute.shape) == (row, int(m.cand_sent[0]))
            assert -hit["score"] == pytest.approx(float(m.dist[0]), abs=1e-5)
