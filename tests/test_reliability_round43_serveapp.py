"""The page server, round 43: a refused value is said as the client wrote it in JSON (`true`, `null`, not Python's
`True`, `None`); HEAD answers as GET without a body; a known route with another method is 405 naming the methods in
an Allow header; static files never escape their list."""

from __future__ import annotations

import json

import pytest
from serve_support import PAPERS, build_index, request, running

from aspire.encoders import load_encoder
from aspire.serve import open_service
from aspire.serve.requests import PapersQuery, RequestError, SearchBody, check


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    index = build_index(load_encoder(tiny_model_dir), PAPERS, tmp_path_factory.mktemp("r43") / "index", "tiny")
    with running(open_service(index)) as srv:
        yield srv


@pytest.mark.parametrize("model, data, said", [
    (SearchBody, {"paper_id": "q", "sentences": [0], "k": True}, "k must be an integer in 1..50; got true"),
    (SearchBody, {"paper_id": "q", "sentences": [0], "tau": False}, "got false"),
    (SearchBody, {"paper_id": None, "sentences": [0]}, "paper_id must be a non-empty string of at most 256 "
                                                       "characters; got null"),
    (PapersQuery, {"limit": True}, "limit must be an integer in 1..100; got true"),
])
def test_a_refused_value_is_said_as_json(model, data, said):
    with pytest.raises(RequestError) as err:
        check(model, data)
    assert err.value.status == 400
    assert said in err.value.message  # once "got True" / "got None": Python, where the client wrote JSON


def test_over_http_a_boolean_k_is_refused_in_json_terms(server):
    status, _, raw = request(server, "POST", "/api/search", b'{"paper_id": "q", "sentences": [0], "k": true}')
    assert (status, json.loads(raw)) == (400, {"error": "k must be an integer in 1..50; got true"})


@pytest.mark.parametrize("path", ["/", "/api/info", "/api/paper?id=q", "/api/paper?id=zz", "/api/papers?limit=0",
                                  "/static/app.js"])
def test_head_answers_as_get_without_a_body(server, path):
    get_status, get_type, get_body, get_headers = request(server, "GET", path, with_headers=True)
    head_status, head_type, head_body, head_headers = request(server, "HEAD", path, with_headers=True)
    assert (head_status, head_type, head_body) == (get_status, get_type, b"")
    assert get_body
    lower = {k.lower(): v for k, v in head_headers.items()}
    assert lower["content-length"] == str(len(get_body))


@pytest.mark.parametrize("method, path, allow", [("GET", "/api/search", "POST"), ("HEAD", "/api/reload", "POST"),
                                                 ("PUT", "/api/info", "GET, HEAD"), ("DELETE", "/", "GET, HEAD")])
def test_another_method_on_a_known_route_is_405_with_allow(server, method, path, allow):
    status, ctype, raw, headers = request(server, method, path, with_headers=True)
    assert status == 405 and ctype.startswith("application/json")
    assert {k.lower(): v for k, v in headers.items()}["allow"] == allow
    if method != "HEAD":
        assert json.loads(raw) == {"error": f"method {method} not allowed here; use {allow}"}


@pytest.mark.parametrize("path", ["/static/../app.py", "/static/..%2fapp.py", "/static/%2e%2e/requests.py",
                                  "/static/app.js/", "/static/index.html", "/static/"])
def test_static_files_never_leave_their_list(server, path):
    status, _, raw = request(server, "GET", path)
    assert status == 404 and set(json.loads(raw)) == {"error"}
