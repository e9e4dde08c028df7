"""MemoryBackend: the queue operations of the Backend protocol, over a MemoryTable.

Each write is one step under the shared queue's lock: take the queue's time
(the handle's clock, never behind the latest time a write recorded), do what
every write does first (expire the leases past their deadline, except the
caller's own, and forget the finished jobs and keys whose retention is
over), make the operation's moves on the table (table.py), and wake the
waiters the moves concern. Reads take the lock and build `Job` views; they
change nothing; the blocking waits are the shared queue's (sets.py). Retry
delays come from the shared BackoffPolicy and the settings' rng, so a seeded
rng and a fake clock make a run repeatable.
Nothing is durable and nothing is fsynced: `Capabilities.in_process`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import islice
from typing import Any, TypeVar

from ..backend import Capabilities, CopiedLimits, DormantJob, Settings, distinct_leases
from ..codec import dumps, loads
from ..dependencies import ANY, SUCCESS, GraphNode, verdict
from ..errors import NobrokerError, QueueClosedError
from ..limits import KeyUse
from ..models import (
    CompactionResult,
    Job,
    JobState,
    QueueStats,
    RecoveryReport,
    new_pending_jobs,
)
from ..window_copies import CopiedWindow
from . import copying
from .graphs import add_graph, prerequisites
from .jobs import MemoryJob
from .revivals import requeue_dead
from .sets import SharedQueue, attach, detach, queue_names
from .table import MemoryTable
from .views import find_view, job_view, stats_view

__all__ = ["MemoryBackend", "CAPABILITIES"]

CAPABILITIES = Capabilities(listing=True, imports=True, exports=True, in_process=True,
                            dependencies=True, limits=True, revival=True)
T = TypeVar("T")


class MemoryBackend:
    """The queue `name` of the in-memory set `location` (memory://NAME). Safe to
    share between threads; handles of one process share the queue (sets.py)."""

    capabilities = CAPABILITIES
    recovery: RecoveryReport | None = None

    def __init__(self, location: str, name: str, settings: Settings) -> None:
        self.name = name
        self.location = location
        self.settings = settings = settings.filled()
        assert settings.clock is not None and settings.rng is not None  # filled()
        self._clock, self._rng = settings.clock, settings.rng
        self._shared: SharedQueue = attach(location, name)
        self._closed = False
        self._my_locks: set[str] = set()  # named locks this handle holds
        self._dead_listener: Callable[[list[str]], None] | None = None

    def __repr__(self) -> str:
        return f"MemoryBackend({self.location!r}, name={self.name!r})"

    def set_clock(self, clock: Callable[[], float]) -> None:
        """Read this handle's time from `clock` from now on (nobroker.testing's jumps)."""
        self.settings = replace(self.settings, clock=clock)
        self._clock = clock

    # -- the steps every call takes -----------------------------------------

    def _open(self) -> MemoryTable:
        """The table, under the lock; QueueClosedError once this handle is closed."""
        if self._closed:
            raise QueueClosedError(f"queue {self.name!r} in {self.location} is closed")
        return self._shared.table

    def _write(self, change: Callable[[MemoryTable, float], T],
               spare: Iterable[str] = ()) -> T:
        """One write: the queue's time, the expiries and forgetting every write does
        first (but for `spare`, the caller's own leases), then `change`."""
        if self.settings.readonly:
            raise NobrokerError("queue was opened read-only")
        shared = self._shared
        dead: list[str] = []  # dead-lettered by their lease's expiry: the `dead` hook's
        try:
            with shared.lock:
                table = self._open()
                wakes, finishes = table.wakes, table.finishes
                now = shared.advance(self._clock())
                table.dependent_keep = self.settings.result_ttl
                try:
                    table.sweep(now, self.settings.key_retention)
                    spared = frozenset(spare)
                    for job in table.due.expired(now):
                        if job.id not in spared:
                            table.retry(job, self._retry_at(job, now),
                                        f"lease expired (attempt {job.attempts})")
                            dead += [job.id] if job.state is JobState.DEAD else []
                    return change(table, now)
                finally:  # the expiries stand even if `change` refused
                    shared.notify(table.wakes - wakes, table.finishes - finishes)
        finally:
            if dead and self._dead_listener is not None:  # outside the lock
                self._dead_listener(dead)

    def report_reclaimed(self, listener: Callable[[list[str]], None]) -> None:
        self._dead_listener = listener  # told the ids our lease reclaims dead-letter

    def _now(self) -> float:  # the clock set_clock() set last, read at each call
        return self._clock()

    def _read(self, question: Callable[[MemoryTable, float], T]) -> T:
        with self._shared.lock:
            table = self._open()
            return question(table, self._shared.peek(self._clock()))

    def _retry_at(self, job: MemoryJob, now: float, delay: float | None = None) -> float:
        """When a failed attempt runs again: now if it was the last (it dies now),
        else after `delay` or the backoff policy's, jittered by the settings' rng."""
        if job.attempts >= job.max_attempts:
            return now
        return now + (delay if delay is not None
                      else self.settings.backoff.delay(job.attempts, self._rng))

    # -- views --------------------------------------------------------------

    def _view(self, job: MemoryJob) -> Job:  # at now: a keyed job's result may be gone
        return job_view(job, self._shared.peek(self._clock()))

    def _find(self, table: MemoryTable, job_id: str, now: float) -> Job:
        return find_view(table, job_id, now, self.settings.key_retention)

    # -- producing ----------------------------------------------------------

    def enqueue(self, payload_text: str, payload: Any, *, priority: int, delay: float,
                max_attempts: int, job_id: str | None, depends_on: Sequence[str] = (),
                allow_failure: bool = False, meta: dict[str, Any] | None = None,
                copied_limits: CopiedLimits | None = None) -> Job:
        keys, cap = copied_limits or self.settings.limits.stored_keys(payload)

        def change(table: MemoryTable, now: float) -> Job:
            unmet, failed, died = prerequisites(table, depends_on)  # refuses before a change
            if job_id is not None:
                existing = table.jobs.get(job_id)
                if existing is not None and existing.state is JobState.CANCELLED:
                    table.delete(existing)  # a cancelled job does not hold its key
                elif existing is not None or job_id in table.done_keys:
                    return self._find(table, job_id, now)
            new_id = job_id if job_id is not None else table.new_id()
            mode = ANY if allow_failure else SUCCESS
            released, error = verdict(mode, failed, died, not unmet)
            job = table.add(new_id, job_id is not None, payload_text, priority, now + delay, now,
                            max_attempts, None if released or error else unmet, mode, keys, cap)
            job.note = (None, meta) if meta else None
            if error is not None:  # settled at once
                job.last_error = error
                table.finish(job, JobState.CANCELLED, now, self.settings.result_ttl)
            if depends_on or meta:
                return self._view(job)
            return Job(new_id, payload, priority, 0, max_attempts, JobState.PENDING,
                       now + delay, now, None)

        return self._write(change)

    def enqueue_many(self, payload_texts: Sequence[str], payloads: Sequence[Any], *,
                     priority: int, delay: float, max_attempts: int,
                     metas: Sequence[dict[str, Any]] | None = None) -> list[Job]:
        def change(table: MemoryTable, now: float) -> list[Job]:
            ids = []
            for i, (text, payload) in enumerate(zip(payload_texts, payloads, strict=True)):
                ids.append(table.new_id())
                keys, cap = self.settings.limits.stored_keys(payload)
                job = table.add(ids[-1], False, text, priority, now + delay, now, max_attempts,
                                keys=keys, cap=cap)
                if metas and metas[i]:
                    job.note = (None, metas[i])
            return new_pending_jobs(ids, payloads, priority, max_attempts, now + delay, now, metas)

        return self._write(change)

    def enqueue_graph(self, payload_texts: Sequence[str], nodes: Sequence[GraphNode],
                      copied_limits: Mapping[str, CopiedLimits] | None = None) -> list[Job]:
        return self._write(lambda table, now: [self._view(job) for job in add_graph(
            table, now, payload_texts, nodes, self.settings.result_ttl,
            self.settings.max_attempts, self.settings.limits, copied_limits)])

    # -- consuming ----------------------------------------------------------

    def lease(self, count: int, visibility_timeout: float) -> list[Job]:
        return self._write(lambda table, now: [
            self._view(job) for job in table.lease(now, count, now + visibility_timeout,
                                                   self.settings.limits)])

    def _ack(self, table: MemoryTable, now: float, job: Job, result_text: str | None,
             result_ttl: float | None) -> None:
        held = table.held(job.id, job.token)
        ttl = self.settings.result_ttl if result_ttl is None else result_ttl
        # A result kept for no time is none: a keyed job's remembered id must not carry it.
        table.ack(held, now, result_text if ttl > 0 else None, ttl, self.settings.key_retention)

    def ack(self, job: Job, result_text: str | None = None,
            result_ttl: float | None = None) -> None:
        self._write(lambda table, now: self._ack(table, now, job, result_text, result_ttl),
                    spare=(job.id,))

    def _ack_all(self, table: MemoryTable, now: float, jobs: Sequence[Job]) -> None:
        distinct_leases(jobs)
        for job in jobs:  # every lease checked before anything changes
            table.held(job.id, job.token)
        for job in jobs:
            self._ack(table, now, job, None, None)

    def ack_many(self, jobs: Sequence[Job]) -> None:
        self._write(lambda table, now: self._ack_all(table, now, jobs),
                    spare=[job.id for job in jobs])

    def ack_many_and_lease(self, jobs: Sequence[Job], count: int,
                           visibility_timeout: float) -> list[Job]:
        def change(table: MemoryTable, now: float) -> list[Job]:
            self._ack_all(table, now, jobs)
            return [self._view(job) for job in table.lease(now, count, now + visibility_timeout,
                                                           self.settings.limits)]

        return self._write(change, spare=[job.id for job in jobs])

    def ack_and_lease(self, job: Job, visibility_timeout: float,
                      result_text: str | None = None,
                      result_ttl: float | None = None) -> Job | None:
        def change(table: MemoryTable, now: float) -> Job | None:
            self._ack(table, now, job, result_text, result_ttl)
            leased = table.lease(now, 1, now + visibility_timeout, self.settings.limits)
            return self._view(leased[0]) if leased else None

        return self._write(change, spare=(job.id,))

    def nack(self, job: Job, error: str | None, delay: float | None,
             dead: bool = False) -> Job:
        def change(table: MemoryTable, now: float) -> Job:
            held = table.held(job.id, job.token)
            table.retry(held, now if dead else self._retry_at(held, now, delay), error, dead)
            return self._view(held)

        return self._write(change, spare=(job.id,))

    def snooze(self, job: Job, delay: float, error: str | None) -> Job:
        def change(table: MemoryTable, now: float) -> Job:
            held = table.held(job.id, job.token)
            table.snooze(held, now + delay, error)
            return self._view(held)

        return self._write(change, spare=(job.id,))

    def extend(self, job: Job, seconds: float) -> Job:
        def change(table: MemoryTable, now: float) -> Job:
            held = table.held(job.id, job.token)
            table.extend(held, now + seconds)
            return self._view(held)

        return self._write(change, spare=(job.id,))

    def write_notes(self, job: Job, progress: tuple[float, str | None] | None,
                    meta: dict[str, Any]) -> None:
        def change(table: MemoryTable, now: float) -> None:
            table.held(job.id, job.token).note = (progress, loads(dumps(meta)))

        self._write(change, spare=(job.id,))

    def wait(self, timeout: float) -> bool:
        return self._shared.wait_leasable(self._open, self._now, self.settings.limits,
                                          timeout)

    def wait_finished(self, job_id: str, timeout: float | None) -> Job | None:
        return self._shared.wait_finished(
            self._open, lambda table, now: self._find(table, job_id, now), self._now, timeout)

    # -- job control --------------------------------------------------------

    def cancel(self, job_id: str) -> bool:
        def change(table: MemoryTable, now: float) -> bool:
            job = table.jobs.get(job_id)
            if job is None or job.state not in (JobState.PENDING, JobState.LEASED,
                                                JobState.WAITING):
                return False
            table.finish(job, JobState.CANCELLED, now, self.settings.result_ttl)
            return True

        return self._write(change)

    def set_paused(self, paused: bool) -> None:
        self._write(lambda table, now: table.set_paused(paused))

    # -- operating ----------------------------------------------------------

    def requeue_dead(self, job_id: str | None) -> int:
        return self._write(lambda table, now: requeue_dead(table, job_id, now))

    def purge(self) -> int:
        return self._write(lambda table, now: table.purge(now))

    def delete_dead(self, job_id: str | None) -> int:
        return self._write(lambda table, now: table.delete_dead(job_id))

    def get(self, job_id: str) -> Job:
        return self._read(lambda table, now: self._find(table, job_id, now))

    def stats(self) -> QueueStats:
        return self._read(stats_view)

    def list_jobs(self, state: JobState | None, limit: int | None,
                  offset: int = 0) -> list[Job]:
        stop = None if limit is None else offset + limit
        return self._read(lambda table, now: [
            self._view(job) for job in islice(table.entries(state), offset, stop)])

    def limit_use(self) -> list[KeyUse]:
        return self._read(lambda table, now: table.limit_use(self.settings.limits, now))

    def queue_names(self) -> list[str]:
        """QueueListing: the queues of this set that a handle has open."""
        self._read(lambda table, now: None)  # QueueClosedError on a closed handle
        return queue_names(self.location)

    def compact(self) -> CompactionResult:
        """Nothing to rewrite: the sweep every write does first, and what is left."""
        started = time.perf_counter()
        live, keys = self._write(lambda table, now: (sum(1 for _ in table.entries()),
                                                     len(table.done_keys)))
        return CompactionResult(old_generation=0, new_generation=0, bytes_before=0,
                                bytes_after=0, live_jobs=live, remembered_keys=keys,
                                seconds=time.perf_counter() - started)

    # -- moving queues (nobroker migrate) -----------------------------------

    def export_jobs(self) -> list[tuple[Job, bool]]:
        return self._read(lambda t, now: [(self._view(job), job.keyed) for job in t.entries()])

    def export_limits(self) -> dict[str, CopiedLimits]:
        return self._read(lambda table, now: copying.export_limits(table))

    def import_jobs(self, jobs: Sequence[Job], keyed: Sequence[bool],
                    limits: Mapping[str, CopiedLimits] | None = None) -> list[JobState]:
        return self._write(lambda table, now: copying.import_copies(table, jobs, keyed, limits))

    def wait_modes(self) -> dict[str, str]:
        return self._read(lambda table, now: copying.wait_modes(table))

    def export_windows(self) -> list[CopiedWindow]:  # RateWindows.export_windows
        return self._read(lambda table, now: copying.export_windows(table))

    def import_windows(self, windows: Sequence[CopiedWindow]) -> None:
        self._write(lambda table, now: copying.import_windows(table, windows))

    def export_dormant(self) -> list[DormantJob]:
        return self._read(lambda table, now: copying.export_dormant(table, self._view))

    def import_dormant(self, jobs: Sequence[DormantJob]) -> list[str]:
        return self._write(lambda table, now: copying.import_dormant(
            table, jobs, now, self.settings.result_ttl))

    # -- named locks and lifecycle ------------------------------------------

    def try_lock(self, key: str) -> Callable[[], None] | None:
        if self.settings.readonly:
            raise NobrokerError("queue was opened read-only")
        return self._shared.try_lock(key, self._my_locks, self._open)

    def close(self) -> None:
        shared = self._shared
        with shared.lock:
            if self._closed:
                return
            self._closed = True
            shared.named_locks.difference_update(self._my_locks)  # they die with it
            self._my_locks.clear()
            shared.leasable.notify_all()  # this handle's waiters see it closed
            shared.finished.notify_all()
        detach(self.location, shared, self.name)
