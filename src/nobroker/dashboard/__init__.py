"""nobroker's dashboard: a live view of a directory's queues over HTTP (stdlib only).

Layers, in dependency order:

    hub.py      which queues the directory holds, one open Queue each, and a
                ring buffer of their stats() sampled every second
    records.py  a job's raw log records, where the backend can list them
    api.py      the JSON API: one function per endpoint, no HTTP in it
    metrics.py  /metrics in the Prometheus text format
    handler.py  routing, the token / CSRF / same-origin checks, event streams
    server.py   the Dashboard: starts, serves and stops the HTTP server
    watch.py    `nobroker stats --watch`, the terminal's small cousin
    static/     the page: index.html, app.css, app.js (package data)

Everything reads queues through the public Queue API, so the dashboard
works on whatever backend the Queue stands on.
"""

from __future__ import annotations

from .server import TOKEN_ENV, Dashboard

__all__ = ["Dashboard", "TOKEN_ENV"]
