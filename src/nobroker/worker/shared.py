"""What the worker's threads share: one condition and the state it guards.

`Shared` declares that state for the parts of `Worker` (dispatcher.py,
slots.py, heartbeat.py, signals.py) and holds the operations more than one
thread performs on it: reserving leases for max_jobs, recording a stop
request, stopping on a queue error or on a thread of ours that raised.
`Worker.__init__` sets it all.

Rules: every attribute below the condition is read and written only while
holding `_cond`; no queue call is made while holding it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConnectionLostError, LockTimeoutError, NobrokerError, WorkerCrashedError
from ..models import Job
from ..queue import Queue
from ..tasks import TaskRegistry
from .children import ChildProcess
from .pool import EventLoop, describe_error

# Worth waiting out, not stopping for: another process's lock, a database server away
# for a moment (a PostgreSQL queue reconnects on its next call, with a backoff).
PASSING = (LockTimeoutError, ConnectionLostError)

log = logging.getLogger("nobroker")

Handler = Callable[[Job], object]


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """What one `Worker.run()` did."""

    succeeded: int = 0  # the handler returned; the job was acked
    retried: int = 0  # the handler raised; the job will be retried after its backoff
    dead_lettered: int = 0  # the handler raised on the job's last attempt
    snoozed: int = 0  # given back untried, not an attempt (its lock was held, or Snooze)
    lost: int = 0  # the lease was gone before the job could be settled
    abandoned: int = 0  # still running when the worker stopped; will be redelivered
    heartbeats: int = 0  # lease extensions written
    timed_out: int = 0  # calls stopped at their time limit (also counted as retried/dead)
    crashed: int = 0  # child processes that died under a call (pool="process")
    seconds: float = 0.0  # wall time of run()
    stopped_by: str = ""  # max_jobs, idle_timeout, stop(), SIGINT, SIGTERM or error
    forced: bool = False  # a second signal or stop(immediate=True) skipped the wait

    @property
    def failed(self) -> int:
        return self.retried + self.dead_lettered

    @property
    def processed(self) -> int:
        return self.succeeded + self.failed + self.snoozed + self.lost


@dataclass(eq=False, slots=True)
class Flight:
    """One leased job, from the lease until it is settled (or given up)."""

    job: Job
    renew_at: float  # the worker's clock() at the next heartbeat
    settling: bool = False  # its slot is acking or nacking it: heartbeats keep off
    lost: bool = False  # a heartbeat found the lease gone: not ours any more
    abandoned: bool = False  # the worker stopped without it
    child: ChildProcess | None = None  # the child process running it (pool="process")
    queue_index: int = 0  # its queue's place in Worker.queues
    began: float = 0.0  # the worker's clock() when its slot took it (the job log)
    task: str | None = None  # what it runs: a task's name, or the handler's


class Shared:
    """The state of one Worker that more than one of its threads touches."""

    queue: Queue  # the first of `queues`
    queues: list[Queue]
    handler: Handler | None
    tasks: TaskRegistry | None  # the first queue's
    _registries: list[TaskRegistry | None]  # per queue, when running tasks
    pool: str
    timeout: float | None
    concurrency: int
    prefetch: int  # jobs leased beyond the running ones (prefetch.py); 0: none
    max_jobs: int | None
    visibility_timeout: float
    heartbeat_interval: float
    handle_signals: bool
    _handler_spec: str
    _loop: EventLoop
    _children: list[ChildProcess]
    _clock: Callable[[], float]
    # Guarded by _cond:
    _cond: threading.Condition
    _arrivals: threading.Condition  # on _cond's lock: idle slots wait here
    _beats: threading.Condition  # on _cond's lock: the heartbeat thread waits here
    _acking: threading.Condition  # on _cond's lock: the idle acker waits here
    _flights: set[Flight]
    _inbox: deque[Flight]
    _reserved: int
    _live_slots: int  # slot threads that have not raised
    _counts: dict[str, int]
    _stopping: threading.Event
    _last_busy: float
    _stop_reason: str | None
    _stop_at: float | None
    _signals: int
    _forced: bool
    _closing: bool
    _beating: bool
    _fatal: NobrokerError | None

    def _reserve(self, wanted: int) -> int:
        """How many of `wanted` more leases max_jobs still allows (under _cond)."""
        granted = wanted if self.max_jobs is None else min(wanted,
                                                           self.max_jobs - self._reserved)
        self._reserved += max(granted, 0)
        return max(granted, 0)

    def _request_stop(self, reason: str, *, deadline: bool) -> None:
        """Record the first stop request; a deadline starts the shutdown_timeout (under _cond)."""
        if self._stop_reason is None:
            self._stop_reason = reason
            self._stopping.set()
        if deadline and self._stop_at is None:
            self._stop_at = self._clock()
        self._cond.notify_all()
        self._acking.notify_all()  # an acker waiting out ack_delay writes now

    def _fail(self, exc: NobrokerError) -> None:
        with self._cond:
            first = self._fatal is None
            if first:
                self._fatal = exc
            self._request_stop("error", deadline=True)
        if first:
            log.error("the queue failed, stopping the worker: %s", exc)

    def _crash(self, thread: str, exc: BaseException) -> None:
        """A thread of ours raised what nothing expected: stop loudly rather than hang
        waiting for it (the traceback logged, run() raising WorkerCrashedError)."""
        log.error("the worker's thread %s failed, stopping the worker", thread,
                  exc_info=(type(exc), exc, exc.__traceback__))
        error = WorkerCrashedError(thread, describe_error(exc))
        error.__cause__ = exc
        with self._cond:
            if self._fatal is None:
                self._fatal = error
            self._request_stop("error", deadline=True)

    def _drop(self, flight: Flight) -> None:
        """Give up a flight no thread will settle (its slot failed): no heartbeat keeps
        it, so its job is delivered again once its lease runs out."""
        with self._cond:
            if flight in self._flights and not flight.abandoned:
                flight.abandoned = True
                self._flights.discard(flight)
                self._counts["abandoned"] += 1
            self._cond.notify_all()
