"""The page server, round 42: a selection out of range is refused naming its field (`sentences`), as every other
refusal of a search body; paging never skips or repeats a paper; hits and aligned pairs are aspire.search's own;
requests h11 cannot parse are answered once, in JSON, with the security headers."""

from __future__ import annotations

import json

import pytest
import torch
from serve_support import PAPERS, build_index, raw_exchange, reply_headers, running

from aspire.encoders import load_encoder
from aspire.serve import open_service
from aspire.serve.protocol import SECURITY_HEADERS
from aspire.serve.requests import RequestError


@pytest.fixture(scope="module")
def service(tiny_model_dir, tmp_path_factory):
    index = build_index(load_encoder(tiny_model_dir), PAPERS, tmp_path_factory.mktemp("round42") / "index", "tiny")
    return open_service(index)


@pytest.mark.parametrize("sentences, bad", [([3], "[3]"), ([0, -1, 7], "[-1, 7]")])
def test_a_selection_out_of_range_is_refused_naming_its_field(service, sentences, bad):
    with pytest.raises(RequestError) as err:
        service.search({"paper_id": "q", "sentences": sentences})
    assert err.value.status == 400
    assert err.value.message.startswith("sentences: ")  # once "sentence positions [3] ..." without the field's name
    assert f"{bad} out of range 0..2 for paper 'q'" in err.value.message


@pytest.mark.parametrize("limit", [1, 2, 3, 4])
def test_paging_never_skips_or_repeats_a_paper(service, limit):
    everything = [p["paper_id"] for p in service.find_papers("", 100)["papers"]]
    assert everything == [p.paper_id for p in PAPERS]
    got, offset = [], 0
    while offset is not None:
        page = service.find_papers("", limit, offset)
        assert page["offset"] == offset and len(page["papers"]) <= limit
        got += [p["paper_id"] for p in page["papers"]]
        offset = page["next_offset"]
    assert got == everything


@pytest.mark.parametrize("field, value", [("limit", 0), ("limit", 101), ("limit", True), ("offset", -1),
                                          ("offset", 1.0)])
def test_bad_paging_values_are_refused_naming_the_field(service, field, value):
    with pytest.raises(RequestError, match=f"^{field} must be") as err:
        service.find_papers("", **{field: value})
    assert err.value.status == 400


@pytest.mark.parametrize("rerank", ["none", "minl2", "ot"])
def test_hits_and_pairs_are_the_searchers_own(service, rerank):
    out = service.search({"paper_id": "q", "sentences": [2, 1], "k": 4, "rerank": rerank})
    searcher = service.searcher
    with torch.no_grad():
        want = searcher.search(searcher.query_from_index("q", [1, 2]), k=4, rerank=rerank)
    assert [h["paper_id"] for h in out["hits"]] == [h.paper_id for h in want]
    assert [h["score"] for h in out["hits"]] == pytest.approx([h.score for h in want], abs=1e-6)
    for hit, ref in zip(out["hits"], want):
        assert [(p["query_sentence"], p["hit_sentence"]) for p in hit["pairs"]] == \
            [(p.query_sentence, p.hit_sentence) for p in ref.pairs]
        for pair in hit["pairs"]:  # each pair's distance is its cell of the grid (rows: the selected sentences)
            row = out["plan_rows"].index(pair["query_sentence"])
            assert hit["dist"][row][pair["hit_sentence"]] == pytest.approx(pair["dist"], abs=1e-3)


@pytest.mark.parametrize("raw, status", [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n", 400),
    (b"POST /api/search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    (b"POST /api/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"zz\r\n{}\r\n0\r\n\r\n", 400),
])
def test_unparseable_requests_are_answered_once_in_json_with_the_security_headers(service, raw, status):
    with running(service) as srv:
        reply = raw_exchange(srv, raw)
    assert reply.count(b"HTTP/1.1 ") == 1
    assert int(reply.split(b" ", 2)[1]) == status
    headers = reply_headers(reply)
    for key, value in SECURITY_HEADERS.items():
        assert headers[key.lower()] == value
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"].startswith("bad request: ")
