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
from dataclasses import dataclass, field
from typing import Any

from ...dependencies import ANY, FAILURE, MODES, SUCCESS, verdict
from ..log.records import ALLOW_FAILURE, ON_FAILURE, WAIT, Record, ReplayError

__all__ = ["Wait", "Waits", "prerequisites_field", "mode_fields"]


def prerequisites_field(rec: dict[str, Any], job_id: str, offset: int) -> tuple[list[str], str]:
    """An ENQUEUE's or a JOB's `w` (a non-empty list of distinct ids, not its own) and
    its mode from `af` and `of` (booleans, default false, not both), checked;
    ReplayError naming what is wrong."""
    unmet, allow, on_failure = rec[WAIT], rec.get(ALLOW_FAILURE, False), rec.get(ON_FAILURE,
                                                                                 False)
    if (type(unmet) is not list or not unmet or not all(type(p) is str for p in unmet)
            or len(set(unmet)) != len(unmet) or job_id in unmet):
        raise ReplayError(offset, f"bad prerequisites {unmet!r}")
    if type(allow) is not bool or type(on_failure) is not bool or (allow and on_failure):
        raise ReplayError(offset, f"fields '{ALLOW_FAILURE}' and '{ON_FAILURE}' must be "
                          "booleans, not both true")
    return unmet, FAILURE if on_failure else ANY if allow else SUCCESS


def mode_fields(fields: Record, mode: str) -> None:
    """Add what says `mode` to an ENQUEUE's or JOB's fields (nothing for SUCCESS)."""
    if mode == ANY:
        fields[ALLOW_FAILURE] = True
    elif mode == FAILURE:
        fields[ON_FAILURE] = True


@dataclass(slots=True)
class Wait:
    """One waiting job's prerequisites not yet finished (ids, in the order given)."""

    unmet: dict[str, None]
    mode: str  # dependencies.SUCCESS, ANY or FAILURE: what releases it
    died: bool = False  # a prerequisite was dead-lettered (what releases FAILURE)
    # SUCCESS: its prerequisites that failed (the batch that fails one cancels the job,
    # revivable: nobroker.revivals), so never saved
    failed: dict[str, None] = field(default_factory=dict)


class Waits:
    """The waiting jobs' unmet prerequisites, both ways round. Dicts used as ordered
    sets, so that striking one off is O(1) however many a job or prerequisite has."""

    def __init__(self) -> None:
        self.by_job: dict[str, Wait] = {}
        self.dependents: dict[str, dict[str, None]] = {}  # prerequisite -> waiting jobs
        # The dependents the batch being applied struck a prerequisite off (`settled`
        # checks them at its end); None: not tracked (salvage's record-by-record replay).
        self.touched: dict[str, None] | None = {}

    def __bool__(self) -> bool:
        return bool(self.by_job)

    def add(self, job_id: str, unmet: Sequence[str], mode: str, died: bool = False) -> None:
        self.by_job[job_id] = Wait(dict.fromkeys(unmet), mode, died)
        dependents = self.dependents
        for prerequisite in unmet:
            others = dependents.get(prerequisite)
            if others is None:
                dependents[prerequisite] = {job_id: None}
            else:
                others[job_id] = None

    def finished(self, prerequisite: str, died: bool = False,
                 failed: bool = False) -> list[str]:
        """`prerequisite` finished (`died`: dead-lettered; `failed`: cancelled or
        purged): struck off its dependents' lists; returns them."""
        dependents = self.dependents.pop(prerequisite, None)
        if dependents is None:
            return []
        by_job = self.by_job
        if self.touched is not None:
            self.touched.update(dependents)
        for job_id in dependents:
            wait = by_job[job_id]
            del wait.unmet[prerequisite]
            if died:
                wait.died = True
            if (died or failed) and wait.mode == SUCCESS:
                wait.failed[prerequisite] = None
        return list(dependents)

    def unsettled(self) -> str | None:
        """After a batch: the first job it left waiting although its prerequisites
        settle it (released or cancelled by verdict()), or None. The writer always
        settles such a job in the batch that finishes the last prerequisite it needs, so
        one left waiting means a record of the batch is missing: the log is damaged."""
        touched = self.touched
        if not touched:
            return None
        self.touched = {}
        by_job = self.by_job
        for job_id in touched:
            wait = by_job.get(job_id)
            if wait is None:
                continue
            failed = (next(iter(wait.failed)), "failed") if wait.failed else None
            released, error = verdict(wait.mode, failed, wait.died, not wait.unmet)
            if released or error is not None:
                return job_id
        return None

    def remove(self, job_id: str) -> Wait | None:
        """Waiting job `job_id` leaves the waiting state (released or cancelled)."""
        wait = self.by_job.pop(job_id, None)
        if wait is not None:
            for prerequisite in wait.unmet:
                others = self.dependents.get(prerequisite)
                if others is not None:
                    others.pop(job_id, None)
                    if not others:
                        del self.dependents[prerequisite]
        return wait

    def waiting_for(self, job_id: str) -> tuple[str, ...]:
        wait = self.by_job.get(job_id)
        return () if wait is None else tuple(wait.unmet)

    def items(self) -> list[tuple[object, ...]]:
        """(job, unmet prerequisites, allow_failure) for every waiting job, with a fourth
        item "failure" for one in FAILURE mode: what a checkpoint saves and `restore`
        takes back (a reader of three items only refuses four, and replays the log
        instead). `died` is not saved: the batch that sets it releases the job."""
        return [(job_id, list(wait.unmet), wait.mode == ANY) if wait.mode != FAILURE
                else (job_id, list(wait.unmet), False, FAILURE)
                for job_id, wait in self.by_job.items()]

    def restore(self, items: Sequence[Sequence[object]]) -> None:
        for item in items:
            job_id, unmet, allow_failure = item[:3]
            mode = item[3] if len(item) == 4 else ANY if allow_failure is True else SUCCESS
            if (type(job_id) is not str or type(unmet) is not list or not unmet
                    or not all(type(p) is str for p in unmet) or len(item) not in (3, 4)
                    or type(allow_failure) is not bool or mode not in MODES
                    or job_id in self.by_job):
                raise ValueError(f"bad waiting job {job_id!r}")
            self.add(job_id, unmet, str(mode))

    def fingerprint(self) -> tuple[object, ...]:
        return tuple(sorted((job_id, tuple(wait.unmet), wait.mode, wait.died)
                            for job_id, wait in self.by_job.items()))
