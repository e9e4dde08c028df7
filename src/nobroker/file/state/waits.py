"""Which waiting jobs wait for which prerequisites (depends_on=): the replay's bookkeeping.

A job enqueued with prerequisites that have not all succeeded is WAITING (its
ENQUEUE record carries them, `w`). Replay keeps, for every waiting job, the
prerequisites it still waits for, and for every prerequisite its waiting
dependents. A prerequisite that finishes (acked, dead-lettered, cancelled,
purged) is struck off its dependents' lists here; what happens to the dependents
is not decided here: the writer plans RELEASE or CANCEL records for them in the
same batch (commands.plan_dependents), and replay only checks them.
Pure: no os, time, random or threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..log.records import ALLOW_FAILURE, WAIT, ReplayError

__all__ = ["Wait", "Waits", "prerequisites_field"]


def prerequisites_field(rec: dict[str, Any], job_id: str, offset: int) -> tuple[list[str], bool]:
    """An ENQUEUE's or a JOB's `w` (a non-empty list of distinct ids, not its own) and
    `af` (default false), checked; ReplayError naming what is wrong."""
    unmet, allow = rec[WAIT], rec.get(ALLOW_FAILURE, False)
    if (type(unmet) is not list or not unmet or not all(type(p) is str for p in unmet)
            or len(set(unmet)) != len(unmet) or job_id in unmet):
        raise ReplayError(offset, f"bad prerequisites {unmet!r}")
    if type(allow) is not bool:
        raise ReplayError(offset, f"field '{ALLOW_FAILURE}' must be a boolean")
    return unmet, allow


@dataclass(slots=True)
class Wait:
    """One waiting job's prerequisites not yet finished (ids, in the order given)."""

    unmet: dict[str, None]
    allow_failure: bool  # a prerequisite that fails counts as done for this job


class Waits:
    """The waiting jobs' unmet prerequisites, both ways round."""

    def __init__(self) -> None:
        self.by_job: dict[str, Wait] = {}
        self.dependents: dict[str, list[str]] = {}  # prerequisite -> waiting jobs

    def __bool__(self) -> bool:
        return bool(self.by_job)

    def add(self, job_id: str, unmet: Sequence[str], allow_failure: bool) -> None:
        self.by_job[job_id] = Wait(dict.fromkeys(unmet), allow_failure)
        for prerequisite in unmet:
            self.dependents.setdefault(prerequisite, []).append(job_id)

    def finished(self, prerequisite: str) -> list[str]:
        """`prerequisite` finished: struck off its dependents' lists; returns them."""
        dependents = self.dependents.pop(prerequisite, None)
        if dependents is None:
            return []
        for job_id in dependents:
            self.by_job[job_id].unmet.pop(prerequisite, None)
        return dependents

    def remove(self, job_id: str) -> Wait | None:
        """Waiting job `job_id` leaves the waiting state (released or cancelled)."""
        wait = self.by_job.pop(job_id, None)
        if wait is not None:
            for prerequisite in wait.unmet:
                others = self.dependents.get(prerequisite)
                if others is not None:
                    others.remove(job_id)
                    if not others:
                        del self.dependents[prerequisite]
        return wait

    def waiting_for(self, job_id: str) -> tuple[str, ...]:
        wait = self.by_job.get(job_id)
        return () if wait is None else tuple(wait.unmet)

    def items(self) -> list[tuple[str, list[str], bool]]:
        """(job, unmet prerequisites, allow_failure) for every waiting job: what a
        checkpoint saves and `restore` takes back."""
        return [(job_id, list(wait.unmet), wait.allow_failure)
                for job_id, wait in self.by_job.items()]

    def restore(self, items: Sequence[Sequence[object]]) -> None:
        for job_id, unmet, allow_failure in items:
            if (type(job_id) is not str or type(unmet) is not list or not unmet
                    or not all(type(p) is str for p in unmet)
                    or type(allow_failure) is not bool or job_id in self.by_job):
                raise ValueError(f"bad waiting job {job_id!r}")
            self.add(job_id, unmet, allow_failure)

    def fingerprint(self) -> tuple[object, ...]:
        return tuple(sorted((job_id, tuple(unmet), flag) for job_id, unmet, flag in self.items()))
