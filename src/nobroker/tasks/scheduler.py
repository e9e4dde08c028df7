"""The Scheduler a Worker runs in a thread of its own: it enqueues each periodic
task's due ticks (schedule.py says when they are due, and why each runs once).

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
from typing import TYPE_CHECKING, Any

from ..errors import LockTimeoutError, NobrokerError
from .schedule import tick_job_id

if TYPE_CHECKING:
    from ..queue import Queue
    from .registry import Task

__all__ = ["Scheduler"]

log = logging.getLogger("nobroker")

_SLICE = 1.0  # longest real-time sleep before the clock is read again
_FIRST = 0.02  # the first sleep, which measures the clock's rate
_RETRY = 0.5  # after an enqueue failed (the lock was busy), try again this much later

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
