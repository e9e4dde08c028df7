"""Waiting without polling: idle workers and result waiters, woken by NOTIFY.

Each kind of waiter has a connection of its own that LISTENs on one of the
queue's two channels (every statement that changes jobs sends them: sql/parts/counted.sql):

- `wait` (an idle worker): the ready channel. It drains what arrived, reads
  the earliest due time (a delayed job, a lease deadline) from the indexes,
  then blocks on the socket until a NOTIFY or that time. A job enqueued
  between the read and the block is not missed: the LISTEN came first.
  The lease after a wake runs on this same connection when no wait holds
  it (`run_warm`): its server process is the one the NOTIFY just woke.
- `wait_finished` (a result waiter): the finished channel. It puts the job
  in `watches` before it blocks, and only a watched job's finish is
  notified, so that acks nobody waits for commit without NOTIFY's
  server-wide lock (`_watch` says how the watch is ordered against an ack
  in flight). A waiter that sees the job finished removes the watch; the
  watch of one that timed out is swept once its job has finished
  (backend.py's periodic sweep). Each thread waiting for a result takes a
  LISTEN connection of its own from a small pool, so the threads of one
  handle wait side by side; idle ones are kept (up to `_IDLE_FINISHERS`)
  for the next wait.

Neither ever leases, and neither is a poll loop: a wait is bounded by the
caller's timeout and the next due time only.

Except on a read-only handle, which must write nothing (it may be open with
a role that may only SELECT): its `wait_finished` cannot put a watch, so no
NOTIFY would come, and `poll_finished` reads the job on the handle's
operation connection instead, every `_FIRST_POLL` seconds at first, the
pause doubling up to `_MAX_POLL`, the last one cut to the caller's timeout.
So a read-only waiter learns of a finish up to `_MAX_POLL` late, costs a
read per pause, and takes no connection of its own; between reads it holds
no lock, so the handle's other threads go on meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

import psycopg

from ..errors import ConnectionLostError, JobNotFoundError, QueueClosedError
from ..models import Job
from . import schema
from .connection import Link
from .rows import job_from_row
from .session import Session, listener
from .statements import Statements

__all__ = ["Wakeups"]

Conn = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")

_IDLE_FINISHERS: Final = 4  # idle result-wait connections a handle keeps for reuse
_FIRST_POLL: Final = 0.01  # a read-only wait_finished's first pause between reads
_MAX_POLL: Final = 0.5  # ... and its longest: how late a read-only waiter may learn


class Wakeups:
    """The LISTEN connections of one handle (one for idle waits, a pool for result
    waits), and the waits on them."""

    def __init__(self, session: Session, sql: Statements) -> None:
        target = session.target
        self.ready_channel, finished_channel = schema.channels(target.schema, session.name)
        timeout = session.settings.lock_timeout
        self._session = session
        self._sql = sql
        # Set up as an operation connection too, so that a lease can run on it (run_warm).
        listen = listener(self.ready_channel)

        def setup(conn: Conn) -> None:
            session.setup(conn)
            listen(conn)

        self._waiter = Link(target, setup=setup, lock_timeout=timeout)
        self._finished_channel = finished_channel
        self._idle: list[Link] = []  # result-wait connections no thread is using
        self._pool_lock = threading.Lock()
        self._closed = False

    def wait(self, timeout: float,
             due_of: Callable[[Conn, dict[str, Any]], tuple[float, float | None]] | None = None
             ) -> bool:
        """True when a job may be leasable; False after `timeout` seconds without one.
        `due_of` says when it may be, if not next_due.sql (limited.py's, with limits).

        While the server is unreachable it pauses (at most `timeout`) and
        answers True, so that the caller's next lease reconnects.
        """
        params = self._session.params()

        def run(conn: Conn) -> bool:
            for _ in conn.notifies(timeout=0.0):
                pass  # what arrived before we looked: the query below covers it
            if due_of is not None:
                now, due = due_of(conn, params)
            else:
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

    def run_warm(self, operation: str, fn: Callable[[Conn], T]) -> T:
        """Run `fn` on the idle-wait connection if it is open and no wait holds it;
        LinkBusy otherwise (the caller uses its operation connection).

        Why: a wait that a NOTIFY ended has just had that connection's server
        process wake up to deliver it, so a lease sent there right after finds
        it running, where the operation connection's server process has slept
        since the last job; on a machine whose cores idle, waking a sleeping
        process costs a good part of a millisecond of the enqueue-to-handler time.
        """
        return self._waiter.run_if_idle(operation, fn)

    def wait_finished(self, job_id: str, timeout: float | None) -> Job | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        session = self._session

        def run(conn: Conn) -> Job | None:
            watched = held = False
            while True:
                row = conn.execute(self._sql.get, session.params(id=job_id)).fetchone()
                if row is None:
                    raise JobNotFoundError(job_id)
                if row[2] >= 2:
                    if watched:  # finished: no waiter needs the watch any more
                        conn.execute(self._sql.unwatch, session.params(id=job_id))
                    return job_from_row(row)
                if not watched or (row[2] == 1 and not held):
                    held = self._watch(conn, job_id, leased=row[2] == 1)
                    watched = True
                    continue  # from now on its finish is NOTIFYed: look once more
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None  # the watch stays for other waiters; swept once finished
                for note in conn.notifies(timeout=left):
                    if note.payload in (job_id, "*"):
                        break

        finisher = self._take()
        try:
            return finisher.run("wait_finished", run)
        finally:
            self._give(finisher)

    def poll_finished(self, link: Link, job_id: str, timeout: float | None) -> Job | None:
        """`wait_finished` for a read-only handle: read the job on `link` (the
        operation connection) until it has finished, pausing longer each time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        session = self._session
        pause = _FIRST_POLL

        def read(conn: Conn) -> Any:
            return conn.execute(self._sql.get, session.params(id=job_id)).fetchone()

        while True:
            row = link.run("wait_finished", read)
            if row is None:
                raise JobNotFoundError(job_id)
            if row[2] >= 2:
                return job_from_row(row)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            time.sleep(pause if left is None else min(pause, left))
            pause = min(pause * 2, _MAX_POLL)

    def _take(self) -> Link:
        """A LISTEN connection on the finished channel for one wait: an idle one, or
        a new one (it connects on first use)."""
        with self._pool_lock:
            if self._closed:
                raise QueueClosedError("the queue is closed")
            if self._idle:
                return self._idle.pop()
        session = self._session
        return Link(session.target, setup=listener(self._finished_channel),
                    lock_timeout=session.settings.lock_timeout)

    def _give(self, finisher: Link) -> None:
        # Kept even if its connection broke: the link reconnects on its next use,
        # after the pause its failures earned, so a server that is away is not hammered.
        with self._pool_lock:
            if not self._closed and len(self._idle) < _IDLE_FINISHERS:
                self._idle.append(finisher)
                return
        finisher.close()

    def _watch(self, conn: Conn, job_id: str, *, leased: bool) -> bool:
        """Put the job in `watches`; True if that was ordered against an ack in flight.

        An ack looks for the watch inside its transaction, with a snapshot
        taken after it locked the row (nb_finished, schema.py). A leased job
        may be acked at any moment, so its watch is written under a share
        lock on its row: an ack already running finishes first (and the look
        after this sees it), an ack after it sees the watch. A pending job is
        not locked (lease skips locked rows); it must be leased before it is
        acked, and the look after this catches that.
        """
        params = self._session.params(id=job_id)
        if not leased:
            conn.execute(self._sql.watch, params)
            return False
        with conn.transaction():
            conn.execute(self._sql.hold, params)
            conn.execute(self._sql.watch, params)
        return True

    def close(self) -> None:
        """Close the idle connections; one still in a wait closes when the wait ends."""
        self._waiter.close()
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for finisher in idle:
            finisher.close()
