"""Round 26, the page's server: POST /api/reload refuses a body it would not read (once answered 200, the body
dropped without a word); a page override written as the config loader also reads it (`--k=100`) is held to the
page's bounds; a query string with too many fields is told the limit (once "Max number of fields exceeded");
the answers of /api/search are the Searcher's for every first stage and re-ranker."""

from __future__ import annotations

import itertools
import json

import pytest
from serve_support import PAPERS, build_index, raw_exchange, reply_headers, request, running

from aspire.encoders import load_encoder
from aspire.search import Searcher
from aspire.serve import ServiceHolder, open_service
from aspire.serve.app import MAX_QUERY_FIELDS


@pytest.fixture(scope="module")
def index_dir(tiny_model_dir, tmp_path_factory):
    return build_index(load_encoder(tiny_model_dir), PAPERS, tmp_path_factory.mktemp("r26") / "index", "tiny")


@pytest.fixture(scope="module")
def server(index_dir):
    with running(ServiceHolder(index_dir, check_every=None)) as srv:
        yield srv


def reload_with(srv, head: bytes, body: bytes = b"") -> tuple[int, dict, dict]:
    """A raw POST /api/reload with the given header lines and body; (status, JSON answer, headers)."""
    reply = raw_exchange(srv, b"POST /api/reload HTTP/1.1\r\nHost: t\r\n" + head + b"\r\n" + body)
    status = int(reply.split(b" ", 2)[1])
    headers = reply_headers(reply)
    payload = reply.split(b"\r\n\r\n", 1)[1][: int(headers["content-length"])]
    return status, json.loads(payload), headers


@pytest.mark.parametrize("head, body", [
    (b"Content-Length: 27\r\nContent-Type: application/json\r\n", b'{"generation":"gen-000009"}'),
    (b"Content-Length: 20000\r\n", b"x" * 20000),
    (b"Transfer-Encoding: chunked\r\n", b"5\r\nhello\r\n0\r\n\r\n"),
])
def test_a_body_on_reload_is_refused_not_ignored(server, head, body):
    status, out, headers = reload_with(server, head, body)
    assert status == 400, out  # was 200: {"generation": ...} or 20 KB of anything read by nothing
    assert out["error"].startswith("/api/reload takes no body")
    assert headers["connection"] == "close"  # the unread body does not stay on a reused connection


@pytest.mark.parametrize("head", [b"", b"Content-Length: 0\r\n", b"Content-Length: 00\r\n"])
def test_a_reload_without_a_body_still_reloads(server, head):
    status, out, _ = reload_with(server, head)
    assert status == 200 and out == {"generation": "gen-000001", "previous": "gen-000001", "reloaded": False,
                                     "error": None}
    status, _, raw = request(server, "POST", "/api/reload")  # http.client: Content-Length: 0
    assert status == 200 and json.loads(raw)["error"] is None


@pytest.mark.parametrize("override, named", [("--k=100", "search.k=100"), ("search.--shortlist=9000", "search.shortlist=9000"),
                                             ("--cross_encoder=true", "search.cross_encoder=true")])
def test_an_override_with_dashes_is_held_to_the_pages_bounds(index_dir, override, named):
    """`Searcher.open` (its config loader) reads `--k=100` as k=100: the page's check reads it so too (the service
    was opened with k=100 in its config, served as 50 without a word, and `--cross_encoder=true` was taken)."""
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        open_service(index_dir, [override])
    assert Searcher.open(index_dir, [override.removeprefix("search.")]).config  # the loader does take them


def test_within_bounds_dashed_overrides_are_served(index_dir):
    service = open_service(index_dir, ["--k=7", "search.--shortlist=40"])
    assert service.info()["k"] == 7 and service.info()["shortlist"] == 40


def test_too_many_query_fields_are_told_the_limit(server):
    fields = "&".join(f"f{i}=1" for i in range(MAX_QUERY_FIELDS + 1))
    status, _, raw = request(server, "GET", f"/api/papers?{fields}")
    assert status == 400
    assert json.loads(raw)["error"] == (f"bad query string: more than {MAX_QUERY_FIELDS} fields (at most "
                                        f"{MAX_QUERY_FIELDS}; each '&' starts one)")  # was "Max number of fields exceeded"
    status, _, raw = request(server, "GET", "/api/papers?" + "&".join(["q=a", "limit=2", "offset=0"]))
    assert status == 200 and json.loads(raw)["offset"] == 0


def test_searches_over_http_are_the_searchers_for_every_stage_and_reranker(server, index_dir):
    """Brute-force comparison: each (query, selection, k, stages, rerank) answered over HTTP equals `Searcher.search`
    on the same index (ids, scores, aligned pairs)."""
    searcher = Searcher.open(index_dir)
    for pid, chosen, k, stages, rerank in itertools.product(["q", "c"], [[0], [1, 0]], [1, 4],
                                                            ["ann", "bm25", "ann,bm25", "whole"],
                                                            ["none", "minl2", "ot", "hybrid"]):
        body = {"paper_id": pid, "sentences": chosen, "k": k, "stages": stages, "rerank": rerank}
        status, _, raw = request(server, "POST", "/api/search", body)
        assert status == 200, (body, raw[:200])
        got = json.loads(raw)["hits"]
        hits = searcher.search(searcher.query_from_index(pid, chosen), k=k, stages=stages, rerank=rerank)
        assert [(h["paper_id"], h["score"]) for h in got] == [(h.paper_id, float(h.score)) for h in hits], body
        assert [[(p["query_sentence"], p["hit_sentence"]) for p in h["pairs"]] for h in got] == \
               [[(p.query_sentence, p.hit_sentence) for p in h.pairs] for h in hits], body
