"""The values the public API hands out: Job, QueueStats, RecoveryReport, CompactionResult.

All are frozen: a Job is a snapshot of a job at the moment of the call, not
a live view. To act on a job (ack, nack, extend), pass the Job back; its
`token` is the fencing token that proves the caller still holds the lease.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, Final

__all__ = ["JobState", "Job", "new_pending_jobs", "QueueStats", "RecoveryReport",
           "CompactionResult"]


Progress = tuple[float, str | None]  # how far a running job got (0..1), and a note


class JobState(StrEnum):
    PENDING = "pending"  # waiting for its available_at, then leasable
    LEASED = "leased"  # held by one worker until lease_until
    DEAD = "dead"  # failed max_attempts times; in the dead-letter queue
    WAITING = "waiting"  # waits for its prerequisites (depends_on=) to succeed; not leased
    DONE = "done"  # acked; remembered (with its result) for a retention period
    CANCELLED = "cancelled"  # removed by Queue.cancel before it finished


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    payload: Any  # None for a finished job remembered only by its key
    priority: int
    attempts: int  # deliveries so far (a lease counts; an expired lease counted too)
    max_attempts: int
    state: JobState
    available_at: float  # when it becomes (or became) leasable, seconds since the epoch
    enqueued_at: float
    last_error: str | None
    token: int | None = None  # fencing token of the current lease, when leased
    lease_expires_at: float | None = None
    result: Any = None  # what the handler returned (JSON), once DONE
    finished_at: float | None = None  # when it was acked, dead-lettered or cancelled
    # WAITING: the prerequisites (depends_on=) it still waits for, in the order given.
    waiting_for: tuple[str, ...] = ()
    # What its holder reported (current_job().progress): (fraction 0..1, note), or None.
    progress: Progress | None = None
    # Its metadata (current_job().set_meta, merged): kept as long as the job is.
    meta: dict[str, Any] = field(default_factory=dict)


# A frozen dataclass's __init__ goes through object.__setattr__ once per field:
# for enqueue_many's thousands of new jobs that is most of the call. These are
# the slots' own setters, in field order (the same ones __init__ ends up in).
_JOB_SETTERS: Final = tuple(getattr(Job, f.name).__set__ for f in fields(Job))
assert len(_JOB_SETTERS) == 16, "new_pending_jobs sets every field of Job"
_new_object: Final = object.__new__


def new_pending_jobs(ids: Sequence[str], payloads: Sequence[Any], priority: int,
                     max_attempts: int, available_at: float, enqueued_at: float,
                     metas: Sequence[dict[str, Any]] | None = None) -> list[Job]:
    """Job(id, payload, priority, 0, max_attempts, PENDING, available_at, enqueued_at,
    None) for each id and payload (and a deep copy of its `metas` item: the caller's
    stays the backend's), built at about twice the constructor's speed."""
    (set_id, set_payload, set_priority, set_attempts, set_max_attempts, set_state,
     set_available_at, set_enqueued_at, set_last_error, set_token, set_lease_expires_at,
     set_result, set_finished_at, set_waiting_for, set_progress, set_meta) = _JOB_SETTERS
    pending = JobState.PENDING
    jobs: list[Job] = []
    append = jobs.append
    for job_id, payload in zip(ids, payloads, strict=True):
        job = _new_object(Job)
        set_id(job, job_id)
        set_payload(job, payload)
        set_priority(job, priority)
        set_attempts(job, 0)
        set_max_attempts(job, max_attempts)
        set_state(job, pending)
        set_available_at(job, available_at)
        set_enqueued_at(job, enqueued_at)
        set_last_error(job, None)
        set_token(job, None)
        set_lease_expires_at(job, None)
        set_result(job, None)
        set_finished_at(job, None)
        set_waiting_for(job, ())
        set_progress(job, None)
        set_meta(job, {})
        append(job)
    if metas is not None:
        for job, meta in zip(jobs, metas, strict=True):
            set_meta(job, copy.deepcopy(meta))
    return jobs

@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts of one queue. `pending`, `leased`, `dead`, `total` and `kept` count jobs
    the queue holds now; `done` counts acks over the queue's whole life, so it may
    exceed `total` (a queue whose jobs all finished holds none: total 0, done N)."""

    pending: int  # ready now or delayed (not the jobs waiting for prerequisites)
    leased: int  # held by a worker right now
    dead: int  # in the dead-letter queue
    done: int  # jobs acked since the queue was created (a running count; survives compaction)
    total: int  # pending + leased + dead + waiting: the unfinished and dead-lettered jobs
    generation: int
    log_bytes: int  # logical size of the current log generation
    paused: bool = False  # Queue.pause(): nothing is leased until Queue.resume()
    kept: int = 0  # finished jobs kept with their outcome (a result, or cancelled) for get()
    # Lifetime totals, like `done` (None where a backend does not count them):
    enqueued: int | None = None  # jobs enqueued
    retried: int | None = None  # failed deliveries (nack, expired lease) scheduled again
    dead_lettered: int | None = None  # jobs moved to the dead-letter queue
    live_bytes: int | None = None  # the live jobs' records: about what compaction keeps
    waiting: int = 0  # jobs waiting for their prerequisites (depends_on=)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening (or reading forward) found and what it repaired."""

    generation: int
    records: int  # records replayed on open
    torn_offset: int | None = None
    torn_bytes: int = 0
    torn_reason: str = ""
    repaired: bool = False  # the torn tail was cut (False when opened read-only)
    side_file: str | None = None  # where the cut bytes were saved
    notes: tuple[str, ...] = ()
    checkpoint_offset: int | None = None  # replay started here, from a checkpoint

    @property
    def clean(self) -> bool:
        return self.torn_offset is None and not self.notes

    def describe(self) -> str:
        lines = [f"generation {self.generation}: {self.records} records replayed"]
        if self.checkpoint_offset is not None:
            lines[0] += f" after a checkpoint at offset {self.checkpoint_offset}"
        if self.torn_offset is not None:
            action = "cut" if self.repaired else "found (not cut: read-only)"
            lines.append(f"torn tail at offset {self.torn_offset}: {self.torn_bytes} bytes "
                         f"{action} ({self.torn_reason})")
            if self.side_file:
                lines.append(f"cut bytes saved to {self.side_file}")
        lines.extend(self.notes)
        if self.clean:
            lines.append("log is clean: nothing to repair")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class CompactionResult:
    old_generation: int
    new_generation: int
    bytes_before: int
    bytes_after: int
    live_jobs: int
    remembered_keys: int
    seconds: float
