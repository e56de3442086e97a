"""The page server's start and stop, round 51 (correctness).

Fixed: `AspireServer.shutdown()` on a server whose `serve_forever` never ran waited its whole timeout (10 s by
default) for a serve loop that did not exist, and left the socket open. It now returns at once and closes the
socket; a `serve_forever` after that returns at once. Checked as they are: a real server on port 0 answers, stops
on `shutdown()` and releases its port; a search that selects a sentence twice is answered as the one selecting it
once (repeats merged, as `check_selection` documents for `aspire search`), the answer echoing the merged positions."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from serve_support import encoder_fixture, index_fixture, request, running  # noqa: F401 (fixtures encoder, index)

from aspire.serve import make_server, open_service


@pytest.fixture(scope="module")
def service(index):
    return open_service(index, ["k=3", "ot_max_iter=100"])


def _in_thread(fn, wait: float = 3.0) -> bool:
    """Run `fn` in a daemon thread; whether it returned within `wait` seconds."""
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    thread.join(wait)
    return not thread.is_alive()


def _refused(address) -> bool:
    try:
        socket.create_connection(address, timeout=2).close()
    except OSError:
        return True
    return False


def test_shutdown_of_a_never_started_server_returns_at_once_and_closes_its_socket(service):
    srv = make_server(service, "127.0.0.1", 0)
    address = srv.server_address
    assert _in_thread(lambda: srv.shutdown(timeout=30)), "shutdown of a never-started server waited"
    assert srv.socket.fileno() == -1
    assert _refused(address)
    srv.server_close()  # still allowed afterwards


def test_serve_forever_after_shutdown_returns_at_once(service):
    srv = make_server(service, "127.0.0.1", 0)
    assert _in_thread(lambda: srv.shutdown(timeout=30))
    assert _in_thread(srv.serve_forever), "serve_forever after shutdown kept serving"


def test_a_real_server_on_port_0_answers_then_stops_and_releases_its_port(service):
    srv = make_server(service, "127.0.0.1", 0)
    assert srv.server_address[1] != 0 and srv.url == f"http://127.0.0.1:{srv.server_address[1]}/"
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    status, _, raw = request(srv, "POST", "/api/search", {"paper_id": "q", "sentences": [1], "k": 2})
    assert status == 200 and json.loads(raw)["hits"]
    assert _in_thread(lambda: srv.shutdown(timeout=10), wait=10)
    thread.join(5)
    assert not thread.is_alive()
    srv.server_close()
    assert _refused(srv.server_address)


def test_shutdown_after_serve_forever_returned_returns_at_once(service):
    srv = make_server(service, "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    request(srv, "GET", "/")  # served: the loop is running
    srv.shutdown(timeout=10)
    thread.join(5)
    assert not thread.is_alive(), "serve_forever did not return after the first shutdown"
    assert _in_thread(lambda: srv.shutdown(timeout=30)), "a second shutdown waited"
    srv.server_close()


def test_a_sentence_selected_twice_is_answered_as_selected_once(service):
    with running(service) as srv:
        _, _, twice = request(srv, "POST", "/api/search", {"paper_id": "q", "sentences": [2, 1, 1], "k": 3})
        _, _, once = request(srv, "POST", "/api/search", {"paper_id": "q", "sentences": [1, 2], "k": 3})
    twice, once = json.loads(twice), json.loads(once)
    assert twice["sentences"] == twice["plan_rows"] == [1, 2]
    assert [(h["paper_id"], h["score"]) for h in twice["hits"]] == [(h["paper_id"], h["score"]) for h in once["hits"]]
