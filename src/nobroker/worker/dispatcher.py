"""The Worker itself: its options, run(), stop(), stats, and the dispatcher.

The dispatcher is the thread that called `run()`: it starts the other
threads, leases jobs into free slots, idles in `_wait_for_work` when none is
ready, and stops in order (see the package doc, worker/__init__.py): stop
leasing, drain the in-flight jobs until `shutdown_timeout`, abandon what is
left, stop the heartbeats last. The slots, heartbeats and signal handlers
are the mixins it is built from (slots.py, heartbeat.py, signals.py), and
where jobs come from, one queue or several, is leasing.py's.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from .. import validation
from ..errors import NobrokerError
from ..queue import Queue
from ..tasks import Scheduler, TaskRegistry, queue_clock, registry_of
from .children import ChildProcess
from .heartbeat import Heartbeats
from .joblog import log_job
from .leasing import TICK
from .picking import QueuePicker
from .pool import EventLoop
from .prefetch import checked_ack_delay, prefetch_option
from .shared import Flight, Handler, WorkerStats, log
from .signals import SignalHandling, restore_signal_handlers
from .slots import Slots, spec_of
from .waiting import QueueWaits

# Kubernetes sends SIGKILL 30 s after SIGTERM by default (systemd: 90 s); finish first.
DEFAULT_SHUTDOWN_TIMEOUT = 25.0
POOLS = ("thread", "process")


class Worker(Slots, Heartbeats, SignalHandling):
    """Calls `handler(job)` for each job of `queue` until stopped; see nobroker.worker's doc.

    `queue` is one Queue, or a list of them (or of queue names in `directory`, a
    directory or PostgreSQL URL: the worker opens those and closes them when
    `run()` returns). Over several queues it leases by strict priority, in the
    list's order, or by `weights` ({name: weight}, a smooth weighted round-robin);
    `queue_concurrency` ({name: N}) caps a queue's jobs in flight. See leasing.py.
    `prefetch` (K > 0) keeps K jobs leased beyond the running ones (more under weights:
    rounds.py) and acks finished jobs in batches (prefetch.py); 0 acks and leases per job;
    "auto" sizes K by the recent job durations. The default is "auto" under weights, 0
    otherwise. `ack_delay` (seconds, with prefetch) lets an ack wait that long for others
    to share its fsync.
    """

    def __init__(self, queue: Queue | Sequence[Queue | str], handler: Handler | None = None,
                 *, concurrency: int = 1, directory: str | None = None,
                 weights: Mapping[str, int] | None = None,
                 queue_concurrency: Mapping[str, int] | None = None,
                 poll_interval: float = 0.1, max_jobs: int | None = None,
                 idle_timeout: float | None = None, handle_signals: bool = True,
                 shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
                 visibility_timeout: float | None = None, timeout: float | None = None,
                 pool: str = "thread", prefetch: int | str | None = None, ack_delay: float = 0.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] | None = None) -> None:
        if handler is not None and not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        if pool not in POOLS:
            raise ValueError(f"pool must be 'thread' or 'process', not {pool!r}")
        self.queues, self._owned = _queues_of(queue, directory)
        try:
            self._picker = QueuePicker([q.name for q in self.queues], weights,
                                       queue_concurrency)
            self._registries = [self._registry(q, handler) for q in self.queues]
        except BaseException:
            self._close_owned()
            raise
        self.queue = self.queues[0]
        self.handler = handler
        self.tasks: TaskRegistry | None = self._registries[0]
        self.pool = pool
        self.timeout = None if timeout is None else validation.seconds("timeout", timeout,
                                                                       positive=True)
        self._handler_spec = spec_of(handler) if handler is not None and pool == "process" \
            else ""
        self._preload = self._child_modules() if pool == "process" else ()
        self._loop = EventLoop("nobroker-asyncio")
        self._children: list[ChildProcess] = []
        self.concurrency = validation.integer("concurrency", concurrency, 1)
        self.prefetch, self._auto = prefetch_option(prefetch, bool(weights))  # K; "auto"?
        self.poll_interval = validation.seconds("poll_interval", poll_interval, positive=True)
        self.max_jobs = None if max_jobs is None else validation.integer("max_jobs", max_jobs, 1)
        self.idle_timeout = None if idle_timeout is None else validation.seconds(
            "idle_timeout", idle_timeout)
        self.shutdown_timeout = validation.seconds("shutdown_timeout", shutdown_timeout)
        self.visibility_timeout = (
            min(q.visibility_timeout for q in self.queues) if visibility_timeout is None
            else validation.seconds("visibility_timeout", visibility_timeout, positive=True))
        # Every duration and deadline of the worker's own (heartbeats, idle and shutdown
        # timeouts, stats) is read from `clock`; `sleep`, if given, is how it idles
        # between polls of a queue without a wake-up channel (default: a wait that a
        # stop request or a finished slot ends early).
        self._clock = clock
        self._sleep = sleep
        self.heartbeat_interval = self.visibility_timeout / 3
        self.ack_delay = checked_ack_delay(ack_delay, self.prefetch, self._auto,
                                           self.visibility_timeout)
        self.handle_signals = bool(handle_signals)
        # Everything below is shared between threads and guarded by _cond. Its lock is
        # re-entrant because the signal handler takes it on the main thread, which
        # may already hold it. Idle slots wait on _arrivals, the heartbeat thread on
        # _beats and the acker on _acking (same lock), so that handing one of them
        # work wakes it only, not every thread that waits: beside a slot burning CPU,
        # each needless wake-up cost a GIL hand-off.
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        self._arrivals = threading.Condition(lock)
        self._beats = threading.Condition(lock)
        self._acking = threading.Condition(lock)
        self._flights: set[Flight] = set()
        self._leasing = [0] * len(self.queues)
        self._waits: QueueWaits | None = None
        self._inbox: deque[Flight] = deque()
        self._to_ack: list[Flight] = []  # succeeded, for the acker (prefetch only)
        self._acker_idle = False
        self._sending = 0  # jobs being leased, by the dispatcher or the acker
        self._live_slots = self.concurrency  # slot threads that have not raised
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
        self._quiet: frozenset[int] = frozenset()  # queues the last wake-up found quiet
        self._drained = False  # a slot's pick just found every queue empty

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
        heartbeat = self._guarded(self._heartbeat_loop, "nobroker-heartbeat")
        if self.pool == "process":
            self._children = [ChildProcess(self._preload, f"nobroker-child-{n}")
                              for n in range(self.concurrency)]
        slots = [self._guarded(functools.partial(self._slot_loop, n), f"nobroker-slot-{n}")
                 for n in range(self.concurrency)]
        if self.prefetch or self._auto:
            slots.append(self._guarded(self._ack_loop, "nobroker-acker"))
        for queue, registry in zip(self.queues, self._registries, strict=True):
            periodic = registry.periodic() if registry is not None else []
            if periodic:
                scheduler = Scheduler(queue, periodic, queue_clock(queue))
                _spawn(functools.partial(self._schedule, scheduler),
                       f"nobroker-scheduler-{queue.name}")
        if len(self.queues) > 1:
            self._waits = QueueWaits(self.queues, self.poll_interval)
        names = ", ".join(repr(q.name) for q in self.queues)
        log.info("worker started on queue%s %s in %s: concurrency %d%s%s, visibility timeout "
                 "%gs",
                 "s" if len(self.queues) > 1 else "", names, self.queue.directory,
                 self.concurrency, self._prefetch_text(" "),
                 f", ack delay {self.ack_delay:g}s" if self.ack_delay else "",
                 self.visibility_timeout)
        try:
            self._dispatch()
            with self._cond:  # the prefetched jobs, or those no slot is left to run
                back = not self._forced and (self.prefetch or self._auto or not self._live_slots)
            if back:
                self._give_back()
            self._drain()
        finally:
            self._shut_down(heartbeat, slots)
            restore_signal_handlers(previous)
            if self._waits is not None:
                self._waits.close()
            self._close_owned()
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
                free = self.concurrency + self._ahead - len(self._flights) - self._sending
                if self._ahead and self._inbox and free < self._ahead:
                    free = 0  # the slots have work: lease K at a time
                want = self._reserve(free) if free > 0 else 0
                if want == 0:
                    if free > 0 and not self._flights and not self._sending:
                        self._request_stop("max_jobs", deadline=False)  # all settled
                        return
                    self._cond.wait(TICK)  # a slot finishing, or a stop, wakes us
                    continue
                self._sending += want
            leased = self._lease_into_slots(want)
            with self._cond:
                self._sending -= want
                self._reserved -= want - leased
                if leased:
                    self._woken = False
                    continue
                if self.idle_timeout is not None and self._idle_for() >= self.idle_timeout:
                    self._request_stop("idle_timeout", deadline=False)
                    return
            self._wait_for_work()

    def _drain(self) -> None:
        """Wait for in-flight jobs to settle, until the shutdown deadline."""
        with self._cond:
            if self._flights and not self._forced:
                hint = "; signal again to exit at once" if self._signals else ""
                log.info("stopping (%s): waiting for %d in-flight job(s)%s",
                         self._stop_reason, len(self._flights), hint)
            while self._flights and not self._forced:
                pause = TICK
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
            self._beats.notify_all()
            self._acking.notify_all()
        why = "exiting at once" if forced else \
            f"still running {self.shutdown_timeout:g}s after the stop request"
        now = self._clock()
        for flight in left:
            log.warning("job %s (attempt %d): %s; abandoned, it will be delivered again when "
                        "its lease runs out", flight.job.id, flight.job.attempts, why)
            log_job(self.queues[flight.queue_index], flight.job, flight.task, "lost",
                    now - flight.began if flight.began else 0.0)
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

    def _guarded(self, target: Callable[[], None], name: str) -> threading.Thread:
        """Start a thread of ours that stops the worker if it raises: the others would
        otherwise wait for it forever."""
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # a bug, or a backend raising what it should not
                self._crash(name, exc)

        return _spawn(run, name)

    # -- periodic tasks -----------------------------------------------------

    def _schedule(self, scheduler: Scheduler) -> None:
        try:
            scheduler.loop(self._stopping.wait)
        except Exception:  # a bug: say so, and keep working the queue without the schedule
            log.exception("the periodic-task scheduler failed; no more ticks are enqueued")

    def _registry(self, queue: Queue, handler: Handler | None) -> TaskRegistry | None:
        """The tasks the worker runs for `queue`'s jobs (None: the handler)."""
        if getattr(queue, "readonly", False):
            raise ValueError("a worker needs a writable queue, not one opened read-only")
        if handler is not None:
            return None
        registry = registry_of(queue, create=False)
        if not len(registry) and registry.resolver is None:
            raise ValueError(f"no handler given and no tasks registered on {queue!r}: "
                             f"pass a handler, or register tasks with @queue.task")
        return registry

    def _close_owned(self) -> None:
        for queue in self._owned:
            queue.close()

    def __repr__(self) -> str:
        what = ("its tasks" if self.handler is None
                else getattr(self.handler, "__qualname__", self.handler))
        where = self.queue if len(self.queues) == 1 else self.queues
        prefetch = self._prefetch_text("=")
        if self.ack_delay:
            prefetch += f", ack_delay={self.ack_delay:g}"
        return (f"Worker({where!r}, {what}, concurrency={self.concurrency}, "
                f"pool={self.pool!r}{prefetch})")


def _queues_of(given: Queue | Sequence[Queue | str],
               directory: str | None) -> tuple[list[Queue], list[Queue]]:
    """The worker's queues, and those of them it opened (from names in `directory`)."""
    if not isinstance(given, (list, tuple)):  # one Queue (or a stand-in for one)
        if isinstance(given, str):
            raise TypeError("a Worker works a Queue, or a list of Queues or of queue names "
                            "(with directory=)")
        return [given], []  # type: ignore[list-item]
    if not given:
        raise ValueError("a Worker needs at least one queue")
    if any(isinstance(item, str) for item in given) and directory is None:
        raise ValueError("queue names need directory= (a directory or a PostgreSQL URL)")
    queues: list[Queue] = []
    owned: list[Queue] = []
    try:
        for item in given:
            if not isinstance(item, str):
                queues.append(item)
                continue
            assert directory is not None
            opened = Queue(directory, item)
            owned.append(opened)
            queues.append(opened)
    except BaseException:
        for queue in owned:
            queue.close()
        raise
    return queues, owned


def _spawn(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread
