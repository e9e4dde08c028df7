"""Jobs copied in and out of an in-memory queue (`nobroker migrate`, nobroker.transfer):
copied jobs added as they were (backend.JobImport), and the modes of the waiting jobs,
which a copy gives the target with their prerequisites (Dependencies.wait_modes).
Pure: moves on the table.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..models import Job, JobState
from .table import MemoryTable

__all__ = ["import_copies", "wait_modes"]


def import_copies(table: MemoryTable, jobs: Sequence[Job], texts: Sequence[str],
                  keyed: Sequence[bool]) -> list[JobState]:
    """Each job not known here added as it was (its payload's JSON in `texts`), a
    dead one dead, any other pending; the states of those added."""
    states: list[JobState] = []
    for job, text, is_key in zip(jobs, texts, keyed, strict=True):
        if job.id in table.jobs or job.id in table.done_keys:
            continue
        dead = job.state is JobState.DEAD
        table.add_copy(job.id, is_key, text, job.priority, job.available_at,
                       job.enqueued_at, job.max_attempts, job.attempts, job.last_error, dead)
        states.append(JobState.DEAD if dead else JobState.PENDING)
    return states


def wait_modes(table: MemoryTable) -> dict[str, str]:
    """Each waiting job's mode (dependencies.SUCCESS, ANY or FAILURE), by id."""
    return {job.id: job.mode for job in table.jobs.values()
            if job.state is JobState.WAITING}
