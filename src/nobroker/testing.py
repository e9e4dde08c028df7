"""Helpers for the tests of code that uses nobroker: eager mode, drain, enqueued.

Nothing here imports a test framework: these are plain functions and a
context manager that a pytest test, a unittest or Django `TestCase`, or a
script calls alike. Every job they run is a real job of the queue, leased
and settled by the Worker's own code (`Worker.run_here`: the task its
payload names, its time limit and named lock, the ack with its result, the
nack after its backoff or a `Retry`'s delay, a `Snooze`), in the calling
thread and with no thread of the Worker's, so that what a test then sees
(results, `q.get(id)`, `q.stats()`, the dead-letter queue) is what a worker
would have left.

Time is jumped, never slept. When the next run is due later (a delay, an
eta, a retry's backoff, a snooze), the queue's clock is moved to that
moment: a clock with an `advance(seconds)` method (`FakeClock`, or a test's
own) is advanced; any other clock of a memory:// queue (real time, by
default) is replaced on that handle by an offset clock, the old clock plus
the jumps so far. On other backends such a jump raises ValueError: open the
queue with `clock=FakeClock()`.

    eager(q)      a `with` block in which task calls run as they are enqueued
                  (`Queue(..., eager=True)` for a queue's whole life)
    drain(q)      runs every job until none is left, jumping time; the jobs it finished
    enqueued(q)   the jobs waiting to run (delayed ones too), of one task if given
    FakeClock     a clock that moves only when told (or jumped)
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .errors import JobNotFoundError
from .memory import MemoryBackend
from .models import Job, JobState
from .queue import Queue
from .tasks import Task
from .worker import Handler, Worker

__all__ = ["FakeClock", "drain", "eager", "enqueued", "run_eagerly"]

# Runs one call of these helpers makes at most: a task that re-enqueues itself for
# ever, or snoozes for ever, ends in an error rather than a test that never ends.
MAX_RUNS = 10_000
_FINISHED = (JobState.DONE, JobState.DEAD, JobState.CANCELLED)


class _Advancing(Protocol):
    def __call__(self) -> float: ...

    def advance(self, seconds: float) -> float: ...


class FakeClock:
    """A clock that moves only when told: `Queue("memory://t", clock=FakeClock(1000))`,
    then `clock.advance(30)`; drain() and eager mode advance it to the next due job.
    `start` None: the real time when it was made."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move `seconds` (>= 0) forward; returns the new time."""
        if not seconds >= 0:
            raise ValueError(f"a clock only moves forward, not by {seconds!r} s")
        self.now += seconds
        return self.now

    def __repr__(self) -> str:
        return f"FakeClock({self.now!r})"


class _OffsetClock:
    """Another clock (real time) plus the jumps made so far."""

    def __init__(self, base: Callable[[], float]) -> None:
        self.base = base
        self.offset = 0.0

    def __call__(self) -> float:
        return self.base() + self.offset

    def advance(self, seconds: float) -> float:
        self.offset += seconds
        return self()


def _jump(queue: Queue, moment: float) -> None:
    """Move the queue's time forward to `moment` (see the module doc)."""
    clock: Any = queue.clock
    if not callable(getattr(clock, "advance", None)):
        backend = queue.backend
        if not isinstance(backend, MemoryBackend):
            raise ValueError(f"{queue!r}: a job is due later and its queue's clock cannot "
                             f"be moved; open the queue with "
                             f"clock=nobroker.testing.FakeClock()")
        clock = _OffsetClock(queue.clock)
        backend.set_clock(clock)
        queue.clock = clock
    advancing: _Advancing = clock
    left = moment - advancing()
    if left > 0:
        advancing.advance(left)


def _next_due(queue: Queue) -> float | None:
    """When the earliest pending job is due (None: no job is pending)."""
    return min((job.available_at for job in queue.list_jobs(JobState.PENDING)), default=None)


def _window_opening(queue: Queue) -> float | None:
    """When the first full rate window of `queue` lets a job start again (None: no window
    is full, or the queue is paused; a concurrency key held elsewhere has no such time)."""
    if queue.stats().paused:
        return None
    now = queue.clock()
    return min((use.opens_at for use in queue.limit_use()
                if use.opens_at is not None and use.opens_at > now), default=None)


def _worker(queue: Queue, handler: Handler | None = None) -> Worker:
    """A Worker that is never run: its run_here settles jobs in the calling thread."""
    return Worker(queue, handler, handle_signals=False)


# -- eager mode --------------------------------------------------------------


@contextlib.contextmanager
def eager(queue: Queue, enabled: bool = True) -> Iterator[Queue]:
    """Within the block, each task call on `queue` (`.delay()`, `.apply_async()`) runs
    in the calling thread and has finished when the call returns (`enabled=False`:
    a block where they are only enqueued); the mode before it comes back at the end.
    The mode is this Queue object's: another handle on the same queue keeps its own."""
    previous = queue.eager
    queue.eager = bool(enabled)
    try:
        yield queue
    finally:
        queue.eager = previous


def run_eagerly(queue: Queue, job: Job) -> None:
    """Run the job just enqueued until it has finished, as a worker would: every attempt
    it takes, time jumped to each retry (what `.delay()` does on an eager queue).

    Other jobs are left alone: a ready job leased ahead of it is given back untried
    (not an attempt). It returns early, the job unfinished, if the job is not
    pending (already finished, or leased by a worker) or the queue leases nothing
    (it is paused)."""
    worker = _worker(queue)
    try:
        for _ in range(MAX_RUNS):
            try:
                current = queue.get(job.id)
            except JobNotFoundError:  # finished and forgotten at once (result_ttl=0)
                return
            if current.state is not JobState.PENDING:
                return
            leased = _lease_this(queue, worker, current.id)
            if leased is not None:
                worker.run_here(leased)
            elif current.available_at > queue.clock():
                _jump(queue, current.available_at)
            else:
                return  # due, yet not leased: the queue is paused
        raise RuntimeError(f"job {job.id} had not finished after {MAX_RUNS} runs "
                           f"(a task that snoozes for ever?)")
    finally:
        worker.end_here()


def _lease_this(queue: Queue, worker: Worker, job_id: str) -> Job | None:
    """Lease the job `job_id` if it is ready, giving back untried (not an attempt, its
    last error kept) any job leased ahead of it."""
    ahead: list[Job] = []
    try:
        while True:
            leased = queue.lease(1, visibility_timeout=worker.visibility_timeout)
            if not leased:
                return None
            if leased[0].id == job_id:
                return leased[0]
            ahead.append(leased[0])
    finally:
        for other in ahead:
            queue.snooze(other, 0, error=other.last_error)


# -- drain and enqueued ------------------------------------------------------


def drain(queue: Queue, handler: Handler | None = None) -> list[Job]:
    """Run every job of `queue` in the calling thread until none is left, jumping the
    queue's time to each delayed job, retry and snooze, and past each full rate limit
    window (to when it lets the next job start), instead of waiting; returns
    the jobs it finished (done or dead), in the order they finished, as `q.get`
    shows them then. Runs the queue's registered tasks, or `handler(job)` for each
    job if given (as `Worker(q, handler)`). Jobs leased by someone else are left to
    them; on a paused queue it runs nothing."""
    worker = _worker(queue, handler)
    finished: list[Job] = []
    try:
        for _ in range(MAX_RUNS):
            leased = queue.lease(1, visibility_timeout=worker.visibility_timeout)
            if leased:
                if worker.run_here(leased[0]) in ("succeeded", "dead_lettered"):
                    finished.append(_as_finished(queue, leased[0]))
                continue
            due = _next_due(queue)
            if due is not None and due <= queue.clock():
                due = _window_opening(queue)  # due, yet not leased: a rate limit holds it?
            if due is None:
                return finished  # nothing pending, or nothing leasable: paused, or held
            _jump(queue, due)
        raise RuntimeError(f"drain ran {MAX_RUNS} jobs and the queue is not empty yet "
                           f"(a task that enqueues itself for ever?)")
    finally:
        worker.end_here()


def _as_finished(queue: Queue, job: Job) -> Job:
    """The job as the queue keeps it once finished; a job acked without a result is not
    kept, so it is the leased job marked done."""
    try:
        kept = queue.get(job.id)
    except JobNotFoundError:
        kept = None
    if kept is not None and kept.state in _FINISHED:
        return kept
    return dataclasses.replace(job, state=JobState.DONE, token=None, lease_expires_at=None,
                               finished_at=queue.clock())


_NOT_STARTED = frozenset({JobState.PENDING, JobState.WAITING})


def enqueued(queue: Queue, task: Task[Any, Any] | str | None = None) -> list[Job]:
    """The jobs of `queue` waiting to run, in enqueue order: pending (due now or
    delayed) and waiting for prerequisites (`depends_on=`); with `task` (a task or
    its name), only the calls of that task."""
    if task is not None and not isinstance(task, (str, Task)):
        raise TypeError(f"task must be a task or its name, not {type(task).__name__}")
    name = task.name if isinstance(task, Task) else task
    jobs = [job for job in queue.list_jobs() if job.state in _NOT_STARTED]
    if name is None:
        return jobs
    return [job for job in jobs
            if isinstance(job.payload, dict) and job.payload.get("task") == name]
