"""Jobs copied in and out of an in-memory queue (`nobroker migrate`, nobroker.transfer):
copied jobs added as they were (backend.JobImport), the modes of the waiting jobs,
which a copy gives the target with their prerequisites (Dependencies.wait_modes), the
revivable cancelled dependents (backend.DormantJob) and the rate windows' latest
starts (window_copies.RateWindows), both ways. Pure: moves on
the table, `now` passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..backend import CopiedLimits, DormantJob
from ..codec import encode_payload
from ..dependencies import SUCCESS
from ..models import Job, JobState
from ..window_copies import CopiedWindow, copied_windows, merged_window
from .jobs import MemoryJob
from .table import MemoryTable

__all__ = ["import_copies", "export_limits", "wait_modes", "export_dormant", "import_dormant",
           "export_windows", "import_windows"]


def import_copies(table: MemoryTable, jobs: Sequence[Job], keyed: Sequence[bool],
                  limits: Mapping[str, CopiedLimits] | None) -> list[JobState]:
    """Each job not known here added as it was (with its limit keys and cap, if `limits`
    has them), a dead one dead, any other pending; the states of those added."""
    states: list[JobState] = []
    for job, is_key in zip(jobs, keyed, strict=True):
        if job.id in table.jobs or job.id in table.done_keys:
            continue
        dead = job.state is JobState.DEAD
        keys, cap = (limits or {}).get(job.id, (None, None))
        table.add_copy(job.id, is_key, encode_payload(job.payload), job.priority,
                       job.available_at, job.enqueued_at, job.max_attempts, job.attempts,
                       job.last_error, dead, keys, cap)
        states.append(JobState.DEAD if dead else JobState.PENDING)
    return states


def export_limits(table: MemoryTable) -> dict[str, CopiedLimits]:
    """Each live job's limit keys and stored cap, by id (JobExport.export_limits)."""
    return {job.id: (job.keys, job.cap) for job in table.entries() if job.keys is not None}


def wait_modes(table: MemoryTable) -> dict[str, str]:
    """Each waiting job's mode (dependencies.SUCCESS, ANY or FAILURE), by id."""
    return {job.id: job.mode for job in table.jobs.values()
            if job.state is JobState.WAITING}


def export_dormant(table: MemoryTable, view: Callable[[MemoryJob], Job]) -> list[DormantJob]:
    """The revivable cancelled dependents (table.dormant), in enqueue order."""
    jobs = sorted((table.jobs[job_id] for job_id in table.dormant.by_job),
                  key=lambda job: job.seq)
    return [DormantJob(view(job), job.keyed, sleeper.keys, tuple(sleeper.unmet),
                       tuple(sleeper.failed), job.cap)
            for job in jobs for sleeper in (table.dormant.by_job[job.id],)]


def import_dormant(table: MemoryTable, jobs: Sequence[DormantJob], now: float,
                   keep: float) -> list[str]:
    """Each copied revivable dependent not known here cancelled at `now`, kept `keep`
    seconds, and revivable as it was (its keys and cap too); the ids of those added."""
    added: list[str] = []
    for copy in jobs:
        job_id = copy.job.id
        if job_id in table.jobs or job_id in table.done_keys:
            continue
        job = table.add(job_id, copy.keyed, encode_payload(copy.job.payload),
                        copy.job.priority, copy.job.available_at, copy.job.enqueued_at,
                        copy.job.max_attempts, None, SUCCESS, copy.keys, copy.cap)
        job.last_error = copy.job.last_error
        table.dormant.add(job_id, copy.unmet, copy.failed, copy.keys)
        table.finish(job, JobState.CANCELLED, now, keep)
        added.append(job_id)
    return added


def export_windows(table: MemoryTable) -> list[CopiedWindow]:
    """Each rate key's window that holds a start, by key (RateWindows.export_windows)."""
    return copied_windows(table.limited.windows)


def import_windows(table: MemoryTable, windows: Sequence[CopiedWindow]) -> None:
    """Each copied window merged into the table's of its key (RateWindows.import_windows)."""
    kept = table.limited.windows
    for copy in windows:
        kept[copy.key] = merged_window(kept.get(copy.key), copy)
