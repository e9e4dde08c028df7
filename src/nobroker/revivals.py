"""Dependents a failure cancelled, kept revivable: a requeue of the failure resumes them.

A waiting job (mode "success") that a prerequisite's death or cancel cancels
is kept, as any cancelled job, for the queue's result_ttl, and noted here with
what it still waited for: `unmet` (prerequisites not finished) and `failed`
(dead or cancelled ones: it stays cancelled while any is). As the
prerequisites go on, each is moved: one that succeeds is struck off, one that
fails joins `failed`, one that is requeued from the dead-letter queue (or,
itself such a dependent, revived) leaves `failed` for `unmet`. A dependent
whose `failed` is empty waits again (revived), for its `unmet`. A failed
prerequisite that is gone (deleted from the dead-letter queue, forgotten,
purged) never succeeds: its dependents are dropped from here and stay
cancelled. docs/TASKS.md, "Dependencies". Shared by the file backend's replay
and the in-memory backend; pure: no os, time, random or threads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Sleeper", "Dormant"]


@dataclass(slots=True)
class Sleeper:
    """One revivable cancelled dependent: what it waits for, and what keeps it cancelled."""

    unmet: dict[str, None]  # prerequisites not finished (ids, in the order given)
    failed: dict[str, None]  # dead or cancelled prerequisites
    keys: tuple[str | None, str | None] | None = None  # its limit keys (rate, concurrency)
    cap: int | None = None  # the concurrency cap its enqueuer declared (None: none)


class Dormant:
    """The revivable cancelled dependents, and for each prerequisite those watching it
    (dicts used as ordered sets: moving one is O(1))."""

    def __init__(self) -> None:
        self.by_job: dict[str, Sleeper] = {}
        self.watching: dict[str, dict[str, None]] = {}  # prerequisite -> its sleepers

    def __bool__(self) -> bool:
        return bool(self.by_job)

    def add(self, job_id: str, unmet: Iterable[str], failed: Iterable[str],
            keys: tuple[str | None, str | None] | None = None,
            cap: int | None = None) -> None:
        sleeper = self.by_job[job_id] = Sleeper(dict.fromkeys(unmet), dict.fromkeys(failed),
                                                keys, cap)
        for prerequisite in (*sleeper.unmet, *sleeper.failed):
            self.watching.setdefault(prerequisite, {})[job_id] = None

    def remove(self, job_id: str) -> Sleeper | None:
        """Job `job_id` is revivable no more (revived, forgotten, its id reused)."""
        sleeper = self.by_job.pop(job_id, None)
        if sleeper is not None:
            for prerequisite in (*sleeper.unmet, *sleeper.failed):
                self._unwatch(prerequisite, job_id)
        return sleeper

    def _unwatch(self, prerequisite: str, job_id: str) -> None:
        others = self.watching.get(prerequisite)
        if others is not None:
            others.pop(job_id, None)
            if not others:
                del self.watching[prerequisite]

    def finished(self, prerequisite: str, ok: bool) -> None:
        """`prerequisite` succeeded (`ok`: struck off) or died or was cancelled (failed)."""
        sleepers = self.watching.get(prerequisite)
        if not sleepers:
            return
        for job_id in list(sleepers):
            sleeper = self.by_job[job_id]
            if sleeper.unmet.pop(prerequisite, False) is None:  # it was there
                if ok:
                    self._unwatch(prerequisite, job_id)
                else:
                    sleeper.failed[prerequisite] = None

    def requeued(self, prerequisite: str) -> list[str]:
        """`prerequisite` waits or runs again (requeued, or revived): unmet again for its
        sleepers; returns those nothing keeps cancelled now, to revive."""
        free: list[str] = []
        for job_id in self.watching.get(prerequisite, ()):
            sleeper = self.by_job[job_id]
            if sleeper.failed.pop(prerequisite, False) is None:
                sleeper.unmet[prerequisite] = None
                if not sleeper.failed:
                    free.append(job_id)
        return free

    def gone(self, prerequisite: str) -> None:
        """`prerequisite` is gone, never done: its sleepers stay cancelled for good."""
        for job_id in list(self.watching.get(prerequisite, ())):
            self.remove(job_id)

    def revivable(self, job_id: str, cleared: Sequence[str]) -> bool:
        """Whether sleeper `job_id` revives once the failed prerequisites `cleared` are
        requeued or revived (a writer's plan, before any of that is applied)."""
        sleeper = self.by_job.get(job_id)
        return sleeper is not None and all(p in cleared for p in sleeper.failed)

    def items(self) -> list[list[object]]:
        """[job, unmet, failed, rate key, concurrency key] of each: what a checkpoint
        saves and `restore` takes back."""
        return [[job_id, list(s.unmet), list(s.failed), *(s.keys or (None, None))]
                for job_id, s in self.by_job.items()]

    def restore(self, items: Sequence[Sequence[object]]) -> None:
        for item in items:
            if len(item) != 5:
                raise ValueError(f"bad revivable job {item!r}")
            job_id, unmet, failed, rate, concurrency = item
            if (type(job_id) is not str or job_id in self.by_job or type(unmet) is not list
                    or type(failed) is not list or not failed
                    or not all(type(p) is str for p in (*unmet, *failed))
                    or not all(k is None or type(k) is str for k in (rate, concurrency))):
                raise ValueError(f"bad revivable job {job_id!r}")
            keys = None if rate is None and concurrency is None else (rate, concurrency)
            self.add(job_id, unmet, failed, keys)  # type: ignore[arg-type]

    def caps(self) -> list[list[object]]:
        """[job, cap] of each with a cap: what a checkpoint saves beside `items` (an
        additive key) and `restore_caps` takes back."""
        return [[job_id, s.cap] for job_id, s in self.by_job.items() if s.cap is not None]

    def restore_caps(self, items: Sequence[Sequence[object]]) -> None:
        for item in items:
            job_id, cap = item if len(item) == 2 else (None, None)
            sleeper = self.by_job.get(job_id) if type(job_id) is str else None
            if sleeper is None or sleeper.keys is None or sleeper.keys[1] is None \
                    or type(cap) is not int or cap < 1:
                raise ValueError(f"bad cap of a revivable job {item!r}")
            sleeper.cap = cap

    def fingerprint(self) -> tuple[object, ...]:
        return tuple(sorted((job_id, tuple(s.unmet), tuple(s.failed), s.keys, s.cap)
                            for job_id, s in self.by_job.items()))
