"""Connections to the server: opened lazily, reopened after a break, errors translated.

`Link` owns one psycopg connection. `Link.run(operation, fn)` calls
`fn(connection)` and turns every psycopg error into one of errors.py's:
a lock wait past `lock_timeout` is LockTimeoutError; a broken or refused
connection is ConnectionLostError (the connection is dropped, and the next
call connects again, after a pause that doubles with each failure up to
`MAX_PAUSE`, so a dead server is not hammered); anything else the server
refuses is DatabaseError. Messages pass through `Target.scrub`, so a password
never shows.

On connect, a link sets its session up (`setup`): the queue set's schema is
migrated if needed, the connection takes a counter slot (schema.py), and
`synchronous_commit` is turned off only when the Queue was opened with
`fsync=False`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

import psycopg
from psycopg import errors as pgerrors

from ..errors import ConnectionLostError, DatabaseError, LockTimeoutError, QueueClosedError
from . import schema, sql
from .url import Target

__all__ = ["Link", "LinkBusy", "connect", "migrate", "changed", "error_text", "SLOTS"]

T = TypeVar("T")
# Counter rows per queue; each writing connection holds one while it lives, and a
# handle has two (operations, idle waits), so 128 handles on one database before
# two connections share a row. stats() sums one row per slot that ever wrote: at
# 256 (or 512 with the fallback rows) that is still a fraction of a millisecond.
SLOTS: Final = 256
FIRST_PAUSE: Final = 0.05
MAX_PAUSE: Final = 2.0
_ADVISORY_CLASS: Final = 0x6E6F62  # "nob": first key of nobroker's advisory locks


def connect(target: Target, timeout: float = 10.0) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection; ConnectionLostError (password scrubbed) if it fails."""
    try:
        return psycopg.connect(target.conninfo, autocommit=True,
                               connect_timeout=max(1, round(timeout)),
                               application_name="nobroker")
    except psycopg.Error as exc:
        raise ConnectionLostError(target.shown, "connect", error_text(target, exc)) from None


def migrate(conn: psycopg.Connection[tuple[object, ...]], target: Target) -> tuple[int, int]:
    """Bring the queue set's schema to schema.LATEST; returns (version before, after)."""
    name = target.schema
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_ADVISORY_CLASS, name))
        current = _version(conn, name)
        if current > schema.LATEST:
            raise DatabaseError(target.shown, "open",
                                f"schema {name!r} is at version {current}, newer than this "
                                f"nobroker knows ({schema.LATEST}): upgrade nobroker")
        if current < schema.LATEST:
            for statement in schema.migrate_sql(name, current):
                conn.execute(statement.encode())
            conn.execute(sql.query("version_record", name), {"version": schema.LATEST})
    return current, schema.LATEST


def _version(conn: psycopg.Connection[tuple[object, ...]], name: str) -> int:
    row = conn.execute(sql.query("version_table", name)).fetchone()
    if row is None or row[0] is None:
        return 0
    found = conn.execute(sql.query("version_read", name)).fetchone()
    return int(found[0]) if found and found[0] is not None else 0  # type: ignore[call-overload]


def changed(conn: psycopg.Connection[tuple[Any, ...]], statement: bytes,
            params: dict[str, Any]) -> int:
    """The rows a statement ending in `SELECT count(*)` changed."""
    row = conn.execute(statement, params).fetchone()
    assert row is not None
    return int(row[0])


def error_text(target: Target, exc: BaseException) -> str:
    """A psycopg error as one line, the password scrubbed (its type if it has no text)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return target.scrub(text)


class LinkBusy(Exception):
    """Link.run_if_idle: the connection is in use by another thread, or not open."""


class Link:
    """One connection, shared by a handle's threads one call at a time."""

    def __init__(self, target: Target, *, setup: Callable[[psycopg.Connection[
                     tuple[object, ...]]], None], lock_timeout: float) -> None:
        self.target = target
        self._setup = setup
        self._lock_timeout = lock_timeout
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._lock = threading.RLock()
        self._closed = False
        self._failures = 0
        self._retry_at = 0.0

    def run(self, operation: str, fn: Callable[[psycopg.Connection[tuple[object, ...]]], T]
            ) -> T:
        with self._lock:
            return self._run(operation, fn, self._connection(operation))

    def run_if_idle(self, operation: str,
                    fn: Callable[[psycopg.Connection[tuple[object, ...]]], T]) -> T:
        """`run`, but only on a connection that is open and that no other thread is
        using at this moment; LinkBusy (nothing run) otherwise."""
        if not self._lock.acquire(blocking=False):
            raise LinkBusy
        try:
            if self._closed or self._conn is None or self._conn.closed:
                raise LinkBusy
            return self._run(operation, fn, self._conn)
        finally:
            self._lock.release()

    def _run(self, operation: str, fn: Callable[[psycopg.Connection[tuple[object, ...]]], T],
             conn: psycopg.Connection[tuple[object, ...]]) -> T:
        try:
            return fn(conn)
        except pgerrors.LockNotAvailable:
            raise LockTimeoutError(self.target.shown, self._lock_timeout, None) from None
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if conn.broken or conn.closed:
                self._drop()
                raise ConnectionLostError(self.target.shown, operation,
                                          error_text(self.target, exc)) from None
            raise DatabaseError(self.target.shown, operation,
                                error_text(self.target, exc)) from None
        except psycopg.Error as exc:
            raise DatabaseError(self.target.shown, operation,
                                error_text(self.target, exc)) from None

    def _connection(self, operation: str) -> psycopg.Connection[tuple[object, ...]]:
        if self._closed:
            raise QueueClosedError("the queue is closed")
        if self._conn is not None and not self._conn.closed:
            return self._conn
        now = time.monotonic()
        if now < self._retry_at:
            raise ConnectionLostError(self.target.shown, operation,
                                      f"not reconnecting for {self._retry_at - now:.2f}s "
                                      "after a failed attempt")
        try:
            conn = connect(self.target, max(self._lock_timeout, 1.0))
            try:
                self._setup(conn)
            except psycopg.Error as exc:
                conn.close()
                raise ConnectionLostError(self.target.shown, operation,
                                          error_text(self.target, exc)) from None
        except ConnectionLostError:
            pause = min(FIRST_PAUSE * 2 ** self._failures, MAX_PAUSE)
            self._failures += 1
            self._retry_at = time.monotonic() + pause
            raise
        self._failures = 0
        self._conn = conn
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()

    def interrupt(self) -> None:
        """Close from another thread (without the lock) so that a blocked wait ends."""
        self._closed = True
