"""Leasing on PostgreSQL: the lease statements of one PostgresBackend, and who is told
of the jobs their lease reclaims dead-letter.

Every lease statement (lease.sql, limited_lease.sql, ack_and_lease.sql,
limited_ack_and_lease.sql, and the lease of no job a purge runs first) takes
expired leases back before it leases: a job whose lease ran out on its last
attempt dies there, in the process that ran the statement. Each returns the
ids of the jobs it killed (rows.lease_rows), and once its transaction has
committed they are given to the listener the Queue's hooks set
(`report_reclaimed`): the `dead` hook fires in
that process, as it does on files and memory:// (issue 24). A reclaim made by
another host's lease fires there, never here, and never twice.

The choice of statement: limits declared, the limited lease (limited.py: the
unrated one with no rate limit among them, migrations/0012); else
lease_ready.sql first (it reclaims nothing: it takes nothing when a lease has
expired or a delayed job is due), then lease.sql.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from ..limits import Limits
from ..models import Job
from .connection import Link, LinkBusy
from .limited import LimitedLeases, declared_params
from .rows import job_from_row, lease_rows
from .statements import Statements
from .sweeping import EVERY, OVERDUE, Sweeper
from .wakeups import Wakeups

__all__ = ["Leasing"]

Conn = psycopg.Connection[tuple[Any, ...]]
Params = Callable[..., dict[str, Any]]


class Leasing:
    """The leases of one PostgresBackend (see the module doc)."""

    def __init__(self, sql: Statements, params: Params, link: Link, wakeups: Wakeups,
                 sweeper: Sweeper, limited: LimitedLeases, limits: Limits,
                 backoff: dict[str, Any]) -> None:
        self._sql, self._params, self._link = sql, params, link
        self._wakeups, self._sweeper = wakeups, sweeper
        self._limited, self._limits = limited, limits  # limits: declared as tasks are
        self._backoff = backoff  # bound by every statement that reclaims
        self._dead_listener: Callable[[list[str]], None] | None = None

    def report_reclaimed(self, listener: Callable[[list[str]], None]) -> None:
        """Tell `listener` the ids of jobs our lease reclaims dead-letter (committed)."""
        self._dead_listener = listener

    def _told(self, dead: list[str]) -> None:
        if dead and self._dead_listener is not None:
            self._dead_listener(dead)

    def lease(self, count: int, visibility_timeout: float) -> list[Job]:
        params = self._params(n=count, vt=visibility_timeout, **self._backoff)
        dead: list[str] = []

        def run(conn: Conn) -> list[Job]:
            dead.clear()  # a retried call reports its own run's reclaims only
            if self._limits:  # declared: the limited lease
                rows, killed = self._limited.lease(conn, params, count)
            elif (rows := conn.execute(self._sql.lease_ready, params).fetchall())[0][0]:
                rows, killed = [row[1:] for row in rows if row[1] is not None], []
            else:
                rows, killed = lease_rows(conn.execute(self._sql.lease, params).fetchall())
            dead.extend(killed)
            rows.sort(key=lambda r: (-r[3], r[1]))
            return [job_from_row(row) for row in rows]

        try:
            jobs = self._wakeups.run_warm("lease", run)
        except LinkBusy:
            jobs = self._link.run("lease", run)
        self._told(dead)
        self._sweeper.maybe(EVERY if not jobs else OVERDUE)  # idle, or a busy one overdue
        return jobs

    def ack_and_lease(self, params: dict[str, Any],
                      not_leased: Callable[[Conn], Exception]) -> Job | None:
        """ack_and_lease.sql (limited_ack_and_lease.sql with limits declared,
        unrated_ack_and_lease.sql with no rate limit among them) with the ack's
        `params`: the next job, or None;
        `not_leased(conn)`'s error if the ack's lease was not current."""
        sql, tail = self._sql.ack_and_lease, 1  # tail: columns after the job's
        if self._limits:  # declared: the lease within them, in the same statement
            sql, tail = self._sql.unrated_ack_and_lease, 2  # no rate limit: leaner
            params = {**params, **declared_params(self._limits)}
            if self._limits.rates:  # and a start granted before, if one is left
                sql = self._sql.limited_ack_and_lease
                params.update(self._limited.grants.claim())
        params = {**params, **self._backoff}
        dead: list[str] = []
        granted: list[str | None] = [None]

        def run(conn: Conn) -> Job | None:
            dead.clear()
            rows = conn.execute(sql, params).fetchall()
            if not rows or not rows[0][0]:
                raise not_leased(conn)
            row = rows[0][1:-tail]
            dead[:] = rows[0][-tail] or ()
            granted[0] = rows[0][-1] if tail == 2 else None
            return job_from_row(row) if row[0] is not None else None

        job = self._link.run("ack_and_lease", run)
        self._limited.grants.told(granted[0])  # committed: the starts are recorded
        self._told(dead)
        return job

    def reclaim_then(self, operation: str, then: Callable[[Conn], int]) -> int:
        """Take expired leases back (a lease of no job), then `then(conn)`: its count."""
        params = self._params(n=0, vt=1.0, **self._backoff)
        dead: list[str] = []

        def run(conn: Conn) -> int:
            dead[:] = lease_rows(conn.execute(self._sql.lease, params).fetchall())[1]
            return then(conn)

        count = self._link.run(operation, run)
        self._told(dead)
        return count
