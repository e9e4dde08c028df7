"""FileBackend: the queue operations of the Backend protocol, over the file log.

Each operation is one `handle.write(plan)` or `handle.read(query)` (handle.py
owns the files, the lock and the commit protocol): a plan decides the
records an operation writes against the replay state (commands.py), and
returns what builds the operation's result once they are committed; and it
turns entries into the protocol's `Job` views. Arguments arrive checked, payloads
as JSON text (nobroker/backend.py); every time comes from the handle's
never-backwards clock and every random choice from the settings' rng.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..backend import Capabilities, CopiedLimits, DormantJob, Settings, distinct_leases
from ..dependencies import ANY, SUCCESS
from ..errors import NobrokerError
from ..limits import JobKeys, KeyUse, family, key_use
from ..models import (
    CompactionResult,
    Job,
    JobState,
    QueueStats,
    RecoveryReport,
    new_pending_jobs,
)
from ..window_copies import CopiedWindow, copied_windows
from . import blocking
from .disk.namedlocks import try_named_lock
from .handle import QueueHandle
from .log.logfile import LogFile, paused_gc
from .log.records import ID, TIME, RecordType
from .options import FileOptions
from .state.batch import Batch
from .state.commands import (
    plan_ack,
    plan_ack_many,
    plan_cancel,
    plan_delete_dead,
    plan_enqueue,
    plan_enqueue_many,
    plan_lease,
    plan_nack,
    plan_pause,
    plan_purge,
    plan_requeue,
    plan_settle,
    plan_snooze,
)
from .state.graphs import graph_jobs, plan_graph
from .state.notes import Note
from .state.state import Entry, QueueState
from .views import MISSING, done_view, dormant_views, entry_view, found_view, leased_views, new_view

if TYPE_CHECKING:
    from ..dependencies import GraphNode

__all__ = ["FileBackend", "FileOptions", "CAPABILITIES"]

T = TypeVar("T")

CAPABILITIES = Capabilities(compaction=True, inspection=True, recovery=True, local=True,
                            exports=True, dependencies=True, limits=True, revival=True)


class FileBackend:
    """The queue `name` in `directory`: opened (created unless read-only) and recovered.
    `settings` are the Queue's, checked; `options` the file engine's own (FileOptions)."""

    def __init__(self, directory: str | os.PathLike[str], name: str, settings: Settings,
                 options: FileOptions | None = None) -> None:
        self.name = name
        self.location = os.path.abspath(os.fspath(directory))
        self.settings = settings = settings.filled()
        self.options = options if options is not None else FileOptions()
        self.capabilities = CAPABILITIES
        self.handle = QueueHandle(self.location, name, settings, self.options)
        self.recovery: RecoveryReport | None = self.handle.recovery
        self._backoff = settings.backoff
        assert settings.rng is not None  # filled() gave it one
        self._rng = settings.rng
        self._key_retention = settings.key_retention
        self._result_ttl = settings.result_ttl
        self._limits = settings.limits  # declared by this process's code (nobroker.limits)

    # -- views --------------------------------------------------------------

    def _view(self, entry: Entry, payload: Any = MISSING, source: LogFile | None = None
              ) -> Job:
        return entry_view(self.handle.state, self.handle.live_log, entry, payload, source,
                          self.handle.peek_now)

    def _leased_views(self, entries: list[Entry]) -> Callable[[LogFile], list[Job]]:
        """Under the lock: what builds the views of jobs just leased (views.py)."""
        return leased_views(self._view, entries)

    def report_reclaimed(self, listener: Callable[[list[str]], None]) -> None:
        """Tell `listener` the ids of jobs our writes' lease reclaims dead-letter."""
        self.handle.dead_listener = listener

    # -- producing ----------------------------------------------------------

    def enqueue(self, payload_text: str, payload: Any, *, priority: int, delay: float,
                max_attempts: int, job_id: str | None, depends_on: Sequence[str] = (),
                allow_failure: bool = False, meta: dict[str, Any] | None = None,
                copied_limits: CopiedLimits | None = None) -> Job:
        keys = self._limits.keys_of(payload) if self._limits.tasks else None
        caps = self._limits.concurrency  # written with a limited job ("cc")
        if copied_limits is not None:  # nobroker migrate: the keys and cap it had
            keys, cap = copied_limits
            caps = {} if cap is None or keys[1] is None else {family(keys[1]): cap}

        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job]:
            batch.caps = caps
            found = plan_enqueue(state, batch, now, payload_text, priority=priority,
                                 delay=delay, max_attempts=max_attempts, job_id=job_id,
                                 key_retention=self._key_retention, rng=self._rng,
                                 depends_on=depends_on, mode=ANY if allow_failure else SUCCESS,
                                 keys=keys, meta=meta)
            if isinstance(found, Entry):
                return lambda: self._view(found)
            if isinstance(found, float):
                return lambda: done_view(self.handle.state.notes, job_id or "", found)
            new_id = batch.last_id()
            if depends_on or meta:  # as the batch left it: waiting, pending or cancelled
                return lambda: self._view(self.handle.state.jobs[new_id], payload)
            return lambda: new_view(new_id, payload, priority, max_attempts, now + delay, now)

        return self.handle.write(plan)

    def enqueue_many(self, payload_texts: Sequence[str], payloads: Sequence[Any], *,
                     priority: int, delay: float, max_attempts: int,
                     metas: Sequence[dict[str, Any]] | None = None) -> list[Job]:
        keys = [self._limits.keys_of(payload) for payload in payloads] if self._limits else []

        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], list[Job]]:
            batch.caps = self._limits.concurrency
            ids = plan_enqueue_many(state, batch, now, payload_texts, priority=priority,
                                    delay=delay, max_attempts=max_attempts, rng=self._rng,
                                    keys=keys, metas=metas)
            return lambda: new_pending_jobs(ids, payloads, priority, max_attempts,
                                            now + delay, now, metas)

        # Thousands of records, Applied tuples and Jobs, none in a cycle: the collector
        # would only scan them again and again as they pile up (paused_gc).
        with paused_gc():
            return self.handle.write(plan)

    def enqueue_graph(self, payload_texts: Sequence[str], nodes: Sequence[GraphNode],
                      copied_limits: Mapping[str, CopiedLimits] | None = None) -> list[Job]:
        keys: list[JobKeys | None] = [self._limits.keys_of(node.payload) for node in nodes] \
            if self._limits.tasks else []
        job_caps: dict[str, int] | None = None
        if copied_limits is not None:  # nobroker migrate: the keys and caps they had
            copied = [copied_limits.get(node.job_id or "", (None, None)) for node in nodes]
            keys = [job_keys for job_keys, _ in copied]
            # Each its own cap: two jobs of one key may carry different ones.
            job_caps = {node.job_id: cap for node, (_, cap) in zip(nodes, copied, strict=True)
                        if node.job_id is not None and cap is not None}

        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], list[Job]]:
            batch.caps, batch.job_caps = self._limits.concurrency, job_caps
            attempts = self.settings.max_attempts
            planned = plan_graph(state, batch, now, payload_texts, nodes, self._rng, attempts,
                                 keys)
            return lambda: graph_jobs(nodes, planned, now, attempts, lambda job_id, payload:
                                      self._view(self.handle.state.jobs[job_id], payload))

        with paused_gc():  # as enqueue_many's
            return self.handle.write(plan)

    # -- consuming ----------------------------------------------------------

    def lease(self, count: int, visibility_timeout: float) -> list[Job]:
        def plan(state: QueueState, batch: Batch, now: float
                 ) -> Callable[[], Callable[[LogFile], list[Job]]]:
            leased = plan_lease(state, batch, now, count, visibility_timeout, self._limits)
            jobs = state.jobs
            return lambda: self._leased_views([jobs[r[ID]] for r in leased])

        return self.handle.write_then_read(plan)

    def ack(self, job: Job, result_text: str | None = None,
            result_ttl: float | None = None) -> None:
        ttl = self._result_ttl if result_ttl is None else result_ttl

        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], None]:
            plan_ack(state, batch, now, job.id, job.token, result_text, ttl,
                     self._key_retention, self._limits)
            return lambda: None

        self.handle.write(plan, spare=job.id)

    def ack_many(self, jobs: Sequence[Job]) -> None:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], None]:
            distinct_leases(jobs)
            plan_ack_many(state, batch, now, jobs, self._limits)
            return lambda: None

        self.handle.write(plan, spare=frozenset(job.id for job in jobs))

    def ack_many_and_lease(self, jobs: Sequence[Job], count: int,
                           visibility_timeout: float) -> list[Job]:
        def plan(state: QueueState, batch: Batch, now: float
                 ) -> Callable[[], Callable[[LogFile], list[Job]]]:
            distinct_leases(jobs)
            plan_ack_many(state, batch, now, jobs, self._limits)
            # The acked jobs are still leased while we plan, so ready() cannot offer them.
            leased = plan_lease(state, batch, now, count, visibility_timeout, self._limits)
            table = state.jobs
            return lambda: self._leased_views([table[r[ID]] for r in leased])

        return self.handle.write_then_read(plan, spare=frozenset(job.id for job in jobs))

    def ack_and_lease(self, job: Job, visibility_timeout: float,
                      result_text: str | None = None,
                      result_ttl: float | None = None) -> Job | None:
        ttl = self._result_ttl if result_ttl is None else result_ttl

        def plan(state: QueueState, batch: Batch, now: float
                 ) -> Callable[[], Callable[[LogFile], list[Job]]]:
            plan_ack(state, batch, now, job.id, job.token, result_text, ttl,
                     self._key_retention, self._limits)
            # The acked job is still leased while we plan, so ready() cannot offer it.
            leased = plan_lease(state, batch, now, 1, visibility_timeout, self._limits)
            jobs = state.jobs
            return lambda: self._leased_views([jobs[r[ID]] for r in leased])

        views = self.handle.write_then_read(plan, spare=job.id)
        return views[0] if views else None

    def nack(self, job: Job, error: str | None, delay: float | None,
             dead: bool = False) -> Job:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job]:
            plan_nack(state, batch, now, job.id, job.token, error, delay, self._backoff,
                      self._rng, dead)
            return lambda: self._view(state.jobs[job.id])  # entries are snapshots

        return self.handle.write(plan, spare=job.id)

    def snooze(self, job: Job, delay: float, error: str | None) -> Job:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job]:
            plan_snooze(state, batch, now, job.id, job.token, error, delay)
            return lambda: self._view(state.jobs[job.id])  # entries are snapshots

        return self.handle.write(plan, spare=job.id)

    def extend(self, job: Job, seconds: float) -> Job:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], Job]:
            plan_settle(state, batch, now, RecordType.EXTEND, job.id, job.token,
                        until=now + seconds)
            return lambda: self._view(state.jobs[job.id])  # entries are snapshots

        return self.handle.write(plan, spare=job.id)

    def write_notes(self, job: Job, progress: tuple[float, str | None] | None,
                    meta: dict[str, Any]) -> None:
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], None]:
            plan_settle(state, batch, now, RecordType.PROGRESS, job.id, job.token,
                        **{TIME: now, **Note(progress, meta).fields()})
            return lambda: None

        self.handle.write(plan, spare=job.id)

    def wait(self, timeout: float) -> bool:
        return blocking.wait_leasable(self.handle, self._limits, timeout)

    def limit_use(self) -> list[KeyUse]:
        handle = self.handle
        return handle.read(lambda state: key_use(
            self._limits, state.limited.windows, state.limited.in_use, handle.peek_now(),
            state.limited.stored_caps(state.table)))

    def wait_finished(self, job_id: str, timeout: float | None) -> Job | None:
        return blocking.wait_finished(self.handle, self.get, job_id, timeout)

    # -- job control --------------------------------------------------------

    def _write_planned(self, planner: Callable[..., T], *args: Any) -> T:
        """One write of what `planner(state, batch, now, *args)` plans; what it returns."""
        def plan(state: QueueState, batch: Batch, now: float) -> Callable[[], T]:
            answer = planner(state, batch, now, *args)
            return lambda: answer

        return self.handle.write(plan)

    def cancel(self, job_id: str) -> bool:
        return self._write_planned(plan_cancel, job_id, self._result_ttl)

    def set_paused(self, paused: bool) -> None:
        self._write_planned(plan_pause, paused)

    # -- operating ----------------------------------------------------------

    def requeue_dead(self, job_id: str | None) -> int:
        return self._write_planned(plan_requeue, job_id)

    def purge(self) -> int:
        return self._write_planned(plan_purge)

    def delete_dead(self, job_id: str | None) -> int:
        return self._write_planned(plan_delete_dead, job_id)

    def get(self, job_id: str) -> Job:
        handle = self.handle
        return handle.read(lambda state: found_view(state, job_id, handle.peek_now(),
                                                    self._key_retention, self._view))

    def stats(self) -> QueueStats:  # counts kept as records are applied: O(1)
        handle = self.handle

        def query(s: QueueState) -> QueueStats:
            return QueueStats(pending=s.pending, leased=s.leased, dead=s.dead, done=s.done,
                              total=s.live(), waiting=s.waiting,
                              generation=handle.generation, log_bytes=handle.log_bytes,
                              paused=s.paused, kept=s.kept_at(handle.peek_now()),
                              enqueued=s.enqueued, retried=s.retried,
                              dead_lettered=s.dead_lettered, live_bytes=s.live_bytes)

        return handle.read(query)

    def list_jobs(self, state: JobState | None, limit: int | None,
                  offset: int = 0) -> list[Job]:
        def query(replay: QueueState) -> list[Job]:
            # The skipped jobs are counted, not built: a deep page costs milliseconds.
            page = replay.entries(state, offset)
            if limit is not None:
                page = itertools.islice(page, limit)
            return [self._view(entry) for entry in page]

        return self.handle.read(query)

    def export_jobs(self) -> list[tuple[Job, bool]]:
        """JobExport (nobroker migrate): the live jobs, each with whether its id is a key."""
        return self.handle.read(lambda replay: [(self._view(entry), entry.keyed)
                                               for entry in replay.entries()])

    def export_limits(self) -> dict[str, CopiedLimits]:
        """JobExport.export_limits: the live jobs' keys and caps (QueueState.limited)."""
        return self.handle.read(lambda state: {
            entry.id: (keys, state.limited.cap_of(entry.seq)) for entry in state.entries()
            for keys in (state.limited.keys_of(entry.seq),) if keys is not None})

    def export_windows(self) -> list[CopiedWindow]:
        """RateWindows.export_windows: the replayed windows (LimitedJobs.windows)."""
        return self.handle.read(lambda state: copied_windows(state.limited.windows))

    def import_windows(self, windows: Sequence[CopiedWindow]) -> None:
        """RateWindows.import_windows: a LIMIT record per window, its starts in "st"."""
        self._write_planned(lambda state, batch, now: state.limited.plan_copies(batch, windows))

    def export_dormant(self) -> list[DormantJob]:
        """Revival.export_dormant (nobroker migrate): QueueState.dormant's jobs."""
        return self.handle.read(lambda state: dormant_views(state, self.handle.live_log))

    def wait_modes(self) -> dict[str, str]:
        """Dependencies.wait_modes: each waiting job's mode, by id."""
        return self.handle.read(lambda state: {job_id: wait.mode for job_id, wait
                                               in state.waits.by_job.items()})

    def compact(self) -> CompactionResult:
        return self.handle.compact()

    def try_lock(self, key: str) -> Callable[[], None] | None:
        if self.handle.readonly:
            raise NobrokerError("queue was opened read-only")
        return try_named_lock(self.options.fs, self.location, self.name, key)

    def close(self) -> None:
        self.handle.close()

