"""The dashboard's server: a `Dashboard` starts, serves and stops it.

Theory of operation. One `ThreadingHTTPServer` (a thread per connection)
answers every request with handler.py's `RequestHandler`, which sees this
`Dashboard` as its `Site`: the queues (hub.py), the token, read-only or not,
the page's files and the Host names that reach it. `start()` samples the
queues, then serves from a background thread; `close()` stops serving,
wakes every event stream so that it ends, and closes the queues.
"""

from __future__ import annotations

import secrets
import socket
import threading
from collections.abc import Sequence

from .handler import MAX_STREAMS, TOKEN_HEADER, DashboardServer, RequestHandler, page_files
from .hub import Hub

__all__ = ["Dashboard", "TOKEN_ENV", "TOKEN_HEADER", "new_token"]

TOKEN_ENV = "NOBROKER_DASHBOARD_TOKEN"
MIN_TOKEN_LENGTH = 16
_LOCAL_NAMES = ("127.0.0.1", "localhost", "[::1]")
_WILDCARDS = ("0.0.0.0", "::", "")


def new_token() -> str:
    return secrets.token_urlsafe(24)


class Dashboard:
    """The dashboard for one directory or database URL (showing `queues`, and every
    queue the backend can list): `start()` it, read `url`, `close()` it."""

    def __init__(self, directory: str, *, host: str = "127.0.0.1", port: int = 8321,
                 readonly: bool = False, token: str | None = None,
                 interval: float = 1.0, queues: Sequence[str] = ("default",)) -> None:
        if token is not None and len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(f"the dashboard token must be at least {MIN_TOKEN_LENGTH} "
                             f"characters")
        self.token = token or new_token()
        self.readonly = readonly
        self.hub = Hub(directory, readonly=readonly, interval=interval, queues=queues)
        self.static = page_files()
        self.streams = threading.BoundedSemaphore(MAX_STREAMS)
        server = _IPv6Server if ":" in host else DashboardServer  # an IPv6 address: ::1
        try:
            self.httpd = server((host.strip("[]"), port), RequestHandler)
        except BaseException:
            self.hub.close()  # the URL's queue is open already
            raise
        self.httpd.site = self
        self.host = host
        self.port = int(self.httpd.server_address[1])
        bare = host.strip("[]")
        names = () if host in _WILDCARDS else (f"[{bare}]" if ":" in bare else bare,)
        self.allowed_hosts = {f"{n}:{self.port}" for n in (*_LOCAL_NAMES, *names)}
        self.any_host = host in _WILDCARDS
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        shown = "127.0.0.1" if self.host in _WILDCARDS else self.host.strip("[]")
        if ":" in shown:
            shown = f"[{shown}]"
        return f"http://{shown}:{self.port}/"

    def start(self) -> None:
        """Sample the queues, then serve in a background thread."""
        self.hub.start()
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        name="nobroker-dashboard", daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=10)
        self.hub.close()  # wakes every event stream, which then ends
        self.httpd.server_close()

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _IPv6Server(DashboardServer):
    address_family = socket.AF_INET6
