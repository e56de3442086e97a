"""The page server, round 16 (correctness), against RFC 9110 / 9112 and Python's http.client:

- an absolute-form request target (`GET http://host:port/api/info HTTP/1.1`, what `http.client` sends when given an
  absolute URL) is served as its path (RFC 9112 3.2.2: a server MUST accept it); it was a 404 "no such route";
- a request with Transfer-Encoding beside Content-Length is refused and its connection closed (RFC 9112 6.1: the
  server MUST close the connection after answering it); it was answered 200 on a connection kept open, and a request
  smuggled behind it answered too;
- a later HTTP/1 minor version (`HTTP/1.2`) is read as HTTP/1.1 (RFC 9110 2.5); it was refused as unsupported;
- a request target that is neither a path nor an http URI (`GET api/info`) is a 400 saying so (RFC 9112 3.2); it was
  a 404 "no such route '/api/info'", naming a route that exists;
- `find_papers` takes integers for limit and offset, not a bool or a float (`limit=True` gave a page of 1), as a
  search's strict `k` does.
"""

from __future__ import annotations

import http.client
import json
import socket

import pytest
from serve_support import encoder_fixture, index_fixture, raw_exchange, reply_headers, running  # noqa: F401 (fixtures)

from aspire.serve import RequestError, open_service


@pytest.fixture(scope="module")
def server(index):
    with running(open_service(index, ["k=3"])) as srv:
        yield srv


def fetch(srv, method: str, target: str, body: bytes | None = None, headers: dict | None = None):
    """One request through http.client with `target` as it is: (status, headers, body)."""
    host, port = srv.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def read_until_closed(srv, data: bytes) -> bytes:
    """Send `data` (our side left open) and read until the server closes the connection."""
    with socket.create_connection(srv.server_address[:2], timeout=20) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def statuses(reply: bytes) -> list[int]:
    """The status of each response in `reply`, in order (each read past its head and Content-Length body)."""
    out = []
    while reply:
        head, _, rest = reply.partition(b"\r\n\r\n")
        out.append(int(head.split(b" ", 2)[1]))
        reply = rest[int(reply_headers(head + b"\r\n\r\n").get("content-length", 0)):]
    return out


SEARCH = json.dumps({"paper_id": "q", "sentences": [0, 2]}).encode()


# ---- defects --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method, path, body", [
    ("GET", "/api/info", None),
    ("GET", "/api/papers?q=pars&limit=2", None),
    ("GET", "/api/paper?id=q", None),
    ("POST", "/api/search", SEARCH),
    ("GET", "/static/app.js", None),
])
def test_an_absolute_form_target_is_answered_as_its_path(server, method, path, body):
    """http.client sends `http://127.0.0.1:PORT/api/info` as it is given; the server answered 404 "no such route
    'http://...'" (RFC 9112 3.2.2: a server MUST accept the absolute-form)."""
    host, port = server.server_address[:2]
    headers = {"Content-Type": "application/json"} if body is not None else {}
    want = fetch(server, method, path, body, headers)
    assert want[0] == 200
    for origin in (f"http://{host}:{port}", f"HTTP://{host}:{port}", f"https://{host}:{port}"):
        got = fetch(server, method, origin + path, body, headers)
        assert got[0] == 200, got
        assert got[2] == want[2] and got[1]["content-type"] == want[1]["content-type"]


def test_an_absolute_form_target_without_a_path_is_the_page_and_one_without_a_host_is_refused(server):
    status, _, page = fetch(server, "GET", "/")
    assert status == 200
    host, port = server.server_address[:2]
    reply = raw_exchange(server, f"GET http://{host}:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert statuses(reply) == [200] and reply.endswith(page)
    reply = raw_exchange(server, b"GET http:///api/info HTTP/1.1\r\nHost: x\r\n\r\n")  # RFC 9110 4.2.1: invalid
    assert statuses(reply) == [400] and b"without a host" in reply


def test_an_absolute_form_post_cut_short_by_a_half_closing_client_is_told_so(server):
    """The rewritten target keeps the server's mark on a body that cannot come (a 400 at once, not a 408 later)."""
    host, port = server.server_address[:2]
    head = (f"POST http://{host}:{port}/api/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(SEARCH) + 5}\r\n\r\n").encode()
    reply = raw_exchange(server, head + SEARCH)
    assert statuses(reply) == [400] and b"the client sent no more" in reply


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_transfer_encoding_beside_content_length_is_refused_and_the_connection_closed(server, version):
    """RFC 9112 6.1: such a request MUST be followed by the connection's close. It was answered 200 and kept open, so
    the bytes its Content-Length and its chunks disagree on were read as a second request (here a GET, answered)."""
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(SEARCH), SEARCH)
    smuggled = b"GET /api/info HTTP/1.1\r\nHost: t\r\n\r\n"
    head = (f"POST /api/search HTTP/{version}\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\nContent-Length: {len(SEARCH)}\r\n\r\n").encode()
    reply = read_until_closed(server, head + chunked + smuggled)
    assert statuses(reply) == [400], reply[:300]
    assert reply_headers(reply)["connection"] == "close"
    assert b"Transfer-Encoding beside a Content-Length" in reply


def test_transfer_encoding_in_an_http_1_0_request_is_refused(server):
    """RFC 9112 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing (h11 read it as chunked)."""
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(SEARCH), SEARCH)
    reply = raw_exchange(server, b"GET /api/info HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
    assert statuses(reply) == [400] and b"in an HTTP/1.0 request" in reply


@pytest.mark.parametrize("version", ["1.2", "1.9"])
def test_a_later_http_1_minor_version_is_answered_as_http_1_1(server, version):
    """RFC 9110 2.5: a recipient SHOULD process a higher minor version of a major version it implements as the highest
    minor version it conforms to; it was a 400 "unsupported HTTP version '1.2'"."""
    want = raw_exchange(server, b"GET /api/info HTTP/1.1\r\nHost: t\r\n\r\n")
    got = raw_exchange(server, f"GET /api/info HTTP/{version}\r\nHost: t\r\n\r\n".encode())
    assert statuses(got) == [200] and got.split(b"\r\n\r\n", 1)[1] == want.split(b"\r\n\r\n", 1)[1]
    # kept alive as HTTP/1.1 is: two requests on one connection, both answered
    two = read_until_closed(server, f"GET /api/info HTTP/{version}\r\nHost: t\r\n\r\n".encode()
                            + f"GET /api/paper?id=q HTTP/{version}\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    assert statuses(two) == [200, 200]


@pytest.mark.parametrize("target, shown", [("api/info", "'api/info'"), ("?q=pars", "'?q=pars'"), ("*", "'*'")])
def test_a_target_that_is_neither_a_path_nor_an_http_uri_is_a_400_naming_it(server, target, shown):
    reply = raw_exchange(server, f"GET {target} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    assert statuses(reply) == [400], reply[:200]
    error = json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]
    assert error.startswith(f"request target {shown} is neither a path") and "no such route" not in error


def test_find_papers_takes_integers_not_bools_or_floats(index):
    service = open_service(index)
    assert [p["paper_id"] for p in service.find_papers("", limit=2, offset=1)["papers"]] == ["a", "b"]
    for bad in ({"limit": True}, {"limit": 2.0}, {"offset": False}, {"offset": 1.5}):
        with pytest.raises(RequestError, match=f"{next(iter(bad))} must be an integer"):
            service.find_papers("", **bad)


# ---- checks that held ------------------------------------------------------------------------------------------
def test_options_asterisk_is_still_routed(server):
    """`OPTIONS *` (the asterisk-form, RFC 9112 3.2.4) is not taken for a bad target: no route answers it."""
    reply = raw_exchange(server, b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n")
    assert statuses(reply) == [404]


@pytest.mark.parametrize("version", ["2.0", "0.9", "3.1"])
def test_other_major_versions_stay_refused(server, version):
    reply = raw_exchange(server, f"GET /api/info HTTP/{version}\r\nHost: t\r\n\r\n".encode())
    assert statuses(reply) == [400] and b"unsupported HTTP version" in reply
