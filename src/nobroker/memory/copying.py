"""Jobs copied in and out of an in-memory queue (`nobroker migrate`, nobroker.transfer):
copied jobs added as they were (backend.JobImport), the modes of the waiting jobs,
which a copy gives the target with their prerequisites (Dependencies.wait_modes), and
the revivable cancelled dependents (backend.DormantJob), both ways. Pure: moves on
the table, `now` passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..backend import DormantJob
from ..dependencies import SUCCESS
from ..models import Job, JobState
from .jobs import MemoryJob
from .table import MemoryTable

__all__ = ["import_copies", "wait_modes", "export_dormant", "import_dormant"]


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


def export_dormant(table: MemoryTable, view: Callable[[MemoryJob], Job]) -> list[DormantJob]:
    """The revivable cancelled dependents (table.dormant), in enqueue order."""
    jobs = sorted((table.jobs[job_id] for job_id in table.dormant.by_job),
                  key=lambda job: job.seq)
    return [DormantJob(view(job), job.keyed, sleeper.keys, tuple(sleeper.unmet),
                       tuple(sleeper.failed))
            for job in jobs for sleeper in (table.dormant.by_job[job.id],)]


def import_dormant(table: MemoryTable, jobs: Sequence[DormantJob], texts: Sequence[str],
                   now: float, keep: float) -> list[str]:
    """Each copied revivable dependent not known here cancelled at `now`, kept `keep`
    seconds, and revivable as it was; the ids of those added."""
    added: list[str] = []
    for copy, text in zip(jobs, texts, strict=True):
        job_id = copy.job.id
        if job_id in table.jobs or job_id in table.done_keys:
            continue
        job = table.add(job_id, copy.keyed, text, copy.job.priority, copy.job.available_at,
                        copy.job.enqueued_at, copy.job.max_attempts, None, SUCCESS,
                        copy.keys)
        job.last_error = copy.job.last_error
        table.dormant.add(job_id, copy.unmet, copy.failed, copy.keys)
        table.finish(job, JobState.CANCELLED, now, keep)
        added.append(job_id)
    return added
