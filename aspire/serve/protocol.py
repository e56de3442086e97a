"""uvicorn's h11 protocol with the page server's connection rules.

- A request h11 cannot parse (a bad request line, header or Content-Length, too long a head) is
  answered with JSON `{"error": "bad request: <h11's reason>"}` and the status h11 suggests (400,
  431, 501 for a transfer coding other than chunked), not uvicorn's plain-text 400, with the
  SECURITY_HEADERS (no generation: it reached no index). Refused in its body (a bad chunk header after a head h11
  took), the request's own answer from the app is dropped: it is answered, once.
- A connection must deliver a complete request head within `head_timeout` seconds of opening (or of
  its previous response): slow or idle clients cannot hold connections open.
- A client that half-closes its side (it will send no more) still gets its answers, then the
  connection closes: every request it sent complete is answered, in order (pipelined requests too; once
  all but the one being answered were dropped without a word); when a body is not complete the ASGI scope
  is marked (`CLIENT_EOF`), so the app can answer "body shorter than Content-Length" (400) instead of
  waiting for bytes that cannot come.
- Upgrade requests (WebSocket) are answered as plain HTTP requests, without a warning.
- A connection closes by lingering: once the answer is out our side is shut for writing, and what
  the client still sends is read and dropped until it closes its side or `LINGER` seconds pass.
  Closing at once with unread bytes in the socket (a head refused after its first 16 KB, a body
  refused by its Content-Length while it is still arriving) makes the kernel reset the connection,
  and the client may lose the answer.
"""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol

CLIENT_EOF = "aspire.client_eof"  # scope key set when the client half-closes during its request
SECURITY_HEADERS = {  # on every answer, the app's and the refusals of a request h11 cannot parse
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
HEAD_TIMEOUT = 15.0
LINGER = 2.0  # seconds a closing connection waits for the client to stop sending


class LingeringTransport:
    """The connection's transport, whose close() lingers (see the module notes); the rest passes through."""

    def __init__(self, transport, linger_close) -> None:
        self.raw = transport
        self.linger_timer = None  # the final close, scheduled once close() was called
        self._linger_close = linger_close

    @property
    def lingering(self) -> bool:
        return self.linger_timer is not None

    def close(self) -> None:
        self._linger_close()

    def is_closing(self) -> bool:
        return self.lingering or self.raw.is_closing()

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


class JSONErrorsH11Protocol(H11Protocol):
    """H11Protocol answering protocol errors in JSON, with a request-head deadline and half-close handling."""

    head_timeout = HEAD_TIMEOUT

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._protocol_error: h11.RemoteProtocolError | None = None
        self._head_timer = None
        self._client_done = False  # the client half-closed: answer what it sent, then close
        next_event = self.conn.next_event

        def recording_next_event():  # remember why h11 refused, for send_400_response
            try:
                return next_event()
            except h11.RemoteProtocolError as exc:
                self._protocol_error = exc
                raise

        self.conn.next_event = recording_next_event

    # ---- head deadline ------------------------------------------------------------------------------
    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.transport = LingeringTransport(transport, self._linger_close)
        self._arm_head_timer()

    def connection_lost(self, exc) -> None:
        self._cancel_head_timer()
        if self.transport.lingering:
            self.transport.linger_timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.transport.lingering:
            return  # closing: what the client still sends is dropped
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._cancel_head_timer()  # a request is being answered; the app bounds its body read

    def on_response_complete(self) -> None:
        super().on_response_complete()  # starts the next pipelined request, when h11 holds one complete
        if self.transport.is_closing():
            return
        if self._client_done:
            cycle = self.cycle
            if cycle is None or cycle.response_complete:
                self.transport.close()  # every request the client sent is answered, and no more can come
                return
            self._client_eof(cycle)
        self._arm_head_timer()

    # ---- half-close and errors ----------------------------------------------------------------------
    def eof_received(self) -> bool | None:
        if self.transport.lingering:
            return None  # the client stopped sending while we close: close now
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return None  # between requests: close
        self._client_done = True  # answer this request and those pipelined after it (on_response_complete)
        self._client_eof(cycle)
        return True  # keep our side open to answer

    @staticmethod
    def _client_eof(cycle) -> None:
        """The client sends no more: a request whose body is incomplete is the last one, its scope marked."""
        if cycle.more_body:
            cycle.keep_alive = False
            cycle.scope[CLIENT_EOF] = True  # type: ignore[typeddict-unknown-key]
            cycle.message_event.set()

    def _unsupported_upgrade_warning(self) -> None:  # an upgrade request is answered as plain HTTP
        self.logger.debug("upgrade request answered without upgrading")

    def send_400_response(self, msg: str) -> None:
        exc = self._protocol_error
        status = getattr(exc, "error_status_hint", 400) if exc is not None else 400
        status = status if 400 <= status < 600 else 400  # h11's hints: 400, 431, 501 (a transfer coding it lacks)
        reason = (str(exc) if exc is not None and str(exc) else msg)[:200]
        body = json.dumps({"error": f"bad request: {reason}"}).encode("utf-8")
        headers = [(b"content-type", b"application/json; charset=utf-8"), (b"connection", b"close"),
                   (b"content-length", str(len(body)).encode()),
                   *((k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items())]
        try:
            output = self.conn.send(h11.Response(status_code=status, headers=headers, reason=STATUS_PHRASES[status]))
            output += self.conn.send(h11.Data(data=body)) + self.conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:  # a response was already under way: nothing more can be said
            output = b""
        self.transport.write(output)
        self.transport.close()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # the request whose body h11 refused (a bad chunk header after its head) is answered here, or its answer
            # cut short: the app's own answer, still to come, is dropped as for a client gone (it was sent to h11,
            # which refused it, and logged as an internal error with a traceback)
            cycle.disconnected = True
            cycle.message_event.set()

    def _linger_close(self) -> None:
        """Shut our side once the answer is out; drop the client's further bytes until it closes or LINGER passes."""
        transport = self.transport
        raw = transport.raw
        if transport.lingering or raw.is_closing() or not raw.can_write_eof():
            raw.close()
            return
        self._cancel_head_timer()
        try:
            raw.write_eof()
        except OSError:  # the client reset the connection meanwhile (ENOTCONN): nothing to linger for
            raw.close()
            return
        transport.linger_timer = self.loop.call_later(LINGER, raw.close)
        if self.flow is not None:
            self.flow.resume_reading()  # pipelining may have paused reads: drain what comes
