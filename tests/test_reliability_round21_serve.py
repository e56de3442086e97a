"""Round 21, serving and query naming: what the page and the `X-Aspire-Generation-Digest` header compare tells an
index rebuilt at its path (its generation named gen-000001 again) from the old one; a `title+facet` query's texts
are named with their facet."""

from __future__ import annotations

import json
import logging
import shutil
import time

import pytest
from serve_support import PAPERS, browser_page, build_index, needs_chromium, request, running

from aspire.data.papers import Paper
from aspire.encoders import load_encoder
from aspire.serve import SearchService, ServiceHolder
from aspire.serve.service import generation_key


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    return load_encoder(tiny_model_dir)


def answer(srv, method="GET", path="/api/info", body=None) -> tuple[int, dict, dict]:
    status, _, raw, headers = request(srv, method, path, body, with_headers=True)
    return status, json.loads(raw), {k.lower(): v for k, v in headers.items()}


def test_every_answer_carries_the_generations_digest_which_changes_when_the_name_does_not(encoder, tmp_path):
    index = build_index(encoder, PAPERS[:3], tmp_path / "index", "tiny")
    with running(ServiceHolder(index, check_every=None)) as srv:
        _, info, headers = answer(srv)
        first = headers["x-aspire-generation-digest"]
        assert headers["x-aspire-generation"] == info["generation"] == "gen-000001"  # the name, as before
        assert first == generation_key(index)[1] and len(first) == 16
        shutil.rmtree(index)
        build_index(encoder, PAPERS, index, "tiny")  # gen-000001 again, other papers
        status, out, headers = answer(srv, "POST", "/api/reload")
        assert status == 200 and out["generation"] == "gen-000001" and out["reloaded"] is True
        second = headers["x-aspire-generation-digest"]
        assert headers["x-aspire-generation"] == "gen-000001" and second != first
        for method, path, body in (("GET", "/api/info", None), ("GET", "/api/papers?q=", None),
                                   ("GET", "/api/paper?id=q", None), ("GET", "/nowhere", None),
                                   ("POST", "/api/search", {"paper_id": "q", "sentences": [0]})):
            status, _, headers = answer(srv, method, path, body)
            assert headers["x-aspire-generation-digest"] == second, (method, path, status)


def test_a_service_opened_from_no_directory_sends_no_digest(encoder, tmp_path):
    index = build_index(encoder, PAPERS[:3], tmp_path / "index", "tiny")
    opened = ServiceHolder(index, check_every=None).service
    with running(SearchService(opened.searcher, {}, "gen-000001")) as srv:
        status, _, headers = answer(srv)
    assert status == 200 and headers["x-aspire-generation"] == "gen-000001"
    assert "x-aspire-generation-digest" not in headers


@needs_chromium
def test_the_page_sees_an_index_rebuilt_with_the_same_generation_name(encoder, tmp_path):
    """Once the page compared the name alone: across a rebuild that started again at gen-000001 it kept saying
    "3 papers" (and no rebuild) while every answer came from the 5-paper index."""
    index = build_index(encoder, PAPERS[:3], tmp_path / "index", "tiny")
    with running(ServiceHolder(index, check_every=0.0)) as srv, browser_page(srv) as page:
        page.wait_for_selector('#index-info:text-matches("^3 papers")')
        assert page.locator("#generation").inner_text() == "index gen-000001"
        shutil.rmtree(index)
        build_index(encoder, PAPERS, index, "tiny")
        deadline = time.monotonic() + 20
        while answer(srv)[1]["n_papers"] != len(PAPERS) and time.monotonic() < deadline:
            time.sleep(0.05)  # the server's background reload
        assert answer(srv)[1]["n_papers"] == len(PAPERS)
        page.fill("#paper-filter", "a")  # any answer of the new index tells the page
        page.wait_for_selector("#generation.changed", timeout=10_000)
        page.wait_for_selector(f'#index-info:text-matches("^{len(PAPERS)} papers")', timeout=10_000)
        assert page.locator("#generation").inner_text() == "index gen-000001"


LABEL_TO_FACET = {"background_label": "background", "method_label": "method", "result_label": "result"}
LONG = " ".join(["the model improves the results"] * 30) + "."  # past the tiny model's 128 pieces


def cut_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "word pieces" in r.getMessage()]


def test_a_title_and_facet_query_cut_at_the_limit_is_named_with_its_facet(encoder, caplog):
    """Once `title+facet` queries were named `paper q` in every facet (and as the candidate's own abstract is): the
    warnings of the method and the result query of one paper read the same."""
    from aspire.evaluate.facets import facet_text_queries

    paper = Paper("q", "a title", ["we study data.", LONG, LONG], ["background_label", "method_label", "result_label"])
    for facet in ("method", "result"):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="aspire"):
            out = facet_text_queries(encoder, [paper], facet, LABEL_TO_FACET, "title+facet")
        (warning,) = cut_warnings(caplog)
        assert f"(paper q {facet} sentences (" in warning, warning
        narrowed = Paper("q", "a title", [LONG])
        assert out.paper_ids == ["q"]  # the batch keeps the paper's id: only the warning's name differs
        assert out.emb[0, 0].tolist() == encoder.encode_abstract([narrowed])[0].tolist()


def test_a_title_and_facet_query_with_non_finite_vectors_is_named_with_its_facet(tiny_model_dir):
    import torch

    from aspire.evaluate.facets import facet_text_queries

    encoder = load_encoder(tiny_model_dir)
    with torch.no_grad():  # every text holding "model" gets a NaN vector
        encoder.model.embeddings.word_embeddings.weight[encoder.tokenizer.convert_tokens_to_ids("model")] = float("nan")
    paper = Paper("q", "a title", ["the model is new.", "results."], ["method_label", "result_label"])
    for query_text in ("facet", "title+facet"):
        with pytest.raises(ValueError, match=r"non-finite vectors for 1 item\(s\): paper q method sentences;"):
            facet_text_queries(encoder, [paper], "method", LABEL_TO_FACET, query_text)
