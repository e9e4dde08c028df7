"""How a handle's connections are set up, and the time its statements act at.

A handle (PostgresBackend) has a connection for operations, one that LISTENs
for idle waits and also takes the lease that follows a wake (wakeups.py), and
one per thread waiting for a result, which only LISTENs. `Session.setup`
prepares the first two on every (re)connect: the queue set's schema is
migrated once per handle (checked
only, when read-only), the connection takes a counter slot (an advisory
lock, so no two live connections share a counter row; schema.py), and the
session's options follow the settings: `lock_timeout`, and
`synchronous_commit = off` only for `fsync=False`. The slots are
`connection.SLOTS` per database (advisory locks are not per schema); once
every one is held, a connection counts in row `SLOTS + pid % SLOTS`, which
it may share: still exact (the counter update takes the row's lock), only
slower when two writers meet there. A read-only connection never writes a
counter, so it takes no slot and leaves them to the writers.

`Session.params` binds every statement's common values: the queue's name,
and `t`, the time to act at. `t` is None unless the Queue was given a clock,
so that the server's `now()` decides (`nb_now`): hosts with skewed clocks
then agree on deadlines. An injected clock that steps back is held at the
latest time this handle recorded, so recorded times never go backwards.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any, Final

import psycopg

from ..backend import Settings
from ..errors import JobNotFoundError
from . import sql
from .connection import SLOTS, migrate
from .url import Target

__all__ = ["Session", "listener"]

Conn = psycopg.Connection[tuple[Any, ...]]
_SLOT_CLASS: Final = 0x6E6F63  # "noc": the first key of the counter-slot advisory locks


class Session:
    """The settings of one handle's operation connection, and its acting time."""

    def __init__(self, target: Target, name: str, settings: Settings,
                 clock: Callable[[], float] | None, ensure_queue: bytes) -> None:
        self.target = target
        self.name = name
        self.settings = settings
        self.clock = clock
        self.floor = -math.inf  # the latest time an injected clock gave this handle
        self._floor_lock = threading.Lock()
        self._migrated = False
        self._ensure_queue = ensure_queue

    def setup(self, conn: Conn) -> None:
        settings = self.settings
        if not self._migrated:
            if settings.readonly:
                self._check_version(conn)
            else:
                migrate(conn, self.target)
            self._migrated = True
        options = [f"SET lock_timeout = {max(1, round(settings.lock_timeout * 1000))}"]
        if not settings.readonly:
            options.append(f"SET nobroker.slot = {self._take_slot(conn)}")
        if not settings.fsync:
            options.append("SET synchronous_commit = off")
        for statement in options:
            conn.execute(statement.encode())
        if settings.readonly:
            conn.execute(b"SET default_transaction_read_only = on")
        else:
            conn.execute(self._ensure_queue, {"q": self.name})

    @staticmethod
    def _take_slot(conn: Conn) -> int:
        """The first free counter slot, held (advisory lock) while `conn` lives; a
        shared fallback row once all are held."""
        row = conn.execute("SELECT s FROM generate_series(0, %s) AS s "
                           "WHERE pg_try_advisory_lock(%s, s) LIMIT 1",
                           (SLOTS - 1, _SLOT_CLASS)).fetchone()
        return int(row[0]) if row else SLOTS + conn.info.backend_pid % SLOTS

    def _check_version(self, conn: Conn) -> None:
        row = conn.execute(sql.query("version_table", self.target.schema)).fetchone()
        if row is None or row[0] is None:
            raise JobNotFoundError(self.target.schema, "queue set (schema)")

    def now(self) -> float | None:
        """The time to act at, when the Queue has a clock of its own (else the server's)."""
        if self.clock is None:
            return None
        now = float(self.clock())
        with self._floor_lock:
            if now < self.floor:
                return self.floor
            self.floor = now
            return now

    def params(self, **values: Any) -> dict[str, Any]:
        values["q"] = self.name
        values["t"] = self.now()
        # how long a dependent that a finish cancels is kept (sql/parts/settled.sql)
        values.setdefault("ttl", self.settings.result_ttl)
        return values


def listener(channel: str) -> Callable[[Conn], None]:
    """The setup of a connection that waits for `channel`'s NOTIFYs."""
    def setup(conn: Conn) -> None:
        conn.execute(f'LISTEN "{channel}"'.encode())
    return setup
