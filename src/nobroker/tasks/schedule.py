"""Periodic tasks: when each tick is due, and enqueueing it exactly once.

What it owns: `Schedule` (a cron expression or a fixed interval, `every=`)
and the `Scheduler` a Worker runs in a thread of its own.

How ticks run exactly once with any number of workers: every worker process
runs a scheduler, and each enqueues a due tick with the idempotency key
`periodic:NAME:TIME` (TIME: the tick's scheduled time, UTC, ISO 8601, also
for a cron schedule in a time zone: an instant has one name everywhere). The
queue writes the first enqueue of a key and returns the existing job for the
others, so however many workers see a tick, one job runs it. Intervals are
aligned to the epoch (`every=60` ticks at :00 of each minute), so all workers
agree on the tick times without talking to each other.

Missed ticks: a tick that came due while no worker ran is run once when a
worker starts -- the latest one only; older ones are skipped. A worker looks
back at most `key_retention` seconds (the queue's; one day by default),
because beyond that the queue no longer remembers whether the tick ran. The
same rule holds while running: if the scheduler wakes late (a suspended
laptop), it enqueues the latest due tick and skips the ones before it.

Time is the queue's clock (`Queue(clock=...)`): tests inject a fast one. The
scheduler sleeps until the next due tick -- never a poll loop -- converting
the clock's seconds to real ones by the clock's observed rate, so a fast
test clock is followed, and waking at least every `_SLICE` seconds so a wall
clock that jumps is noticed.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..errors import LockTimeoutError, NobrokerError
from .cron import Cron

if TYPE_CHECKING:
    from ..queue import Queue
    from .registry import Task

__all__ = ["Schedule", "Scheduler", "tick_job_id"]

log = logging.getLogger("nobroker")

_SLICE = 1.0  # longest real-time sleep before the clock is read again
_FIRST = 0.02  # the first sleep, which measures the clock's rate
_RETRY = 0.5  # after an enqueue failed (the lock was busy), try again this much later


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a periodic task's ticks fall: `cron` or every `every` seconds."""

    cron: Cron | None = None
    every: float | None = None

    @classmethod
    def of(cls, cron: str | None, every: float | timedelta | None,
           tz: str | None = None) -> Schedule:
        if (cron is None) == (every is None):
            raise ValueError("a periodic task needs cron= or every=, exactly one")
        if cron is not None:
            return cls(cron=Cron.parse(cron, tz))
        if tz is not None:
            raise ValueError("tz= is for cron= schedules: every= counts seconds, which "
                             "no time zone changes")
        seconds = every.total_seconds() if isinstance(every, timedelta) else every
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"every must be seconds or a timedelta, not "
                            f"{type(every).__name__}")
        if not 0 < seconds < float("inf"):
            raise ValueError(f"every must be a finite number of seconds > 0, not {seconds}")
        return cls(every=float(seconds))

    def next_after(self, t: float) -> float:
        """The first tick strictly after `t`."""
        if self.every is not None:
            return (t // self.every + 1) * self.every
        assert self.cron is not None
        found = self.cron.next_after(t)
        assert found is not None  # Cron.parse refuses schedules that never match
        return found

    def latest_at_or_before(self, t: float) -> float | None:
        """The last tick at or before `t`."""
        if self.every is not None:
            return (t // self.every) * self.every
        assert self.cron is not None
        return self.cron.latest_at_or_before(t)

    def __str__(self) -> str:
        if self.cron is None:
            return f"every {self.every:g}s"
        where = f" in {self.cron.zone.key}" if self.cron.zone is not None else ""
        return f"cron {self.cron.expression!r}{where}"


def tick_job_id(name: str, tick: float) -> str:
    """The idempotency key of one tick of one periodic task."""
    when = datetime.fromtimestamp(tick, UTC)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        stamp += f".{when.microsecond:06d}"
    return f"periodic:{name}:{stamp}Z"


class Scheduler:
    """Enqueues each periodic task's due ticks; one per worker process."""

    def __init__(self, queue: Queue, tasks: list[Task[Any, Any]],
                 clock: Callable[[], float]) -> None:
        self.queue = queue
        self.tasks = tasks
        self.clock = clock
        self.lookback = float(getattr(queue, "key_retention", 86400.0))
        self.enqueued = 0  # ticks this scheduler wrote or found already written
        self._due: list[tuple[float, int]] = []  # (tick time, index into tasks)

    def start(self) -> None:
        """Enqueue each task's latest missed tick (if recent enough) and plan the next."""
        now = self.clock()
        for index, task in enumerate(self.tasks):
            assert task.schedule is not None
            last = task.schedule.latest_at_or_before(now)
            if last is not None and last > now - self.lookback:
                self._enqueue(task, last)
            heapq.heappush(self._due, (task.schedule.next_after(now), index))

    def run_due(self) -> float | None:
        """Enqueue what is due now; returns when the next tick falls (clock time)."""
        now = self.clock()
        while self._due and self._due[0][0] <= now:
            tick, index = self._due[0]
            task = self.tasks[index]
            assert task.schedule is not None
            latest = task.schedule.latest_at_or_before(now)
            if latest is not None and latest > tick:
                log.info("periodic task %s: woke late, skipping the ticks from %s up to %s",
                         task.name, tick_job_id(task.name, tick), tick_job_id(task.name, latest))
                tick = latest
            if not self._enqueue(task, tick):
                heapq.heapreplace(self._due, (now + _RETRY, index))
                continue
            heapq.heapreplace(self._due, (task.schedule.next_after(tick), index))
        return self._due[0][0] if self._due else None

    def loop(self, wait: Callable[[float], bool]) -> None:
        """Run until `wait(seconds)` returns True (stop); it sleeps real seconds."""
        self.start()
        pacer = _Pacer(self.clock)
        while True:
            due = self.run_due()
            if due is None:
                return
            if wait(pacer.real_seconds(due - self.clock())):
                return

    def _enqueue(self, task: Task[Any, Any], tick: float) -> bool:
        try:
            self.queue.enqueue({"task": task.name, "args": [], "kwargs": {}},
                               job_id=tick_job_id(task.name, tick), priority=task.priority,
                               max_attempts=task.max_attempts)
        except LockTimeoutError as exc:
            log.warning("periodic task %s: could not enqueue its tick (%s); retrying",
                        task.name, exc)
            return False
        except NobrokerError as exc:
            log.error("periodic task %s: could not enqueue its tick: %s", task.name, exc)
            return False
        self.enqueued += 1
        return True


class _Pacer:
    """Turns a span of the (possibly injected) clock into real seconds to sleep.

    The rate is the clock's progress over real time since the scheduler
    started, never taken below 1: a clock slower than real time (or one set
    back) only means an earlier wake-up that finds nothing due yet.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.clock0 = clock()
        self.real0 = time.monotonic()

    def real_seconds(self, span: float) -> float:
        elapsed = time.monotonic() - self.real0
        if elapsed < _FIRST:
            return max(0.0, min(span, _FIRST))
        rate = max(1.0, (self.clock() - self.clock0) / elapsed)
        return max(0.0, min(span / rate, _SLICE))
