"""The cross-encoder stage of search (issue 26, part 3c): a tiny random BERT cross-encoder (one logit) re-scores
the previous stages' top N; weight 1 orders them as its logits say, weight 0 keeps their order; each re-scored
hit reports its logit; the command line, the service and the page's server return the stage and its time; bad
directories, N and W are refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from serve_support import PAPERS, build_index, request, running

from aspire.batch import DocBatch
from aspire.cli.search import main as search_main
from aspire.encoders import load_encoder
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SearchConfig, SentenceIndex
from aspire.index.config import SearchArgumentError
from aspire.retrieval.crossencoder import load_cross_stage
from aspire.scoring.crossencoder import CrossEncoderReranker
from aspire.search import Searcher
from aspire.serve import RequestError, open_service

QUERY_TEXT = "a new neural method for text"
TEXTS = {  # paper -> (title, sentences): words of the tiny vocabulary
    "P0": ("neural network", ["we propose a model.", "results improve."]),
    "P1": ("citation similarity", ["scientific documents.", "the abstract title."]),
    "P2": ("language data", ["a method for text.", "we show performance."]),
    "P3": ("sentence task", ["state of the art.", "two approach based."]),
    "P4": ("aspect paper", ["learning with data.", "the task of language."]),
}


@pytest.fixture(scope="module")
def cross_dir(tiny_cross_encoder_dir):
    return tiny_cross_encoder_dir


@pytest.fixture(scope="module")
def cross(cross_dir):
    return load_cross_stage(cross_dir, max_length=64)


def text_index() -> SentenceIndex:
    """Five two-sentence papers at increasing distance from the query vector e0 (ANN order P0 .. P4)."""
    vectors = np.array([[1.0 - 0.1 * p, 0.1 * p + 0.01 * j] for p in range(5) for j in range(2)], dtype=np.float32)
    corpus = EncodedCorpus(vectors, np.arange(0, 12, 2), list(TEXTS), [t for t, _ in TEXTS.values()],
                           [s for _, s in TEXTS.values()])
    return SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp")


def text_query() -> DocBatch:
    return DocBatch.from_list([torch.tensor([[1.0, 0.0], [0.0, 1.0]])], ["q"], [[QUERY_TEXT, "unselected words"]]
                              ).select_sentences([[0]])


def logits_of(cross_dir, ids) -> dict[str, float]:
    """The model's logits of the query text against each paper's title and abstract, computed apart."""
    reranker = CrossEncoderReranker(str(cross_dir), max_length=64)
    texts = [" ".join([TEXTS[p][0], *TEXTS[p][1]]) for p in ids]
    return dict(zip(ids, reranker.score(QUERY_TEXT, texts).tolist()))


def test_weight_one_orders_the_top_n_by_the_logits_and_reports_them(cross, cross_dir):
    searcher = Searcher(text_index(), SearchConfig(k=5, cross_top=5, cross_weight=1.0), cross_encoder=cross)
    before = [h.paper_id for h in searcher.search(text_query())]
    assert before == ["P0", "P1", "P2", "P3", "P4"]
    logits = logits_of(cross_dir, before)
    expected = sorted(before, key=lambda p: -logits[p])
    assert expected != before  # the test can tell the stage from no stage
    hits = searcher.search(text_query(), cross_encoder=True)
    assert [h.paper_id for h in hits] == expected and [h.rank for h in hits] == [1, 2, 3, 4, 5]
    for h in hits:
        assert set(h.stages) == {"ann", "crossencoder"}
        assert h.stages["crossencoder"] == pytest.approx(logits[h.paper_id], abs=1e-5)
    assert [h.score for h in hits] == sorted([h.score for h in hits], reverse=True)


def test_weight_zero_keeps_the_order_and_still_reports_the_logits(cross, cross_dir):
    searcher = Searcher(text_index(), SearchConfig(k=5, cross_top=5, cross_weight=0.0), cross_encoder=cross)
    hits = searcher.search(text_query(), cross_encoder=True)
    assert [h.paper_id for h in hits] == ["P0", "P1", "P2", "P3", "P4"]
    logits = logits_of(cross_dir, list(TEXTS))
    assert all(h.stages["crossencoder"] == pytest.approx(logits[h.paper_id], abs=1e-5) for h in hits)


def test_top_n_below_k_leaves_the_tail_and_k_below_top_n_deepens_the_previous_stage(cross, cross_dir):
    logits = logits_of(cross_dir, list(TEXTS))
    searcher = Searcher(text_index(), SearchConfig(k=5, cross_top=2, cross_weight=1.0), cross_encoder=cross)
    hits = searcher.search(text_query(), cross_encoder=True)
    assert [h.paper_id for h in hits] == sorted(["P0", "P1"], key=lambda p: -logits[p]) + ["P2", "P3", "P4"]
    assert ["crossencoder" in h.stages for h in hits] == [True, True, False, False, False]
    # k = 2 of a top 5: the ANN stage gives 5, the cross-encoder picks the best 2 of them
    deep = Searcher(text_index(), SearchConfig(k=2, cross_top=5), cross_encoder=cross).search(text_query(),
                                                                                              cross_encoder=True)
    assert [h.paper_id for h in deep] == sorted(TEXTS, key=lambda p: -logits[p])[:2]


def test_the_stage_follows_a_rerank_and_a_bm25_first_stage(cross):
    searcher = Searcher(text_index(), SearchConfig(k=3, cross_top=3, stages="ann,bm25", rerank="minl2",
                                                   shortlist=5), cross_encoder=cross)
    hits = searcher.search(text_query(), cross_encoder=True)
    assert len(hits) == 3 and all({"minl2", "crossencoder"} <= set(h.stages) for h in hits)


def test_bad_directories_and_settings_are_named(cross, tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match=f"cross-encoder '{tmp_path / 'absent'}': no such directory"):
        load_cross_stage(tmp_path / "absent")
    with pytest.raises(ValueError, match=f"cross-encoder '{tiny_model_dir}': not a trained cross-encoder"):
        load_cross_stage(tiny_model_dir)  # a plain encoder: no classification head
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        load_cross_stage(tmp_path / "empty")
    with pytest.raises(SearchArgumentError, match="cross_encoder: .*no cross-encoder is loaded"):
        Searcher(text_index()).search(text_query(), cross_encoder=True)
    with pytest.raises(SearchArgumentError, match="cross_top: must be >= 1"):
        Searcher(text_index(), SearchConfig(cross_top=0), cross_encoder=cross)
    for weight in (-0.1, 1.5):
        with pytest.raises(SearchArgumentError, match="cross_weight"):
            Searcher(text_index(), SearchConfig(cross_weight=weight), cross_encoder=cross)


# ---- command line ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cross-cli") / "index"
    text_index().save(path)
    return path


def test_cli_json_reports_the_stage_and_its_time(index_dir, cross_dir, capsys):
    # query P0 by its stored vectors and texts; P0 itself is left out
    code = search_main(["--index", str(index_dir), "--query-id", "P0", "--k", "4", "--cross-encoder", str(cross_dir),
                        "--cross-top", "4", "--cross-weight", "1", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["cross_encoder"]["top"] == 4 and out["cross_encoder"]["weight"] == 1.0 and out["cross_encoder"]["ms"] >= 0
    ids = [h["paper_id"] for h in out["hits"]]
    reranker = CrossEncoderReranker(str(cross_dir))
    query = " ".join(TEXTS["P0"][1])  # all of P0's sentences are selected
    logits = dict(zip(ids, reranker.score(query, [" ".join([TEXTS[p][0], *TEXTS[p][1]]) for p in ids]).tolist()))
    assert ids == sorted(ids, key=lambda p: -logits[p])
    assert all(h["stages"]["crossencoder"] == pytest.approx(logits[h["paper_id"]], abs=1e-5) for h in out["hits"])


@pytest.mark.parametrize("extra, message", [
    (["--cross-top", "0"], "cross_top: must be >= 1"),
    (["--cross-weight", "1.5"], "cross_weight: must be <= 1"),
    (["--cross-weight", "-1"], "cross_weight: must be >= 0"),
])
def test_cli_refuses_bad_n_and_w_by_name(index_dir, cross_dir, capsys, extra, message):
    code = search_main(["--index", str(index_dir), "--query-id", "P0", "--cross-encoder", str(cross_dir), *extra])
    assert code == 2 and message in capsys.readouterr().err


def test_cli_refuses_a_missing_or_plain_model_and_flags_without_one(index_dir, tiny_model_dir, tmp_path, capsys):
    assert search_main(["--index", str(index_dir), "--query-id", "P0", "--cross-encoder", str(tmp_path / "nope")]) == 2
    assert f"No such file or directory (--cross-encoder): {tmp_path / 'nope'}" in capsys.readouterr().err
    assert search_main(["--index", str(index_dir), "--query-id", "P0", "--cross-encoder", str(tiny_model_dir)]) == 2
    assert "not a trained cross-encoder" in capsys.readouterr().err
    assert search_main(["--index", str(index_dir), "--query-id", "P0", "--cross-top", "5"]) == 2
    assert "go with --cross-encoder DIR" in capsys.readouterr().err


# ---- the page's service and server -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def page_index(tiny_model_dir, tmp_path_factory):
    return build_index(load_encoder(tiny_model_dir), PAPERS, tmp_path_factory.mktemp("cross-page") / "index", "tiny")


def test_service_adds_the_stage_on_request_only(page_index, cross, cross_dir):
    service = open_service(page_index, ["k=3", "cross_top=4", "cross_weight=1"], cross_encoder=cross)
    assert service.info()["cross_encoder"] == {"loaded": True, "top": 4, "weight": 1.0}
    off = service.search({"paper_id": "q", "sentences": [1, 2], "k": 3, "rerank": "minl2"})
    assert off["cross_encoder"] is None and all("crossencoder" not in h["stages"] for h in off["hits"])
    on = service.search({"paper_id": "q", "sentences": [1, 2], "k": 3, "rerank": "minl2", "cross_encoder": True})
    assert on["cross_encoder"]["top"] == 4 and on["cross_encoder"]["ms"] >= 0
    assert all({"minl2", "crossencoder"} <= set(h["stages"]) for h in on["hits"])
    assert [h["rank"] for h in on["hits"]] == [1, 2, 3]
    # weight 1: the best 3 by the logits of the previous stage's top 4, computed apart from the service
    top4 = [h["paper_id"] for h in service.search({"paper_id": "q", "sentences": [1, 2], "k": 4, "rerank": "minl2"})["hits"]]
    papers = {p.paper_id: p for p in PAPERS}
    query = " ".join(papers["q"].sentences[1:3])
    texts = [" ".join([papers[p].title, *papers[p].sentences]) for p in top4]
    logits = dict(zip(top4, CrossEncoderReranker(str(cross_dir), max_length=64).score(query, texts).tolist()))
    assert [h["paper_id"] for h in on["hits"]] == sorted(top4, key=lambda p: -logits[p])[:3]
    assert sorted(top4, key=lambda p: -logits[p])[:3] != top4[:3]  # the test can tell the stage from no stage
    assert all(h["stages"]["crossencoder"] == pytest.approx(logits[h["paper_id"]], abs=1e-5) for h in on["hits"])
    with running(service) as srv:  # over HTTP: the same answer and the page offers the choice
        status, _, raw = request(srv, "POST", "/api/search", {"paper_id": "q", "sentences": [1, 2], "k": 3,
                                                              "rerank": "minl2", "cross_encoder": True})
        assert status == 200 and [h["paper_id"] for h in json.loads(raw)["hits"]] == [h["paper_id"] for h in on["hits"]]
        status, _, raw = request(srv, "GET", "/api/info")
        assert json.loads(raw)["cross_encoder"]["loaded"] is True
        status, _, page = request(srv, "GET", "/")
        assert b'id="cross"' in page and b'value="off" selected' in page


def test_service_without_a_cross_encoder_refuses_it_clearly(page_index):
    service = open_service(page_index, ["k=3"])
    assert service.info()["cross_encoder"]["loaded"] is False
    for body, message in (({"cross_encoder": True}, "cross_encoder: this server holds no cross-encoder"),
                          ({"cross_encoder": "yes"}, "cross_encoder must be true or false"),
                          ({"rerank": "crossencoder"}, "unknown rerank 'crossencoder'")):
        with pytest.raises(RequestError, match=message) as err:
            service.search({"paper_id": "q", "sentences": [0], **body})
        assert err.value.status == 400


def test_serve_refuses_a_missing_or_plain_cross_encoder_before_serving(page_index, tiny_model_dir, tmp_path, capsys):
    from aspire.serve.__main__ import main as serve_main

    assert serve_main(["--index", str(page_index), "--port", "0", "--cross-encoder", str(tmp_path / "nope")]) == 2
    assert f"No such file or directory (--cross-encoder): {tmp_path / 'nope'}" in capsys.readouterr().err
    assert serve_main(["--index", str(page_index), "--port", "0", "--cross-encoder", str(tiny_model_dir)]) == 2
    assert "not a trained cross-encoder" in capsys.readouterr().err


def test_edges_a_top_of_one_and_an_index_of_one_paper_answer_finite_numbers(cross, tiny_model_dir, tmp_path):
    hits = Searcher(text_index(), SearchConfig(k=3, cross_top=1, cross_weight=0.5), cross_encoder=cross).search(
        text_query(), cross_encoder=True)  # one re-scored paper: its z-scores are 0, not NaN
    assert [h.paper_id for h in hits] == ["P0", "P1", "P2"] and all(np.isfinite(h.score) for h in hits)
    assert list(hits[0].stages) == ["ann", "crossencoder"] and "crossencoder" not in hits[1].stages
    alone = build_index(load_encoder(tiny_model_dir), PAPERS[:1], tmp_path / "one", "tiny")
    out = open_service(alone, cross_encoder=cross).search({"paper_id": "q", "sentences": [0], "cross_encoder": True})
    assert out["hits"] == [] and out["cross_encoder"]["ms"] == 0.0
