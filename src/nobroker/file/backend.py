"""FileBackend: the queue operations of the Backend protocol, over the file log.

Each operation is one `store.write(plan)` or `store.read(query)` (store.py
owns the files, the lock and the commit protocol): a plan decides the
records an operation writes against the replay state (commands.py), and
returns what builds the operation's result once they are committed. This
module also turns the state's entries into the `Job` views the protocol
returns. Arguments arrive checked and payloads as JSON text (see
nobroker/backend.py); every time comes from the store's never-backwards
clock and every random choice from the settings' rng.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

from ..backend import Capabilities, Settings
from ..errors import JobNotFoundError, NotLeasedError
from ..models import CompactionResult, Job, JobState, QueueStats, RecoveryReport
from .commands import (
    Batch,
    check_lease,
    plan_enqueue,
    plan_enqueue_many,
    plan_lease,
    plan_purge,
    plan_requeue,
    plan_settle,
)
from .options import FileOptions
from .records import RecordType
from .state import Entry, QueueState
from .store import FileStore

__all__ = ["FileBackend", "FileOptions", "CAPABILITIES"]

CAPABILITIES = Capabilities(compaction=True, inspection=True, recovery=True, local=True)
_MISSING: Any = object()


class FileBackend:
    """The queue `name` in `directory`: opened (created unless read-only) and recovered.

    `settings` are the Queue's, checked; `options` the file engine's own
    (FileOptions: auto-compaction, network file systems, and the test hooks).
    """

    def __init__(self, directory: str | os.PathLike[str], name: str, settings: Settings,
                 options: FileOptions | None = None) -> None:
        self.name = name
        self.location = os.path.abspath(os.fspath(directory))
        self.settings = settings = settings.filled()
        self.options = options if options is not None else FileOptions()
        self.capabilities = CAPABILITIES
        self.store = FileStore(self.location, name, settings, self.options)
        self.recovery: RecoveryReport | None = self.store.recovery
        self._backoff = settings.backoff
        assert settings.rng is not None  # filled() gave it one
        self._rng = settings.rng
        self._key_retention = settings.key_retention

    # -- views --------------------------------------------------------------

    def _view(self, entry: Entry, payload: Any = _MISSING) -> Job:
        leased = entry.state is JobState.LEASED
        return Job(
            id=entry.id,
            payload=self.store.payload(entry) if payload is _MISSING else payload,
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

    def enqueue(self, payload_text: str, payload: Any, *, priority: int, delay: float,
                max_attempts: int, job_id: str | None) -> Job:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job]:
            found = plan_enqueue(state, batch, now, payload_text, priority=priority,
                                 delay=delay, max_attempts=max_attempts, job_id=job_id,
                                 key_retention=self._key_retention, rng=self._rng)
            if isinstance(found, Entry):
                return lambda: self._view(found)
            if isinstance(found, float):
                return lambda: self._done_view(job_id or "", found)
            new_id = batch.last_id()
            return lambda: self._new_view(new_id, payload, priority, max_attempts,
                                          now + delay, now)

        return self.store.write(plan)

    def enqueue_many(self, payload_texts: Sequence[str], payloads: Sequence[Any], *,
                     priority: int, delay: float, max_attempts: int) -> list[Job]:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], list[Job]]:
            ids = plan_enqueue_many(state, batch, now, payload_texts, priority=priority,
                                    delay=delay, max_attempts=max_attempts, rng=self._rng)
            view, at = self._new_view, now + delay
            return lambda: [view(i, p, priority, max_attempts, at, now)
                            for i, p in zip(ids, payloads, strict=True)]

        return self.store.write(plan)

    # -- consuming ----------------------------------------------------------

    def lease(self, count: int, visibility_timeout: float) -> list[Job]:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], list[Job]]:
            leased = plan_lease(state, batch, now, count, visibility_timeout)
            jobs = state.jobs
            return lambda: [self._view(jobs[r["id"]]) for r in leased]

        return self.store.write(plan)

    def ack(self, job: Job) -> None:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], None]:
            plan_settle(state, batch, now, RecordType.ACK, job.id, job.token, t=now)
            return lambda: None

        self.store.write(plan, spare=job.id)

    def ack_many(self, jobs: Sequence[Job]) -> None:
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

        self.store.write(plan, spare=frozenset(job.id for job in jobs))

    def ack_and_lease(self, job: Job, visibility_timeout: float) -> Job | None:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job | None]:
            plan_settle(state, batch, now, RecordType.ACK, job.id, job.token, t=now)
            # The acked job is still leased while we plan, so ready() cannot offer it.
            leased = plan_lease(state, batch, now, 1, visibility_timeout)
            jobs = state.jobs
            return lambda: self._view(jobs[leased[0]["id"]]) if leased else None

        return self.store.write(plan, spare=job.id)

    def nack(self, job: Job, error: str | None, delay: float | None) -> Job:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job]:
            entry = check_lease(state, job.id, job.token)
            pause = delay if delay is not None else self._backoff.delay(entry.attempts,
                                                                         self._rng)
            plan_settle(state, batch, now, RecordType.NACK, job.id, job.token,
                        at=now + pause, err=error)
            return lambda: self._view(state.jobs[job.id])  # entries are snapshots

        return self.store.write(plan, spare=job.id)

    def extend(self, job: Job, seconds: float) -> Job:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job]:
            plan_settle(state, batch, now, RecordType.EXTEND, job.id, job.token,
                        until=now + seconds)
            return lambda: self._view(state.jobs[job.id])  # entries are snapshots

        return self.store.write(plan, spare=job.id)

    def wait(self, timeout: float) -> bool:
        store = self.store
        store.prepare_wait()  # before looking, so a poke from now on is kept for us
        due, now = store.read(lambda state: (state.next_wakeup(), store.peek_now()))
        if due is not None and due <= now:
            return True
        limit = timeout if due is None else min(timeout, due - now)
        return store.wait(limit) or (due is not None and due <= store.peek_now())

    # -- operating ----------------------------------------------------------

    def requeue_dead(self, job_id: str | None) -> int:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], int]:
            count = plan_requeue(state, batch, now, job_id)
            return lambda: count

        return self.store.write(plan)

    def purge(self) -> int:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], int]:
            count = plan_purge(state, batch, now)
            return lambda: count

        return self.store.write(plan)

    def get(self, job_id: str) -> Job:
        store = self.store

        def query(state: QueueState) -> Job:
            entry = state.jobs.get(job_id)
            if entry is not None:
                return self._view(entry)
            done_at = state.done_keys.get(job_id)
            if done_at is not None and done_at + self._key_retention > store.peek_now():
                return self._done_view(job_id, done_at)
            raise JobNotFoundError(job_id)

        return store.read(query)

    def stats(self) -> QueueStats:
        """Counts kept as records are applied: O(1) whatever the queue's size."""
        store = self.store

        def query(s: QueueState) -> QueueStats:
            return QueueStats(pending=s.pending, leased=s.leased, dead=s.dead, done=s.done,
                              total=s.pending + s.leased + s.dead,
                              generation=store.generation, log_bytes=store.log_bytes,
                              enqueued=s.enqueued, retried=s.retried,
                              dead_lettered=s.dead_lettered, live_bytes=s.live_bytes)

        return store.read(query)

    def list_jobs(self, state: JobState | None, limit: int | None,
                  offset: int = 0) -> list[Job]:
        if state is JobState.DONE:
            raise ValueError("finished jobs are not listed; only their keys are remembered")

        def query(replay: QueueState) -> list[Job]:
            # The skipped jobs are counted, not built: a deep page costs milliseconds.
            page = replay.entries(state, offset)
            if limit is not None:
                page = itertools.islice(page, limit)
            return [self._view(entry) for entry in page]

        return self.store.read(query)

    def compact(self) -> CompactionResult:
        return self.store.compact()

    def close(self) -> None:
        self.store.close()
