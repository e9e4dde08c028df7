"""The PostgreSQL backend: one queue's jobs as rows, every call one short transaction.

Theory of operation. Each call is one SQL statement where it can be (so one
round trip and one commit), a short transaction where it cannot. A call that
returned has committed; with `fsync=False` the session commits with
`synchronous_commit = off` (a server crash may lose the last moments, never
corrupt). The rules are the file backend's, point by point:

- leasing takes ready rows with `FOR UPDATE SKIP LOCKED`, highest priority
  first and FIFO (by `seq`) within a priority; each lease gets a fencing
  token from a sequence, and ack/nack/extend match on (id, token), so a
  stale holder changes nothing and gets NotLeasedError;
- an expired lease is an attempt: the lease statement first reclaims expired
  leases (back to pending after the backoff, or dead with "lease expired
  (attempt N)"); the rows it reclaims become leasable from the next call,
  as in the file backend, and an ack arriving late still succeeds while
  nobody reclaimed the job;
- a finished row (acked, cancelled) stays until `expires_at`: the key
  retention for a keyed job, the result's ttl for a job acked with a result,
  at once otherwise; rows past it are invisible and swept in batches;
- purge removes pending jobs only; requeue_dead resets attempts;
- stats() sums the per-slot counter rows that a trigger keeps (schema.py).

Whose clock: the server's. Every statement computes its time as
`nb_now(given)`: the server's `now()` unless the Queue was given a clock
(tests inject one), so hosts with skewed clocks agree on deadlines and
delays. A handle never lets its own recorded time go backwards when an
injected clock steps back.

Wake-ups: idle workers (`wait`) and result waiters (`wait_finished`) block
on a LISTEN connection of their own, woken by the trigger's NOTIFY; a wait
is bounded by the earliest due time read from the indexes, never a poll.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Sequence
from typing import Any, Final

import psycopg

from ..backend import Capabilities, Settings
from ..backoff import BackoffPolicy
from ..errors import ConnectionLostError, JobNotFoundError, NotLeasedError
from ..models import CompactionResult, Job, JobState, QueueStats, RecoveryReport
from . import schema
from .connection import SLOTS, Link, migrate
from .url import Target

__all__ = ["PostgresBackend", "STATE_CODES"]

Conn = psycopg.Connection[tuple[Any, ...]]

STATE_CODES: Final = {JobState.PENDING: 0, JobState.LEASED: 1, JobState.DEAD: 2,
                      JobState.DONE: 3, JobState.CANCELLED: 4}
_STATES: Final = {code: state for state, code in STATE_CODES.items()}
_COLS: Final = ("j.id, j.seq, j.state, j.priority, j.available_at, j.enqueued_at, "
                "j.max_attempts, j.attempts, j.token, j.lease_until, j.last_error, j.payload, "
                "j.result, j.finished_at")
_VISIBLE: Final = "(j.state < 3 OR j.expires_at > t.now)"
_SWEEP_EVERY: Final = 1.0  # seconds between a handle's sweeps of expired finished rows
_RECLAIM_BATCH: Final = 100
_SLOT_CLASS: Final = 0x6E6F63


def backoff_sql(policy: BackoffPolicy, attempts: str) -> str:
    """BackoffPolicy.delay as an SQL expression of the column `attempts`.

    The same formula with the policy's numbers written in: for exponents at
    or past the first one whose delay reaches max_delay (or overflows), the
    delay is max_delay, as in Python; below it, base * factor ** n exactly.
    """
    cap = 0
    while cap <= 1000:
        try:
            if policy.base * policy.factor ** cap >= policy.max_delay:
                break
        except OverflowError:
            break
        cap += 1
    n = f"greatest({attempts} - 1, 0)"
    raw = (f"CASE WHEN {n} >= {cap} THEN {policy.max_delay!r}::float8 ELSE "
           f"least({policy.max_delay!r}::float8, {policy.base!r}::float8 * "
           f"power({policy.factor!r}::float8, {n})) END")
    if not policy.jitter:
        return f"({raw})"
    return f"({raw} * (1.0 - {policy.jitter!r}::float8 * random()))"


class PostgresBackend:
    """One queue in a PostgreSQL schema. Safe to share between threads."""

    capabilities = Capabilities(compaction=False, inspection=False, recovery=False,
                                local=False)
    recovery: RecoveryReport | None = None

    def __init__(self, target: Target, name: str, settings: Settings) -> None:
        self.target = target
        self.name = name
        self.location = target.shown
        # No clock given (None): the server's now() decides every time.
        self._clock = settings.clock
        self.settings = settings = settings.filled()
        assert self.settings.rng is not None  # filled() gave it one
        self._rng = self.settings.rng
        self._floor = -math.inf
        self._floor_lock = threading.Lock()
        self._ready_channel, self._finished_channel = schema.channels(target.schema, name)
        self._migrated = False
        self._last_sweep = -math.inf
        self._sql = _Statements(schema.quoted(target.schema), settings.backoff)
        self._link = Link(target, setup=self._setup, lock_timeout=settings.lock_timeout)
        self._waiter = Link(target, setup=self._listen(self._ready_channel),
                            lock_timeout=settings.lock_timeout)
        self._finisher = Link(target, setup=self._listen(self._finished_channel),
                              lock_timeout=settings.lock_timeout)
        try:
            self._link.run("open", lambda conn: None)  # connect now: a bad URL fails here
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresBackend({self.location!r}, name={self.name!r})"

    # -- sessions -----------------------------------------------------------

    def _setup(self, conn: Conn) -> None:
        settings = self.settings
        if not self._migrated:
            if settings.readonly:
                self._check_version(conn)
            else:
                migrate(conn, self.target)
            self._migrated = True
        row = conn.execute("SELECT s FROM generate_series(0, %s) AS s "
                           "WHERE pg_try_advisory_lock(%s, s) LIMIT 1",
                           (SLOTS - 1, _SLOT_CLASS)).fetchone()
        slot = int(row[0]) if row else SLOTS + conn.info.backend_pid % SLOTS
        options = [f"SET nobroker.slot = {slot}",
                   f"SET lock_timeout = {max(1, round(settings.lock_timeout * 1000))}"]
        if not settings.fsync:
            options.append("SET synchronous_commit = off")
        for statement in options:
            conn.execute(statement.encode())
        if settings.readonly:
            conn.execute(b"SET default_transaction_read_only = on")
        else:
            conn.execute(self._sql.ensure_queue, {"q": self.name})

    def _check_version(self, conn: Conn) -> None:
        row = conn.execute("SELECT to_regclass(%s)",
                           (f"{schema.quoted(self.target.schema)}.schema_version",)).fetchone()
        if row is None or row[0] is None:
            raise JobNotFoundError(self.target.schema, "queue set (schema)")

    def _listen(self, channel: str) -> Any:
        def setup(conn: Conn) -> None:
            conn.execute(f'LISTEN "{channel}"'.encode())
        return setup

    def _t(self) -> float | None:
        """The time to act at, when the Queue has a clock of its own (else the server's)."""
        if self._clock is None:
            return None
        now = float(self._clock())
        with self._floor_lock:
            if now < self._floor:
                return self._floor
            self._floor = now
            return now

    def _params(self, **values: Any) -> dict[str, Any]:
        values["q"] = self.name
        values["t"] = self._t()
        return values

    # -- views --------------------------------------------------------------

    @staticmethod
    def _job(row: Sequence[Any]) -> Job:
        (job_id, _seq, code, priority, available_at, enqueued_at, max_attempts, attempts,
         token, lease_until, last_error, payload, result, finished_at) = row
        leased = code == 1
        return Job(id=job_id, payload=json.loads(payload), priority=priority,
                   attempts=attempts, max_attempts=max_attempts, state=_STATES[code],
                   available_at=available_at, enqueued_at=enqueued_at, last_error=last_error,
                   token=token if leased else None,
                   lease_expires_at=lease_until if leased else None,
                   result=None if result is None else json.loads(result),
                   finished_at=finished_at)

    def _not_leased(self, conn: Conn, job: Job) -> NotLeasedError:
        row = conn.execute(self._sql.lease_of, self._params(id=job.id)).fetchone()
        if row is None:
            return NotLeasedError(job.id, "it is no longer in the queue")
        code, token = row
        if code != 1:
            return NotLeasedError(job.id, f"it is {_STATES[code]}")
        return NotLeasedError(job.id, f"lease {job.token} was superseded by lease {token}")

    # -- producing ----------------------------------------------------------

    def enqueue(self, payload_text: str, payload: Any, *, priority: int, delay: float,
                max_attempts: int, job_id: str | None) -> Job:
        params = self._params(id=job_id, pr=priority, delay=delay, ma=max_attempts,
                              p=payload_text)

        def run(conn: Conn) -> Job:
            if job_id is None:
                while True:  # a generated id may clash with a user's key: take the next
                    row = conn.execute(self._sql.enqueue, params).fetchone()
                    if row is not None:
                        return self._job(row)
            with conn.transaction():
                conn.execute(self._sql.forget_key, params)
                row = conn.execute(self._sql.enqueue, params).fetchone()
                if row is None:
                    row = conn.execute(self._sql.get, params).fetchone()
                    assert row is not None, "a key that conflicts is visible"
                return self._job(row)

        return self._link.run("enqueue", run)

    def enqueue_many(self, payload_texts: Sequence[str], payloads: Sequence[Any], *,
                     priority: int, delay: float, max_attempts: int) -> list[Job]:
        if not payload_texts:
            return []
        params = self._params(pr=priority, delay=delay, ma=max_attempts,
                              ps=list(payload_texts))

        def run(conn: Conn) -> list[Job]:
            while True:
                with conn.transaction():
                    rows = conn.execute(self._sql.enqueue_many, params).fetchall()
                    if len(rows) == len(payload_texts):
                        break
                    raise _Retry  # rolls the transaction back
            rows.sort(key=lambda r: r[1])
            return [Job(id=row[0], payload=p, priority=priority, attempts=0,
                        max_attempts=max_attempts, state=JobState.PENDING,
                        available_at=row[4], enqueued_at=row[5], last_error=None)
                    for row, p in zip(rows, payloads, strict=True)]

        while True:
            try:
                return self._link.run("enqueue_many", run)
            except _Retry:
                continue

    # -- consuming ----------------------------------------------------------

    def lease(self, count: int, visibility_timeout: float) -> list[Job]:
        self._maybe_sweep()
        params = self._params(n=count, vt=visibility_timeout)

        def run(conn: Conn) -> list[Job]:
            rows = conn.execute(self._sql.lease, params).fetchall()
            rows.sort(key=lambda r: (-r[3], r[1]))
            return [self._job(row) for row in rows]

        return self._link.run("lease", run)

    def _retention(self, result_text: str | None, result_ttl: float | None) -> tuple[float,
                                                                                    float]:
        """(seconds a keyed row is kept, seconds an unkeyed row is kept) after its ack."""
        keyed = self.settings.key_retention
        if result_text is None:
            return keyed, 0.0
        ttl = self.settings.result_ttl if result_ttl is None else result_ttl
        return max(keyed, ttl), ttl

    def ack(self, job: Job, result_text: str | None = None,
            result_ttl: float | None = None) -> None:
        keyed, unkeyed = self._retention(result_text, result_ttl)
        params = self._params(id=job.id, tok=job.token, r=result_text, kr=keyed, ur=unkeyed)

        def run(conn: Conn) -> None:
            if conn.execute(self._sql.ack, params).fetchone() is None:
                raise self._not_leased(conn, job)

        self._link.run("ack", run)

    def ack_many(self, jobs: Sequence[Job]) -> None:
        if not jobs:
            return
        seen: set[str] = set()
        for job in jobs:
            if job.id in seen:
                raise NotLeasedError(job.id, "it appears twice in one ack_many")
            seen.add(job.id)
        keyed, unkeyed = self._retention(None, None)
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
            stale = rollback.job
        else:
            return
        self._link.run("ack_many", lambda conn: _raise(self._not_leased(conn, stale)))

    def ack_and_lease(self, job: Job, visibility_timeout: float,
                      result_text: str | None = None,
                      result_ttl: float | None = None) -> Job | None:
        keyed, unkeyed = self._retention(result_text, result_ttl)
        params = self._params(id=job.id, tok=job.token, r=result_text, kr=keyed, ur=unkeyed,
                              n=1, vt=visibility_timeout)

        def run(conn: Conn) -> Job | None:
            rows = conn.execute(self._sql.ack_and_lease, params).fetchall()
            if not rows or not rows[0][0]:
                raise self._not_leased(conn, job)
            row = rows[0][1:]
            return self._job(row) if row[0] is not None else None

        return self._link.run("ack_and_lease", run)

    def nack(self, job: Job, error: str | None, delay: float | None) -> Job:
        wait = delay if delay is not None else self.settings.backoff.delay(job.attempts,
                                                                            self._rng)
        params = self._params(id=job.id, tok=job.token, err=error, delay=wait)

        def run(conn: Conn) -> Job:
            row = conn.execute(self._sql.nack, params).fetchone()
            if row is None:
                raise self._not_leased(conn, job)
            return self._job(row)

        return self._link.run("nack", run)

    def extend(self, job: Job, seconds: float) -> Job:
        params = self._params(id=job.id, tok=job.token, s=seconds)

        def run(conn: Conn) -> Job:
            row = conn.execute(self._sql.extend, params).fetchone()
            if row is None:
                raise self._not_leased(conn, job)
            return self._job(row)

        return self._link.run("extend", run)

    def wait(self, timeout: float) -> bool:
        """True when a job may be leasable; False after `timeout` seconds without one.

        Listens first, then reads the earliest due time, then blocks on the
        LISTEN socket until a NOTIFY or that time: a job enqueued between the
        read and the block is not missed. While the server is unreachable it
        pauses (the link's reconnect backoff, at most `timeout`) and answers
        True, so that the caller's next lease reconnects.
        """
        params = self._params()

        def run(conn: Conn) -> bool:
            for _ in conn.notifies(timeout=0.0):
                pass  # what arrived before we looked: the query below covers it
            row = conn.execute(self._sql.next_due, params).fetchone()
            assert row is not None
            now, due = row
            if due is not None and due <= now:
                return True
            limit = timeout if due is None else min(timeout, due - now)
            for _ in conn.notifies(timeout=max(limit, 0.0), stop_after=1):
                return True
            return due is not None and due - now <= timeout

        try:
            return self._waiter.run("wait", run)
        except ConnectionLostError:  # the server is away: pause, then let lease() retry
            time.sleep(min(timeout, 0.2))
            return True

    def wait_finished(self, job_id: str, timeout: float | None) -> Job | None:
        deadline = None if timeout is None else time.monotonic() + timeout

        def run(conn: Conn) -> Job | None:
            while True:
                row = conn.execute(self._sql.get, self._params(id=job_id)).fetchone()
                if row is None:
                    raise JobNotFoundError(job_id)
                if row[2] >= 2:
                    return self._job(row)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                for note in conn.notifies(timeout=left):
                    if note.payload in (job_id, "*"):
                        break

        return self._finisher.run("wait_finished", run)

    # -- job control --------------------------------------------------------

    def cancel(self, job_id: str) -> bool:
        params = self._params(id=job_id, ttl=self.settings.result_ttl)
        return self._link.run("cancel", lambda conn: conn.execute(
            self._sql.cancel, params).fetchone() is not None)

    def set_paused(self, paused: bool) -> None:
        params = self._params(paused=paused, chan=self._ready_channel)
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
        params = self._params(n=0, vt=1.0)

        def run(conn: Conn) -> int:
            conn.execute(self._sql.lease, params)  # count 0: reclaims expired leases only
            return conn.execute(self._sql.purge, params).rowcount

        return self._link.run("purge", run)

    def delete_dead(self, job_id: str | None) -> int:
        params = self._params(id=job_id)

        def run(conn: Conn) -> int:
            count = conn.execute(self._sql.delete_dead, params).rowcount
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
            return self._job(row)

        return self._link.run("get", run)

    def stats(self) -> QueueStats:
        params = self._params()

        def run(conn: Conn) -> QueueStats:
            row = conn.execute(self._sql.stats, params).fetchone()
            assert row is not None
            pending, leased, dead, done = (int(v) for v in row[:4])
            return QueueStats(pending=pending, leased=leased, dead=dead, done=done,
                              total=pending + leased + dead, generation=0, log_bytes=0,
                              paused=bool(row[4]))

        return self._link.run("stats", run)

    def list_jobs(self, state: JobState | None, limit: int | None) -> list[Job]:
        if state is JobState.DONE:  # as the file backend: finished jobs are not listed
            raise ValueError("finished jobs are not listed; only their keys are remembered")
        codes = [0, 1, 2] if state is None else [STATE_CODES[state]]
        params = self._params(codes=codes, n=limit)

        def run(conn: Conn) -> list[Job]:
            return [self._job(row) for row in conn.execute(self._sql.list_jobs, params)]

        return self._link.run("list_jobs", run)

    def compact(self) -> CompactionResult:
        """PostgreSQL compacts itself (autovacuum); this sweeps expired finished rows."""
        started = time.perf_counter()
        params = self._params()

        def run(conn: Conn) -> tuple[int, int]:
            while conn.execute(self._sql.sweep, params).rowcount:
                pass
            row = conn.execute(self._sql.live, params).fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

        live, keys = self._link.run("compact", run)
        return CompactionResult(old_generation=0, new_generation=0, bytes_before=0,
                                bytes_after=0, live_jobs=live, remembered_keys=keys,
                                seconds=time.perf_counter() - started)

    def _maybe_sweep(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep < _SWEEP_EVERY:
            return
        self._last_sweep = now
        params = self._params()
        self._link.run("sweep", lambda conn: conn.execute(self._sql.sweep, params))

    # -- transfer (nobroker migrate) -----------------------------------------

    def import_jobs(self, jobs: Sequence[Job], keyed: Sequence[bool]) -> list[JobState]:
        """Insert jobs copied from another backend, keeping their ids, attempts and
        errors; a leased job arrives pending. Ids already here are skipped: returns
        the states of the jobs inserted."""
        if not jobs:
            return []
        rows = [(j.id, STATE_CODES[JobState.DEAD if j.state is JobState.DEAD
                                   else JobState.PENDING], j.priority, j.available_at,
                 j.enqueued_at, j.max_attempts, j.attempts, k, j.last_error,
                 json.dumps(j.payload, ensure_ascii=False, allow_nan=False))
                for j, k in zip(jobs, keyed, strict=True)]
        params = self._params(ids=[r[0] for r in rows], states=[r[1] for r in rows],
                              prs=[r[2] for r in rows], ats=[r[3] for r in rows],
                              ts=[r[4] for r in rows], mas=[r[5] for r in rows],
                              atts=[r[6] for r in rows], ks=[r[7] for r in rows],
                              errs=[r[8] for r in rows], ps=[r[9] for r in rows])

        def run(conn: Conn) -> list[JobState]:
            with conn.transaction():
                rows = conn.execute(self._sql.import_jobs, params).fetchall()
                conn.execute(self._sql.bump_seq, params)
            return [_STATES[row[0]] for row in rows]

        return self._link.run("import", run)

    # -- lifecycle ----------------------------------------------------------

    def close(self) -> None:
        for link in (self._waiter, self._finisher, self._link):
            link.close()


class _Retry(Exception):
    """A generated id clashed with a key: the batch was rolled back, take new ids."""


class _Rollback(Exception):
    def __init__(self, job: Job) -> None:
        super().__init__(job.id)
        self.job = job


def _raise(error: Exception) -> None:
    raise error


class _Statements:
    """The SQL of every operation, with the schema and the backoff policy written in."""

    def __init__(self, s: str, backoff: BackoffPolicy) -> None:
        def sql(text: str) -> bytes:
            return text.replace("{s}", s).replace("{cols}", _COLS).replace(
                "{visible}", _VISIBLE).encode()

        t = "(SELECT {s}.nb_now(%(t)s::float8) AS now) AS t"
        new_id = "lpad(to_hex(n.seq), 16, '0')"
        self.ensure_queue = sql("INSERT INTO {s}.queues (name) VALUES (%(q)s) "
                                "ON CONFLICT DO NOTHING")
        self.enqueue = sql(f"""
            INSERT INTO {{s}}.jobs AS j (queue, id, seq, state, priority, available_at,
                                       enqueued_at, max_attempts, keyed, payload)
            SELECT %(q)s, coalesce(%(id)s::text, {new_id}), n.seq, 0, %(pr)s, t.now + %(delay)s,
                   t.now, %(ma)s, %(id)s::text IS NOT NULL, %(p)s
            FROM (SELECT nextval('{{s}}.job_seq') AS seq) AS n, {t}
            ON CONFLICT (queue, id) DO NOTHING
            RETURNING {{cols}}""")
        self.enqueue_many = sql(f"""
            INSERT INTO {{s}}.jobs AS j (queue, id, seq, state, priority, available_at,
                                       enqueued_at, max_attempts, keyed, payload)
            SELECT %(q)s, {new_id}, n.seq, 0, %(pr)s, t.now + %(delay)s, t.now, %(ma)s,
                   false, n.p
            FROM (SELECT nextval('{{s}}.job_seq') AS seq, u.p
                  FROM unnest(%(ps)s::text[]) WITH ORDINALITY AS u(p, o) ORDER BY u.o) AS n,
                 {t}
            ON CONFLICT (queue, id) DO NOTHING
            RETURNING j.id, j.seq, j.state, j.priority, j.available_at, j.enqueued_at""")
        self.forget_key = sql(f"""
            DELETE FROM {{s}}.jobs AS j USING {t}
            WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state >= 3
              AND j.expires_at <= t.now""")
        self.get = sql(f"""
            SELECT {{cols}} FROM {{s}}.jobs AS j, {t}
            WHERE j.queue = %(q)s AND j.id = %(id)s AND {{visible}}""")
        self.lease_of = sql(f"""
            SELECT j.state, j.token FROM {{s}}.jobs AS j, {t}
            WHERE j.queue = %(q)s AND j.id = %(id)s AND {{visible}}""")
        reclaim = f"""
            expired AS (
                SELECT j.id FROM {{s}}.jobs AS j, t
                WHERE j.queue = %(q)s AND j.state = 1 AND j.lease_until <= t.now
                ORDER BY j.lease_until LIMIT {_RECLAIM_BATCH} FOR UPDATE OF j SKIP LOCKED),
            reclaimed AS (
                UPDATE {{s}}.jobs AS j SET
                    state = CASE WHEN j.attempts >= j.max_attempts THEN 2 ELSE 0 END,
                    available_at = CASE WHEN j.attempts >= j.max_attempts THEN j.available_at
                                   ELSE t.now + {backoff_sql(backoff, "j.attempts")} END,
                    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN t.now END,
                    last_error = 'lease expired (attempt ' || j.attempts || ')',
                    token = NULL, lease_until = NULL
                FROM expired, t WHERE j.queue = %(q)s AND j.id = expired.id
                RETURNING j.id)"""
        pick = """
            picked AS (
                SELECT j.id FROM {s}.jobs AS j, t
                WHERE j.queue = %(q)s AND j.state = 0 AND j.available_at <= t.now
                  AND NOT EXISTS (SELECT 1 FROM {s}.queues WHERE name = %(q)s AND paused)
                  {extra}
                ORDER BY j.priority DESC, j.seq LIMIT %(n)s FOR UPDATE OF j SKIP LOCKED),
            leased AS (
                UPDATE {s}.jobs AS j SET state = 1, attempts = j.attempts + 1,
                    token = nextval('{s}.lease_token'), lease_until = t.now + %(vt)s
                FROM picked, t WHERE j.queue = %(q)s AND j.id = picked.id
                RETURNING {cols})"""
        now_cte = "t AS (SELECT {s}.nb_now(%(t)s::float8) AS now)"
        self.lease = sql(f"WITH {now_cte}, {reclaim}, {pick.replace('{extra}', '')} "
                         "SELECT * FROM leased")
        ack_set = """
            state = 3, finished_at = t.now, available_at = t.now, token = NULL,
            lease_until = NULL,
            expires_at = t.now + CASE WHEN j.keyed THEN %(kr)s::float8 ELSE %(ur)s::float8 END"""
        self.ack = sql(f"""
            UPDATE {{s}}.jobs AS j SET {ack_set}, result = %(r)s::text FROM {t}
            WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state = 1 AND j.token = %(tok)s
            RETURNING j.id""")
        self.ack_many = sql(f"""
            UPDATE {{s}}.jobs AS j SET {ack_set}
            FROM unnest(%(ids)s::text[], %(toks)s::bigint[]) AS a(id, tok), {t}
            WHERE j.queue = %(q)s AND j.id = a.id AND j.state = 1 AND j.token = a.tok
            RETURNING j.id""")
        acked = f"""
            acked AS (
                UPDATE {{s}}.jobs AS j SET {ack_set}, result = %(r)s::text FROM t
                WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state = 1
                  AND j.token = %(tok)s
                RETURNING j.id)"""
        self.ack_and_lease = sql(
            f"WITH {now_cte}, {acked}, {reclaim}, "
            f"{pick.replace('{extra}', 'AND EXISTS (SELECT 1 FROM acked)')} "
            "SELECT (SELECT count(*) FROM acked), leased.* "
            "FROM (SELECT 1) AS one LEFT JOIN leased ON true")
        self.nack = sql(f"""
            UPDATE {{s}}.jobs AS j SET
                state = CASE WHEN j.attempts >= j.max_attempts THEN 2 ELSE 0 END,
                available_at = CASE WHEN j.attempts >= j.max_attempts THEN j.available_at
                               ELSE t.now + %(delay)s::float8 END,
                finished_at = CASE WHEN j.attempts >= j.max_attempts THEN t.now END,
                last_error = %(err)s::text, token = NULL, lease_until = NULL
            FROM {t}
            WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state = 1 AND j.token = %(tok)s
            RETURNING {{cols}}""")
        self.extend = sql(f"""
            UPDATE {{s}}.jobs AS j SET lease_until = t.now + %(s)s::float8 FROM {t}
            WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state = 1 AND j.token = %(tok)s
            RETURNING {{cols}}""")
        self.next_due = sql(f"""
            SELECT t.now, CASE WHEN (SELECT paused FROM {{s}}.queues WHERE name = %(q)s)
                               THEN NULL ELSE least(
                (SELECT min(available_at) FROM {{s}}.jobs
                 WHERE queue = %(q)s AND state = 0),
                (SELECT min(lease_until) FROM {{s}}.jobs
                 WHERE queue = %(q)s AND state = 1)) END
            FROM {t}""")
        self.cancel = sql(f"""
            UPDATE {{s}}.jobs AS j SET state = 4, finished_at = t.now, token = NULL,
                lease_until = NULL, expires_at = t.now + %(ttl)s::float8
            FROM {t}
            WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state IN (0, 1)
            RETURNING j.id""")
        self.pause = sql("""
            WITH changed AS (
                INSERT INTO {s}.queues AS qs (name, paused) VALUES (%(q)s, %(paused)s)
                ON CONFLICT (name) DO UPDATE SET paused = excluded.paused RETURNING paused)
            SELECT CASE WHEN NOT paused THEN pg_notify(%(chan)s, '') END FROM changed""")
        self.requeue = sql(f"""
            UPDATE {{s}}.jobs AS j SET state = 0, attempts = 0, available_at = t.now,
                finished_at = NULL
            FROM {t}
            WHERE j.queue = %(q)s AND j.state = 2 AND (%(id)s::text IS NULL OR j.id = %(id)s)
            RETURNING j.id""")
        self.purge = sql("DELETE FROM {s}.jobs WHERE queue = %(q)s AND state = 0")
        self.delete_dead = sql("""
            DELETE FROM {s}.jobs
            WHERE queue = %(q)s AND state = 2 AND (%(id)s::text IS NULL OR id = %(id)s)""")
        self.stats = sql("""
            SELECT coalesce(sum(pending), 0), coalesce(sum(leased), 0), coalesce(sum(dead), 0),
                   coalesce(sum(done), 0),
                   coalesce((SELECT paused FROM {s}.queues WHERE name = %(q)s), false)
            FROM {s}.counters WHERE queue = %(q)s""")
        self.list_jobs = sql("""
            SELECT {cols} FROM {s}.jobs AS j
            WHERE j.queue = %(q)s AND j.state = ANY(%(codes)s::smallint[])
            ORDER BY j.seq LIMIT %(n)s""")
        self.sweep = sql(f"""
            DELETE FROM {{s}}.jobs AS d USING (
                SELECT j.id FROM {{s}}.jobs AS j, {t}
                WHERE j.queue = %(q)s AND j.state >= 3 AND j.expires_at <= t.now
                LIMIT 1000 FOR UPDATE OF j SKIP LOCKED) AS gone
            WHERE d.queue = %(q)s AND d.id = gone.id""")
        self.live = sql(f"""
            SELECT count(*) FILTER (WHERE j.state < 3),
                   count(*) FILTER (WHERE j.state >= 3 AND j.keyed)
            FROM {{s}}.jobs AS j, {t} WHERE j.queue = %(q)s AND {{visible}}""")
        self.import_jobs = sql("""
            WITH src AS (
                SELECT u.*, nextval('{s}.job_seq') AS seq
                FROM unnest(%(ids)s::text[], %(states)s::smallint[], %(prs)s::bigint[],
                            %(ats)s::float8[], %(ts)s::float8[], %(mas)s::bigint[],
                            %(atts)s::bigint[], %(ks)s::boolean[], %(errs)s::text[],
                            %(ps)s::text[]) WITH ORDINALITY
                     AS u(id, state, priority, available_at, enqueued_at, max_attempts,
                          attempts, keyed, last_error, payload, o)
                ORDER BY u.o)
            INSERT INTO {s}.jobs (queue, id, seq, state, priority, available_at, enqueued_at,
                                  max_attempts, attempts, keyed, last_error, payload,
                                  finished_at)
            SELECT %(q)s, id, seq, state, priority, available_at, enqueued_at, max_attempts,
                   attempts, keyed, last_error, payload,
                   CASE WHEN state = 2 THEN available_at END
            FROM src
            ON CONFLICT (queue, id) DO NOTHING
            RETURNING state""")
        # Generated-form ids copied in must not be generated again here.
        self.bump_seq = sql("""
            SELECT setval('{s}.job_seq', greatest(
                (SELECT last_value FROM {s}.job_seq),
                (SELECT coalesce(max(('x' || id)::bit(64)::bigint), 1) FROM {s}.jobs
                 WHERE queue = %(q)s AND id ~ '^0000[0-9a-f]{12}$')))""")
