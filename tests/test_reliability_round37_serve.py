"""The page server, round 37: `aspire serve` binds its address before it loads any model (an address in use or a
host that does not resolve once failed only after the encoder and the cross-encoder were loaded), and malformed
search requests are answered 400 naming their field, valid ones as the service ranks them."""

from __future__ import annotations

import json
import socket

import pytest
from serve_support import PAPERS, build_index, request, running

from aspire.encoders import load_encoder
from aspire.serve import ServiceHolder, open_service
from aspire.serve.__main__ import main as serve_main


@pytest.fixture(scope="module")
def index(tiny_model_dir, tmp_path_factory):
    return build_index(load_encoder(tiny_model_dir), PAPERS, tmp_path_factory.mktemp("round37") / "index", "tiny")


@pytest.fixture
def no_model(monkeypatch):
    """Loading the index's service (its encoder) or a cross-encoder fails the test: start-up must refuse first."""
    import aspire.retrieval.crossencoder as crossencoder
    import aspire.serve.reload as reload

    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded before the address was bound")

    monkeypatch.setattr(reload, "open_service", loaded)
    monkeypatch.setattr(crossencoder, "load_cross_stage", loaded)


def test_serve_refuses_an_address_in_use_before_loading_any_model(index, tmp_path, capsys, no_model):
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        cross = tmp_path / "cross"
        cross.mkdir()
        for extra in ([], ["--cross-encoder", str(cross)]):
            assert serve_main(["--index", str(index), "--port", str(port), *extra]) == 2  # once: after the loads
            err = capsys.readouterr().err.strip().splitlines()[-1]
            assert err.startswith("error: ") and "Address already in use" in err and str(port) in err
    finally:
        taken.close()


def test_serve_refuses_a_host_that_does_not_resolve_before_loading_any_model(index, capsys, no_model):
    assert serve_main(["--index", str(index), "--host", "no-such-host.invalid", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "no-such-host.invalid" in err


def test_serve_releases_its_socket_when_the_index_cannot_be_opened(index, monkeypatch, capsys):
    import aspire.serve.reload as reload
    import aspire.serve.server as server

    bound = []
    real_bind = server.bind

    def recording_bind(host, port):
        bound.append(real_bind(host, port))
        return bound[-1]

    def broken(*args, **kwargs):
        raise ValueError("broken index")

    monkeypatch.setattr(server, "bind", recording_bind)
    monkeypatch.setattr(reload, "open_service", broken)
    assert serve_main(["--index", str(index), "--port", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: broken index"
    assert len(bound) == 1 and bound[0].fileno() == -1  # closed, not left listening


@pytest.fixture(scope="module")
def server(index):
    with running(ServiceHolder(index, ["k=3"], check_every=None)) as srv:
        yield srv


@pytest.mark.parametrize("body, status, words", [
    (b"{", 400, "not valid JSON"),
    (b"[1]", 400, "must be a JSON object"),
    (b'{"paper_id": "q"}', 400, "sentences is required"),
    (b'{"sentences": [0]}', 400, "paper_id is required"),
    (b'{"paper_id": "q", "sentences": "0"}', 400, "sentences must be"),
    (b'{"paper_id": "q", "sentences": [0], "k": 0}', 400, "k must be an integer in 1..50"),
    (b'{"paper_id": "q", "sentences": [0], "k": 51}', 400, "k must be an integer in 1..50"),
    (b'{"paper_id": "q", "sentences": [0], "k": 2.0}', 400, "k must be"),
    (b'{"paper_id": "q", "sentences": [0], "k": true}', 400, "k must be"),
    (b'{"paper_id": "q", "sentences": [0], "kk": 2}', 400, "unknown field(s) 'kk'"),
    (b'{"paper_id": "q", "sentences": [0], "k": 2, "k": 3}', 400, "repeats the field 'k'"),
    (b'{"paper_id": "q", "sentences": [3]}', 400, "sentence"),
    (b'{"paper_id": "q", "sentences": [-1]}', 400, "sentence"),
    (b'{"paper_id": "nope", "sentences": [0]}', 404, "nope"),
])
def test_a_malformed_search_is_answered_4xx_naming_its_key(server, body, status, words):
    got, ctype, raw = request(server, "POST", "/api/search", body)
    assert ctype.startswith("application/json")
    message = json.loads(raw)["error"]
    assert (got, words in message) == (status, True), message


def test_a_huge_body_is_refused_413(server):
    got, _, raw = request(server, "POST", "/api/search", b" " * (16 * 1024 + 1))
    assert got == 413 and "too large" in json.loads(raw)["error"]


def test_a_valid_search_is_answered_as_the_service_ranks_it(server, index):
    body = {"paper_id": "q", "sentences": [0, 2], "k": 3}
    status, _, raw = request(server, "POST", "/api/search", body)
    expected = open_service(index, ["k=3"]).search(body)
    got = json.loads(raw)
    assert status == 200
    assert [h["paper_id"] for h in got["hits"]] == [h["paper_id"] for h in expected["hits"]]
    assert [h["score"] for h in got["hits"]] == pytest.approx([h["score"] for h in expected["hits"]])
