"""The backend seam: what a storage engine must do for `Queue` to stand on it.

`Queue` (queue.py) is the facade: it checks every argument (validation.py),
encodes payloads as JSON text, and holds the clock and the random source.
A backend stores jobs and makes each operation durable before it returns.
The seam sits at the level of queue operations, not of bytes or rows: the
file log (nobroker.file), PostgreSQL (nobroker.postgres) and the in-memory
queue (nobroker.memory) share nothing below it, and none imports another.
opener.py opens the one a location names.

Every argument a backend receives is already checked: numbers are in range,
payloads and results are JSON text, ids are valid. A backend builds the
`Job` views it returns (models.py) and raises only the errors of errors.py.

`Capabilities` says what a backend can do beyond the common operations, and
how it differs where backends genuinely differ (huey's `destructive_reads`),
so that the CLI, the Worker, the dashboard, `nobroker migrate` and the
contract suite ask instead of assuming files. An operation only some
backends have sits in a protocol of its own (QueueListing, JobImport,
JobExport), named by the flag that says a backend has it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .backoff import BackoffPolicy
from .errors import NotLeasedError
from .limits import JobKeys, KeyUse, Limits
from .models import CompactionResult, Job, JobState, QueueStats, RecoveryReport
from .validation import INT_LIMIT, integer, number

__all__ = ["POSTGRES_SCHEMES", "MEMORY_SCHEME", "Backend", "Capabilities", "QueueListing",
           "JobImport", "JobExport", "Transactions", "Dependencies", "Revival", "DormantJob",
           "Settings", "CopiedLimits", "is_postgres_url", "is_memory_url", "distinct_leases"]


# A location starting with one of these is a PostgreSQL URL, not a directory.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# memory://NAME: a queue set in this process's memory (nobroker.memory).
MEMORY_SCHEME = "memory://"
# A copied job's limit keys and the cap its enqueuer declared (JobExport.export_limits).
CopiedLimits = tuple[JobKeys, int | None]


def is_postgres_url(location: object) -> bool:
    """Whether `location` names a PostgreSQL queue set rather than a directory."""
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def is_memory_url(location: object) -> bool:
    """Whether `location` names an in-memory queue set (memory://NAME)."""
    return isinstance(location, str) and location.startswith(MEMORY_SCHEME)

@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend offers beyond the operations every backend has."""

    compaction: bool = False  # compact() rewrites storage; stats() reports generation/log_bytes
    inspection: bool = False  # raw records of the log can be listed (nobroker inspect)
    recovery: bool = False  # opening may repair a torn tail and report it (Queue.recovery)
    local: bool = False  # one machine only (a directory); False: several hosts may share it
    listing: bool = False  # queue_names() lists every queue of the set (see QueueListing)
    imports: bool = False  # import_jobs() takes copied jobs as they were (see JobImport)
    exports: bool = False  # export_jobs() hands jobs out with their keys (see JobExport)
    # enqueue() takes depends_on= and allow_failure= (see Dependencies): jobs wait
    # for others, each released in the write that finishes its last prerequisite.
    dependencies: bool = False
    # requeue_dead of a dead prerequisite revives the dependents its death cancelled.
    revival: bool = False
    # The queue lives in this process only: no other process sees it, nothing
    # survives the process, and nothing is ever fsynced (memory://).
    in_process: bool = False
    # Jobs can be written in a caller's database transaction, and a task's writes
    # committed with its ack (see Transactions): PostgreSQL.
    transactions: bool = False
    # Rate limits and concurrency limits (nobroker.limits) hold across every process:
    # lease() decides them from the state it holds under its lock, with the limits of
    # the settings, and enqueue() stores the keys they give a job.
    limits: bool = False


@dataclass(frozen=True, slots=True)
class Settings:
    """The Queue's checked settings, handed to its backend once, at open."""

    visibility_timeout: float = 30.0
    max_attempts: int = 5
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    key_retention: float = 86400.0  # seconds a finished keyed job is remembered
    result_ttl: float = 86400.0  # seconds a finished job's result (and state) is kept
    lock_timeout: float = 10.0
    fsync: bool = True
    readonly: bool = False
    clock: Callable[[], float] | None = None  # None: the backend's own (time.time)
    rng: random.Random | None = None  # None: the backend's own (seeded from os.urandom)
    # What this process declared (Queue(rate_limit=), @q.task's limits): every lease
    # decides by them (nobroker.limits); tasks declare into it after the open.
    limits: Limits = field(default_factory=Limits, compare=False)

    @classmethod
    def checked(cls, *, visibility_timeout: float, max_attempts: int,
                backoff: BackoffPolicy | None, lock_timeout: float, key_retention: float,
                result_ttl: float, fsync: bool, readonly: bool,
                clock: Callable[[], float] | None, rng: random.Random | None,
                rate_limit: object = None) -> Settings:
        """Settings from a caller's arguments: each checked, ValueError or TypeError
        naming the one that is wrong."""
        limits = Limits()
        if rate_limit is not None:
            limits.declare_queue(rate_limit)
        return cls(limits=limits,
            visibility_timeout=number("visibility_timeout", visibility_timeout, minimum=0.001),
            max_attempts=integer("max_attempts", max_attempts, 1, INT_LIMIT),
            lock_timeout=number("lock_timeout", lock_timeout, minimum=0),
            key_retention=number("key_retention", key_retention, minimum=0),
            result_ttl=number("result_ttl", result_ttl, minimum=0),
            backoff=backoff if backoff is not None else BackoffPolicy(),
            fsync=bool(fsync), readonly=bool(readonly), clock=clock,
            rng=rng if rng is not None else random.Random())

    def filled(self) -> Settings:
        """These settings with a clock and an rng: the given ones, else time.time and
        a Random seeded from os.urandom. A backend keeps what this returns."""
        if self.clock is not None and self.rng is not None:
            return self
        return replace(self, clock=self.clock or time.time, rng=self.rng or random.Random())


class Backend(Protocol):
    """One queue's storage. Safe to share between threads.

    Every method is one queue operation, durable before it returns (unless the
    settings say fsync=False). The arguments are checked already (see the
    module doc); `job` arguments are the `Job`s this backend handed out.
    """

    name: str  # the queue's name
    location: str  # where it lives: a directory, or a database URL
    settings: Settings  # as opened, with the clock and rng filled in
    capabilities: Capabilities
    recovery: RecoveryReport | None  # what opening repaired, where `capabilities.recovery`

    # -- producing
    def enqueue(self, payload_text: str, payload: Any, *, priority: int, delay: float,
                max_attempts: int, job_id: str | None,
                meta: dict[str, Any] | None = None) -> Job:
        """`meta`: the job's metadata from the start (checked: codec.metadata)."""
        ...

    def enqueue_many(self, payload_texts: Sequence[str], payloads: Sequence[Any], *,
                     priority: int, delay: float, max_attempts: int,
                     metas: Sequence[dict[str, Any]] | None = None) -> list[Job]:
        """`metas`: each job's metadata from the start ({}: none), or None for none."""
        ...

    # -- consuming
    def lease(self, count: int, visibility_timeout: float) -> list[Job]: ...

    def ack(self, job: Job, result_text: str | None = None,
            result_ttl: float | None = None) -> None:
        """With `result_text` (JSON; "null" included), the job is kept as DONE with its
        result for `result_ttl` seconds (None: the settings'); without, nothing is."""
        ...

    def ack_many(self, jobs: Sequence[Job]) -> None: ...

    def ack_many_and_lease(self, jobs: Sequence[Job], count: int,
                           visibility_timeout: float) -> list[Job]:
        """Ack `jobs` as ack_many does (a stale lease: nothing written, nothing leased)
        and lease up to `count` ready jobs, as one write where the backend can."""
        ...

    def ack_and_lease(self, job: Job, visibility_timeout: float,
                      result_text: str | None = None,
                      result_ttl: float | None = None) -> Job | None: ...

    def nack(self, job: Job, error: str | None, delay: float | None,
             dead: bool = False) -> Job:
        """`delay` None: the settings' backoff, jittered by the settings' rng; `dead`:
        dead-lettered now, whatever attempts remain (`delay` then unused)."""
        ...

    def snooze(self, job: Job, delay: float, error: str | None) -> Job:
        """Give the job back untried: pending again in `delay` seconds, its attempts
        as before this lease (so never dead-lettered by it); NotLeasedError as nack."""
        ...

    def extend(self, job: Job, seconds: float) -> Job: ...

    def write_notes(self, job: Job, progress: tuple[float, str | None] | None,
                    meta: dict[str, Any]) -> None:
        """The holder's report on its leased `job`: its progress and its whole metadata
        (merged by the caller), replacing what the job had; NotLeasedError as nack.
        Kept as long as the job is (its result, its key, the dead-letter queue)."""
        ...

    def wait(self, timeout: float) -> bool:
        """Block until a job may be leasable (True) or `timeout` passes (False); never
        polls faster than the backend must, and never leases. While the queue is
        paused nothing is leasable: it returns at RESUME or at the timeout."""
        ...

    def limit_use(self) -> list[KeyUse]:
        """Each rate and concurrency key's use now (limits.key_use); [] for a backend
        without `capabilities.limits`."""
        ...

    def wait_finished(self, job_id: str, timeout: float | None) -> Job | None:
        """The job once DONE, DEAD or CANCELLED (woken, never polled); None on timeout.
        Raises JobNotFoundError for an id the backend does not know (or no longer)."""
        ...

    # -- job control
    def cancel(self, job_id: str) -> bool:
        """Cancel a pending or leased job (its lease is revoked), kept as CANCELLED for
        the settings' result_ttl; False for a finished, dead or unknown job."""
        ...

    def set_paused(self, paused: bool) -> None:
        """Pause (nothing is leased; enqueueing goes on) or resume, in every process."""
        ...

    # -- operating
    def requeue_dead(self, job_id: str | None) -> int: ...

    def purge(self) -> int: ...

    def delete_dead(self, job_id: str | None) -> int:
        """Delete one dead job (JobNotFoundError if it is not dead) or all; how many."""
        ...

    def get(self, job_id: str) -> Job: ...

    def stats(self) -> QueueStats: ...

    def list_jobs(self, state: JobState | None, limit: int | None,
                  offset: int = 0) -> list[Job]:
        """Jobs in enqueue order (of `state`, if given), skipping the first `offset`."""
        ...

    def compact(self) -> CompactionResult:
        """What compaction means here, on every backend: the file log rewrites its live
        jobs into a new generation (`capabilities.compaction`); the others drop the
        finished jobs and keys whose retention is over, at once rather than in passing."""
        ...

    def try_lock(self, key: str) -> Callable[[], None] | None:
        """Take the named lock `key` of this queue if no handle anywhere holds it
        (another thread of this process included): returns the function that lets
        it go (called once), or None if it is held. A lock dies with its holder
        (its process, or its database connection): nothing is left to expire."""
        ...

    def close(self) -> None: ...


class QueueListing(Protocol):
    """What a backend with `capabilities.listing` also has: the names of every queue
    in its set (a PostgreSQL schema), read cheaply from the set's own bookkeeping."""

    def queue_names(self) -> list[str]:
        """Sorted; every queue ever opened for writing in the set."""
        ...


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One job of `Queue.enqueue_graph`: its payload and options as enqueue's, and the
    jobs it waits for: an int is the index of an earlier node of the same graph, a
    str the id of a job already in the queue. `mode`: see docs/TASKS.md,
    "Dependencies" (nobroker.dependencies re-exports it: import it from there)."""

    payload: Any
    depends_on: tuple[int | str, ...] = ()
    mode: str = "success"  # dependencies.SUCCESS, ANY or FAILURE
    priority: int = 0
    delay: float = 0.0
    max_attempts: int | None = None  # None: the queue's default
    job_id: str | None = None  # None: the backend makes one (as enqueue does)


class Dependencies(Protocol):
    """What a backend with `capabilities.dependencies` also has: enqueue with prerequisites
    (job ids), waiting until they have all succeeded (or finished, with `allow_failure`);
    one that fails cancels it (docs/TASKS.md). `copied_limits`: migrate's, kept as given."""

    def enqueue(self, payload_text: str, payload: Any, *, priority: int, delay: float,
                max_attempts: int, job_id: str | None, depends_on: Sequence[str] = (),
                allow_failure: bool = False, meta: dict[str, Any] | None = None,
                copied_limits: CopiedLimits | None = None) -> Job: ...

    def enqueue_graph(self, payload_texts: Sequence[str], nodes: Sequence[GraphNode],
                      copied_limits: Mapping[str, CopiedLimits] | None = None) -> list[Job]:
        """Every node as a job, in one durable write (all or nothing); the nodes come
        checked (dependencies.checked_nodes), a max_attempts None meaning the settings'
        max_attempts; `copied_limits`: migrate's, by node job id. JobNotFoundError for an
        unknown prerequisite id, NobrokerError for a node's job id already in use, both
        before anything is written. The Jobs in node order."""
        ...

    def wait_modes(self) -> dict[str, str]:
        """Each waiting job's mode (dependencies.SUCCESS, ANY or FAILURE), by id: what
        `nobroker migrate` copies with its prerequisites (Job.waiting_for)."""
        ...


@dataclass(frozen=True, slots=True)
class DormantJob:
    """A cancelled dependent that a requeue of its failed prerequisites would revive
    (nobroker.revivals), as `nobroker migrate` copies it: the job (payload kept),
    whether its id is a caller's key, its limit keys, what it still waits for, and
    the dead or cancelled prerequisites that keep it cancelled (never empty), and
    the concurrency cap its enqueuer declared for its key (None: none, or not kept)."""

    job: Job
    keyed: bool
    keys: JobKeys | None
    unmet: tuple[str, ...]
    failed: tuple[str, ...]
    cap: int | None = None


class Revival(Protocol):
    """What a backend with `capabilities.revival` also has (`nobroker migrate`)."""

    def export_dormant(self) -> list[DormantJob]:
        """Every revivable cancelled dependent still kept, in enqueue order; one whose
        failed prerequisite is gone (never to be requeued) is not revivable."""
        ...


class JobImport(Protocol):
    """What a backend with `capabilities.imports` also has (`nobroker migrate`)."""

    def import_jobs(self, jobs: Sequence[Job], keyed: Sequence[bool],
                    limits: Mapping[str, CopiedLimits] | None = None) -> list[JobState]:
        """Insert jobs copied from another queue, keeping their ids, priorities, attempts,
        errors, times and `limits` (by id, as export_limits'); a dead job arrives dead, a
        leased one pending. `keyed[i]`: whether `jobs[i].id` is a caller's key. Ids
        already here are skipped: returns the states of the jobs inserted."""
        ...

    def import_dormant(self, jobs: Sequence[DormantJob]) -> list[str]:
        """Insert revivable cancelled dependents copied from another queue (a backend with
        `capabilities.revival`), kept for result_ttl from now, revived by a requeue here
        as they would have been there. Ids already here are skipped: the ids inserted."""
        ...


class JobExport(Protocol):
    """What a backend with `capabilities.exports` also has (`nobroker migrate`)."""

    def export_jobs(self) -> list[tuple[Job, bool]]:
        """Every pending, leased and dead job in enqueue order, each with whether its
        id is a caller's idempotency key (as JobImport.import_jobs takes them)."""
        ...

    def export_limits(self) -> dict[str, CopiedLimits]:
        """Each exported job's limit keys and stored cap, by id (for import_jobs)."""
        ...


class Transactions(Protocol):
    """What a backend with `capabilities.transactions` also has: jobs written in
    the caller's transaction, and acks written in a task's (nobroker.transactions)."""

    def enqueue_in(self, connection: Any, payload_text: str, payload: Any, *,
                   priority: int, delay: float, max_attempts: int,
                   job_id: str | None, meta: dict[str, Any] | None = None) -> Job:
        """`enqueue`, run on the caller's `connection` and inside its transaction:
        committed (and its wake-up sent) by the caller's commit, or never."""
        ...

    def atomic(self) -> AbstractContextManager[Any]:
        """A connection of this backend's in an open transaction: committed when the
        block ends, rolled back if it raises."""
        ...

    def ack_in(self, connection: Any, job: Job, result_text: str | None,
               result_ttl: float | None, *, joined: bool = False) -> None:
        """`ack`, inside the transaction `atomic()` opened (`joined`: one the application
        opened on its own connection); NotLeasedError if the lease is no longer current
        (the caller then rolls the transaction back)."""
        ...


def distinct_leases(jobs: Sequence[Job]) -> None:
    """ack_many's rule on every backend: each job once. A job listed twice is a
    stale lease the second time (NotLeasedError), found before anything is written."""
    seen: set[str] = set()
    for job in jobs:
        if job.id in seen:
            raise NotLeasedError(job.id, "it appears twice in one ack_many")
        seen.add(job.id)
