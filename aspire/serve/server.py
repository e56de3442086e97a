"""The page server: the FastAPI app (aspire.serve.app) on uvicorn, with the h11 protocol of
aspire.serve.protocol (JSON protocol errors, a request-head deadline, half-closed bodies).

`make_server(service_or_holder, host, port)` binds the socket at once (port 0: any free port, see
`.url`), or serves one already bound by `bind(host, port)` (`sock=`: a command binds before it loads a
model); `serve_forever()` runs uvicorn in the calling thread until `shutdown()` (from another
thread) or SIGINT / SIGTERM (in the main thread); `server_close()` releases the socket.
Beyond MAX_CONNECTIONS open connections uvicorn itself answers 503 (plain text: an overload, not a
client's mistake).
"""

from __future__ import annotations

import math
import socket
import threading

import uvicorn

from aspire.serve.app import BODY_TIMEOUT, Guard, create_app
from aspire.serve.protocol import HEAD_TIMEOUT, JSONErrorsH11Protocol
from aspire.serve.reload import ServiceHolder
from aspire.serve.service import SearchService

MAX_CONNECTIONS = 512  # beyond this many open connections uvicorn answers 503
KEEP_ALIVE = 5  # seconds an idle keep-alive connection stays open after a response


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening socket on (host, port) (port 0: any free port); OSError naming the address when it cannot be had
    (in use, a host that does not resolve); ValueError naming the port when it is not an int in 0..65535 (once an
    OverflowError or a TypeError from the socket module, which callers did not report as a user's mistake)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer in 0..65535, got {port!r}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # "::1" binds IPv6, names and dotted IPv4
    return socket.create_server((host, port), family=family, backlog=128)


class AspireServer:
    """A uvicorn server over a bound socket, answering from a ServiceHolder.

    Args:
        holder: the live service (and its reloads).
        host, port: the address to bind (port 0: any free port).
        body_timeout: seconds a request body may take to arrive (408 after).
        head_timeout: seconds a connection may take to send a complete request head (closed after).
        sock: a listening socket from `bind` to serve instead of binding (host, port).
    Each timeout is a finite number > 0 (ValueError naming it, before the socket is bound).
    """

    def __init__(self, holder: ServiceHolder, host: str = "127.0.0.1", port: int = 0,
                 body_timeout: float = BODY_TIMEOUT, head_timeout: float = HEAD_TIMEOUT,
                 sock: socket.socket | None = None) -> None:
        for name, value in (("body_timeout", body_timeout), ("head_timeout", head_timeout)):
            # once taken as given: a head_timeout <= 0 closed connections unanswered, a body_timeout <= 0 answered
            # every search 408, NaN set no deadline at all
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
        self.holder = holder
        self.socket = sock if sock is not None else bind(host, port)
        self.server_address = self.socket.getsockname()[:2]
        protocol = type("AspireH11Protocol", (JSONErrorsH11Protocol,), {"head_timeout": head_timeout})
        config = uvicorn.Config(Guard(create_app(holder, body_timeout), holder), http=protocol, ws="none",
                                lifespan="off", log_config=None, access_log=False, server_header=False,
                                timeout_keep_alive=KEEP_ALIVE, limit_concurrency=MAX_CONNECTIONS)
        self._uvicorn = uvicorn.Server(config)
        self._stopped = threading.Event()
        self._state = threading.Lock()  # guards _started against a shutdown racing serve_forever's start
        self._started = False  # serve_forever entered (a shutdown then waits for it to return)

    @property
    def service(self) -> SearchService:
        """The service answering now."""
        return self.holder.service

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def serve_forever(self) -> None:
        """Serve until `shutdown()` or SIGINT / SIGTERM; returns at once when `shutdown()` came first."""
        with self._state:
            if self._uvicorn.should_exit:  # shut down before it started (its socket already closed)
                return
            self._started = True
            self._stopped.clear()
        try:
            self._uvicorn.run(sockets=[self.socket])
        finally:
            self._stopped.set()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop `serve_forever` (running in another thread) and wait up to `timeout` seconds for it to return.

        On a server whose `serve_forever` never started, returns at once and closes the socket (once it waited
        the whole `timeout` for a serve_forever that was not running); a later `serve_forever` returns at once."""
        with self._state:
            self._uvicorn.should_exit = True
            started = self._started
        if not started:
            self.socket.close()
            return
        self._stopped.wait(timeout)

    def server_close(self) -> None:
        self.socket.close()


def make_server(service: SearchService | ServiceHolder, host: str = "127.0.0.1", port: int = 0,
                **options) -> AspireServer:
    """A server bound to (host, port); a SearchService is served as it is (no reloads), a
    ServiceHolder with its reloads. `options`: AspireServer's timeouts and `sock`. Call `serve_forever()`."""
    holder = service if isinstance(service, ServiceHolder) else ServiceHolder(None, service=service)
    return AspireServer(holder, host, port, **options)
