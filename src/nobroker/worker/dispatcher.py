"""The Worker itself: its options, run(), stop(), stats, and the dispatcher.

The dispatcher is the thread that called `run()`: it starts the other
threads, leases jobs into free slots, idles in `_wait_for_work` when none is
ready, and stops in order (see the package doc, worker/__init__.py): stop
leasing, drain the in-flight jobs until `shutdown_timeout`, abandon what is
left, stop the heartbeats last. The slots, heartbeats and signal handlers
are the mixins it is built from (slots.py, heartbeat.py, signals.py).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections import deque
from collections.abc import Callable

from .. import validation
from ..errors import NobrokerError
from ..models import Job
from ..queue import Queue
from ..tasks import Scheduler, TaskRegistry, queue_clock, registry_of
from .heartbeat import Heartbeats
from .pool import ChildProcess, EventLoop
from .shared import PASSING, Flight, Handler, WorkerStats, log
from .signals import SignalHandling, restore_signal_handlers
from .slots import Slots, spec_of

# Kubernetes sends SIGKILL 30 s after SIGTERM by default (systemd: 90 s); finish first.
DEFAULT_SHUTDOWN_TIMEOUT = 25.0
# Longest the dispatcher blocks without looking at its flags. Python runs signal
# handlers on the main thread only, and a signal the kernel hands to another thread
# waits until the main thread next runs bytecode: this bounds that delay.
_TICK = 0.1
# How long one wait on a queue's wake-up channel may last: a producer's poke ends it
# early, so this only bounds how late an idle worker sees a stop request.
_IDLE_SLICE = 0.5
_WAKE_CHANNEL = hasattr(os, "mkfifo")  # elsewhere Queue.wait is a plain sleep
POOLS = ("thread", "process")


class Worker(Slots, Heartbeats, SignalHandling):
    """Calls `handler(job)` for each job of `queue` until stopped; see nobroker.worker's doc."""

    def __init__(self, queue: Queue, handler: Handler | None = None, *, concurrency: int = 1,
                 poll_interval: float = 0.1, max_jobs: int | None = None,
                 idle_timeout: float | None = None, handle_signals: bool = True,
                 shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
                 visibility_timeout: float | None = None, timeout: float | None = None,
                 pool: str = "thread", clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] | None = None) -> None:
        if handler is not None and not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        if getattr(queue, "readonly", False):
            raise ValueError("a worker needs a writable queue, not one opened read-only")
        if pool not in POOLS:
            raise ValueError(f"pool must be 'thread' or 'process', not {pool!r}")
        self.queue = queue
        self.handler = handler
        self.tasks: TaskRegistry | None = None
        if handler is None:
            self.tasks = registry_of(queue, create=False)
            if not len(self.tasks):
                raise ValueError(f"no handler given and no tasks registered on {queue!r}: "
                                 f"pass a handler, or register tasks with @queue.task")
        self.pool = pool
        self.timeout = None if timeout is None else validation.seconds("timeout", timeout,
                                                                       positive=True)
        self._handler_spec = spec_of(handler) if handler is not None and pool == "process" \
            else ""
        self._preload = self._child_modules() if pool == "process" else ()
        self._loop = EventLoop("nobroker-asyncio")
        self._children: list[ChildProcess] = []
        self.concurrency = validation.integer("concurrency", concurrency, 1)
        self.poll_interval = validation.seconds("poll_interval", poll_interval, positive=True)
        self.max_jobs = None if max_jobs is None else validation.integer("max_jobs", max_jobs, 1)
        self.idle_timeout = None if idle_timeout is None else validation.seconds(
            "idle_timeout", idle_timeout)
        self.shutdown_timeout = validation.seconds("shutdown_timeout", shutdown_timeout)
        self.visibility_timeout = (
            queue.visibility_timeout if visibility_timeout is None
            else validation.seconds("visibility_timeout", visibility_timeout, positive=True))
        # Every duration and deadline of the worker's own (heartbeats, idle and shutdown
        # timeouts, stats) is read from `clock`; `sleep`, if given, is how it idles
        # between polls of a queue without a wake-up channel (default: a wait that a
        # stop request or a finished slot ends early).
        self._clock = clock
        self._sleep = sleep
        self.heartbeat_interval = self.visibility_timeout / 3
        self.handle_signals = bool(handle_signals)
        # Everything below is shared between threads and guarded by _cond. Its lock is
        # re-entrant because the signal handler takes it on the main thread, which
        # may already hold it. Idle slots wait on _arrivals (same lock), so that
        # handing them a job wakes them only, not every thread that waits.
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        self._arrivals = threading.Condition(lock)
        self._flights: set[Flight] = set()
        self._inbox: deque[Flight] = deque()
        self._reserved = 0  # leases taken (or being taken), for max_jobs
        self._counts = dict.fromkeys(("succeeded", "retried", "dead_lettered", "snoozed",
                                      "lost", "abandoned", "heartbeats", "timed_out",
                                      "crashed"), 0)
        self._stopping = threading.Event()  # set with the first stop request: the scheduler
        self._started = False
        self._began = 0.0
        self._seconds: float | None = None
        self._last_busy = 0.0
        self._stop_reason: str | None = None
        self._stop_at: float | None = None  # when a stop with a deadline was requested
        self._signals = 0
        self._forced = False
        self._closing = False  # slots: exit when idle
        self._beating = True  # heartbeat thread: keep going
        self._fatal: NobrokerError | None = None
        self._woken = False  # the last wait said a job may be ready (dispatcher only)

    # -- public -------------------------------------------------------------

    def run(self) -> WorkerStats:
        """Work until stopped; returns what was done. Raises the queue's error if the
        queue became unusable (after letting in-flight handlers finish)."""
        with self._cond:
            if self._started:
                raise RuntimeError("a Worker runs once; create a new one")
            self._started = True
            self._began = self._last_busy = self._clock()
        previous = self._install_signal_handlers()
        heartbeat = _spawn(self._heartbeat_loop, "nobroker-heartbeat")
        if self.pool == "process":
            self._children = [ChildProcess(self._preload, f"nobroker-child-{n}")
                              for n in range(self.concurrency)]
        slots = [_spawn(functools.partial(self._slot_loop, n), f"nobroker-slot-{n}")
                 for n in range(self.concurrency)]
        periodic = self.tasks.periodic() if self.tasks is not None else []
        if periodic:
            scheduler = Scheduler(self.queue, periodic, queue_clock(self.queue))
            _spawn(functools.partial(self._schedule, scheduler), "nobroker-scheduler")
        log.info("worker started on queue %r in %s: concurrency %d, visibility timeout %gs",
                 self.queue.name, self.queue.directory, self.concurrency,
                 self.visibility_timeout)
        try:
            self._dispatch()
            self._drain()
        finally:
            self._shut_down(heartbeat, slots)
            restore_signal_handlers(previous)
        stats = self.stats
        log.info("worker stopped (%s%s) after %.1fs: %d succeeded, %d retried, "
                 "%d dead-lettered, %d lost, %d abandoned", stats.stopped_by,
                 ", forced" if stats.forced else "", stats.seconds, stats.succeeded,
                 stats.retried, stats.dead_lettered, stats.lost, stats.abandoned)
        if self._fatal is not None:
            raise self._fatal
        return stats

    def stop(self, *, immediate: bool = False) -> None:
        """Ask a running worker to stop; safe from any thread, including a handler's.

        It stops leasing and lets in-flight handlers finish, for at most
        `shutdown_timeout` seconds. With `immediate=True` it does not wait for
        them: their jobs come back when their leases run out.
        """
        with self._cond:
            self._request_stop("stop()", deadline=True)
            self._forced = self._forced or immediate
            self._cond.notify_all()

    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the counters, also while running."""
        with self._cond:
            seconds = self._seconds
            if seconds is None:
                seconds = self._clock() - self._began if self._started else 0.0
            return WorkerStats(**self._counts, seconds=seconds,
                               stopped_by=self._stop_reason or "", forced=self._forced)

    # -- the dispatcher -----------------------------------------------------

    def _dispatch(self) -> None:
        """Lease jobs into free slots until a stop is due."""
        while True:
            with self._cond:
                if self._stop_reason is not None:
                    return
                free = self.concurrency - len(self._flights)
                want = self._reserve(free) if free > 0 else 0
                if want == 0:
                    if free > 0 and not self._flights:  # max_jobs reached, all settled
                        self._request_stop("max_jobs", deadline=False)
                        return
                    self._cond.wait(_TICK)  # a slot finishing, or a stop, wakes us
                    continue
            jobs = self._lease(want)
            with self._cond:
                self._reserved -= want - len(jobs)
                if jobs:
                    self._woken = False
                    self._admit(jobs)
                    continue
                if self.idle_timeout is not None and self._idle_for() >= self.idle_timeout:
                    self._request_stop("idle_timeout", deadline=False)
                    return
            self._wait_for_work()

    def _wait_for_work(self) -> None:
        """Idle until a job may be ready; the caller then tries to lease again.

        With the queue's wake-up channel (`Queue.wait`), a producer's enqueue
        ends the wait at once, so the wait can be long: up to `_IDLE_SLICE`,
        which bounds how late an idle worker notices a stop request. Without
        one (or where the channel is a plain sleep, as on Windows) this is
        polling: wait `poll_interval`, waking early only for a stop request
        or a slot that finished.
        """
        wait = getattr(self.queue, "wait", None)
        timeout = self.poll_interval
        if callable(wait) and _WAKE_CHANNEL:
            timeout = max(timeout, _IDLE_SLICE)
        if self.idle_timeout is not None:
            with self._cond:
                timeout = min(timeout, max(self.idle_timeout - self._idle_for(), 0.001))
        if callable(wait):
            # A paused queue's ready jobs end a wait at once, so a wake that
            # leased nothing asks whether the queue is paused before waiting
            # again; asking after every wake would put a round trip between
            # an enqueue and its pickup.
            if self._woken and self._paused():
                self._pause_for(self.poll_interval)
            self._woken = bool(wait(timeout))
            return
        if self._sleep is not None:
            self._sleep(timeout)
            return
        deadline = self._clock() + timeout
        with self._cond:
            while self._stop_reason is None:
                left = deadline - self._clock()
                if left <= 0 or self._cond.wait(min(left, _TICK)):
                    return  # time to look again, or a slot finished: capacity changed

    def _paused(self) -> bool:
        """Whether the queue is paused (asked only after a lease came back empty)."""
        try:
            return bool(getattr(self.queue.stats(), "paused", False))
        except NobrokerError:
            return False

    def _pause_for(self, seconds: float) -> None:
        with self._cond:
            if seconds > 0 and self._stop_reason is None:
                self._cond.wait(seconds)

    def _lease(self, count: int) -> list[Job]:
        try:
            return self.queue.lease(count, visibility_timeout=self.visibility_timeout)
        except PASSING as exc:
            log.warning("could not lease: %s; trying again", exc)
        except NobrokerError as exc:
            self._fail(exc)
        return []

    def _admit(self, jobs: list[Job]) -> None:
        """Hand freshly leased jobs to the slots (under _cond)."""
        renew_at = self._clock() + self.heartbeat_interval
        for job in jobs:
            flight = Flight(job, renew_at)
            self._flights.add(flight)
            self._inbox.append(flight)
        self._last_busy = self._clock()
        self._arrivals.notify(len(jobs))

    def _idle_for(self) -> float:
        return 0.0 if self._flights else self._clock() - self._last_busy
    def _drain(self) -> None:
        """Wait for in-flight jobs to settle, until the shutdown deadline."""
        with self._cond:
            if self._flights and not self._forced:
                hint = "; signal again to exit at once" if self._signals else ""
                log.info("stopping (%s): waiting for %d in-flight job(s)%s",
                         self._stop_reason, len(self._flights), hint)
            while self._flights and not self._forced:
                pause = _TICK
                if self._stop_at is not None:
                    left = self._stop_at + self.shutdown_timeout - self._clock()
                    if left <= 0:
                        return
                    pause = min(pause, left)
                self._cond.wait(pause)

    def _shut_down(self, heartbeat: threading.Thread, slots: list[threading.Thread]) -> None:
        """Give up on what is still running, stop the slots, then the heartbeats."""
        with self._cond:
            left = sorted(self._flights, key=lambda f: f.job.id)
            for flight in left:
                flight.abandoned = True
            self._counts["abandoned"] += len(left)
            self._flights.clear()
            self._inbox.clear()
            self._closing = True
            self._beating = False
            self._seconds = self._clock() - self._began
            forced = self._forced
            self._cond.notify_all()
            self._arrivals.notify_all()
        why = "exiting at once" if forced else \
            f"still running {self.shutdown_timeout:g}s after the stop request"
        for flight in left:
            log.warning("job %s (attempt %d): %s; abandoned, it will be delivered again when "
                        "its lease runs out", flight.job.id, flight.job.attempts, why)
        if forced:
            self._close_runners(kill=True)
            return
        heartbeat.join(self.queue.lock_timeout + 1.0)
        for slot in slots:
            slot.join(0.0 if left else 1.0)
        self._close_runners(kill=bool(left))

    def _close_runners(self, *, kill: bool) -> None:
        """End the child processes (killing those still at work) and the event loop."""
        for child in self._children:
            if kill:
                child.kill(final=True)
            else:
                child.close()
        self._loop.close()

    # -- periodic tasks -----------------------------------------------------

    def _schedule(self, scheduler: Scheduler) -> None:
        try:
            scheduler.loop(self._stopping.wait)
        except Exception:  # a bug: say so, and keep working the queue without the schedule
            log.exception("the periodic-task scheduler failed; no more ticks are enqueued")

    def __repr__(self) -> str:
        what = ("its tasks" if self.handler is None
                else getattr(self.handler, "__qualname__", self.handler))
        return (f"Worker({self.queue!r}, {what}, concurrency={self.concurrency}, "
                f"pool={self.pool!r})")


def _spawn(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread
