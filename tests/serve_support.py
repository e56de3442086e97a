"""Helpers for the page server's tests: a small labelled corpus, index building, a server running in a
thread, a headless Chromium page on it, bounded waits for an event and for threads, raw and JSON requests, and a
collector of the log records a server writes."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from aspire.data.papers import Paper
from aspire.index import (
    IndexBuildConfig,
    IndexConfig,
    SentenceIndex,
    encode_corpus,
    model_fingerprint,
)
from aspire.serve import make_server

L = ("background_label", "method_label", "result_label", "objective_label")
PAPERS = [
    Paper("q", "a parser for documents", ["we study scientific documents.", "we propose a new neural parser.",
                                          "the parser improves the state of the art."], [L[0], L[1], L[2]]),
    Paper("a", "neural parsing", ["parsing is a task.", "we propose a neural network parser."], [L[0], L[1]]),
    Paper("b", "document similarity", ["scientific documents are many.", "we show similarity results."],
          [L[3], L[2]]),
    Paper("c", "citation text", ["citation sentences in a paper.", "a model of citation.", "results improve."],
          [L[0], L[1], L[2]]),
    Paper("d", "aspects", ["an aspect of a title.", "we use data."], [L[0], "other_label"]),
]


def build_index(encoder, papers, out: Path, name: str) -> Path:
    """Encode `papers` and save them as a new generation of the flat index at `out`."""
    corpus = encode_corpus(encoder, papers, progress=False)
    index = SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), model_fingerprint(encoder), name)
    index.save(out)
    return out


@contextlib.contextmanager
def running(service_or_holder, **options):
    """A server for `service_or_holder` on a free loopback port, serving in a thread while in the block."""
    srv = make_server(service_or_holder, "127.0.0.1", 0, **options)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(10)


def chromium_path() -> str | None:
    """The headless Chromium the page's browser tests drive: $ASPIRE_CHROMIUM, else chromium on the PATH; None skips
    them (`needs_chromium`)."""
    return os.environ.get("ASPIRE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


needs_chromium = pytest.mark.skipif(chromium_path() is None,
                                    reason="headless Chromium not installed (apt-get install -y chromium)")


@contextlib.contextmanager
def browser_page(srv):
    """A Chromium page (playwright) open on `srv`'s page, its paper list shown, while in the block; the browser is
    closed after it."""
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.set_default_timeout(15000)
            page.goto(srv.url)
            page.wait_for_selector(".paper-item")
            yield page
        finally:
            browser.close()


def wait_until(condition, what: str, timeout: float = 20.0) -> None:
    """Poll `condition()` until it holds; AssertionError saying `what` did not happen within `timeout` seconds.
    (A fixed sleep assumed a server, thread or rebuild had got there, which a slower machine may not.)"""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:g} s")
        time.sleep(0.01)


def join_all(threads: list[threading.Thread], timeout: float = 20.0) -> None:
    """Join `threads`; AssertionError naming those still running after `timeout` seconds each."""
    for thread in threads:
        thread.join(timeout)
    alive = [thread.name for thread in threads if thread.is_alive()]
    assert not alive, f"threads still running after {timeout:g} s: {alive}"


def request(srv, method, path, body=None, headers=None, with_headers=False):
    """One request on a new connection: (status, content type, body bytes[, response headers])."""
    host, port = srv.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json"} if data is not None else {}
    hdrs.update(headers or {})
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    if with_headers:
        return resp.status, resp.getheader("Content-Type"), raw, dict(resp.getheaders())
    return resp.status, resp.getheader("Content-Type"), raw


def raw_exchange(srv, data: bytes | list[bytes], half_close: bool = True, pause: float = 0.2) -> bytes:
    """Send bytes as they are (pieces of a list `pause` seconds apart; then close our side when
    `half_close`); the whole reply."""
    with socket.create_connection(srv.server_address[:2], timeout=20) as sock:
        for i, piece in enumerate([data] if isinstance(data, bytes) else data):
            if i:
                time.sleep(pause)
            sock.sendall(piece)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def raw_request(srv, data: bytes | list[bytes], half_close: bool = True) -> tuple[int, bytes]:
    """Send bytes as they are; returns (status, body)."""
    reply = raw_exchange(srv, data, half_close)
    status = int(reply.split(b" ", 2)[1])
    return status, reply.split(b"\r\n\r\n", 1)[1]


def reply_headers(reply: bytes) -> dict[str, str]:
    head = reply.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in head)}


class LogRecords(logging.Handler):
    """Collects every log record at WARNING or above written while attached to the root logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tracebacks(self) -> list[str]:
        """The records that carry a traceback or are errors, formatted."""
        return [f"{r.name} {r.levelname}: {r.getMessage()}" for r in self.records
                if r.exc_info or r.levelno >= logging.ERROR or "Traceback" in r.getMessage()]

    def __enter__(self):
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger().removeHandler(self)


# ---- fixtures a serve test module imports (`from serve_support import encoder_fixture, index_fixture`) ---------

@pytest.fixture(scope="module", name="encoder")
def encoder_fixture(tiny_model_dir):
    """`encoder`: the tiny model of `tests/conftest.py`, loaded once a module."""
    from aspire.encoders import load_encoder

    return load_encoder(tiny_model_dir)


@pytest.fixture(scope="module", name="index")
def index_fixture(encoder, tmp_path_factory) -> Path:
    """`index`: an index of `PAPERS` built with `encoder`, once a module."""
    return build_index(encoder, PAPERS, tmp_path_factory.mktemp("served") / "index", "tiny")
