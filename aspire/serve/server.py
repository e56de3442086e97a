"""HTTP front of the aspect-selection page: the standard library's `ThreadingHTTPServer`.

Routes (anything else is 404, a known route with another method 405; all errors are JSON
`{"error": message}`):

    GET  /                      the page (static/index.html)
    GET  /static/<file>         only the files listed in STATIC (read once at start; no paths)
    GET  /api/info              index size, model, search defaults
    GET  /api/papers?q=&limit=  papers whose title contains q (or whose id is q)
    GET  /api/paper?id=         one paper's sentences with facet labels
    POST /api/search            JSON {"paper_id", "sentences": [..], "k", "rerank"} -> ranked hits

Requests are bounded: bodies of at most MAX_BODY bytes with a Content-Length (411/413 otherwise),
JSON only (415), query strings of at most MAX_QUERY_FIELDS fields; a connection idle for
`timeout` seconds is closed. Unexpected failures are logged with their traceback and answered 500.
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from aspire.serve.service import RequestError, SearchService

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).with_name("static")
STATIC = {  # route -> (file under static/, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}
API_GET = ("/api/info", "/api/papers", "/api/paper")
API_POST = ("/api/search",)
MAX_BODY = 16 * 1024
MAX_QUERY_FIELDS = 8
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def load_static() -> dict[str, tuple[bytes, str]]:
    """The STATIC files' bytes, read once: {route: (body, content type)}."""
    return {route: ((STATIC_DIR / name).read_bytes(), ctype) for route, (name, ctype) in STATIC.items()}


class Handler(BaseHTTPRequestHandler):
    """One request: route, check, answer. `self.server` is an `AspireServer`."""

    server_version = "aspire-serve"
    timeout = 15  # seconds a connection may stay idle (slow clients cannot hold threads)

    # ---- answers ------------------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, ctype: str, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for key, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, payload: dict, extra: dict | None = None) -> None:
        self._send(status, json.dumps(payload, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8",
                   extra)

    def send_error(self, code, message=None, explain=None):  # noqa: D401 - http.server hook
        """Errors raised by http.server itself (bad request line, too long headers, ...) as JSON.

        Always with a status line (http.server would leave it out for a request line it took for
        HTTP/0.9), and an unsupported HTTP version is the client's error: 400, not 505.
        """
        self.close_connection = True
        self.request_version = "HTTP/1.0"
        if code == HTTPStatus.HTTP_VERSION_NOT_SUPPORTED:
            code, message = HTTPStatus.BAD_REQUEST, message or "unsupported HTTP version"
        try:
            short = self.responses.get(code, ("error",))[0]
        except AttributeError:
            short = "error"
        if not hasattr(self, "command") or self.command is None:
            self.command = "GET"
        self._json(int(code), {"error": message or short})

    def log_message(self, format, *args):  # http.server's access log -> logging (quiet by default)
        log.debug("%s %s", self.address_string(), format % args)

    # ---- dispatch -----------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def __getattr__(self, name: str):
        if name.startswith("do_"):  # any other method: 405 rather than http.server's 501
            return lambda: self._dispatch(name[3:])
        raise AttributeError(name)

    def _dispatch(self, method: str) -> None:
        try:
            parts = urlsplit(self.path)
            route = parts.path
            if route in self.server.static:
                self._need(method, ("GET", "HEAD"))
                body, ctype = self.server.static[route]
                self._send(200, body, ctype)
            elif route in API_GET:
                self._need(method, ("GET",))
                self._json(200, self._get(route, self._query(parts.query)))
            elif route in API_POST:
                self._need(method, ("POST",))
                self._json(200, self.server.service.search(self._body()))
            else:
                raise RequestError(404, f"no such route {route[:100]!r}")
        except RequestError as err:
            extra = {"Allow": ", ".join(err.allow)} if getattr(err, "allow", None) else None
            if err.status in (411, 413):
                self.close_connection = True  # the unread body must not be taken for the next request
            self._json(err.status, {"error": err.message}, extra)
        except Exception:
            log.exception("request %s %s failed", method, self.path[:200])
            self.close_connection = True
            self._json(500, {"error": "internal error (logged by the server)"})

    @staticmethod
    def _need(method: str, allowed: tuple[str, ...]) -> None:
        if method not in allowed:
            err = RequestError(405, f"method {method} not allowed here; use {', '.join(allowed)}")
            err.allow = allowed
            raise err

    @staticmethod
    def _query(query: str) -> dict[str, str]:
        try:
            fields = parse_qs(query, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_QUERY_FIELDS)
        except ValueError as exc:
            raise RequestError(400, f"bad query string: {exc}") from None
        if any(len(v) > 1 for v in fields.values()):
            raise RequestError(400, "repeated query parameter")
        return {k: v[0] for k, v in fields.items()}

    def _get(self, route: str, args: dict[str, str]) -> dict:
        service: SearchService = self.server.service
        if route == "/api/info":
            return service.info()
        if route == "/api/paper":
            if "id" not in args:
                raise RequestError(400, "give the paper as ?id=PAPER_ID")
            return service.paper(args["id"])
        limit = args.get("limit", "20")
        if not limit.isdigit() or len(limit) > 4:
            raise RequestError(400, f"limit must be a positive integer, got {limit[:20]!r}")
        return service.find_papers(args.get("q", ""), int(limit))

    def _body(self):
        length = self.headers.get("Content-Length")
        if length is None:
            raise RequestError(411, "a POST needs a Content-Length header")
        if not length.strip().isdigit():
            raise RequestError(400, "Content-Length must be a non-negative integer")
        size = int(length)
        if size > MAX_BODY:
            raise RequestError(413, f"request body of {size} bytes is too large (at most {MAX_BODY})")
        ctype = self.headers.get("Content-Type", "")
        if ctype.split(";")[0].strip().lower() != "application/json":
            if size:
                self.rfile.read(size)
            raise RequestError(415, "the body must be JSON (Content-Type: application/json)")
        raw = self.rfile.read(size)
        if len(raw) != size:
            raise RequestError(400, f"body ended after {len(raw)} of {size} bytes")
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RequestError(400, f"the body is not valid JSON: {exc}") from None
        except RecursionError:
            raise RequestError(400, "the body's JSON is nested too deeply") from None


class AspireServer(ThreadingHTTPServer):
    """A threading HTTP server holding the SearchService and the static files."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], service: SearchService) -> None:
        self.service = service
        self.static = load_static()
        super().__init__(address, Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


def make_server(service: SearchService, host: str = "127.0.0.1", port: int = 0) -> AspireServer:
    """A server bound to (host, port) (port 0: any free port; see `.url`); call `serve_forever()`."""
    return AspireServer((host, port), service)
