"""The page server, round 13 (correctness): the page searches with the server's k by default (it always asked for
10, and refused its own default shortlist below 10), and an answer's `shortlist` is the one the re-ranker read (with
the cross-encoder stage, grown to cross_top; it said the request's). As references: the service's hits, ranks and
scores are the Searcher's, bit for bit after a JSON round trip, for every pipeline and re-ranker, on an index with
and without the title as sentence 0; a request's own temperature leaves later requests alone; threads answer as one
request at a time does; the page's facet selection is the sentences `--sentences FACET` selects; and every field the
page's script reads is one the API sends."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from serve_support import PAPERS, L, browser_page, build_index, needs_chromium, running

from aspire.data.facets import FACETS, resolve_selection
from aspire.data.papers import Paper, write_papers
from aspire.encoders import load_encoder
from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex, encode_corpus, model_fingerprint
from aspire.search import Searcher
from aspire.serve import open_service

MORE = [*PAPERS,  # papers enough for k, shortlist and a cross-encoder's top to differ
        Paper("e", "citation model", ["we propose a citation model.", "it improves results."], [L[1], L[2]]),
        Paper("f", "", ["a paper without a title.", "we show data."], [L[0], L[2]]),
        Paper("g", "text similarity", ["text similarity is a task.", "we use a neural model.", "results show it."],
              [L[3], L[1], L[2]])]
SETTINGS = [  # (rerank, stages, k, shortlist, tau): None is the server's default
    (None, None, None, None, None), ("none", "ann", 3, None, None), ("none", "bm25", 2, None, None),
    ("minl2", "ann,bm25", 4, 5, None), ("ot", "ann", 3, 4, None), ("ot", "ann", 3, 6, 0.05),
    ("maxpassage", "whole", 2, 3, None), ("hybrid", "ann", 5, 7, None), ("ot", "bm25", 2, None, 7.5)]


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    return load_encoder(tiny_model_dir)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("round13")
    write_papers(root / "papers.jsonl", MORE)
    return root


@pytest.fixture(scope="module")
def index(encoder, root):
    return build_index(encoder, MORE, root / "index", "tiny")


@pytest.fixture(scope="module")
def titled_index(tiny_model_dir, root):
    """An index whose encoder makes the title sentence 0 (`include_title`)."""
    encoder = load_encoder(tiny_model_dir, include_title=True)
    built = SentenceIndex.build(encode_corpus(encoder, MORE, progress=False), IndexBuildConfig(index=IndexConfig(kind="flat")),
                                model_fingerprint(encoder), "tiny", include_title=True)
    built.save(root / "titled")
    return root / "titled"


def body_of(paper_id: str, sentences: list[int], rerank, stages, k, shortlist, tau) -> dict:
    given = {"rerank": rerank, "stages": stages, "k": k, "shortlist": shortlist, "tau": tau}
    return {"paper_id": paper_id, "sentences": sentences, **{key: v for key, v in given.items() if v is not None}}


# ---- defects --------------------------------------------------------------------------------------------------
@needs_chromium
def test_the_page_searches_with_the_servers_k_by_default(index):
    """The page's "top" choice was 10 whatever the server's k: a server of k=3 got searches for 10, and its default
    shortlist of 4 was refused by the page itself ("Shortlist 4 is out of range: use a whole number from 10")."""
    service = open_service(index, ["k=3", "rerank=minl2", "shortlist=4"])
    expected = service.search({"paper_id": "q", "sentences": [1]})  # the server's default search
    with running(service) as srv, browser_page(srv) as page:
        assert page.input_value("#k") == "3" and page.input_value("#shortlist") == "4"
        page.click('.paper-item[data-id="q"]')
        page.wait_for_selector('#query-title:has-text("(q)")')
        page.click('#query-sentences .sentence[data-index="1"]')
        page.click("#search-btn")
        page.wait_for_selector("#results .hit, #status.error")
        assert page.locator("#status.error").count() == 0, page.inner_text("#status")
        shown = page.locator("#results .hit").evaluate_all("ns => ns.map(n => n.dataset.id)")
        assert shown == [h["paper_id"] for h in expected["hits"]] and len(shown) == 3
        page.select_option("#k", "5")  # the user's choice is sent, and the page's own choices stay
        page.fill("#shortlist", "6")
        assert page.locator("#k option").evaluate_all("os => os.map(o => o.value)") == ["3", "5", "10", "20", "50"]
        with page.expect_response("**/api/search") as sent:
            page.click("#search-btn")
        assert json.loads(sent.value.request.post_data)["k"] == 5 and len(sent.value.json()["hits"]) == 5


def test_the_answer_says_the_shortlist_the_reranker_read_with_the_cross_encoder(index, tiny_cross_encoder_dir,
                                                                                 monkeypatch):
    """With the cross-encoder stage the re-ranker reads at least cross_top papers (`aspire.search.cross_depth`); the
    answer said the request's shortlist (3 where 6 were re-ranked)."""
    import aspire.retrieval.rerank as rerank_module
    from aspire.retrieval.crossencoder import load_cross_stage

    service = open_service(index, ["cross_top=6"], cross_encoder=load_cross_stage(str(tiny_cross_encoder_dir)))
    read = []
    original = rerank_module.rerank

    def spy(searcher, query, papers, first_scores, cfg):
        read.append(len(papers))
        return original(searcher, query, papers, first_scores, cfg)

    monkeypatch.setattr(rerank_module, "rerank", spy)
    body = {"paper_id": "q", "sentences": [1], "k": 2, "shortlist": 3, "rerank": "minl2"}
    crossed = service.search({**body, "cross_encoder": True})
    assert read == [6] and crossed["shortlist"] == 6 and crossed["cross_encoder"]["top"] == 6  # once 3
    assert len(crossed["hits"]) == 2 and crossed["k"] == 2
    plain = service.search(body)  # without the stage: the request's
    assert read == [6, 3] and plain["shortlist"] == 3
    assert service.search({**body, "rerank": "none", "shortlist": None, "cross_encoder": True})["shortlist"] is None


# ---- references (checks that held) ----------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["index", "titled_index"])
def test_hits_ranks_and_scores_are_the_searchers_exactly_and_a_temperature_stays_with_its_request(which, request):
    path = request.getfixturevalue(which)
    overrides = ["rerank=ot", "k=4", "ot_tau=0.5"]
    service = open_service(path, overrides)
    stored = SentenceIndex.load(path)
    for paper_id, sentences in [("q", [2, 0]), ("g", [1]), ("c", [0, 1, 2])]:
        for setting in SETTINGS:
            body = body_of(paper_id, sentences, *setting)
            answer = json.loads(json.dumps(service.search(body), allow_nan=False))  # as the page receives it
            req = service.check(body)
            tau = setting[4]
            searcher = Searcher.open(path, overrides + ([f"ot_tau={tau}"] if tau is not None else []))
            direct = searcher.search(searcher.query_from_index(paper_id, sentences), k=req.k, rerank=req.rerank,
                                     shortlist=req.shortlist, stages=req.stages)
            assert [(h["rank"], h["paper_id"], h["score"], h["stages"]) for h in answer["hits"]] == [
                (h.rank, h.paper_id, h.score, h.stages) for h in direct], (which, body)
            scores = [h["score"] for h in answer["hits"]]
            assert scores == sorted(scores, reverse=True) and paper_id not in [h["paper_id"] for h in answer["hits"]]
            assert answer["ot"]["tau"] == (tau if tau is not None else 0.5)
            for hit in answer["hits"]:  # the grids' rows are the selected sentences, their columns the hit's shown
                n_hit = len(stored.sentences[stored.positions[hit["paper_id"]]])
                assert [len(row) for row in hit["dist"]] == [n_hit] * len(sentences) == [len(hit["sentences"])] * len(sentences)
        default = service.search({"paper_id": paper_id, "sentences": sentences})  # after the requests' own tau
        again = Searcher.open(path, overrides)
        direct = again.search(again.query_from_index(paper_id, sentences), k=4)
        assert [(h["paper_id"], h["score"]) for h in default["hits"]] == [(h.paper_id, h.score) for h in direct]
        assert default["ot"]["tau"] == 0.5 and service.searcher.config.ot_tau == 0.5


def test_threads_answer_as_one_request_at_a_time(titled_index):
    service = open_service(titled_index, ["rerank=ot", "k=3"])
    bodies = [body_of(pid, sel, *setting) for pid, sel in [("q", [0, 3]), ("e", [1]), ("b", [0, 1, 2])]
              for setting in SETTINGS]
    alone = [json.dumps(service.search(b)) for b in bodies]
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda b: json.dumps(service.search(b)), bodies * 2))
    assert together == alone * 2


@pytest.mark.parametrize("labels_from", [False, True])
def test_the_pages_facet_selection_is_the_sentences_a_facet_name_selects(titled_index, index, root, labels_from):
    for path, titled in [(index, False), (titled_index, True)]:
        service = open_service(path, [], root / "papers.jsonl" if labels_from else None)
        stored = service.index
        for paper in MORE:
            shown = service.paper(paper.paper_id)["sentences"]
            first = titled and bool(paper.title)
            assert [s["text"] for s in shown] == [paper.title] * first + paper.sentences
            assert [s["label"] for s in shown] == ["title"] * first + paper.labels  # the title: no facet
            for facet in FACETS:  # the page's facet button selects the sentences whose facet it is
                on_page = [i for i, s in enumerate(shown) if s["facet"] == facet]
                try:
                    named = sorted(resolve_selection(facet, stored.labels[stored.positions[paper.paper_id]]))
                except ValueError:  # the paper has no such sentence
                    named = []
                assert on_page == named, (path.name, paper.paper_id, facet)


def test_every_field_the_pages_script_reads_is_one_the_api_sends(index):
    script = (Path(__file__).resolve().parents[1] / "aspire" / "serve" / "static" / "app.js").read_text()
    service = open_service(index, ["rerank=ot"])
    info = service.info()
    answer = service.search({"paper_id": "q", "sentences": [0, 2], "k": 2})
    paper = service.paper("q")
    found = service.find_papers("", 2)
    sent = {"info": info, "cross": info["cross_encoder"], "found": found, "p": found["papers"][0], "paper": paper,
            "s": paper["sentences"][0], "result": answer, "hit": answer["hits"][0], "h": answer["hits"][0]}
    methods = {"to", "replace", "map", "reduce", "some", "flat"}  # `p.toFixed`, `s.label.replace`: no fields
    for name, fields in sent.items():  # each object as the script names it
        read = set(re.findall(rf"(?<![.\w]){name}\.([a-z_]+)", script)) - methods
        assert read and read <= set(fields), (name, sorted(read - set(fields)))
    assert "k" in set(re.findall(r"\binfo\.([a-z_]+)", script))  # the page's default k is the server's
