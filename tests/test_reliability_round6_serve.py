"""The page server, round 6: a query string on a route that takes none is refused (a `?k=1` on the search was
ignored), query text that is not UTF-8 is refused naming its parameter (it became "\ufffd"), /api/info says the
k and shortlist a request gets (it said the config's, beyond the page's bounds), the serve command refuses a
search.k / search.shortlist beyond them and a --check-every it would ignore, and the package docstring names
its modules."""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import replace

import pytest
from serve_support import PAPERS, build_index, raw_exchange, reply_headers, request, running

import aspire.serve
from aspire.encoders import load_encoder
from aspire.search import Searcher
from aspire.serve import SearchService, ServiceHolder, open_service
from aspire.serve.__main__ import main as serve_main
from aspire.serve.requests import MAX_K, MAX_SHORTLIST


@pytest.fixture(scope="module")
def index(tiny_model_dir, tmp_path_factory):
    return build_index(load_encoder(tiny_model_dir), PAPERS, tmp_path_factory.mktemp("round6") / "index", "tiny")


@pytest.fixture
def no_serving(monkeypatch):
    """`aspire serve` returns instead of serving (so a command line it wrongly takes ends the test, not hangs it)."""
    from aspire.serve.server import AspireServer

    monkeypatch.setattr(AspireServer, "serve_forever", lambda self: None)


@pytest.fixture(scope="module")
def server(index):
    with running(ServiceHolder(index, ["k=3"], check_every=None)) as srv:
        yield srv


def error_of(srv, method: str, path: str, body=None) -> tuple[int, str]:
    status, ctype, raw = request(srv, method, path, body)
    assert ctype.startswith("application/json")
    return status, json.loads(raw).get("error", "")


def test_a_query_string_on_a_route_that_takes_none_is_refused_not_ignored(server):
    search = {"paper_id": "q", "sentences": [0]}
    status, message = error_of(server, "POST", "/api/search?k=1", search)  # once 200 with the default k=3
    assert status == 400 and message == ("unknown query parameter(s) 'k': /api/search takes none; "
                                         "a search's fields go in its JSON body")
    assert error_of(server, "GET", "/api/info?limit=5") == (400, "unknown query parameter(s) 'limit': /api/info takes none")
    assert error_of(server, "POST", "/api/reload?now") == (400, "unknown query parameter(s) 'now': /api/reload takes none")
    status, _, raw = request(server, "POST", "/api/search?", search)  # an empty query string is no parameter
    assert status == 200 and len(json.loads(raw)["hits"]) == 3
    assert request(server, "GET", "/api/info")[0] == 200


@pytest.mark.parametrize("path, name", [("/api/papers?q=%ff", "q"), ("/api/paper?id=a%e9", "id"),
                                        ("/api/papers?%c3=1", "\\xc3")])
def test_query_text_that_is_not_utf8_is_refused_naming_its_parameter(server, path, name):
    # once decoded with replacement characters: q=%ff searched for "\ufffd" and answered 200 with no papers
    assert error_of(server, "GET", path) == (400, f"query parameter '{name}' is not UTF-8 text")
    status, _, raw = request(server, "GET", "/api/papers?q=%C3%A9")  # %-escaped UTF-8 is text
    assert status == 200 and json.loads(raw)["query"] == "é"


def test_info_says_the_k_and_shortlist_a_request_gets(index):
    searcher = Searcher.open(index)
    searcher.config = replace(searcher.config, k=80, shortlist=9000)  # a saved config beyond the page's bounds
    service = SearchService(searcher)
    info = service.info()
    asked = service.check({"paper_id": "q", "sentences": [0]})
    assert (info["k"], info["shortlist"]) == (asked.k, asked.shortlist) == (MAX_K, MAX_SHORTLIST)  # once 80, 9000


@pytest.mark.parametrize("override, message", [
    ("search.k=51", f"search.k=51: the page serves at most k={MAX_K}"),
    ("search.shortlist=6000", f"search.shortlist=6000: the page serves at most shortlist={MAX_SHORTLIST}"),
])
def test_serve_refuses_a_k_or_shortlist_beyond_what_the_page_serves(index, capsys, no_serving, override, message):
    with pytest.raises(ValueError, match=re.escape(message)):  # once served, every search cut to the bound
        open_service(index, [override])
    assert serve_main(["--index", str(index), "--port", "0", override]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {message}"


@pytest.mark.parametrize("options, message", [
    (["--no-auto-reload", "--check-every", "5"], "--check-every and --no-auto-reload contradict each other"),
    (["--check-every", "inf"], "--check-every must be a finite number >= 0 of seconds, got inf"),
])
def test_serve_refuses_a_check_every_it_would_not_follow(index, capsys, no_serving, options, message):
    with pytest.raises(SystemExit) as exit_:  # once accepted: the first ignored, the second checked only once
        serve_main(["--index", str(index), "--port", "0", *options])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_package_docstring_names_modules_that_exist():
    named = re.findall(r"^- `(\w+)`:|; `(\w+)`:", aspire.serve.__doc__, flags=re.M)
    modules = [a or b for a, b in named]
    assert "requests" in modules  # once "models", a module that does not exist
    assert [m for m in modules if importlib.util.find_spec(f"aspire.serve.{m}") is None] == []


def test_a_temperature_for_a_reranker_that_reads_none_is_refused(server):
    # tau with rerank minl2 was accepted and read by nothing (and built a Searcher of its own for the request)
    body = {"paper_id": "q", "sentences": [0], "rerank": "minl2", "tau": 0.5}
    assert error_of(server, "POST", "/api/search", body) == (
        400, "tau: the OT temperature is read by rerank 'ot' alone, and this search reranks by 'minl2': leave tau "
             "out, or ask for rerank 'ot'")
    status, _, raw = request(server, "POST", "/api/search", {**body, "rerank": "ot"})
    assert status == 200 and json.loads(raw)["ot"]["tau"] == 0.5


def test_a_request_the_parser_refuses_is_answered_with_the_security_headers(server):
    # the app's docstring said every answer carries them; the parser's JSON 400s carried none
    from aspire.serve.protocol import SECURITY_HEADERS

    reply = raw_exchange(server, b"GET /api/info HTTP/1.1\r\nHost: x\r\nbad header line\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 ") and b"bad request:" in reply
    headers = reply_headers(reply)
    assert {k.lower(): v for k, v in SECURITY_HEADERS.items()}.items() <= headers.items()
