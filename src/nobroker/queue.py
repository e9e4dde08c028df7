"""The Queue: the public face of one queue in a directory.

It checks arguments, plans each call's records (commands.py) and turns replay
state entries into `Job` views. The files, the lock, the in-memory state and
the commit protocol (read forward, expire, plan, write one batch, fsync
outside the lock) belong to the `FileStore` (store.py); every call here is one
`store.write(plan)` or `store.read(query)`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

from .backoff import BackoffPolicy
from .errors import JobNotFoundError, NotLeasedError, SerializationError
from .file.commands import (
    Batch,
    check_lease,
    plan_enqueue,
    plan_enqueue_many,
    plan_lease,
    plan_purge,
    plan_requeue,
    plan_settle,
)
from .file.fs import OS, FileSystem
from .file.records import RecordType, check_id, check_number, encode_payload
from .file.state import Entry, JobState, QueueState
from .file.store import FileStore
from .models import CompactionResult, Job, QueueStats, RecoveryReport

__all__ = ["Queue"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
_MISSING: Any = object()
MAX_ERROR_LENGTH = 4000
_INT_LIMIT = 2**53  # integers beyond this do not survive a round trip through most JSON readers


class Queue:
    """A durable job queue stored in `path/NAME.*` files.

    Safe to share between threads, and to open from many processes at once.
    Do not carry a Queue object across `fork()`; it reopens itself if you do.
    """

    def __init__(self, path: str | os.PathLike[str], name: str = "default", *,
                 fsync: bool = True, visibility_timeout: float = 30.0, max_attempts: int = 5,
                 backoff: BackoffPolicy | None = None, lock_timeout: float = 10.0,
                 key_retention: float = 86400.0, auto_compact: float | None = 0.5,
                 readonly: bool = False, allow_network_fs: bool = False,
                 clock: Callable[[], float] = time.time, _fs: FileSystem = OS) -> None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"queue name {name!r} must be 1-100 letters, digits, '_' or '-'")
        self.visibility_timeout = check_number("visibility_timeout", visibility_timeout,
                                               minimum=0.001)
        self.max_attempts = _check_int("max_attempts", max_attempts, 1, _INT_LIMIT)
        self.lock_timeout = check_number("lock_timeout", lock_timeout, minimum=0)
        self.key_retention = check_number("key_retention", key_retention, minimum=0)
        if auto_compact is not None:
            check_number("auto_compact", auto_compact, minimum=0)
            if not 0 < auto_compact < 1:
                raise ValueError(f"auto_compact must be between 0 and 1 (or None), "
                                 f"not {auto_compact!r}")
        self.auto_compact = auto_compact
        self.backoff = backoff if backoff is not None else BackoffPolicy()
        self.fsync = bool(fsync)
        self.readonly = bool(readonly)
        self.directory = os.path.abspath(os.fspath(path))
        self.name = name
        self._clock = clock
        self._store = FileStore(self.directory, name, fsync=self.fsync, readonly=self.readonly,
                                lock_timeout=self.lock_timeout, auto_compact=auto_compact,
                                backoff=self.backoff, key_retention=self.key_retention,
                                allow_network_fs=allow_network_fs, clock=clock, fs=_fs)
        self.recovery: RecoveryReport = self._store.recovery

    @property
    def generation(self) -> int:
        return self._store.generation

    # -- views --------------------------------------------------------------

    def _view(self, entry: Entry, payload: Any = _MISSING) -> Job:
        leased = entry.state is JobState.LEASED
        return Job(
            id=entry.id,
            payload=self._store.payload(entry) if payload is _MISSING else payload,
            priority=entry.priority, attempts=entry.attempts, max_attempts=entry.max_attempts,
            state=entry.state, available_at=entry.available_at, enqueued_at=entry.enqueued_at,
            last_error=entry.last_error, token=entry.token if leased else None,
            lease_expires_at=entry.lease_until if leased else None)

    @staticmethod
    def _new_view(job_id: str, payload: Any, priority: int, max_attempts: int,
                  available_at: float, now: float) -> Job:
        """A job just enqueued, as its ENQUEUE record makes it (no lookup needed)."""
        return Job(job_id, payload, priority, 0, max_attempts, JobState.PENDING,
                   available_at, now, None)

    @staticmethod
    def _done_view(job_id: str, done_at: float) -> Job:
        return Job(id=job_id, payload=None, priority=0, attempts=0, max_attempts=0,
                   state=JobState.DONE, available_at=done_at, enqueued_at=done_at,
                   last_error=None)

    # -- producing ----------------------------------------------------------

    def _options(self, priority: int, delay: float,
                 max_attempts: int | None) -> tuple[int, float, int]:
        return (_check_int("priority", priority, -_INT_LIMIT, _INT_LIMIT),
                check_number("delay", delay, minimum=0),
                self.max_attempts if max_attempts is None
                else _check_int("max_attempts", max_attempts, 1, _INT_LIMIT))

    @staticmethod
    def _encode(payload: Any, index: int | None = None) -> str:
        try:
            return encode_payload(payload)
        except ValueError as exc:
            where = "" if index is None else f"payload {index}: "
            raise SerializationError(f"{where}{exc}") from None

    def enqueue(self, payload: Any, *, priority: int = 0, delay: float = 0.0,
                max_attempts: int | None = None, job_id: str | None = None) -> Job:
        """Add a job; durable when this returns.

        A higher `priority` is leased first; `delay` seconds hide it until
        then. With `job_id`, a second enqueue of a known id (pending, leased,
        dead, or done less than `key_retention` seconds ago) writes nothing
        and returns the existing job.
        """
        text = self._encode(payload)
        priority, delay, attempts = self._options(priority, delay, max_attempts)
        key = check_id(job_id) if job_id is not None else None

        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job]:
            found = plan_enqueue(state, batch, now, text, priority=priority, delay=delay,
                                 max_attempts=attempts, job_id=key,
                                 key_retention=self.key_retention)
            if isinstance(found, Entry):
                return lambda: self._view(found)
            if isinstance(found, float):
                return lambda: self._done_view(key or "", found)
            new_id = batch.last_id()
            return lambda: self._new_view(new_id, payload, priority, attempts, now + delay, now)

        return self._store.write(plan)

    def enqueue_many(self, payloads: Any, *, priority: int = 0, delay: float = 0.0,
                     max_attempts: int | None = None) -> list[Job]:
        """Add many jobs in one batch: one write, one fsync, all or none after a crash."""
        items = list(payloads)
        prio, wait, attempts = self._options(priority, delay, max_attempts)
        texts = [self._encode(p, index) for index, p in enumerate(items)]

        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], list[Job]]:
            ids = plan_enqueue_many(state, batch, now, texts, priority=prio, delay=wait,
                                    max_attempts=attempts)
            view, at = self._new_view, now + wait
            return lambda: [view(i, p, prio, attempts, at, now)
                            for i, p in zip(ids, items, strict=True)]

        return self._store.write(plan) if items else []

    # -- consuming ----------------------------------------------------------

    def _visibility(self, visibility_timeout: float | None) -> float:
        if visibility_timeout is None:
            return self.visibility_timeout
        return check_number("visibility_timeout", visibility_timeout, minimum=0.001)

    def lease(self, count: int = 1, *, visibility_timeout: float | None = None) -> list[Job]:
        """Take up to `count` ready jobs; each is invisible to others until its deadline."""
        count = _check_int("count", count, 1)
        timeout = self._visibility(visibility_timeout)

        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], list[Job]]:
            leased = plan_lease(state, batch, now, count, timeout)
            jobs = state.jobs
            return lambda: [self._view(jobs[r["id"]]) for r in leased]

        return self._store.write(plan)

    def lease_one(self, *, visibility_timeout: float | None = None) -> Job | None:
        jobs = self.lease(1, visibility_timeout=visibility_timeout)
        return jobs[0] if jobs else None

    def ack(self, job: Job) -> None:
        """Finish a job. Raises NotLeasedError if `job`'s lease is no longer current."""
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], None]:
            plan_settle(state, batch, now, RecordType.ACK, job.id, job.token, t=now)
            return lambda: None

        self._store.write(plan, spare=job.id)

    def ack_many(self, jobs: list[Job]) -> None:
        """Finish many jobs in one batch; if any lease is stale, nothing is written."""
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], None]:
            seen: set[str] = set()
            for job in jobs:
                if job.id in seen:
                    raise NotLeasedError(job.id, "it appears twice in one ack_many")
                seen.add(job.id)
                check_lease(state, job.id, job.token)
            for job in jobs:
                batch.add(RecordType.ACK, {"id": job.id, "tok": job.token, "t": now})
            return lambda: None

        if jobs:
            self._store.write(plan, spare=frozenset(job.id for job in jobs))

    def ack_and_lease(self, job: Job, *,
                      visibility_timeout: float | None = None) -> Job | None:
        """Ack `job` and lease the next ready job in the same batch (one fsync)."""
        timeout = self._visibility(visibility_timeout)

        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job | None]:
            plan_settle(state, batch, now, RecordType.ACK, job.id, job.token, t=now)
            # The acked job is still leased while we plan, so ready() cannot offer it.
            leased = plan_lease(state, batch, now, 1, timeout)
            jobs = state.jobs
            return lambda: self._view(jobs[leased[0]["id"]]) if leased else None

        return self._store.write(plan, spare=job.id)

    def nack(self, job: Job, *, error: str | None = None, delay: float | None = None) -> Job:
        """Give a job back: retried after `delay` (default: the backoff policy), or
        dead-lettered when it has used `max_attempts`. Returns the job's new state."""
        if error is not None:
            error = str(error)[:MAX_ERROR_LENGTH]
        wait = None if delay is None else check_number("delay", delay, minimum=0)

        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job]:
            entry = check_lease(state, job.id, job.token)
            pause = wait if wait is not None else self.backoff.delay(entry.attempts)
            plan_settle(state, batch, now, RecordType.NACK, job.id, job.token,
                        at=now + pause, err=error)
            return lambda: self._view(state.jobs[job.id])  # entries are snapshots

        return self._store.write(plan, spare=job.id)

    def extend(self, job: Job, seconds: float) -> Job:
        """Move the lease's deadline to `seconds` from now (not added to the old one)."""
        seconds = check_number("seconds", seconds, minimum=0.001)

        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job]:
            plan_settle(state, batch, now, RecordType.EXTEND, job.id, job.token,
                        until=now + seconds)
            return lambda: self._view(state.jobs[job.id])  # entries are snapshots

        return self._store.write(plan, spare=job.id)

    def wait(self, timeout: float) -> bool:
        """Block until a job may be leasable, for at most `timeout` seconds.

        Returns True when something may be ready (a job is ready now, a
        delayed job or a lease deadline came due, or a writer poked the wake
        pipe), False on timeout. It never leases: call lease() after it.
        An idle worker blocked here uses no CPU.
        """
        timeout = check_number("timeout", timeout, minimum=0)
        self._store.prepare_wait()  # before looking, so a poke from now on is kept for us
        due = self._store.read(QueueState.next_wakeup)
        now = float(self._clock())
        if due is not None and due <= now:
            return True
        limit = timeout if due is None else min(timeout, due - now)
        return self._store.wait(limit) or (due is not None and due <= self._clock())

    # -- operating ----------------------------------------------------------

    def requeue_dead(self, job_id: str | None = None) -> int:
        """Move one dead job (or all) back to pending with a fresh attempt budget."""
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], int]:
            count = plan_requeue(state, batch, now, job_id)
            return lambda: count

        return self._store.write(plan)

    def purge(self) -> int:
        """Remove every pending job (leased ones finish normally); returns how many."""
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], int]:
            count = plan_purge(state, batch, now)
            return lambda: count

        return self._store.write(plan)

    def get(self, job_id: str) -> Job:
        def query(state: QueueState) -> Job:
            entry = state.jobs.get(job_id)
            if entry is not None:
                return self._view(entry)
            done_at = state.done_keys.get(job_id)
            if done_at is not None and done_at + self.key_retention > self._clock():
                return self._done_view(job_id, done_at)
            raise JobNotFoundError(job_id)

        return self._store.read(query)

    def stats(self) -> QueueStats:
        """Counts kept as records are applied: O(1) whatever the queue's size."""
        def query(s: QueueState) -> QueueStats:
            return QueueStats(pending=s.pending, leased=s.leased, dead=s.dead, done=s.done,
                              total=s.pending + s.leased + s.dead,
                              generation=self._store.generation,
                              log_bytes=self._store.log_bytes)

        return self._store.read(query)

    def list_jobs(self, state: JobState | str | None = None, *,
                  limit: int | None = None) -> list[Job]:
        """Jobs in enqueue order, optionally of one state, at most `limit`."""
        wanted = JobState(state) if state is not None else None
        if wanted is JobState.DONE:
            raise ValueError("finished jobs are not listed; only their keys are remembered")
        if limit is not None:
            limit = _check_int("limit", limit, 0)

        def query(replay: QueueState) -> list[Job]:
            jobs: list[Job] = []
            for entry in replay.entries(wanted):
                if limit is not None and len(jobs) >= limit:
                    break
                jobs.append(self._view(entry))
            return jobs

        return self._store.read(query)

    def dlq(self, *, limit: int | None = None) -> list[Job]:
        """The dead-letter queue: jobs that used up their attempts."""
        return self.list_jobs(JobState.DEAD, limit=limit)

    def compact(self) -> CompactionResult:
        """Rewrite the live jobs into a new log generation and switch to it atomically.

        The new generation is written without holding the queue's lock, so other
        handles and processes keep working; only the switch at the end locks.
        """
        return self._store.compact()

    # -- lifecycle ----------------------------------------------------------

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Queue({self.directory!r}, name={self.name!r})"


def _check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ValueError(f"{name} must be {bound}, not {value}")
    return value
