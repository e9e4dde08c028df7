"""The dashboard's request handler: routing, the security checks, server-sent events.

It serves three kinds of path: the single page (`/`, `/q/NAME`,
`/q/NAME/job/ID` all answer index.html; the page's own script renders the
view), its static files (package data, read with importlib.resources so the
.pyz serves them too), and the API (api.py) with `/metrics` and the event
stream `/api/events`. It sees the dashboard it serves only as a `Site`, so
it imports nothing of server.py, which starts and stops it.

The checks, in the order they run:

1. Host: the Host header must name this server (127.0.0.1, localhost or
   [::1] at our port, or the --host given), so that a page of another site
   cannot reach us through DNS rebinding. Applies to every request.
2. A change is a POST; --read-only refuses every POST with 403.
3. Same origin: a POST whose Origin header (or Sec-Fetch-Site) says it comes
   from another origin is refused.
4. CSRF: the token must arrive in the `X-Nobroker-Token` header of a request
   whose body is `application/json`. A page of another origin can neither
   set that header nor send that type without a CORS preflight, and the
   server never grants one; the token is never taken from a cookie, the
   query string or a form, which a browser might attach on its own.
5. The token itself, compared in constant time.

Every response carries a Content-Security-Policy that allows only our own
script and style (no inline script, no eval, no framing); the page builds
its DOM with textContent, so a payload, an error or a job id is never
parsed as HTML. Every refusal is a 4xx with a one-line reason as JSON;
an unexpected exception is logged and answered 500 with one line, never a
traceback.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import NobrokerError
from . import api, metrics, stream
from .api import to_json
from .hub import Hub, UnknownQueue

__all__ = ["CSP", "MAX_BODY", "TOKEN_HEADER", "DashboardServer", "RequestHandler", "Site",
           "page_files"]

TOKEN_HEADER = "X-Nobroker-Token"
MAX_BODY = 64 * 1024
MAX_STREAMS = 32  # event streams at once; each holds a thread
KEEPALIVE = 15.0  # seconds between comments on an idle event stream

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
STATIC_TYPES = {"app.js": "text/javascript; charset=utf-8",
                "app.css": "text/css; charset=utf-8",
                "index.html": "text/html; charset=utf-8", "favicon.svg": "image/svg+xml"}

log = logging.getLogger("nobroker.dashboard")


def page_files() -> dict[str, bytes]:
    """The page's files; index.html names each of the others with `?v=` and a hash of
    its bytes, so the browser may cache them for good (a new version is a new URL)."""
    root = resources.files("nobroker.dashboard").joinpath("static")
    files = {name: root.joinpath(name).read_bytes() for name in STATIC_TYPES}
    page = files["index.html"]
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest()[:16]
        page = page.replace(f'"/static/{name}"'.encode(), f'"/static/{name}?v={digest}"'.encode())
    files["index.html"] = page
    return files


class Site(Protocol):
    """What the handler reads of the dashboard it serves (server.py's `Dashboard`)."""

    hub: Hub
    token: str
    readonly: bool
    static: dict[str, bytes]  # page_files()
    streams: threading.BoundedSemaphore  # one per open event stream, MAX_STREAMS in all
    allowed_hosts: set[str]  # the Host header values that name this server
    any_host: bool  # bound to a wildcard address: any Host names it


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True
    site: Site


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class RequestHandler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"
    # Headers and body are two writes: without TCP_NODELAY the body waits for the
    # client's delayed ACK of the headers on a kept-alive connection (40 ms a request).
    disable_nagle_algorithm = True
    server_version = "nobroker-dashboard"
    sys_version = ""
    error_content_type = "text/plain; charset=utf-8"
    error_message_format = "%(code)d %(message)s\n"

    @property
    def site(self) -> Site:
        return self.server.site

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # -- responses ----------------------------------------------------------

    def _headers(self, status: int, content_type: str, length: int | None,
                 cache: str = "no-store") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", cache)
        self.end_headers()

    def _send(self, status: int, body: bytes, content_type: str,
              cache: str = "no-store") -> None:
        self._headers(status, content_type, len(body), cache)
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, to_json(value).encode() + b"\n", "application/json")

    def _refuse(self, status: int, reason: str) -> None:
        self.close_connection = True
        self._json(status, {"error": reason.splitlines()[0] if reason else "refused"})

    # -- dispatch -----------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch(self._get)

    def do_HEAD(self) -> None:
        self._dispatch(self._get)

    def do_POST(self) -> None:
        self._dispatch(self._post)

    def _not_allowed(self) -> None:
        self._refuse(405, f"method {self.command} is not allowed")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def _dispatch(self, route: Any) -> None:
        try:
            self._check_host()
            route()
        except _Refused as exc:
            self._refuse(exc.status, exc.reason)
        except api.ApiError as exc:
            self._refuse(exc.status, exc.reason)
        except UnknownQueue as exc:
            self._refuse(404, str(exc))
        except NobrokerError as exc:  # the queue said no: locked, damaged, closed
            self._refuse(409, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug of ours: one line to the client, details to the log
            log.exception("dashboard request %s %s failed", self.command, self.path)
            self._refuse(500, f"internal error ({type(exc).__name__}); see the server's log")

    def _check_host(self) -> None:
        host = (self.headers.get("Host") or "").lower()
        if not self.site.any_host and host not in self.site.allowed_hosts:
            raise _Refused(403, f"Host {host!r} is not this dashboard's address")

    def _parts(self) -> tuple[list[str], dict[str, list[str]]]:
        split = urlsplit(self.path)
        parts = [unquote(p, errors="strict") for p in split.path.split("/")[1:]]
        try:
            query = parse_qs(split.query, keep_blank_values=True, strict_parsing=False,
                             max_num_fields=20)
        except ValueError as exc:
            raise _Refused(400, f"bad query string: {exc}") from None
        return parts, query

    def _get(self) -> None:
        try:
            parts, query = self._parts()
        except UnicodeDecodeError:
            raise _Refused(400, "the path is not valid UTF-8") from None
        hub = self.site.hub
        if parts in ([""], ["q", ""]) or (len(parts) == 2 and parts[0] == "q") or (
                len(parts) == 4 and parts[0] == "q" and parts[2] == "job"):
            self._send(200, self.site.static["index.html"], STATIC_TYPES["index.html"])
            return
        if len(parts) == 2 and parts[0] == "static" and parts[1] in STATIC_TYPES:
            versioned = "v=" in urlsplit(self.path).query  # the URL changes with the bytes
            self._send(200, self.site.static[parts[1]], STATIC_TYPES[parts[1]],
                       "public, max-age=31536000, immutable" if versioned else "no-cache")
            return
        if parts == ["favicon.ico"]:
            self._send(200, self.site.static["favicon.svg"], STATIC_TYPES["favicon.svg"])
            return
        if parts == ["metrics"]:
            self._send(200, metrics.render(hub).encode(), metrics.CONTENT_TYPE)
            return
        if parts == ["healthz"]:
            self._json(200, {"ok": True})
            return
        if not parts or parts[0] != "api":
            raise _Refused(404, f"no page at {urlsplit(self.path).path}")
        rest = parts[1:]
        if rest == ["overview"]:
            self._json(200, api.get_overview(hub))
        elif rest == ["events"]:
            self._events(_one(query, "queue"))
        elif len(rest) >= 2 and rest[0] == "queues":
            self._get_queue(rest[1], rest[2:], query)
        else:
            raise _Refused(404, f"no API endpoint at {urlsplit(self.path).path}")

    def _get_queue(self, name: str, rest: list[str], query: dict[str, list[str]]) -> None:
        hub = self.site.hub
        if not rest:
            self._json(200, api.get_queue(hub, name))
        elif rest == ["series"]:
            self._json(200, api.get_series(hub, name, _number(query, "step", 10.0)))
        elif rest == ["jobs"]:
            state = _one(query, "state") or None
            self._json(200, api.get_jobs(hub, name, state, int(_number(query, "offset", 0)),
                                         int(_number(query, "limit", api.PAGE_DEFAULT))))
        elif len(rest) == 2 and rest[0] == "jobs":
            self._json(200, api.get_job(hub, name, rest[1]))
        elif len(rest) == 3 and rest[0] == "jobs" and rest[2] == "records":
            self._json(200, api.get_records(hub, name, rest[1]))
        else:
            raise _Refused(404, f"no API endpoint at {urlsplit(self.path).path}")

    def _post(self) -> None:
        if self.site.readonly:
            raise _Refused(403, "the dashboard is read-only (--read-only): no changes")
        self._check_origin()
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise _Refused(415, "a change must be sent as application/json")
        given = self.headers.get(TOKEN_HEADER)
        if not given:
            raise _Refused(403, f"a change needs the dashboard's token in the "
                                f"{TOKEN_HEADER} header")
        if not hmac.compare_digest(given.encode(), self.site.token.encode()):
            raise _Refused(403, "the token is wrong")
        body = self._body()
        try:
            parts, _ = self._parts()
        except UnicodeDecodeError:
            raise _Refused(400, "the path is not valid UTF-8") from None
        if len(parts) != 4 or parts[:2] != ["api", "queues"]:
            raise _Refused(404, f"no API endpoint at {urlsplit(self.path).path}")
        self._json(200, api.post_action(self.site.hub, parts[2], parts[3], body))

    def _check_origin(self) -> None:
        origin = self.headers.get("Origin")
        host = self.headers.get("Host") or ""
        if origin is not None and origin.lower() != f"http://{host}".lower():
            raise _Refused(403, f"cross-origin change refused (Origin {origin!r})")
        site = self.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            raise _Refused(403, f"cross-site change refused (Sec-Fetch-Site {site!r})")

    def _body(self) -> dict[str, Any]:
        if self.headers.get("Transfer-Encoding"):
            raise _Refused(411, "send the body with a Content-Length, not chunked")
        length_text = self.headers.get("Content-Length")
        if length_text is None or not length_text.strip().isdigit():
            raise _Refused(411, "a change needs a Content-Length")
        length = int(length_text)
        if length > MAX_BODY:
            raise _Refused(413, f"the body is larger than {MAX_BODY} bytes")
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise _Refused(400, f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _Refused(400, "the body must be a JSON object")
        return body

    # -- server-sent events -------------------------------------------------

    def _events(self, name: str | None) -> None:
        hub = self.site.hub
        if name:
            hub.queue(name)  # UnknownQueue -> 404 before the stream starts
        if not self.site.streams.acquire(blocking=False):
            raise _Refused(503, "too many event streams are open")
        try:
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(f"retry: {stream.RETRY_MS}\n\n".encode())
            while not hub.stopping():
                event = stream.update(hub, name)
                data = to_json(event)
                self.wfile.write(f"event: update\ndata: {data}\n\n".encode())
                self.wfile.flush()
                with hub.changed:
                    woke = hub.changed.wait(KEEPALIVE)
                if not woke and not hub.stopping():
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the page went away
        finally:
            self.site.streams.release()


def _one(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    if not values:
        return None
    if len(values) > 1:
        raise _Refused(400, f"{key!r} is given more than once")
    return values[0]


def _number(query: dict[str, list[str]], key: str, default: float) -> float:
    text = _one(query, key)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        raise _Refused(400, f"{key} must be a number, not {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise _Refused(400, f"{key} must be finite")
    if key in ("offset", "limit") and value != int(value):
        raise _Refused(400, f"{key} must be a whole number")
    return value
