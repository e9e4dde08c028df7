"""Jobs copied in from another queue (`nobroker migrate`, backend.JobImport), as moves
on a MemoryTable: each kept as it was (pending, or dead with its attempts and last
error), an id the table knows already (live, or a remembered key) skipped. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..models import Job, JobState
from .table import MemoryTable

__all__ = ["add_copies"]


def add_copies(table: MemoryTable, jobs: Sequence[Job], texts: Sequence[str],
               keyed: Sequence[bool]) -> list[JobState]:
    """Each job not known yet added with its payload text: the states they were given."""
    states: list[JobState] = []
    for job, text, is_key in zip(jobs, texts, keyed, strict=True):
        if job.id in table.jobs or job.id in table.done_keys:
            continue
        dead = job.state is JobState.DEAD
        table.add_copy(job.id, is_key, text, job.priority, job.available_at,
                       job.enqueued_at, job.max_attempts, job.attempts, job.last_error, dead)
        states.append(JobState.DEAD if dead else JobState.PENDING)
    return states
