"""The page's HTTP routes: a FastAPI app over a `ServiceHolder`.

Routes (anything else is 404, a known route with another method 405; every error is JSON
`{"error": message}` with a 4xx status for any client mistake; every GET route answers HEAD too, as HTTP
requires of a server, with the GET's status and headers and no body):

    GET  /                            the page (static/index.html); /static/<file> only the files in STATIC
    GET  /api/info                    index size, model, search defaults, generation, reload error
    GET  /api/papers?q=&limit=&offset=   papers whose id starts with q or whose title holds its words, a page at a time
    GET  /api/paper?id=               one paper's sentences with facet labels
    POST /api/search                  JSON `SearchBody` (aspire.serve.requests) -> ranked, explained hits
    POST /api/reload                  open the index's live generation now if it is not the one served (no body)

Every answer of the app carries `X-Aspire-Generation` (the name of the index generation it was answered from;
JSON answers also say it as `generation`), `X-Aspire-Generation-Digest` (the digest of that generation's manifest,
`aspire.serve.service.generation_key`: the name alone does not tell two builds apart, as an index deleted and built
again starts again at gen-000001; absent for a service opened from no directory), `Cache-Control: no-store` and the
SECURITY_HEADERS; a request the HTTP parser refuses (`aspire.serve.protocol`) is answered with the SECURITY_HEADERS
alone.
Bounds: a request target of at most MAX_TARGET bytes (414; an absolute-form one, `http://host/path`, is taken as
its path), headers of at most MAX_HEADERS bytes (431), no Transfer-Encoding beside a Content-Length or in an
HTTP/1.0 request (400, the connection closed), query strings of at most MAX_QUERY_FIELDS fields of UTF-8 text,
no repeated fields, none on the routes that take no parameters (/api/info, /api/search, /api/reload); a search's
body needs a Content-Length (411), at most MAX_BODY bytes (413), JSON (415), complete within `body_timeout`
seconds (408) and not cut short by the client (400); POST /api/reload takes no body (400 for a Content-Length
other than 0 or a Transfer-Encoding). Unexpected failures are logged with their
traceback (the only tracebacks the server logs) and answered 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path
from urllib.parse import parse_qs, unquote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import Response

from aspire.data.guards import SURROGATE
from aspire.serve.protocol import CLIENT_EOF, SECURITY_HEADERS
from aspire.serve.reload import ServiceHolder
from aspire.serve.requests import PaperQuery, PapersQuery, RequestError, check, parse_json
from aspire.text import cut_whole

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).with_name("static")
STATIC = {  # route -> (file under static/, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
    "/static/favicon.svg": ("favicon.svg", "image/svg+xml"),
    "/favicon.ico": ("favicon.svg", "image/svg+xml"),
}
MAX_BODY = 16 * 1024
MAX_QUERY_FIELDS = 8
MAX_TARGET = 4096  # bytes of path and query string
MAX_HEADERS = 16 * 1024  # bytes of header lines (h11 refuses a head it holds incomplete at this size)
BODY_TIMEOUT = 10.0
CLOSE_AFTER = {400, 408, 411, 413, 415}  # a body may be left unread: the connection is not reused
GENERATION = "aspire.generation"  # scope key: the service (its generation) a route answered from
_LENGTH = re.compile(r"[0-9]{1,20}")
_ABSOLUTE = re.compile(rb"https?://([^/]*)(.*)", re.IGNORECASE | re.DOTALL)  # an absolute-form target's authority, path


def load_static() -> dict[str, tuple[bytes, str]]:
    """The STATIC files' bytes, read once: {route: (body, content type)}."""
    return {route: ((STATIC_DIR / name).read_bytes(), ctype) for route, (name, ctype) in STATIC.items()}


def json_response(status: int, payload: dict, headers: dict | None = None) -> Response:
    """JSON with finite numbers only (a NaN in an answer is a bug, raised here, not sent)."""
    body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
    return Response(body, status, headers, media_type="application/json; charset=utf-8")


def error_response(status: int, message: str, headers: dict | None = None) -> Response:
    extra = dict(headers or {})
    if status in CLOSE_AFTER:
        extra["Connection"] = "close"
    return json_response(status, {"error": message}, extra)


def query_args(request: Request, takes: bool = True) -> dict[str, str]:
    """The query string as {name: value}: at most MAX_QUERY_FIELDS fields, none repeated, each UTF-8 text
    (raw or %-escaped); with `takes` False (a route without parameters), no field at all."""
    try:  # bytes that are not UTF-8 become surrogates here, refused below (once silently "\ufffd")
        fields = parse_qs(request.scope["query_string"].decode("utf-8", "surrogateescape"), keep_blank_values=True,
                          max_num_fields=MAX_QUERY_FIELDS, errors="surrogateescape")
    except ValueError:  # parse_qs's one refusal here (once said as "bad query string: Max number of fields exceeded")
        raise RequestError(400, f"bad query string: more than {MAX_QUERY_FIELDS} fields (at most {MAX_QUERY_FIELDS}; "
                                "each '&' starts one)") from None
    for name, values in fields.items():
        if SURROGATE.search(name + "".join(values)):
            raise RequestError(400, f"query parameter {_printable(name)} is not UTF-8 text")
    repeated = sorted(k for k, v in fields.items() if len(v) > 1)
    if repeated:
        raise RequestError(400, f"repeated query parameter(s) {repeated[:5]}")
    if fields and not takes:  # once ignored: `POST /api/search?k=5` searched with the default k
        path = request.url.path
        raise RequestError(400, f"unknown query parameter(s) {', '.join(_printable(k) for k in sorted(fields)[:5])}: {path} "
                                "takes none" + ("; a search's fields go in its JSON body" if path == "/api/search" else ""))
    return {k: v[0] for k, v in fields.items()}


def _printable(name: str) -> str:
    """A query parameter's name for a message: quoted, at most 40 characters, undecodable bytes as escapes."""
    return "'" + cut_whole(name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"), 40) + "'"


async def read_json(request: Request, timeout: float):
    """The request's JSON body, read within `timeout` seconds; RequestError for every way it can be wrong."""
    length = request.headers.get("content-length")
    if length is None:
        raise RequestError(411, "a POST needs a Content-Length header (chunked bodies are not taken)")
    if not _LENGTH.fullmatch(length):  # h11 checks this too; the app does not rely on it
        raise RequestError(400, "Content-Length must be a non-negative integer of ASCII digits")
    size = int(length)
    if size > MAX_BODY:
        raise RequestError(413, f"request body of {size} bytes is too large (at most {MAX_BODY})")
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise RequestError(415, "the body must be JSON (Content-Type: application/json)")
    body = bytearray()
    deadline = asyncio.get_running_loop().time() + timeout
    while len(body) < size:
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            message = await asyncio.wait_for(request.receive(), max(remaining, 0.0))
        except (TimeoutError, asyncio.TimeoutError):  # distinct classes before Python 3.11 (a slow body was a 500)
            raise RequestError(408, f"body ended after {len(body)} of {size} bytes: no more within {timeout:g} s") from None
        if message["type"] == "http.disconnect":
            raise RequestError(400, f"the client left after {len(body)} of {size} bytes")
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
        if request.scope.get(CLIENT_EOF):
            raise RequestError(400, f"body ended after {len(body)} of {size} bytes (the client sent no more)")
    if len(body) != size:
        raise RequestError(400, f"body ended after {len(body)} of {size} bytes")
    return parse_json(bytes(body))


def no_body(request: Request) -> None:
    """Refuse a body on a POST that takes none (/api/reload): RequestError(400) for a Content-Length other than 0 or
    a Transfer-Encoding (once read by nothing: `{"generation": "gen-000001"}` or 20 KB of anything was answered 200)."""
    length = request.headers.get("content-length")
    if length is not None and not _LENGTH.fullmatch(length):
        raise RequestError(400, "Content-Length must be a non-negative integer of ASCII digits")
    if "transfer-encoding" in request.headers or (length is not None and int(length) != 0):
        raise RequestError(400, f"{request.url.path} takes no body: send the POST without one "
                                "(Content-Length: 0, or no Content-Length)")


def generation_headers(service) -> list[tuple[bytes, bytes]]:
    """The headers naming `service`'s generation: its name and, where it was opened from a directory, its manifest's
    digest (once the name alone: a page open across a rebuild that started again at gen-000001 saw no change)."""
    headers = [(b"x-aspire-generation", (service.generation or "").encode("ascii", "replace"))]
    if service.key is not None:
        headers.append((b"x-aspire-generation-digest", service.key[1].encode("ascii", "replace")))
    return headers


def static_file(body: bytes, ctype: str):
    """A route endpoint answering one static file."""
    async def endpoint(request: Request) -> Response:
        return Response(body, 200, media_type=ctype)

    return endpoint


_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")  # the order an Allow header names them


def create_app(holder: ServiceHolder, body_timeout: float = BODY_TIMEOUT) -> FastAPI:
    """The FastAPI app answering the page's routes from `holder`'s live service."""
    app = FastAPI(title="aspire", docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False)
    static = load_static()

    def use(request: Request):
        service = holder.get()
        request.scope[GENERATION] = service
        return service

    for route, (body, ctype) in static.items():
        app.add_route(route, static_file(body, ctype), methods=["GET", "HEAD"], include_in_schema=False)

    @app.api_route("/api/info", methods=["GET", "HEAD"])
    def info(request: Request) -> Response:
        query_args(request, takes=False)
        return json_response(200, {**use(request).info(), "reload_error": holder.reload_error})

    @app.api_route("/api/papers", methods=["GET", "HEAD"])
    def papers(request: Request) -> Response:
        query = check(PapersQuery, query_args(request))
        return json_response(200, use(request).find_papers(query.q, query.limit, query.offset))

    @app.api_route("/api/paper", methods=["GET", "HEAD"])
    def paper(request: Request) -> Response:
        args = query_args(request)
        if "id" not in args:
            raise RequestError(400, "give the paper as ?id=PAPER_ID")
        return json_response(200, use(request).paper(check(PaperQuery, args).id))

    @app.post("/api/search")
    async def search(request: Request) -> Response:
        query_args(request, takes=False)
        body = await read_json(request, body_timeout)
        service = use(request)
        return json_response(200, await run_in_threadpool(service.search, body))

    @app.post("/api/reload")
    async def reload(request: Request) -> Response:
        query_args(request, takes=False)
        no_body(request)
        result, request.scope[GENERATION] = await run_in_threadpool(holder.reload_service)
        if result["error"]:
            return error_response(503, f"could not open the index's live generation ({result['error']}); "
                                       f"still serving {result['generation']}")
        return json_response(200, result)

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError) -> Response:
        return error_response(exc.status, exc.message)

    @app.exception_handler(HTTPException)
    async def routing(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 404:
            return error_response(404, f"no such route {cut_whole(request.url.path, 100)!r}")
        if exc.status_code == 405:
            # starlette joins a route's methods from a set: "GET, HEAD" in one process, "HEAD, GET" in another
            named = {m.strip() for m in (exc.headers or {}).get("Allow", "").split(",") if m.strip()}
            allow = ", ".join(sorted(named, key=lambda m: (_METHOD_ORDER.index(m) if m in _METHOD_ORDER else 99, m)))
            return error_response(405, f"method {request.method[:20]} not allowed here; use {allow}",
                                  {"Allow": allow})
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        return error_response(400, f"invalid request: {exc.errors()[:1]}")

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> Response:  # logged once by Guard
        return error_response(500, "internal error (logged by the server)")

    return app


class Guard:
    """Outermost ASGI layer: refuses HTTP versions other than 1.x (400; a later 1.x is read as 1.1, RFC 9110 2.5),
    request targets over MAX_TARGET bytes (414), headers over MAX_HEADERS bytes (431) and a Transfer-Encoding
    beside a Content-Length or in an HTTP/1.0 request (400, the connection closed: RFC 9112 6.1); takes an
    absolute-form target (`GET http://host/api/info`, RFC 9112 3.2.2) as its path, the host its authority, and refuses
    other targets that do not start with "/" (400; `OPTIONS *` aside); adds the common headers and the generation to
    every answer, and logs an unexpected failure's traceback once."""

    def __init__(self, app, holder: ServiceHolder) -> None:
        self.app = app
        self.holder = holder
        self.headers = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_with_headers(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *self.headers,
                                                  *generation_headers(scope.get(GENERATION) or self.holder.service)]}
            await send(message)

        refused = None
        version = scope.get("http_version", "")
        if re.fullmatch(r"1\.[2-9]", version):  # a later HTTP/1 minor version: read as 1.1 (h11 frames it so)
            scope["http_version"] = "1.1"  # in place, as the rewrites below: the server marks this scope (CLIENT_EOF)
        names = {k for k, _ in scope.get("headers", [])}  # lower-case (the server's)
        absolute = _ABSOLUTE.fullmatch(scope.get("raw_path", b""))
        if scope.get("http_version") not in ("1.0", "1.1"):
            refused = error_response(400, f"unsupported HTTP version {version[:10]!r}")
        elif len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) > MAX_TARGET:
            refused = error_response(414, f"request target longer than {MAX_TARGET} bytes")
        elif sum(len(k) + len(v) + 4 for k, v in scope.get("headers", [])) > MAX_HEADERS:
            refused = error_response(431, f"request headers too long (at most {MAX_HEADERS} bytes)")
        elif b"transfer-encoding" in names and (b"content-length" in names or scope["http_version"] == "1.0"):
            # once answered on a connection kept open: the two framings can disagree (request smuggling)
            refused = error_response(400, "Transfer-Encoding " + ("beside a Content-Length" if b"content-length" in names
                                                                  else "in an HTTP/1.0 request")
                                     + ": the body's framing is ambiguous (RFC 9112 6.1)")
        elif absolute is not None and not absolute.group(1):
            refused = error_response(400, "the request target is an http URI without a host")
        elif absolute is not None:  # once 404 "no such route 'http://...'", as http.client sends an absolute URL
            raw = absolute.group(2) or b"/"
            headers = [(k, v) for k, v in scope.get("headers", []) if k != b"host"]
            scope.update(raw_path=raw, path=scope.get("root_path", "") + unquote(raw.decode("ascii")),
                         headers=[*headers, (b"host", absolute.group(1))])
        elif not scope.get("raw_path", b"").startswith(b"/") and (scope.get("method"), scope.get("raw_path")) != (
                "OPTIONS", b"*"):  # once 404 "no such route '/api/info'" for `GET api/info`: a route that exists
            query = scope.get("query_string", b"")
            target = (scope.get("raw_path", b"") + (b"?" + query if query else b"")).decode("ascii", "replace")
            refused = error_response(400, f"request target {target[:40]!r} is neither a path starting with '/' nor "
                                          "an http URI (RFC 9112 3.2)")
        if refused is not None:
            await refused(scope, receive, send_with_headers)
            return
        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            log.exception("request %s %s failed", scope.get("method"), scope.get("path", "")[:200])
            if not started:
                await error_response(500, "internal error (logged by the server)")(scope, receive, send_with_headers)
