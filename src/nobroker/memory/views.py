"""The in-memory backend's views: a MemoryJob (or a remembered key) as the `Job` the API
hands out, and the queue's counts as its `QueueStats`."""

from __future__ import annotations

from typing import Any

from ..codec import dumps, loads
from ..errors import JobNotFoundError
from ..models import Job, JobState, QueueStats
from .jobs import MemoryJob, Note
from .table import FINISHED, MemoryTable

__all__ = ["job_view", "done_view", "find_view", "stats_view"]


def job_view(job: MemoryJob, now: float) -> Job:
    """What the API shows of `job` at `now`: a kept finished job without its payload
    (and without its result past its result_until)."""
    state = job.state
    if state in FINISHED:
        shown = job.result_text if job.result_until is None or job.result_until > now \
            else None
        return Job(id=job.id, payload=None, priority=job.priority, attempts=job.attempts,
                   max_attempts=job.max_attempts, state=state,
                   available_at=job.finished_at or 0.0, enqueued_at=job.enqueued_at,
                   last_error=job.last_error, finished_at=job.finished_at,
                   result=None if shown is None else loads(shown),
                   **note_view(job.note))
    leased = state is JobState.LEASED
    return Job(id=job.id, payload=loads(job.payload_text or "null"),
               priority=job.priority, attempts=job.attempts,
               max_attempts=job.max_attempts, state=state,
               available_at=job.available_at, enqueued_at=job.enqueued_at,
               last_error=job.last_error, token=job.token if leased else None,
               lease_expires_at=job.lease_until if leased else None,
               finished_at=job.available_at if state is JobState.DEAD else None,
               waiting_for=tuple(job.waiting_for or ()), **note_view(job.note))


def done_view(job_id: str, done_at: float, note: Note | None = None) -> Job:
    """A finished keyed job acked without a result: only its id, time and note are known."""
    return Job(id=job_id, payload=None, priority=0, attempts=0, max_attempts=0,
               state=JobState.DONE, available_at=done_at, enqueued_at=done_at,
               last_error=None, finished_at=done_at, **note_view(note))


def find_view(table: MemoryTable, job_id: str, now: float, key_retention: float) -> Job:
    """`job_id` as `get` hands it out: a job the table holds, or the remembered key of a
    finished keyed job; JobNotFoundError for neither, and for a kept finished job past
    its retention (forgotten at the next write: not returned before it)."""
    job = table.jobs.get(job_id)
    if job is not None:
        if job.state in FINISHED and job.keep_until <= now:
            raise JobNotFoundError(job_id)
        return job_view(job, now)
    done_at = table.done_keys.get(job_id)
    if done_at is not None and done_at + key_retention > now:
        return done_view(job_id, done_at, table.key_notes.get(job_id))
    raise JobNotFoundError(job_id)


def note_view(note: Note | None) -> dict[str, Any]:
    """The Job fields `progress` and `meta` of a note (a copy: callers may change it)."""
    return {} if note is None else {"progress": note[0], "meta": loads(dumps(note[1]))}


def stats_view(table: MemoryTable, now: float) -> QueueStats:
    """The queue's counts at `now`, as `stats()` hands them out (no generation, no log);
    kept: less the keyed jobs whose result has ended (result_deadlines.py)."""
    counts = table.counts
    live = sum(counts[state] for state in (JobState.PENDING, JobState.LEASED,
                                           JobState.DEAD, JobState.WAITING))
    return QueueStats(
        pending=counts[JobState.PENDING], leased=counts[JobState.LEASED],
        dead=counts[JobState.DEAD], done=table.done, total=live, generation=0,
        log_bytes=0, paused=table.paused,
        kept=counts[JobState.DONE] + counts[JobState.CANCELLED] - table.result_ends.ended(now),
        enqueued=table.enqueued, retried=table.retried,
        dead_lettered=table.dead_lettered, waiting=counts[JobState.WAITING])
