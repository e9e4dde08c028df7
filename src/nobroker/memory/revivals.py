"""A requeue of a dead prerequisite revives what its death cancelled, on the in-memory
backend: as the file engine keeps it (QueueState.dormant, nobroker.revivals), as moves
on the table. A dependent (mode "success") a failure cancels keeps its payload and
what it still waited for; it waits again once no failed prerequisite keeps it
cancelled. Pure: `now` comes in as an argument.
"""

from __future__ import annotations

from ..models import JobState
from .table import MemoryTable

__all__ = ["requeue_dead", "revive_dependents"]


def requeue_dead(table: MemoryTable, job_id: str | None, now: float) -> int:
    """MemoryTable.requeue_dead, and what the deaths cancelled waits again; how many."""
    requeued = [job.id for job in table.entries(JobState.DEAD)] if job_id is None \
        else [job_id]
    count = table.requeue_dead(job_id, now)
    for dead_id in requeued:
        revive_dependents(table, dead_id, now)
    return count


def revive_dependents(table: MemoryTable, job_id: str, now: float) -> None:
    """Job `job_id`, failed, is pending (requeued) or waiting (revived) again: each
    cancelled dependent nothing failed keeps cancelled now waits again, from `now`,
    and theirs in turn."""
    for dependent_id in table.dormant.requeued(job_id):
        sleeper = table.dormant.remove(dependent_id)
        assert sleeper is not None
        job = table.jobs[dependent_id]
        job.last_error = job.finished_at = None
        job.available_at = now
        table.wait_again(job, list(sleeper.unmet))
        revive_dependents(table, dependent_id, now)


