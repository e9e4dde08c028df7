"""How finished rows leave the table: a handle's periodic sweeps, and compact().

A finished row (acked, cancelled) stays until its `expires_at` (`retention`:
the key's retention, the result's ttl), invisible after it, and is deleted
by a sweep: `sql/queries/sweep.sql`, a batch of at most 1,000 rows per
statement, with the watches of waiters that gave up (sweep_watches.sql).
A handle sweeps now and then from its own calls (`maybe`): when idle, at
most every `EVERY` seconds; when busy, once the last sweep is `OVERDUE`
old, since a sweep is a statement and a commit of its own, kept off the
enqueue-to-pickup path. A read-only handle never sweeps.

Compaction on PostgreSQL (`compact`) is the same sweep run to the end: every
expired finished row deleted, batch after batch, then the live rows and
the keys still held counted. What is deleted was invisible already, so
nothing a reader sees changes. The storage itself is PostgreSQL's:
autovacuum makes the space of deleted rows reusable (a VACUUM FULL, which
would return it to the operating system, locks the table: an operator's
decision, never nobroker's), so there are no generations and no byte
counts to report.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Final

import psycopg

from ..backend import Settings
from ..errors import NobrokerError
from ..models import CompactionResult
from .connection import Link, changed
from .statements import Statements

__all__ = ["Sweeper", "retention", "result_keep", "EVERY", "OVERDUE"]

Conn = psycopg.Connection[tuple[Any, ...]]

EVERY: Final = 1.0  # seconds between a handle's sweeps while it is idle
OVERDUE: Final = 10.0  # ... and while it is busy leasing


def kept_result(settings: Settings, result_text: str | None,
                result_ttl: float | None) -> str | None:
    """The result an ack stores: none when it is kept for no time (a keyed row
    outlives its ack for its key, and must not carry the result along)."""
    ttl = settings.result_ttl if result_ttl is None else result_ttl
    return result_text if ttl > 0 else None


def result_keep(settings: Settings, result_text: str | None,
                result_ttl: float | None) -> float | None:
    """Seconds an acked row's result is shown when less than the row is kept (a keyed
    row's key outlives it: key_retention is longer), else None (as long as the row)."""
    ttl = settings.result_ttl if result_ttl is None else result_ttl
    return float(ttl) if result_text is not None and settings.key_retention > ttl else None


def retention(settings: Settings, result_text: str | None,
              result_ttl: float | None) -> tuple[float, float]:
    """(seconds a keyed row is kept, seconds an unkeyed row is kept) after its ack:
    a keyed row for its key's retention, a row acked with a result for the
    result's ttl (at least), an unkeyed row without one not at all."""
    keyed = settings.key_retention
    if result_text is None:
        return float(keyed), 0.0
    ttl = settings.result_ttl if result_ttl is None else result_ttl
    return float(max(keyed, ttl)), float(ttl)


class Sweeper:
    """One handle's sweeps of its queue's expired finished rows."""

    def __init__(self, link: Link, statements: Statements,
                 params: Callable[..., dict[str, Any]], *, readonly: bool) -> None:
        self._link = link
        self._sql = statements
        self._params = params
        self._readonly = readonly
        self._last = -math.inf

    def maybe(self, every: float) -> None:
        """Sweep one batch if the last sweep is `every` seconds old."""
        now = time.monotonic()
        if now - self._last < every or self._readonly:
            return
        self._last = now
        params = self._params()

        def run(conn: Conn) -> None:
            conn.execute(self._sql.sweep, params)
            conn.execute(self._sql.sweep_watches, params)  # waiters that timed out

        self._link.run("sweep", run)

    def compact(self) -> CompactionResult:
        """Delete every expired finished row (and stale watch); the live rows and
        the keys still held after it. No generations, no bytes: old and new
        generation are 0, and so are bytes before and after (the space is
        autovacuum's to reuse). A read-only handle refuses, as on the file log."""
        if self._readonly:
            raise NobrokerError("queue was opened read-only")
        started = time.perf_counter()
        params = self._params()

        def run(conn: Conn) -> tuple[int, int]:
            while changed(conn, self._sql.sweep, params):
                pass
            conn.execute(self._sql.sweep_watches, params)
            row = conn.execute(self._sql.live, params).fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

        live, keys = self._link.run("compact", run)
        self._last = time.monotonic()
        return CompactionResult(old_generation=0, new_generation=0, bytes_before=0,
                                bytes_after=0, live_jobs=live, remembered_keys=keys,
                                seconds=time.perf_counter() - started)
