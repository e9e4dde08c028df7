"""The values the public API hands out: Job, QueueStats, RecoveryReport, CompactionResult.

All are frozen: a Job is a snapshot of a job at the moment of the call, not
a live view. To act on a job (ack, nack, extend), pass the Job back; its
`token` is the fencing token that proves the caller still holds the lease.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["JobState", "Job", "QueueStats", "RecoveryReport", "CompactionResult"]


class JobState(StrEnum):
    PENDING = "pending"  # waiting for its available_at, then leasable
    LEASED = "leased"  # held by one worker until lease_until
    DEAD = "dead"  # failed max_attempts times; in the dead-letter queue
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


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts of one queue. `pending`, `leased`, `dead`, `total` and `kept` count jobs
    the queue holds now; `done` counts acks over the queue's whole life, so it may
    exceed `total` (a queue whose jobs all finished holds none: total 0, done N)."""

    pending: int  # waiting, ready now or delayed
    leased: int  # held by a worker right now
    dead: int  # in the dead-letter queue
    done: int  # jobs acked since the queue was created (a running count; survives compaction)
    total: int  # pending + leased + dead: the unfinished and dead-lettered jobs held now
    generation: int
    log_bytes: int  # logical size of the current log generation
    paused: bool = False  # Queue.pause(): nothing is leased until Queue.resume()
    kept: int = 0  # finished jobs kept with their outcome (a result, or cancelled) for get()
    # Lifetime totals, like `done` (None where a backend does not count them):
    enqueued: int | None = None  # jobs enqueued
    retried: int | None = None  # failed deliveries (nack, expired lease) scheduled again
    dead_lettered: int | None = None  # jobs moved to the dead-letter queue
    live_bytes: int | None = None  # the live jobs' records: about what compaction keeps


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
