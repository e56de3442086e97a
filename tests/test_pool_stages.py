"""The search pipeline's stages on CSFCube-style pools and reviewer matching: BM25 of the facet's sentences,
its fusion with a model's run, the cross-encoder rerank hook (tiny random models, no network)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aspire.benchmarks.pools import load_pool_set
from aspire.data.papers import read_paper_map
from aspire.evaluate.options import EvalOptions, Stages
from aspire.evaluate.pool_stages import bm25_rankings, query_texts, read_scored_pool_set, run_stages
from aspire.evaluate.rank import rank_pool_set
from aspire.retrieval.crossencoder import RerankOptions, pair_scores
from aspire.scoring.lexical import BM25Index, paper_text

LABEL_TO_FACET = {"background_label": "background", "method_label": "method"}
PAPERS = {  # q: background about citations, method about optimal transport
    "q": (["citation graphs of scientific papers", "we use optimal transport between sentence sets"],
          ["background_label", "method_label"]),
    "c1": (["optimal transport aligns sentence sets", "results on two tasks"], ["method_label", "result_label"]),
    "c2": (["citation graphs link scientific papers", "we count links"], ["background_label", "method_label"]),
    "c3": (["a survey of image data", "neural networks classify images"], ["background_label", "method_label"]),
    "c4": (["language models of text", "we train a transformer"], ["background_label", "method_label"]),
}


@pytest.fixture()
def faceted(tmp_path):
    """One query with a background and a method pool over the same four candidates."""
    root = tmp_path / "set"
    root.mkdir()
    with open(root / "abstracts-toy.jsonl", "w") as fh:
        for pid, (sents, labels) in PAPERS.items():
            fh.write(json.dumps({"paper_id": pid, "title": f"paper {pid}", "abstract": sents,
                                 "pred_labels": labels}) + "\n")
    pool = {"q": {"cands": ["c3", "c4", "c1", "c2"], "relevance_adju": [0, 0, 2, 2]}}
    for facet in ("background", "method"):
        (root / f"test-pid2anns-toy-{facet}.json").write_text(json.dumps(pool))
    pool_set = load_pool_set(root, "toy", ["background", "method"])
    return pool_set, read_paper_map(root / "abstracts-toy.jsonl", pool_set.paper_ids(), needed_by="pooled")


def test_query_text_is_the_facet_sentences(faceted):
    pool_set, papers = faceted
    texts = query_texts(pool_set, papers, LABEL_TO_FACET)
    assert texts == {"background": {"q": "citation graphs of scientific papers"},
                     "method": {"q": "we use optimal transport between sentence sets"}}
    with pytest.raises(ValueError, match="query q: no sentence of facet 'background'"):
        query_texts(pool_set, papers, {"result_label": "result"})  # no label maps to the pool's facets


def test_bm25_ranks_each_facet_by_its_own_sentences_with_the_corpus_idf(faceted):
    pool_set, papers = faceted
    ranked = bm25_rankings(pool_set, papers, LABEL_TO_FACET)
    assert ranked["background"]["q"][0][0] == "c2"  # citation graphs ... scientific papers
    assert ranked["method"]["q"][0][0] == "c1"  # optimal transport ... sentence sets
    # the scores are those of one index over every paper of the set (the query's own included)
    ids = sorted(pool_set.paper_ids())
    index = BM25Index([paper_text(papers[p]) for p in ids], ids)
    expected = index.scores(["we use optimal transport between sentence sets"])[0]
    assert dict(ranked["method"]["q"]) == pytest.approx({c: float(expected[ids.index(c)]) for c in PAPERS if c != "q"})
    assert [s for _, s in ranked["method"]["q"]] == sorted([s for _, s in ranked["method"]["q"]], reverse=True)


def test_stages_fuse_with_the_model_and_rerank(faceted, tmp_path, tiny_model_dir):
    pool_set, papers = faceted
    out = tmp_path / "out"
    rank_pool_set(pool_set, papers, str(tiny_model_dir), "minl2", out, "dense", EvalOptions(), LABEL_TO_FACET)
    dense = read_scored_pool_set(pool_set, out, "dense")
    # weight 1 on the model keeps its order; weight 0 follows BM25
    only_dense, info = run_stages(pool_set, papers, LABEL_TO_FACET, out, "a1", "dense", Stages(True, 1.0))
    assert only_dense == {f: {q: [c for c, _ in r] for q, r in dense[f].items()} for f in pool_set.facets}
    assert info["fusion"]["alpha_dense"] == 1.0 and info["bm25"]["k1"] == 1.25
    only_bm25, _ = run_stages(pool_set, papers, LABEL_TO_FACET, out, "a0", "dense", Stages(True, 0.0))
    lexical = read_scored_pool_set(pool_set, out, "bm25")
    for facet in pool_set.facets:
        score = dict(lexical[facet]["q"])
        order = [score[c] for c in only_bm25[facet]["q"]]
        assert order == sorted(order, reverse=True)
    # the cross-encoder at weight 1 orders the top 3 by its logits, the 4th stays last; weight 0 changes nothing
    ranked, info = run_stages(pool_set, papers, LABEL_TO_FACET, out, "ce", "dense",
                              Stages(True, 0.5, rerank=RerankOptions(str(tiny_model_dir), 3, 1.0, 32)))
    fused, _ = run_stages(pool_set, papers, LABEL_TO_FACET, out, "fused", "dense", Stages(True, 0.5))
    logits = json.loads((out / "crossencoder_scores.json").read_text())
    for facet in pool_set.facets:
        cross = logits[f"q_{facet}"]
        assert set(cross) == set(fused[facet]["q"][:3])
        assert ranked[facet]["q"] == sorted(cross, key=lambda c: -cross[c]) + fused[facet]["q"][3:]
    assert info["rerank"]["speed"]["pairs"] == 6 and info["rerank"]["first_stage"] == "dense-bm25-a0.5"
    kept, _ = run_stages(pool_set, papers, LABEL_TO_FACET, out, "ce0", "dense",
                         Stages(True, 0.5, rerank=RerankOptions(str(tiny_model_dir), 3, 0.0, 32)))
    assert kept == fused
    with pytest.raises(ValueError, match="alpha in"):
        run_stages(pool_set, papers, LABEL_TO_FACET, out, "x", "dense", Stages(True, None))
    with pytest.raises(ValueError, match="a model and a scorer, BM25, or both"):
        run_stages(pool_set, papers, LABEL_TO_FACET, out, "x", None, Stages())


def test_stage_names():
    rerank = RerankOptions("m", 20, 0.5)
    assert Stages(bm25=True).exp(None) == "bm25"
    assert Stages(True, 0.815, rerank=rerank).exp("m-abstract") == "m-abstract-bm25-a0.815-ce20-w0.5"
    assert Stages(rerank=rerank).exp("m-abstract") == "m-abstract-ce20-w0.5"
    with pytest.raises(ValueError, match="needs a weight alpha in"):
        Stages(bm25=True).exp("m-abstract")


def test_pair_scores_name_a_document_without_text():
    class Fixed:
        def score_pairs(self, pairs):
            return np.array([len(d) for _, d in pairs], dtype=np.float32)

    first = {"a": [("x", 2.0), ("y", 1.0), ("z", 0.0)]}
    assert pair_scores({"a": "q"}, {"x": "xx", "y": "yyy"}, first, Fixed(), 2) == {"a": {"x": 2.0, "y": 3.0}}
    with pytest.raises(ValueError, match="query a: document z has no text"):
        pair_scores({"a": "q"}, {"x": "xx", "y": "yyy"}, first, Fixed(), 3)


# ------------------------------------------------------------------ reviewer matching


def test_reviewer_bm25_fusion_and_rerank(tmp_path, tiny_model_dir):
    from test_benchmarks import make_reviewer_set

    from aspire.benchmarks.reviewers import load_reviewer_set, prediction_files, read_predictions
    from aspire.evaluate.reviewer_run import mix_logits, reviewer_papers, run_reviewers

    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm", draws=2))
    papers, _ = reviewer_papers(rset)
    res = run_reviewers(rset, None, [], tmp_path / "bm25", "bm25", stages=Stages(bm25=True))
    assert res["bm25"]["idf"] == "every paper of the set (10)" and res["model"] is None
    # known answer: a submission's BM25 against each archive paper of the same index, max over the archive
    index = BM25Index([paper_text(p) for p in papers], [p.paper_id for p in papers])
    column = {p.paper_id: j for j, p in enumerate(papers)}
    text = {p.paper_id: paper_text(p) for p in papers}
    pred = read_predictions(prediction_files(tmp_path / "bm25" / "predictions", "bm25", rset)[0])
    for reviewer, scores in pred.items():
        arch = [column[a] for a, _, _ in rset.draws[0].archives[reviewer]]
        for sub, value in scores.items():
            assert value == pytest.approx(float(index.scores([text[sub]])[0][arch].max()))
    # weight 1 on the model keeps the model's order
    common = dict(options=EvalOptions())
    dense = run_reviewers(rset, str(tiny_model_dir), ["abstract"], tmp_path / "d", "d", **common)
    fused = run_reviewers(rset, str(tiny_model_dir), ["abstract"], tmp_path / "f", "f", stages=Stages(True, 1.0), **common)
    assert fused["loss"] == pytest.approx(dense["loss"]) and fused["fusion"]["alpha_dense"] == 1.0
    # the cross-encoder alone (weight 1): each submission ordered by its logits' max over the archive
    ce = run_reviewers(rset, None, [], tmp_path / "ce", "ce",
                       stages=Stages(True, rerank=RerankOptions(str(tiny_model_dir), 20, 1.0, 32)))
    logits = json.loads((tmp_path / "ce" / "crossencoder_scores.json").read_text())
    assert ce["rerank"]["distinct_pairs"] == sum(len(v) for v in logits.values())
    pred = read_predictions(prediction_files(tmp_path / "ce" / "predictions", "ce", rset)[1])
    for reviewer, scores in pred.items():
        best = {s: max(logits[s][a] for a, _, _ in rset.draws[1].archives[reviewer]) for s in scores}
        assert sorted(scores, key=lambda s: -scores[s]) == sorted(best, key=lambda s: -best[s])
    # the saved logits mix again to the same predictions; a missing pair is named
    first = [read_predictions(p) for p in prediction_files(tmp_path / "bm25" / "predictions", "bm25", rset)]
    known = {p.paper_id for p in papers}
    again = mix_logits(rset, known, first, logits, 20, 1.0, "max")
    assert again == [read_predictions(p) for p in prediction_files(tmp_path / "ce" / "predictions", "ce", rset)]
    del logits["s1"]
    with pytest.raises(ValueError, match=r"reviewer r1: no cross-encoder logit for \d+ pairs, e.g. \('s1'"):
        mix_logits(rset, known, first, logits, 20, 1.0, "max")
    with pytest.raises(ValueError, match="alpha in"):
        run_reviewers(rset, str(tiny_model_dir), ["abstract"], tmp_path / "x", "x", stages=Stages(True), **common)
    with pytest.raises(ValueError, match="a model and a scorer, BM25, or both"):
        run_reviewers(rset, None, [], tmp_path / "x", "x")


@pytest.mark.slow
def test_csfcube_cli_bm25_on_real_data(small_csfcube, tmp_path, capsys):
    from aspire.cli.evaluate import main

    assert main(["csfcube", "--data", str(small_csfcube), "--bm25", "--out", str(tmp_path / "b")]) == 0
    results = json.loads((tmp_path / "b" / "results.json").read_text())
    assert results["experiment"] == "bm25" and results["bm25"]["query_text"] == "the facet's sentences"
    assert 0.0 < results["test"]["all"]["MAP"] <= 100.0
    with pytest.raises(SystemExit):
        main(["csfcube", "--data", str(small_csfcube), "--bm25-alpha", "0.5", "--out", str(tmp_path / "x")])
    assert "give --model and --scorer (and/or --bm25)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["csfcube", "--data", str(small_csfcube), "--bm25", "--rerank-top", "5", "--out", str(tmp_path / "x")])
    assert "go with --rerank MODEL" in capsys.readouterr().err


def test_a_pool_set_ranked_by_the_searcher_equals_the_pool_ranking(faceted, tiny_model_dir, tmp_path):
    """CSFCube-style pools answered by aspire search's Searcher (each pool its own index, the query its facet's
    sentences) rank as the evaluation's own pool ranking with the same scorer (min-L2, OT)."""
    from aspire.encoders import load_encoder
    from aspire.evaluate.options import EvalOptions
    from aspire.evaluate.search_run import rank_pools_by_search

    pool_set, papers = faceted
    encoder = load_encoder(str(tiny_model_dir))
    for scorer, pipeline in (("minl2", ["stages=ann", "rerank=minl2"]), ("ot", ["stages=ann", "rerank=ot"])):
        own, _ = rank_pool_set(pool_set, papers, str(tiny_model_dir), scorer, tmp_path / scorer, scorer,
                               EvalOptions(), LABEL_TO_FACET)
        searched = rank_pools_by_search(pool_set, papers, encoder, pipeline, LABEL_TO_FACET)
        assert searched == own
    bm25 = rank_pools_by_search(pool_set, papers, encoder, ["stages=bm25"], LABEL_TO_FACET)
    assert bm25["background"]["q"][0] == "c2" and bm25["method"]["q"][0] == "c1"
