"""The PostgreSQL backend: one queue's jobs as rows, every call one short transaction.

Theory of operation. Each call is one SQL statement where it can (one round trip,
one commit), a short transaction where it cannot. A call that returned has committed;
with `fsync=False` the session commits with `synchronous_commit = off` (a server
crash may lose the last moments, never corrupt). The rules are the file backend's:

- leasing takes ready rows with `FOR UPDATE SKIP LOCKED`, highest priority first and
  FIFO (by `seq`) within a priority; each lease gets a fencing token from a sequence,
  and ack/nack/extend match on (id, token), so a stale holder changes nothing and gets
  NotLeasedError; with limits declared, a lease is limited.py's transaction;
- an expired lease is an attempt: the lease statement first reclaims expired leases
  (back to pending after the backoff, or dead with "lease expired (attempt N)"); the
  rows it reclaims become leasable from the next call, and an ack arriving late
  still succeeds while nobody reclaimed the job;
- a finished row stays until `expires_at`, then is invisible and swept (sweeping.py);
  purge removes pending jobs only; requeue_dead resets attempts; stats() sums the
  counter rows every writing statement keeps (sql/parts/counted.sql).

Whose clock: the server's, unless the Queue was given one (session.py). Wake-ups:
`wait` and `wait_finished` block on LISTEN connections of their own (wakeups.py),
except a read-only handle's wait_finished, which reads until the job finished; a
lease runs on the idle-wait connection when no wait holds it. The SQL is in sql/
(loaded by statements.py), the tables in schema.py. Writes in a transaction not the
call's own (the caller's, an atomic task's): transactional.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from ..backend import Capabilities, CopiedLimits, Settings, distinct_leases
from ..dependencies import GraphNode
from ..errors import (
    ConnectionLostError,
    JobNotFoundError,
    LockTimeoutError,
    NobrokerError,
    NotLeasedError,
)
from ..limits import KeyUse
from ..models import CompactionResult, Job, JobState, Progress, QueueStats, RecoveryReport
from . import copying, graphs
from .connection import Link, changed
from .leasing import Leasing
from .limited import LimitedLeases, key_params, keys_params
from .namedlocks import LockConnections
from .rows import (
    codes_listed,
    enqueue_params,
    job_enqueued,
    job_from_row,
    meta_texts,
    not_leased,
    note_params,
    stats_from_row,
)
from .session import Session
from .statements import Statements, backoff_params
from .sweeping import EVERY, Sweeper, kept_result, result_keep, retention
from .transactional import Conflict, Transactional, enqueue_rows, retried
from .url import Target
from .wakeups import Wakeups

__all__ = ["PostgresBackend"]

Conn = psycopg.Connection[tuple[Any, ...]]


class PostgresBackend(copying.Copies):
    """One queue in a PostgreSQL schema. Safe to share between threads; its copying
    methods (nobroker migrate) are copying.Copies'."""

    capabilities = Capabilities(compaction=False, inspection=False, recovery=False,
                                local=False, listing=True, imports=True, exports=True,
                                transactions=True, dependencies=True, limits=True,
                                revival=True)
    recovery: RecoveryReport | None = None

    def __init__(self, target: Target, name: str, settings: Settings) -> None:
        self.target = target
        self.name = name
        self.location = target.shown
        clock = settings.clock  # None: the server's now() decides every time (session.py)
        self.settings = settings = settings.filled()
        assert settings.rng is not None  # filled() gave it one
        self._rng = settings.rng
        self._sql = Statements.load(target.schema)
        self.session = Session(target, name, settings, clock, self._sql.ensure_queue)
        self._params = self.session.params
        self._link = Link(target, setup=self.session.setup, lock_timeout=settings.lock_timeout)
        self._sweeper = Sweeper(self._link, self._sql, self._params,
                                readonly=settings.readonly)
        self._wakeups = Wakeups(self.session, self._sql)
        self._locks = LockConnections(target, name, settings.lock_timeout)
        self._transactional = Transactional(target, self._sql, self.session, settings)
        self._limited = LimitedLeases(self._sql, settings.limits)  # used once declared
        self._leasing = Leasing(self._sql, self._params, self._link, self._wakeups,
                                self._sweeper, self._limited, settings.limits,
                                backoff_params(settings.backoff))
        try:
            self._link.run("open", lambda conn: None)  # connect now: a bad URL fails here
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresBackend({self.location!r}, name={self.name!r})"

    def _not_leased(self, conn: Conn, job: Job) -> NotLeasedError:
        return not_leased(job, conn.execute(self._sql.lease_of, self._params(id=job.id)).fetchone())

    def _fenced(self, operation: str, sql: bytes, params: dict[str, Any], job: Job) -> Any:
        """Run `sql` under `job`'s lease (its token in `params`): its row, or NotLeasedError."""

        def run(conn: Conn) -> Any:
            row = conn.execute(sql, params).fetchone()
            if row is None:
                raise self._not_leased(conn, job)
            return row

        return self._link.run(operation, run)

    # -- producing ----------------------------------------------------------

    def enqueue(self, payload_text: str, payload: Any, *, priority: int, delay: float,
                max_attempts: int, job_id: str | None, depends_on: Sequence[str] = (),
                allow_failure: bool = False, meta: dict[str, Any] | None = None,
                copied_limits: CopiedLimits | None = None) -> Job:
        params = self._params(**enqueue_params(job_id, priority, delay, max_attempts,
                                               payload_text, meta),
                              **key_params(self.settings.limits, payload, copied_limits))
        if depends_on:  # waiting, pending or cancelled at once (graphs.py)
            node = graphs.Node(payload_text, tuple(depends_on), graphs.mode_of(allow_failure),
                               priority, delay, max_attempts, job_id, params["m"],
                               params["rk"], params["ck"], params["cc"])
            return graphs.enqueue(self._link, self._sql, self._params(), [node], True)[0]

        def run(conn: Conn) -> Job:
            if job_id is None:  # one statement: no transaction needed
                return enqueue_rows(conn, self._sql, params, None)
            with conn.transaction():
                return enqueue_rows(conn, self._sql, params, job_id)

        return self._link.run("enqueue", run)

    def enqueue_many(self, payload_texts: Sequence[str], payloads: Sequence[Any], *,
                     priority: int, delay: float, max_attempts: int,
                     metas: Sequence[dict[str, Any]] | None = None) -> list[Job]:
        if not payload_texts:
            return []
        params = self._params(pr=priority, delay=delay, ma=max_attempts,
                              ps=list(payload_texts), ms=meta_texts(metas, len(payload_texts)),
                              **keys_params(self.settings.limits, payloads))

        def run(conn: Conn) -> list[Job]:
            with conn.transaction():
                rows = conn.execute(self._sql.enqueue_many, params).fetchall()
                if len(rows) != len(payload_texts):
                    raise Conflict  # rolls the transaction back
            rows.sort(key=lambda r: r[1])  # by seq: the order of the payloads
            return [job_enqueued(row, p, max_attempts, metas[i] if metas else None)
                    for i, (row, p) in enumerate(zip(rows, payloads, strict=True))]

        return retried(self._link, "enqueue_many", run)

    def enqueue_graph(self, payload_texts: Sequence[str], nodes: Sequence[GraphNode],
                      copied_limits: Mapping[str, CopiedLimits] | None = None) -> list[Job]:
        """Every node as a job, in one transaction (graphs.py); nodes come checked."""
        return graphs.enqueue(self._link, self._sql, self._params(), graphs.nodes_of(
            payload_texts, nodes, self.settings.max_attempts, self.settings.limits,
            copied_limits))

    # -- in a transaction not ours (transactional.py) -------------------------

    def enqueue_in(self, connection: Any, payload_text: str, payload: Any, *, priority: int,
                   delay: float, max_attempts: int, job_id: str | None,
                   meta: dict[str, Any] | None = None) -> Job:
        return self._transactional.enqueue_in(connection, self._params(**enqueue_params(
            job_id, priority, delay, max_attempts, payload_text, meta),
            **key_params(self.settings.limits, payload)), job_id)

    def atomic(self) -> AbstractContextManager[Conn]:
        return self._transactional.atomic()

    def ack_in(self, connection: Conn, job: Job, result_text: str | None,
               result_ttl: float | None, *, joined: bool = False) -> None:
        self._transactional.ack_in(connection, job, result_text, result_ttl, joined=joined)

    # -- consuming ----------------------------------------------------------

    def lease(self, count: int, visibility_timeout: float) -> list[Job]:
        return self._leasing.lease(count, visibility_timeout)

    def report_reclaimed(self, listener: Callable[[list[str]], None]) -> None:
        """Tell `listener` the ids of jobs our lease reclaims dead-letter (leasing.py)."""
        self._leasing.report_reclaimed(listener)

    def ack(self, job: Job, result_text: str | None = None,
            result_ttl: float | None = None) -> None:
        result_text = kept_result(self.settings, result_text, result_ttl)
        keyed, unkeyed = retention(self.settings, result_text, result_ttl)
        params = self._params(id=job.id, tok=job.token, r=result_text, kr=keyed, ur=unkeyed,
                              rt=result_keep(self.settings, result_text, result_ttl))
        self._fenced("ack", self._sql.ack, params, job)

    def ack_many(self, jobs: Sequence[Job]) -> None:
        if not jobs:
            return
        distinct_leases(jobs)
        keyed, unkeyed = retention(self.settings, None, None)
        params = self._params(ids=[j.id for j in jobs], toks=[j.token or 0 for j in jobs],
                              kr=keyed, ur=unkeyed)

        def run(conn: Conn) -> None:
            with conn.transaction():
                done = {row[0] for row in conn.execute(self._sql.ack_many, params)}
                if len(done) != len(jobs):  # roll back, then say which lease was stale
                    raise _Rollback(next(j for j in jobs if j.id not in done))

        try:
            self._link.run("ack_many", run)
        except _Rollback as rollback:
            stale: Job = rollback.args[0]
        else:
            return
        raise self._link.run("ack_many", lambda conn: self._not_leased(conn, stale))

    def ack_many_and_lease(self, jobs: Sequence[Job], count: int,
                           visibility_timeout: float) -> list[Job]:
        self.ack_many(jobs)  # two transactions; the lease sees the freed limit slots
        return self.lease(count, visibility_timeout)

    def ack_and_lease(self, job: Job, visibility_timeout: float,
                      result_text: str | None = None,
                      result_ttl: float | None = None) -> Job | None:
        result_text = kept_result(self.settings, result_text, result_ttl)
        keyed, unkeyed = retention(self.settings, result_text, result_ttl)
        params = self._params(id=job.id, tok=job.token, r=result_text, kr=keyed, ur=unkeyed,
                              rt=result_keep(self.settings, result_text, result_ttl),
                              n=1, vt=visibility_timeout)
        return self._leasing.ack_and_lease(params, lambda conn: self._not_leased(conn, job))

    def nack(self, job: Job, error: str | None, delay: float | None,
             dead: bool = False) -> Job:
        wait = delay if delay is not None else self.settings.backoff.delay(job.attempts,
                                                                            self._rng)
        params = self._params(id=job.id, tok=job.token, err=error, delay=wait, dl=dead)
        return job_from_row(self._fenced("nack", self._sql.nack, params, job))

    def snooze(self, job: Job, delay: float, error: str | None) -> Job:
        params = self._params(id=job.id, tok=job.token, err=error, delay=delay)
        return job_from_row(self._fenced("snooze", self._sql.snooze, params, job))

    def extend(self, job: Job, seconds: float) -> Job:
        params = self._params(id=job.id, tok=job.token, s=seconds)
        return job_from_row(self._fenced("extend", self._sql.extend, params, job))

    def write_notes(self, job: Job, progress: Progress | None, meta: dict[str, Any]) -> None:
        params = self._params(id=job.id, tok=job.token, **note_params(progress, meta))
        self._fenced("write_notes", self._sql.write_notes, params, job)

    def wait(self, timeout: float) -> bool:
        try:
            self._sweeper.maybe(EVERY)  # before blocking: time nobody waits on
        except (ConnectionLostError, LockTimeoutError):
            pass  # housekeeping: the wait below deals with a server that is away
        return self._wakeups.wait(timeout, self._limited.due if self.settings.limits else None)

    def limit_use(self) -> list[KeyUse]:
        params = self._params()
        return self._link.run("limit_use", lambda conn: self._limited.use(conn, params))

    def wait_finished(self, job_id: str, timeout: float | None) -> Job | None:
        if self.settings.readonly:  # no watch row may be written: read until finished
            return self._wakeups.poll_finished(self._link, job_id, timeout)
        return self._wakeups.wait_finished(job_id, timeout)

    # -- job control --------------------------------------------------------

    def cancel(self, job_id: str) -> bool:
        params = self._params(id=job_id)  # ttl: the settings' result_ttl (session.py)
        return self._link.run("cancel", lambda conn: conn.execute(
            self._sql.cancel, params).fetchone() is not None)

    def set_paused(self, paused: bool) -> None:
        params = self._params(paused=paused, chan=self._wakeups.ready_channel)
        self._link.run("set_paused", lambda conn: conn.execute(self._sql.pause, params))

    # -- operating ----------------------------------------------------------

    def requeue_dead(self, job_id: str | None) -> int:
        params = self._params(id=job_id)

        def run(conn: Conn) -> int:
            rows = conn.execute(self._sql.requeue, params).fetchall()
            if job_id is not None and not rows:
                raise JobNotFoundError(job_id, "dead job")
            return len(rows)

        return self._link.run("requeue_dead", run)

    def purge(self) -> int:
        params = self._params()
        return self._leasing.reclaim_then("purge", lambda conn: changed(
            conn, self._sql.purge, params))

    def delete_dead(self, job_id: str | None) -> int:
        params = self._params(id=job_id)

        def run(conn: Conn) -> int:
            count = changed(conn, self._sql.delete_dead, params)
            if job_id is not None and not count:
                raise JobNotFoundError(job_id, "dead job")
            return count

        return self._link.run("delete_dead", run)

    def get(self, job_id: str) -> Job:
        params = self._params(id=job_id)

        def run(conn: Conn) -> Job:
            row = conn.execute(self._sql.get, params).fetchone()
            if row is None:
                raise JobNotFoundError(job_id)
            return job_from_row(row)

        return self._link.run("get", run)

    def stats(self) -> QueueStats:
        params = self._params()

        def run(conn: Conn) -> QueueStats:
            row = conn.execute(self._sql.stats, params).fetchone()
            assert row is not None
            return stats_from_row(row)

        return self._link.run("stats", run)

    def list_jobs(self, state: JobState | None, limit: int | None,
                  offset: int = 0) -> list[Job]:
        params = self._params(codes=codes_listed(state), n=limit, off=offset)

        def run(conn: Conn) -> list[Job]:
            return [job_from_row(row) for row in conn.execute(self._sql.list_jobs, params)]

        return self._link.run("list_jobs", run)

    def queue_names(self) -> list[str]:  # the `queues` table's rows, no scan of the jobs
        def run(conn: Conn) -> list[str]:
            return [str(row[0]) for row in conn.execute(self._sql.queue_names).fetchall()]

        return self._link.run("queue_names", run)

    def compact(self) -> CompactionResult:
        """Every expired finished row deleted (sweeping.py); no generations or bytes."""
        return self._sweeper.compact()

    def try_lock(self, key: str) -> Callable[[], None] | None:
        if self.settings.readonly:
            raise NobrokerError("queue was opened read-only")
        return self._locks.try_lock(key)

    # -- lifecycle ----------------------------------------------------------

    def close(self) -> None:
        self._wakeups.close()
        self._locks.close()
        self._transactional.close()
        self._link.close()


class _Rollback(Exception):
    """Rolls ack_many's transaction back; args[0]: the job whose lease was stale."""
