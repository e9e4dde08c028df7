"""The Queue: the public face of one queue, over whichever backend stores it.

It checks every argument (validation.py), encodes payloads as JSON text (codec.py),
holds the clock and the random source it hands to its backend, and forwards each call
to the backend as one queue operation (backend.py). Nothing here knows how jobs are
stored, nor imports a backend: opener.py opens the one the location names (a
directory, a postgresql:// URL, memory://NAME), importing it only then.
`Queue.from_backend` puts a Queue over a backend built by hand, for tests and tools.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import dependencies, limits, transactions, validation
from .backend import POSTGRES_SCHEMES, Backend, Settings
from .backoff import BackoffPolicy
from .codec import encode_payload, encode_payloads, metadata, metadata_each
from .errors import NobrokerError, TaskLockedError
from .hooks import Hook, Hooks
from .limits import KeyUse
from .models import CompactionResult, Job, JobState, QueueStats, RecoveryReport
from .opener import open_backend
from .results import await_outcome, finished_outcome, result_text, wait_arguments

__all__ = ["Queue", "POSTGRES_SCHEMES"]

_MISSING: Any = object()  # ack() without a result (None is a result)


class Queue:
    """A durable job queue: `path` is a directory (the queue is its `NAME.*` files),
    a PostgreSQL URL (postgresql://...), or memory://SET (this process only).

    Safe to share between threads, and to open from many processes at once. Do not
    carry a Queue object across `fork()`; it reopens itself if you do. `clock`
    (seconds since the epoch) and `rng` decide every time and every random choice the
    queue records; by default `time.time` (on PostgreSQL, the server's clock) and a
    Random seeded from os.urandom. `auto_compact` and `allow_network_fs` apply to a
    directory only; `eager`: see nobroker.testing; `rate_limit` ("100/m" or (count,
    seconds)): at most that many leases in any such period, across every process.
    """

    hooks: Hooks | None = None  # what on() registered; None until the first
    auto_compact: float | None = None  # the argument as given; a directory's backend acts on it
    eager: bool = False  # run task calls as they are enqueued (nobroker.testing)

    def __init__(self, path: str | os.PathLike[str], name: str = "default", *,
                 fsync: bool = True, visibility_timeout: float = 30.0, max_attempts: int = 5,
                 backoff: BackoffPolicy | None = None, lock_timeout: float = 10.0,
                 key_retention: float = 86400.0, result_ttl: float = 86400.0,
                 auto_compact: float | None = 0.5,
                 readonly: bool = False, allow_network_fs: bool = False,
                 clock: Callable[[], float] | None = None,
                 rng: random.Random | None = None, eager: bool = False,
                 rate_limit: Any = None) -> None:
        name = validation.queue_name(name)
        settings = Settings.checked(
            visibility_timeout=visibility_timeout, max_attempts=max_attempts, backoff=backoff,
            lock_timeout=lock_timeout, key_retention=key_retention, result_ttl=result_ttl,
            fsync=fsync, readonly=readonly, clock=clock, rng=rng, rate_limit=rate_limit)
        if auto_compact is not None:
            validation.fraction("auto_compact", auto_compact)
        self._attach(open_backend(path, name, settings, auto_compact=auto_compact,
                                  allow_network_fs=bool(allow_network_fs)))
        limits.require_for_queue(self._backend, rate_limit)  # closes it if refused
        self.auto_compact = auto_compact
        self.eager = bool(eager)

    @classmethod
    def from_backend(cls, backend: Backend) -> Queue:
        """A Queue over an opened backend (a FileBackend built by a test, say)."""
        queue = cls.__new__(cls)
        cls._attach(queue, backend)  # no auto_compact argument: the backend's options decide
        return queue

    def _attach(self, backend: Backend) -> None:
        settings = backend.settings
        self._backend = backend
        self.name, self.capabilities = backend.name, backend.capabilities
        self.directory = backend.location  # the queue's directory, or its database URL
        self.visibility_timeout, self.max_attempts = (settings.visibility_timeout,
                                                      settings.max_attempts)
        self.lock_timeout, self.key_retention = settings.lock_timeout, settings.key_retention
        self.result_ttl, self.backoff = settings.result_ttl, settings.backoff
        self.fsync, self.readonly = settings.fsync, settings.readonly
        assert settings.clock is not None  # a backend keeps Settings.filled()
        self.clock: Callable[[], float] = settings.clock  # the queue's time, as it records it
        # What opening repaired; None where the backend has no such thing.
        self.recovery: RecoveryReport | None = (
            backend.recovery if backend.capabilities.recovery else None)

    @property
    def backend(self) -> Backend:  # the storage under it (tests and tools)
        return self._backend

    @property
    def generation(self) -> int:
        """The storage generation (compactions so far); 0 where there are none."""
        return self._backend.stats().generation if self.capabilities.compaction else 0

    # -- producing ----------------------------------------------------------

    def enqueue(self, payload: Any, *, priority: int = 0, delay: float = 0.0,
                max_attempts: int | None = None, job_id: str | None = None, connection: Any = None,
                depends_on: Any = None, allow_failure: bool = False, meta: Any = None) -> Job:
        """Add a job; durable when this returns. A higher `priority` is leased first;
        `delay` seconds hide it until then. With `job_id`, a second enqueue of a known id
        (pending, leased, dead, or done less than `key_retention` seconds ago) writes
        nothing and returns the existing job. With `connection` (PostgreSQL: psycopg's or
        Django's), the job is written in that transaction, to exist once the caller commits
        (nobroker.transactions). `depends_on`: docs/TASKS.md; `meta`: docs/FLOW.md."""
        text = encode_payload(payload)
        priority, delay, attempts = validation.job_options(
            priority, delay, max_attempts, self.max_attempts)
        key = validation.job_id(job_id) if job_id is not None else None
        write = dependencies.enqueuer(self, self._backend, connection, depends_on, allow_failure)
        job = write(text, payload, priority=priority, delay=delay, max_attempts=attempts,
                    job_id=key, meta=None if meta is None else metadata(meta))
        transactions.announce(self, connection, job)  # now, or at the caller's commit
        return job

    def enqueue_many(self, payloads: Iterable[Any], *, priority: int = 0, delay: float = 0.0,
                     max_attempts: int | None = None, meta: Any = None) -> list[Job]:
        """Add many jobs in one batch: one write, one fsync, all or none after a crash.
        `meta`: one mapping for every job, or one mapping (or None) per payload."""
        transactions.refuse_in_block(self, "enqueue_many")
        items = list(payloads)
        prio, wait, attempts = validation.job_options(
            priority, delay, max_attempts, self.max_attempts)
        texts = encode_payloads(items)
        metas = metadata_each(meta, len(items))
        if not items:
            return []
        jobs = self._backend.enqueue_many(texts, items, priority=prio, delay=wait,
                                          max_attempts=attempts, metas=metas)
        if self.hooks is not None:
            self.hooks.fire_each("enqueued", jobs)
        return jobs

    def enqueue_graph(self, nodes: Iterable[dependencies.GraphNode]) -> list[Job]:
        """Add the jobs of a graph (GraphNode: payload, options and the jobs each waits
        for) in one batch, all or none: the Jobs in node order. docs/TASKS.md."""
        return dependencies.enqueue_graph(self, self._backend, nodes)

    # -- consuming ----------------------------------------------------------

    def _visibility(self, visibility_timeout: float | None) -> float:
        if visibility_timeout is None:
            return self.visibility_timeout
        return validation.number("visibility_timeout", visibility_timeout, minimum=0.001)

    def lease(self, count: int = 1, *, visibility_timeout: float | None = None) -> list[Job]:
        """Take up to `count` ready jobs; each is invisible to others until its deadline
        (never one over a rate or concurrency limit this process declared)."""
        count = validation.integer("count", count, 1)
        return self._backend.lease(count, self._visibility(visibility_timeout))

    def lease_one(self, *, visibility_timeout: float | None = None) -> Job | None:
        """Lease the next ready job, or None at once (`wait()` blocks until one may be)."""
        return next(iter(self.lease(1, visibility_timeout=visibility_timeout)), None)

    def ack(self, job: Job, *, result: Any = _MISSING, result_ttl: float | None = None) -> None:
        """Finish a job. Raises NotLeasedError if `job`'s lease is no longer current.

        With `result` (any JSON value, None included), the job is kept as done
        with its result for `result_ttl` seconds (default: the queue's), for
        `get` and `result` to read; without it, nothing is kept (but a keyed
        job's id, for `key_retention`). A result that is not JSON raises
        SerializationError and writes nothing."""
        text, ttl = result_text(result, result_ttl, _MISSING)
        self._backend.ack(job, text, ttl)
        if self.hooks is not None:
            self.hooks.fire("succeeded", job)

    def ack_many(self, jobs: list[Job]) -> None:
        """Finish many jobs in one batch; if any lease is stale, nothing is written."""
        if jobs:
            self._backend.ack_many(jobs)
            if self.hooks is not None:
                self.hooks.fire_each("succeeded", jobs)

    def ack_many_and_lease(self, jobs: list[Job], count: int, *,
                           visibility_timeout: float | None = None) -> list[Job]:
        """`ack_many(jobs)` and `lease(count)` in one batch (one fsync on a directory);
        if any lease is stale, nothing is acked nor leased (NotLeasedError)."""
        leased = self._backend.ack_many_and_lease(jobs, validation.integer("count", count, 0),
                                                  self._visibility(visibility_timeout))
        if self.hooks is not None:
            self.hooks.fire_each("succeeded", jobs)
        return leased

    def ack_and_lease(self, job: Job, *, result: Any = _MISSING,
                      result_ttl: float | None = None,
                      visibility_timeout: float | None = None) -> Job | None:
        """Ack `job` (with `result`, as `ack` does) and lease the next ready job in the
        same batch (one fsync)."""
        timeout = self._visibility(visibility_timeout)
        text, ttl = result_text(result, result_ttl, _MISSING)
        following = self._backend.ack_and_lease(job, timeout, text, ttl)
        if self.hooks is not None:
            self.hooks.fire("succeeded", job)
        return following

    def nack(self, job: Job, *, error: str | None = None, delay: float | None = None,
             dead: bool = False) -> Job:
        """Give a job back: retried after `delay` (default: the backoff policy), or
        dead-lettered when it has used `max_attempts` or with `dead=True` (now, whatever
        attempts remain). Returns the job's new state."""
        wait = None if delay is None else validation.number("delay", delay, minimum=0)
        after = self._backend.nack(job, validation.error_text(error), wait,
                                   validation.flag("dead", dead))
        if self.hooks is not None:
            self.hooks.fire("dead" if after.state is JobState.DEAD else "retried", after)
        return after

    def snooze(self, job: Job, delay: float, *, error: str | None = None) -> Job:
        """Give a leased job back untried: pending again after `delay` seconds, this
        lease not counted as an attempt, so snoozing never dead-letters it (as Oban's
        and River's snooze). NotLeasedError if the lease is not current."""
        wait = validation.number("delay", delay, minimum=0)
        return self._backend.snooze(job, wait, validation.error_text(error))

    def extend(self, job: Job, seconds: float) -> Job:
        """Move the lease's deadline to `seconds` from now (not added to the old one)."""
        return self._backend.extend(job, validation.number("seconds", seconds, minimum=0.001))

    def wait(self, timeout: float) -> bool:
        """Block until a job may be leasable (ready now, a delay or lease deadline or a
        rate window came due, a producer woke us: True), for at most `timeout` seconds
        (False). It never leases: call lease() after it. It uses no CPU meanwhile."""
        return self._backend.wait(validation.number("timeout", timeout, minimum=0))

    # -- results ------------------------------------------------------------

    def result(self, job_id: str, timeout: float | None = None) -> Any:
        """Wait until the job finishes and return its result (what `ack(result=)` stored;
        None for a keyed job acked without one). TaskFailed if it ended dead or
        cancelled, TimeoutError after `timeout` seconds (None: no limit), JobNotFoundError
        for an id the queue does not know (never enqueued, acked without a result, or
        forgotten after `result_ttl`). Woken by the ack, in any process: no polling."""
        return finished_outcome(self.wait_finished(job_id, timeout), job_id, timeout)

    async def aresult(self, job_id: str, timeout: float | None = None) -> Any:
        """`result` for asyncio code: waits in a worker thread, never on the loop."""
        return await await_outcome(self._backend.wait_finished, *wait_arguments(job_id, timeout))

    def wait_finished(self, job_id: str, timeout: float | None = None) -> Job | None:
        """The job once it is done, dead or cancelled; None if `timeout` passed first.
        Raises JobNotFoundError for an id the queue does not know (or no longer)."""
        return self._backend.wait_finished(*wait_arguments(job_id, timeout))

    # -- job control --------------------------------------------------------

    def cancel(self, job_id: str) -> bool:
        """Cancel a pending or leased job; False if it is finished, dead or unknown. A
        leased one is revoked: its holder's later ack, nack or extend raises
        NotLeasedError. Either way it is kept as cancelled for `result_ttl` seconds."""
        key = validation.job_id(job_id)
        cancelled = self._backend.cancel(key)
        if cancelled and self.hooks is not None and self.hooks.wants("cancelled"):
            with contextlib.suppress(NobrokerError):  # kept for result_ttl: 0 keeps nothing
                self.hooks.fire("cancelled", self._backend.get(key))
        return cancelled

    def pause(self) -> None:
        """Stop leasing, in every process: lease() returns nothing and wait() blocks
        until resume(). Enqueueing goes on; leased jobs finish normally."""
        self._backend.set_paused(True)

    def resume(self) -> None:
        """Lease again after pause(); idle workers wake at once."""
        self._backend.set_paused(False)

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold the named lock `key` for the `with` block, or raise TaskLockedError at
        once if another run (thread or process) holds it. It is let go when the block
        ends and dies with its holder (the process; on PostgreSQL, its connection), so
        a killed worker leaves no stale lock. A task's `lock=` takes one per run."""
        release = self._backend.try_lock(validation.lock_key(key))
        if release is None:
            raise TaskLockedError(key)
        try:
            yield
        finally:
            release()

    def transaction(self, connection: Any) -> contextlib.AbstractContextManager[Any]:
        """`with q.transaction(conn):` every enqueue of this queue in it (`.delay()` too) is
        written in `conn`'s transaction, for the caller to commit (nobroker.transactions)."""
        return transactions.transaction(self, self._backend, connection)

    # -- operating ----------------------------------------------------------

    def requeue_dead(self, job_id: str | None = None) -> int:
        """Move one dead job (or all) back to pending with a fresh attempt budget."""
        return self._backend.requeue_dead(job_id)

    def purge(self) -> int:
        """Remove every pending job (leased ones finish normally); returns how many."""
        return self._backend.purge()

    def delete_dead(self, job_id: str | None = None) -> int:
        """Delete one dead job (JobNotFoundError if it is not dead), or every dead job;
        returns how many. Recorded in the log, like every change."""
        return self._backend.delete_dead(None if job_id is None
                                         else validation.job_id(job_id))

    def get(self, job_id: str) -> Job:
        """The job `job_id` as the queue knows it now (read-only: no lease is taken):
        live; or finished and still kept (done with its result, or cancelled; with its
        finishing time and attempts); or a finished keyed job's bare id.
        JobNotFoundError if it knows no such job."""
        return self._backend.get(job_id)

    def stats(self) -> QueueStats:  # counts by state, sizes, lifetime totals
        return self._backend.stats()

    def limit_use(self) -> list[KeyUse]:
        """Each rate and concurrency key's use now (nobroker.limits.KeyUse); [] if none."""
        return self._backend.limit_use() if self.capabilities.limits else []

    def list_jobs(self, state: JobState | str | None = None, *,
                  limit: int | None = None, offset: int = 0) -> list[Job]:
        """Jobs in enqueue order, optionally of one state: at most `limit` of them,
        after skipping the first `offset` (a page)."""
        wanted = JobState(state) if state is not None else None
        limit = None if limit is None else validation.integer("limit", limit, 0)
        return self._backend.list_jobs(wanted, limit, validation.integer("offset", offset, 0))

    def dlq(self, *, limit: int | None = None) -> list[Job]:
        """The dead-letter queue: jobs that used up their attempts (or nacked dead)."""
        return self.list_jobs(JobState.DEAD, limit=limit)

    def compact(self) -> CompactionResult:
        """Drop what storage no longer needs; returns what it did. The file log rewrites
        its live jobs into a new generation, locked only for the switch; PostgreSQL and
        memory:// drop the finished jobs and keys whose retention is over."""
        return self._backend.compact()

    # -- tasks (the layer above: nobroker.tasks, imported only when used) ----

    def task(self, fn: Any = None, *, name: str | None = None, max_attempts: int | None = None,
             priority: int = 0, timeout: float | None = None,
             result_ttl: float | None = None, lock: bool | str = False,
             atomic: bool = False, rate_limit: Any = None, rate_limit_key: str | None = None,
             concurrency: int | None = None, concurrency_key: Any = None) -> Any:
        """Decorator: register a function as a task of this queue (`@q.task` or
        `@q.task(...)`); see nobroker.tasks. `lock=True` (or a key): one call at a time,
        see `lock`. `atomic=True` (PostgreSQL): its ack commits its transaction.
        `rate_limit`, `concurrency` (and their keys): docs/TASKS.md, nobroker.limits."""
        from . import tasks
        return tasks.task(self, fn, name=name, max_attempts=max_attempts, priority=priority,
                          timeout=timeout, result_ttl=result_ttl, lock=lock, atomic=atomic,
                          limits={"rate_limit": rate_limit, "rate_limit_key": rate_limit_key,
                                  "concurrency": concurrency, "concurrency_key": concurrency_key})

    def periodic(self, *, cron: str | None = None, every: Any = None, tz: str | None = None,
                 name: str | None = None, max_attempts: int | None = None, priority: int = 0,
                 timeout: float | None = None, result_ttl: float | None = None,
                 lock: bool | str = False) -> Any:
        """Decorator: register a task the workers run on a schedule, `cron="*/5 * * * *"`
        (in UTC, or in time zone `tz`, a tz database name such as "Europe/Paris") or
        `every=60` (seconds or a timedelta); see nobroker.tasks.schedule."""
        from . import tasks
        return tasks.periodic(self, cron=cron, every=every, tz=tz, name=name,
                              max_attempts=max_attempts, priority=priority, timeout=timeout,
                              result_ttl=result_ttl, lock=lock)

    def on(self, event: str, fn: Hook) -> Hook:
        """Call `fn(job)` whenever `event` happens to a job through this Queue object
        (or a Worker working it): "enqueued", "started", "succeeded", "retried",
        "dead" or "cancelled"; see nobroker.hooks. A hook that raises is logged and
        never fails the job. Returns `fn`."""
        if self.hooks is None:
            self.hooks = Hooks(self._backend)  # its lease reclaims fire `dead` too
        self.hooks.add(event, fn)
        return fn

    # -- lifecycle ----------------------------------------------------------

    def close(self) -> None:
        """Release the queue's files (saving a checkpoint if one is worth it). Calls
        afterwards raise QueueClosedError; closing twice does nothing."""
        self._backend.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Queue({self.directory!r}, name={self.name!r})"

