"""The process's in-memory queue sets: memory://NAME -> queue name -> SharedQueue.

Handles (MemoryBackend) of one process that open the same location and
queue name share one SharedQueue, as handles on one directory share its
files: its job table, its lock, the conditions that wake waiters (and the
waits on them), its named locks, and its time. A queue lives while a handle
has it open, and is gone when the last one closes (as SQLite's shared
in-memory databases are), so that a test's queue never leaks into the next
one that reuses its name.
Nothing here crosses a process boundary.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..limits import Limits
from ..models import Job, JobState
from .table import MemoryTable

__all__ = ["SharedQueue", "attach", "detach", "queue_names"]

_ENDED = (JobState.DONE, JobState.DEAD, JobState.CANCELLED)


class SharedQueue:
    """One in-memory queue, and what its handles share. Every field is read and
    changed under `lock` (the conditions use it too)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.leasable = threading.Condition(self.lock)  # a job may be leasable now
        self.finished = threading.Condition(self.lock)  # a job finished or vanished
        self.table = MemoryTable()
        self.named_locks: set[str] = set()  # Queue.lock keys held now
        self.handles = 0  # open handles; the queue goes with the last one
        self._latest = float("-inf")  # the latest time a write recorded

    def peek(self, clock_now: float) -> float:
        """The queue's present time, as the next write would record it: its time
        never goes backwards, whatever the handles' clocks say."""
        return max(float(clock_now), self._latest)

    def advance(self, clock_now: float) -> float:
        """peek(), recorded as the latest time (a write's)."""
        self._latest = self.peek(clock_now)
        return self._latest

    def try_lock(self, key: str, mine: set[str], check: Callable[[], object]
                 ) -> Callable[[], None] | None:
        """Named lock `key` taken for the handle holding `mine` (the keys it holds; what
        its close lets go), after `check()` under the lock; its release, or None if
        another handle holds it."""
        with self.lock:
            check()
            if key in self.named_locks:
                return None
            self.named_locks.add(key)
            mine.add(key)

        def release() -> None:
            with self.lock:
                if key in mine:
                    mine.discard(key)
                    self.named_locks.discard(key)

        return release

    def wait_leasable(self, open_table: Callable[[], MemoryTable],
                      clock: Callable[[], float], limits: Limits, timeout: float) -> bool:
        """Whether a job became leasable within `limits` in `timeout` seconds (Backend.wait):
        `open_table()` is the table (it raises once the waiting handle is closed),
        `clock()` the handle's time. While paused, an enqueue wakes no one: the resume does."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                table = open_table()
                paused = table.paused
                now = self.peek(clock())
                due = None if paused else table.next_wakeup(limits, now)
                if due is not None and due <= now:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                woken = self.leasable.wait(left if due is None else min(left, due - now))
                if not (paused and woken):
                    return woken or (due is not None and due <= self.peek(clock()))
                # Paused: an enqueue makes nothing leasable yet; wait on for the resume.

    def wait_finished(self, open_table: Callable[[], MemoryTable],
                      find: Callable[[MemoryTable, float], Job], clock: Callable[[], float],
                      timeout: float | None) -> Job | None:
        """The job `find(table, now)` shows once it has ended (done, dead or cancelled),
        or None after `timeout` seconds (Backend.wait_finished); `open_table` and
        `clock` as wait_leasable's."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while True:
                job = find(open_table(), self.peek(clock()))
                if job.state in _ENDED:
                    return job
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self.finished.wait(left)

    def notify(self, wakes: int, finishes: int) -> None:
        """Wake idle waiters if a move may have made a job leasable, and result
        waiters if one finished (the table's counts went up by these)."""
        if wakes:
            self.leasable.notify_all()
        if finishes:
            self.finished.notify_all()


_SETS: dict[str, dict[str, SharedQueue]] = {}  # location -> queue name -> queue
_SETS_LOCK = threading.Lock()


def attach(location: str, name: str) -> SharedQueue:
    """The queue `name` of the set at `location`, created on first use; one more
    handle holds it."""
    with _SETS_LOCK:
        queue = _SETS.setdefault(location, {}).setdefault(name, SharedQueue())
        with queue.lock:
            queue.handles += 1
        return queue


def detach(location: str, queue: SharedQueue, name: str) -> None:
    """One handle fewer; the last one takes the queue (and an empty set) away."""
    with _SETS_LOCK:
        with queue.lock:
            queue.handles -= 1
            last = queue.handles == 0
        queues = _SETS.get(location, {})
        if last and queues.get(name) is queue:
            del queues[name]
            if not queues:
                _SETS.pop(location, None)


def queue_names(location: str) -> list[str]:
    """The queues of the set at `location` that a handle has open, sorted."""
    with _SETS_LOCK:
        return sorted(_SETS.get(location, {}))
