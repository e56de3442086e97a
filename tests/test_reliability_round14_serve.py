"""The page server, round 14 (correctness): a client that sends its requests pipelined and then half-closes (it will
send no more) gets every answer in order (all but the one being answered were dropped without a word); a
connection reset while the server shuts its side is closed, not a traceback; a JSON body repeating a field is
refused naming it (the last value was taken without a word, where a query string's repeated field is refused); a
string holding a lone surrogate is told so (not that it must be a string); and
every GET route answers HEAD (RFC 9110 9.1: a server MUST support GET and HEAD; the API routes said 405). As
references: pipelined and keep-alive searches are answered as `Searcher.search` answers each query alone, and
searches running while the index is rebuilt are each the Searcher's answer of the one generation they name."""

from __future__ import annotations

import json
import socket
import threading
import time
from types import SimpleNamespace

import pytest
from serve_support import (  # noqa: F401 (fixtures encoder, index)
    PAPERS,
    LogRecords,
    build_index,
    encoder_fixture,
    index_fixture,
    join_all,
    request,
    running,
    wait_until,
)

from aspire.data.papers import Paper
from aspire.search import Searcher
from aspire.serve import RequestError, ServiceHolder, open_service
from aspire.serve.protocol import JSONErrorsH11Protocol, LingeringTransport
from aspire.serve.requests import parse_json

OVERRIDES = ["k=3", "rerank=ot", "ot_max_iter=100"]


@pytest.fixture(scope="module")
def server(index):
    with running(open_service(index, OVERRIDES)) as srv:
        yield srv


def post(body: dict | bytes) -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (b"POST /api/search HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(data), data))


def get(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode()


def responses(data: bytes, heads: tuple[int, ...] = ()) -> list[tuple[int, dict, bytes]]:
    """The HTTP/1.1 responses in `data`, in order: (status, headers lower-cased, body by its Content-Length; none for
    the answers to HEAD requests, at positions `heads`). ValueError when the last one is not complete."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            raise ValueError("a response head is not complete")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        size = 0 if len(out) in heads else int(headers["content-length"])
        if len(rest) < size:
            raise ValueError("a response body is not complete")
        out.append((int(lines[0].split(" ", 2)[1]), headers, rest[:size]))
        data = rest[size:]
    return out


def exchange(srv, data: bytes, half_close: bool, count: int, heads: tuple[int, ...] = ()) -> list[tuple[int, dict, bytes]]:
    """Send `data` at once (then close our side when `half_close`), read until the server closes (half_close) or
    `count` responses are in (`heads`: the positions of HEAD requests)."""
    with socket.create_connection(srv.server_address[:2], timeout=20) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            try:
                if not half_close and len(responses(got, heads)) >= count:
                    break
            except ValueError:
                pass  # a response not complete yet
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    return responses(got, heads)


def ranked(answer: dict) -> list[tuple]:
    return [(h["rank"], h["paper_id"], h["score"]) for h in answer["hits"]]


def searcher_ranked(path, overrides, paper_id: str, sentences: list[int]) -> list[tuple]:
    searcher = Searcher.open(path, overrides)
    return [(h.rank, h.paper_id, h.score) for h in searcher.search(searcher.query_from_index(paper_id, sentences))]


# ---- defects --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("half_close", [True, False])
def test_pipelined_requests_are_all_answered_in_order_when_the_client_half_closes(server, index, half_close):
    """Requests sent at once, then the client's side shut: once the first search was answered and the GET and the
    second search after it were dropped (1 answer of 3, no Connection: close said)."""
    first, second = {"paper_id": "q", "sentences": [0, 2]}, {"paper_id": "c", "sentences": [1]}
    with LogRecords() as logs:
        got = exchange(server, post(first) + get("/api/info") + post(second), half_close, 3)
    assert [status for status, _, _ in got] == [200, 200, 200]
    answers = [json.loads(body) for _, _, body in got]
    assert ranked(answers[0]) == searcher_ranked(index, OVERRIDES, "q", [0, 2])  # each the Searcher's, in order
    assert answers[1]["n_papers"] == len(PAPERS)
    assert ranked(answers[2]) == searcher_ranked(index, OVERRIDES, "c", [1])
    assert logs.tracebacks() == []


def test_a_half_closed_pipeline_whose_last_body_is_cut_is_answered_then_told_400(server):
    """The last request's body cannot arrive: it is answered at once (400, not a wait for the body timeout), after
    the complete requests before it."""
    cut = post({"paper_id": "q", "sentences": [0]})[:-4]
    started = time.monotonic()
    got = exchange(server, post({"paper_id": "a", "sentences": [1]}) + get("/api/papers?q=par") + cut, True, 3)
    assert [status for status, _, _ in got] == [200, 200, 400]
    assert "body ended after" in json.loads(got[2][2])["error"]
    assert time.monotonic() - started < 8  # well before the 10 s body timeout


def test_a_connection_reset_while_the_server_shuts_its_side_closes_it_without_raising():
    """write_eof on a socket the client reset meanwhile raises ENOTCONN: it escaped from the response's send (a
    logged traceback for a request that was answered)."""
    closed, timers = [], []

    class Reset:
        def is_closing(self):
            return False

        def can_write_eof(self):
            return True

        def write_eof(self):
            raise OSError(107, "Transport endpoint is not connected")

        def close(self):
            closed.append(True)

    proto = SimpleNamespace(loop=SimpleNamespace(call_later=lambda delay, fn: timers.append(fn) or SimpleNamespace(
        cancel=lambda: None)), flow=None, _cancel_head_timer=lambda: None)
    proto.transport = LingeringTransport(Reset(), lambda: None)
    JSONErrorsH11Protocol._linger_close(proto)
    assert closed == [True] and proto.transport.linger_timer is None and timers == []


def test_a_json_body_repeating_a_field_is_refused_naming_it(server):
    """`{"k": 1, "k": 5}` was a search for 5 papers (the last value, without a word)."""
    body = b'{"paper_id": "q", "sentences": [0], "k": 1, "k": 4}'
    status, _, raw = request(server, "POST", "/api/search", body)
    assert status == 400 and json.loads(raw)["error"] == "the body repeats the field 'k': give each field once"
    with pytest.raises(RequestError, match="repeats the field 'paper_id'"):
        parse_json(b'{"paper_id": "q", "sentences": [0], "paper_id": "a"}')
    assert parse_json(b'{"a": {"b": 1}, "b": [{"b": 2}]}') == {"a": {"b": 1}, "b": [{"b": 2}]}  # same name, other objects
    status, _, raw = request(server, "POST", "/api/search", b'{"paper_id": "q", "sentences": [0], "k": 1}')
    assert status == 200 and len(json.loads(raw)["hits"]) == 1


@pytest.mark.parametrize("field", ["paper_id", "stages", "rerank"])
def test_a_string_with_a_lone_surrogate_is_refused_saying_so(server, field):
    """`"paper_id": "\\ud800"` was told "paper_id must be a non-empty string of at most 256 characters" (it is one)."""
    body = {"paper_id": "q", "sentences": [0], field: "PLACEHOLDER"}
    raw = json.dumps(body).replace("PLACEHOLDER", "\\ud800").encode()
    status, _, answer = request(server, "POST", "/api/search", raw)
    assert status == 400
    assert json.loads(answer)["error"] == (f"{field} is not Unicode text (a lone surrogate such as \\ud800 names no "
                                           "character); got '\\ud800'")


@pytest.mark.parametrize("path", ["/api/info", "/api/papers?q=par&limit=2", "/api/paper?id=q", "/api/paper?id=zz",
                                  "/api/papers?limit=0"])
def test_every_get_route_answers_head_with_the_gets_status_and_headers(server, path):
    """HEAD /api/info was 405 "use GET" (the static files answered it)."""
    [(status, headers, body)] = exchange(server, get(path), False, 1)
    (h_status, h_headers, _), *after = exchange(server, get(path, "HEAD") + get("/api/info"), False,
                                                2 if status < 400 else 1, heads=(0,))
    assert h_status == status
    if status < 400:  # the HEAD answer has no body: the next answer on the connection is read right after it
        assert [s for s, _, _ in after] == [200]
    for name in ("content-type", "content-length", "x-aspire-generation", "cache-control"):
        assert h_headers[name] == headers[name], name
    assert int(h_headers["content-length"]) == len(body) > 0


# ---- references (checks that held) ----------------------------------------------------------------------------
def test_keep_alive_searches_are_each_the_searchers_answer(server, index):
    bodies = [{"paper_id": "q", "sentences": [1]}, {"paper_id": "b", "sentences": [0, 1], "rerank": "minl2"},
              {"paper_id": "d", "sentences": [0], "rerank": "none", "stages": "bm25"}]
    got = exchange(server, b"".join(post(b) for b in bodies), False, 3)
    assert [status for status, _, _ in got] == [200] * 3
    for body, (_, _, raw) in zip(bodies, got):
        extra = [f"{key}={body[key]}" for key in ("rerank", "stages") if key in body]
        assert ranked(json.loads(raw)) == searcher_ranked(index, OVERRIDES + extra, body["paper_id"], body["sentences"])


def test_searches_during_rebuilds_are_each_the_answer_of_the_generation_they_name(encoder, tmp_path):
    """Each generation holds other texts for the same ids: an answer mixing two (a hit's title or score of
    another) would differ from the Searcher's answer for the generation it names."""
    papers = [Paper(p.paper_id, p.title, list(p.sentences), list(p.labels)) for p in PAPERS]
    index = build_index(encoder, papers, tmp_path / "index", "tiny")
    generations = {"gen-000001": papers}
    for n in (2, 3):
        generations[f"gen-00000{n}"] = [Paper(p.paper_id, f"{p.title} v{n}", [*p.sentences[1:], p.sentences[0]],
                                              [*p.labels[1:], p.labels[0]]) for p in papers]
    search = {"paper_id": "q", "sentences": [0, 1]}
    seen: list[tuple[int, str, str, dict]] = []
    stop = threading.Event()
    with LogRecords() as logs, running(ServiceHolder(index, OVERRIDES)) as srv:
        def client():
            while not stop.is_set():
                status, _, raw, headers = request(srv, "POST", "/api/search", search, with_headers=True)
                seen.append((status, headers["x-aspire-generation"], raw))

        def answered(gen: str) -> bool:
            return any(s[1] == gen for s in seen)

        threads = [threading.Thread(target=client, name=f"client {i}") for i in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.2)
        wait_until(lambda: answered("gen-000001"), "no search answered from gen-000001 before the first rebuild")
        references = {"gen-000001": searcher_ranked(index, OVERRIDES, "q", [0, 1])}
        for name, gen_papers in list(generations.items())[1:]:
            build_index(encoder, gen_papers, index, "tiny")
            references[name] = searcher_ranked(index, OVERRIDES, "q", [0, 1])
            titles = {p.paper_id: p.title for p in gen_papers}
            wait_until(lambda g=name: answered(g), f"no search answered from {name} after its save")
            generations[name] = titles
            time.sleep(0.2)
        stop.set()
        join_all(threads)
    generations["gen-000001"] = {p.paper_id: p.title for p in papers}
    assert {s[1] for s in seen} == set(references) and all(s[0] == 200 for s in seen)
    for _, header, raw in seen:
        answer = json.loads(raw)
        assert answer["generation"] == header
        assert ranked(answer) == references[header]
        assert all(h["title"] == generations[header][h["paper_id"]] for h in answer["hits"])
    assert logs.tracebacks() == []
