"""Writes inside a transaction that is not one call's own: the caller's, or a task's.

Two uses (backend.Transactions; nobroker.transactions is the public side):
- `enqueue_in`: a job written on the application's own connection, inside
  its transaction. The row, its counter update and its wake-up (a
  `pg_notify`, which PostgreSQL sends at commit) are the caller's to commit
  or roll back; nothing here commits. The counter row is the one of the
  fallback slots for that server process (`SLOTS + pid % SLOTS`, set for this
  transaction only), so two applications' open transactions rarely wait for
  each other's counter row, as they would on one shared row.
- `atomic()`: a connection of the handle's own (set up as its operation
  connection: slot, lock_timeout, fsync) in an open transaction, in which an
  `atomic=True` task runs and its ack (`ack_in`, fenced as every ack) is
  written: one commit for both. Connections are kept for reuse, one per
  thread that runs such a task at a time. `ack_in(joined=True)` writes the
  ack in a transaction the application opened (nobroker.transactions.atomic_in:
  Django's), taking a counter slot for that transaction as `enqueue_in` does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

import psycopg

from ..backend import Settings
from ..errors import DatabaseError, NobrokerError
from ..models import Job
from .connection import SLOTS, Link, error_text
from .rows import job_from_row, not_leased
from .session import Session
from .statements import Statements
from .sweeping import kept_result, result_keep, retention
from .url import Target

__all__ = ["Transactional", "enqueue_rows", "Conflict", "retried"]

Conn = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")
_SLOT_FOR_TRANSACTION: Final = (b"SELECT set_config('nobroker.slot', "
                                b"(%(s)s + pg_backend_pid() %% %(s)s)::text, true)")


def enqueue_rows(conn: Conn, sql: Statements, params: dict[str, Any],
                 job_id: str | None) -> Job:
    """enqueue's statements on `conn`: a generated id (again if it clashed with a
    key), or the key `job_id` (a finished one past its retention forgotten first;
    a known one returned as it is). In the transaction `conn` is in, if any."""
    if job_id is None:
        while True:
            row = conn.execute(sql.enqueue, params).fetchone()
            if row is not None:
                return job_from_row(row)
    conn.execute(sql.forget_key, params)
    row = conn.execute(sql.enqueue, params).fetchone()
    if row is None:
        row = conn.execute(sql.get, params).fetchone()
        assert row is not None, "a key that conflicts is visible"
    return job_from_row(row)


class Conflict(Exception):
    """A new job's id was taken meanwhile (a generated one by a key): the transaction
    was rolled back; try again (`retried`), with new ids."""


def retried(link: Link, operation: str, run: Callable[[Conn], T]) -> T:
    """`link.run(operation, run)`, again for as long as it raises Conflict."""
    while True:
        try:
            return link.run(operation, run)
        except Conflict:
            continue


class Transactional:
    """One handle's writes in transactions it does not own (see the module doc)."""

    def __init__(self, target: Target, sql: Statements, session: Session,
                 settings: Settings) -> None:
        self._target = target
        self._sql = sql
        self._session = session
        self._settings = settings
        self._idle: list[Link] = []  # atomic() connections not in use
        self._lock = threading.Lock()

    def enqueue_in(self, connection: Any, params: dict[str, Any],
                   job_id: str | None) -> Job:
        if not isinstance(connection, psycopg.Connection):
            raise NobrokerError(f"connection= takes a psycopg 3 connection (or Django's, "
                                f"on psycopg 3), not {type(connection).__name__}")
        try:
            if connection.autocommit:  # no transaction of the caller's: one of our own
                with connection.transaction():
                    return self._enqueue(connection, params, job_id)
            return self._enqueue(connection, params, job_id)  # psycopg has begun one
        except psycopg.Error as exc:
            raise DatabaseError(self._target.shown, "enqueue",
                                error_text(self._target, exc)) from None

    def _enqueue(self, conn: Conn, params: dict[str, Any], job_id: str | None) -> Job:
        conn.execute(_SLOT_FOR_TRANSACTION, {"s": SLOTS})
        return enqueue_rows(conn, self._sql, params, job_id)

    @contextmanager
    def atomic(self) -> Iterator[Conn]:
        with self._lock:
            link = self._idle.pop() if self._idle else Link(
                self._target, setup=self._session.setup, lock_timeout=self._settings.lock_timeout)
        conn: Conn | None = None
        try:
            conn = link.run("atomic", lambda conn: conn)  # (re)connects and sets up
            with conn.transaction():
                yield conn
        finally:
            if conn is not None and link.connected and not conn.broken:
                with self._lock:
                    self._idle.append(link)
            else:
                link.close()

    def ack_in(self, conn: Conn, job: Job, result_text: str | None,
               result_ttl: float | None, *, joined: bool = False) -> None:
        result_text = kept_result(self._settings, result_text, result_ttl)
        keyed, unkeyed = retention(self._settings, result_text, result_ttl)
        params = self._session.params(id=job.id, tok=job.token, r=result_text, kr=keyed,
                                      ur=unkeyed,
                                      rt=result_keep(self._settings, result_text, result_ttl))
        try:
            if joined:  # the application's connection: no counter slot of its own
                conn.execute(_SLOT_FOR_TRANSACTION, {"s": SLOTS})
            row = conn.execute(self._sql.ack, params).fetchone()
            if row is None:  # fenced: the caller's `with` rolls the task's writes back
                raise not_leased(job, conn.execute(self._sql.lease_of, params).fetchone())
        except psycopg.Error as exc:
            raise DatabaseError(self._target.shown, "ack",
                                error_text(self._target, exc)) from None

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for link in idle:
            link.close()
