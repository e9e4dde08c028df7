"""The Worker: runs a handler over a queue's jobs until it is told to stop.

What it owns: the loop that leases jobs, calls `handler(job)` and settles
each job -- returning acks it; raising nacks it with "Type: message" as its
`last_error`, so the queue retries it after its backoff or dead-letters it
after `max_attempts` -- and the two duties that make that loop safe to leave
running: lease heartbeats and a graceful shutdown.

Threads, and who does what:
- the *dispatcher* is the thread that called `run()`. It leases jobs when a
  slot is free, idles in `_wait_for_work` (the only place the worker waits
  for work) when none is ready, and decides when to stop;
- `concurrency` *slot* threads call the handler. A slot that finishes a job
  acks it and leases the next one in the same write (`Queue.ack_and_lease`:
  one fsync per job) for as long as jobs are ready;
- one *heartbeat* thread extends every in-flight lease each third of the
  visibility timeout, so a slow but healthy handler is never delivered
  twice: two heartbeats in a row can fail before a lease runs out. A
  heartbeat that finds its lease gone (fenced: it expired and the job went
  to someone else) stops treating the job as its own: it is logged and the
  handler's outcome is never acked or nacked.

Handlers run in threads, which suits I/O-bound work. CPU-bound work wants
processes: `pool="process"` runs each slot's calls in a child process of its
own (pool.py), or run several `nobroker work` processes on one queue; the
queue's file lock makes that safe. `async def` handlers and tasks run on
one event loop per Worker, the slot thread waiting on each coroutine, so at
most `concurrency` run at once.

Without a handler, `Worker(q)` runs the tasks registered on `q`
(nobroker.tasks): each job's payload names its task; a task's return value
is acked as the job's result; a payload naming a task this worker does not
know is nacked with "unknown task 'NAME'" like any failure (retried after
its backoff, so a newer worker of a rolling deploy may still take it, and
dead-lettered after `max_attempts`). Periodic tasks get a *scheduler*
thread that enqueues their ticks (tasks/schedule.py).

Time limits (`timeout=` on a task or the Worker): a call over its limit is
nacked with "TimeoutError: exceeded N s". In a child process it is killed;
a coroutine is cancelled; a thread cannot be killed, so it is abandoned and
runs on detached. A child that dies nacks its job naming the signal, and
the next call gets a fresh child.

A paused queue (`Queue.pause()`) leases nothing: the dispatcher waits on
the wake-up channel, which a resume pokes, and looks at least every
`poll_interval`.

Stopping, in this order: stop leasing; let in-flight handlers finish and be
settled, for at most `shutdown_timeout` seconds after the stop request; stop
heartbeats last. `max_jobs` and `idle_timeout` stop the same way. Python
cannot kill a thread, so a handler still running at the deadline is
*abandoned*: its heartbeats stop, this worker never settles it, and its job
is delivered again (counting an attempt) once its lease runs out. Slot
threads are daemons, so an abandoned handler does not keep the process
alive. A second SIGINT/SIGTERM skips the wait entirely; the in-flight jobs
come back the same way.

Rules: signal handlers only set flags and wake the dispatcher; no queue call
is ever made while holding the worker's condition; the library prints
nothing -- it logs to the `nobroker` logger, one line per failed job.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from . import validation
from .errors import (
    ConnectionLostError,
    LockTimeoutError,
    NobrokerError,
    NotLeasedError,
    SerializationError,
)
from .models import Job, JobState
from .pool import ChildProcess, EventLoop, Outcome, describe_error, job_to_json, run_in_thread
from .queue import Queue
from .tasks import Scheduler, TaskRegistry, call_as, parse_payload, queue_clock, registry_of

# Worth waiting out, not stopping for: another process's lock, a database server away
# for a moment (a PostgreSQL queue reconnects on its next call, with a backoff).
_PASSING = (LockTimeoutError, ConnectionLostError)

__all__ = ["Worker", "WorkerStats", "Handler", "DEFAULT_SHUTDOWN_TIMEOUT", "POOLS",
           "describe_error"]

log = logging.getLogger("nobroker")

Handler = Callable[[Job], object]

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


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """What one `Worker.run()` did."""

    succeeded: int = 0  # the handler returned; the job was acked
    retried: int = 0  # the handler raised; the job will be retried after its backoff
    dead_lettered: int = 0  # the handler raised on the job's last attempt
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
        return self.succeeded + self.failed + self.lost


@dataclass(eq=False, slots=True)
class _Flight:
    """One leased job, from the lease until it is settled (or given up)."""

    job: Job
    renew_at: float  # the worker's clock() at the next heartbeat
    settling: bool = False  # its slot is acking or nacking it: heartbeats keep off
    lost: bool = False  # a heartbeat found the lease gone: not ours any more
    abandoned: bool = False  # the worker stopped without it
    child: ChildProcess | None = None  # the child process running it (pool="process")


@dataclass(frozen=True, slots=True)
class _Plan:
    """What to call for one job, and how (from the handler, or the task it names)."""

    target: Callable[..., Any] | None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | None = None
    timeout: float | None = None
    keep: bool = False  # ack the return value as the job's result (tasks only)
    result_ttl: float | None = None
    spec: str = ""  # module:qualname, for a child process
    refused: str | None = None  # the job cannot run here: this is its last_error


class Worker:
    """Calls `handler(job)` for each job of `queue` until stopped; see the module doc."""

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
        self._handler_spec = _spec_of(handler) if handler is not None and pool == "process" \
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
        # may already hold it.
        self._cond = threading.Condition(threading.RLock())
        self._flights: set[_Flight] = set()
        self._inbox: deque[_Flight] = deque()
        self._reserved = 0  # leases taken (or being taken), for max_jobs
        self._counts = dict.fromkeys(("succeeded", "retried", "dead_lettered", "lost",
                                      "abandoned", "heartbeats", "timed_out", "crashed"), 0)
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
            _restore_signal_handlers(previous)
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
            began = self._clock()
            wait(timeout)
            if self._paused():  # ready jobs end the wait at once: do not spin on them
                self._pause_for(self.poll_interval - (self._clock() - began))
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
        except _PASSING as exc:
            log.warning("could not lease: %s; trying again", exc)
        except NobrokerError as exc:
            self._fail(exc)
        return []

    def _admit(self, jobs: list[Job]) -> None:
        """Hand freshly leased jobs to the slots (under _cond)."""
        renew_at = self._clock() + self.heartbeat_interval
        for job in jobs:
            flight = _Flight(job, renew_at)
            self._flights.add(flight)
            self._inbox.append(flight)
        self._last_busy = self._clock()
        self._cond.notify_all()

    def _reserve(self, wanted: int) -> int:
        """How many of `wanted` more leases max_jobs still allows (under _cond)."""
        granted = wanted if self.max_jobs is None else min(wanted,
                                                           self.max_jobs - self._reserved)
        self._reserved += max(granted, 0)
        return max(granted, 0)

    def _idle_for(self) -> float:
        return 0.0 if self._flights else self._clock() - self._last_busy

    def _request_stop(self, reason: str, *, deadline: bool) -> None:
        """Record the first stop request; a deadline starts the shutdown_timeout (under _cond)."""
        if self._stop_reason is None:
            self._stop_reason = reason
            self._stopping.set()
        if deadline and self._stop_at is None:
            self._stop_at = self._clock()
        self._cond.notify_all()

    def _fail(self, exc: NobrokerError) -> None:
        with self._cond:
            first = self._fatal is None
            if first:
                self._fatal = exc
            self._request_stop("error", deadline=True)
        if first:
            log.error("the queue failed, stopping the worker: %s", exc)

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

    # -- the slots ----------------------------------------------------------

    def _slot_loop(self, number: int) -> None:
        child = self._children[number] if self._children else None
        if child is not None:
            try:
                child.start()  # now, so the first job does not wait for the interpreter
            except OSError as exc:
                log.error("could not start a child process: %s; trying again per job", exc)
        while True:
            with self._cond:
                while not self._inbox and not self._closing:
                    self._cond.wait()
                if not self._inbox:
                    return
                flight: _Flight | None = self._inbox.popleft()
            while flight is not None:
                flight = self._work_on(flight, child)

    def _work_on(self, flight: _Flight, child: ChildProcess | None) -> _Flight | None:
        """Run the handler on one job and settle it; returns the next job, if one was leased."""
        job = flight.job
        plan = self._plan(job)
        with self._cond:
            flight.child = child
        try:
            outcome = self._execute(job, plan, child)
        except Exception as exc:  # a bug of ours: fail the job, keep the slot alive
            log.exception("job %s: running it failed inside the worker", job.id)
            outcome = Outcome.failed(exc)
        error = outcome.error_text
        chain = False
        with self._cond:
            self._counts["timed_out"] += outcome.timed_out
            self._counts["crashed"] += outcome.crashed and not flight.lost
            if flight.abandoned:
                gave_up = True
            else:
                gave_up = False
                flight.settling = True
                chain = (error is None and not flight.lost and self._stop_reason is None
                         and self._reserve(1) == 1)
        if gave_up:
            log.info("job %s finished after the worker stopped; not acked", job.id)
            return None
        if flight.lost:
            counter, following = "lost", None
        else:
            counter, following = self._settle(job, outcome, plan, chain)
        with self._cond:
            if chain and following is None:
                self._reserved -= 1
            self._counts[counter] += 1
            self._flights.discard(flight)
            nxt = None
            if following is not None:
                nxt = _Flight(following, self._clock() + self.heartbeat_interval)
                self._flights.add(nxt)
            self._last_busy = self._clock()
            self._cond.notify_all()
        return nxt

    def _settle(self, job: Job, outcome: Outcome, plan: _Plan,
                chain: bool) -> tuple[str, Job | None]:
        """Ack (and maybe lease the next job) or nack; returns the outcome's counter."""
        text = outcome.error_text
        verb = "acked" if text is None else "nacked"
        try:
            if text is None:
                options = self._ack_options(plan, outcome.result)
                try:
                    if chain:
                        return "succeeded", self.queue.ack_and_lease(
                            job, visibility_timeout=self.visibility_timeout, **options)
                    self.queue.ack(job, **options)
                    return "succeeded", None
                except SerializationError as exc:  # the result is not JSON: the task failed
                    text = describe_error(exc)
                    verb = "nacked"
            # The queue's time before the nack: the delay logged is the backoff, not
            # what is left of it.
            nacked_at = getattr(self.queue, "clock", time.time)()
            after = self.queue.nack(job, error=text)
        except NotLeasedError as exc:
            log.warning("job %s (attempt %d): lease lost before it could be %s (%s); "
                        "whoever holds it now will settle it", job.id, job.attempts, verb,
                        exc.reason)
            return "lost", None
        except _PASSING as exc:
            log.error("job %s (attempt %d) could not be %s: %s; it will be delivered again "
                      "when its lease runs out", job.id, job.attempts, verb, exc)
            return "lost", None
        except NobrokerError as exc:
            self._fail(exc)
            return "lost", None
        one_line = (text or "").replace("\n", "\\n")
        if after.state is JobState.DEAD:
            log.error("job %s failed on attempt %d of %d: %s; moved to the dead-letter queue",
                      job.id, job.attempts, job.max_attempts, one_line)
            outcome_name = "dead_lettered"
        else:
            log.warning("job %s failed on attempt %d of %d: %s; retrying in %.3gs", job.id,
                        job.attempts, job.max_attempts, one_line,
                        max(0.0, after.available_at - nacked_at))
            outcome_name = "retried"
        if log.isEnabledFor(logging.DEBUG) and outcome.error_text is not None:
            log.debug("job %s traceback:\n%s", job.id, outcome.traceback())
        return outcome_name, None

    def _ack_options(self, plan: _Plan, result: Any) -> dict[str, Any]:
        """The result (and its retention) to ack a task's job with."""
        if not plan.keep:  # a plain handler's return value is not stored
            return {}
        options: dict[str, Any] = {"result": result}
        if plan.result_ttl is not None:
            options["result_ttl"] = plan.result_ttl
        return options

    # -- running one call ---------------------------------------------------

    def _plan(self, job: Job) -> _Plan:
        """What this job calls: the handler, or the registered task its payload names."""
        if self.tasks is None:
            return _Plan(self.handler, (job,), None, self.timeout, spec=self._handler_spec)
        try:
            call = parse_payload(job.payload)
        except ValueError as exc:
            return _Plan(None, refused=str(exc))
        task = self.tasks.get(call.name)
        if task is None:
            return _Plan(None, refused=f"unknown task {call.name!r}")
        timeout = task.timeout if task.timeout is not None else self.timeout
        return _Plan(task.fn, tuple(call.args), call.kwargs, timeout, keep=True,
                     result_ttl=task.result_ttl, spec=task.spec)

    def _execute(self, job: Job, plan: _Plan, child: ChildProcess | None) -> Outcome:
        """Run the plan's call where the pool says, under its time limit."""
        if plan.refused is not None or plan.target is None:
            return Outcome(error_text=plan.refused)
        if child is not None:
            handler = self.tasks is None
            request: dict[str, Any] = {"spec": plan.spec, "keep": plan.keep,
                                       "job": job_to_json(job), "handler": handler,
                                       "args": [] if handler else plan.args,
                                       "kwargs": plan.kwargs or {}}
            return child.call(request, plan.timeout)
        target, args, kwargs = plan.target, plan.args, plan.kwargs or {}
        if plan.timeout is not None and not inspect.iscoroutinefunction(target):
            outcome = run_in_thread(lambda: call_as(job, target, args, kwargs), plan.timeout,
                                    f"nobroker-call-{job.id}")
        else:
            try:
                outcome = Outcome(result=call_as(job, target, args, kwargs))
            except BaseException as exc:  # whatever a handler raises is that job's failure
                return Outcome.failed(exc)
        if outcome.error_text is None and inspect.isawaitable(outcome.result):
            return self._loop.run(outcome.result, plan.timeout)  # call_as made it a coroutine
        return outcome

    # -- periodic tasks -----------------------------------------------------

    def _schedule(self, scheduler: Scheduler) -> None:
        try:
            scheduler.loop(self._stopping.wait)
        except Exception:  # a bug: say so, and keep working the queue without the schedule
            log.exception("the periodic-task scheduler failed; no more ticks are enqueued")

    def _child_modules(self) -> tuple[str, ...]:
        """The modules a child process imports up front (pool="process")."""
        if self.tasks is not None:
            specs = [_spec_of(task.fn, task.spec) for task in self.tasks]
        else:
            specs = [self._handler_spec]
        return tuple(dict.fromkeys(spec.partition(":")[0] for spec in specs))

    # -- heartbeats ---------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._beating:
                        return
                    now = self._clock()
                    live = [f for f in self._flights if not (f.settling or f.lost)]
                    due = [f for f in live if f.renew_at <= now]
                    if due:
                        break
                    wake = min((f.renew_at for f in live), default=None)
                    self._cond.wait(None if wake is None else wake - now)
            for flight in due:
                self._beat(flight)

    def _beat(self, flight: _Flight) -> None:
        """Extend one lease; mark the flight lost if the lease is no longer ours."""
        job = flight.job
        try:
            self.queue.extend(job, self.visibility_timeout)
        except NotLeasedError as exc:
            with self._cond:
                if flight.settling or flight not in self._flights:
                    return  # settled meanwhile: the ack, not a rival, ended the lease
                flight.lost = True
                child = flight.child
            log.warning("job %s (attempt %d): heartbeat found the lease lost (%s); this "
                        "worker no longer treats the job as its own and will not settle it",
                        job.id, job.attempts, exc.reason)
            if child is not None:  # a process can be stopped: free the slot (a cancel)
                log.warning("job %s: killing the child process that runs it", job.id)
                child.kill()
            return
        except _PASSING as exc:
            retry = min(self.heartbeat_interval / 4, 1.0)
            log.warning("job %s: heartbeat could not extend the lease (%s); retrying in %.2fs",
                        job.id, exc, retry)
            with self._cond:
                flight.renew_at = self._clock() + retry
            return
        except NobrokerError as exc:
            self._fail(exc)
            with self._cond:
                flight.renew_at = self._clock() + self.heartbeat_interval
            return
        with self._cond:
            flight.renew_at = self._clock() + self.heartbeat_interval
            self._counts["heartbeats"] += 1

    # -- signals ------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, Any]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for name in ("SIGINT", "SIGTERM"):
            signum = getattr(signal, name, None)
            if signum is not None:
                previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only flags: the dispatcher, woken here, does the logging and the work.
        with self._cond:
            self._signals += 1
            if self._signals == 1:
                self._request_stop(signal.Signals(signum).name, deadline=True)
            else:
                self._forced = True
            self._cond.notify_all()

    def __repr__(self) -> str:
        what = ("its tasks" if self.handler is None
                else getattr(self.handler, "__qualname__", self.handler))
        return (f"Worker({self.queue!r}, {what}, concurrency={self.concurrency}, "
                f"pool={self.pool!r})")


def _restore_signal_handlers(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _spec_of(fn: Callable[..., Any], spec: str | None = None) -> str:
    """How a child process imports `fn`: "module:qualname"; ValueError if it cannot."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if spec is None:
        spec = f"{module}:{qualname}"
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        raise ValueError(f"pool='process' imports each handler by name in the child, and "
                         f"{fn!r} cannot be imported (define it at module level)")
    main = sys.modules.get("__main__")
    if module == "__main__" and not getattr(main, "__file__", None):
        raise ValueError(f"pool='process' cannot import {qualname!r} from an interactive "
                         f"__main__; define it in a module")
    return spec


def _spawn(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread
