"""Hooks: functions called when something happens to a job (`Queue.on`).

What it owns: one queue handle's registry of hooks, and calling them. A hook
is `fn(job)`, called in line, in the process and the thread where the event
happens, after the event is durable:

    enqueued   Queue.enqueue / enqueue_many (the producer)
    started    the worker, just before it calls the handler or task
    succeeded  Queue.ack / ack_and_lease / ack_many (the worker that acked it)
    retried    Queue.nack that left the job pending for another attempt
    dead       Queue.nack that dead-lettered the job, or a write whose lease
               reclaim dead-lettered it (its lease ran out on its last attempt:
               the process whose call reclaimed it, where the backend reports it)
    cancelled  Queue.cancel (the process that cancelled it)

Rules: a hook never fails the operation or the job. Each call sits in its own
`try`: an exception is logged (with its traceback, on the `nobroker` logger)
and the next hook runs. Hooks belong to one `Queue` object, not to the queue
on disk: a worker runs the hooks registered on the Queue objects it works.
Registering is rare and firing is frequent, so the registry is a dict of
tuples replaced on each registration: firing reads it without a lock.

A backend reports its reclaims through `report_reclaimed(listener)` (files,
memory:// and PostgreSQL have it: a lease that takes an expired lease back on
its last attempt reports the job, after its write is durable).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Final

from .errors import NobrokerError
from .models import Job, JobState

__all__ = ["EVENTS", "Hook", "Hooks"]

EVENTS: Final = ("enqueued", "started", "succeeded", "retried", "dead", "cancelled")

Hook = Callable[[Job], object]

log = logging.getLogger("nobroker")


class Hooks:
    """The hooks registered on one Queue, by event."""

    def __init__(self, backend: Any = None) -> None:
        self._by_event: dict[str, tuple[Hook, ...]] = {}
        self._backend = backend  # told to report reclaimed dead jobs, once one listens

    def add(self, event: str, fn: Hook) -> None:
        """Call `fn(job)` on each `event` from now on (after the hooks added before)."""
        if event not in EVENTS:
            raise ValueError(f"unknown hook event {event!r}; one of {', '.join(EVENTS)}")
        if not callable(fn):
            raise TypeError(f"a hook must be callable, not {type(fn).__name__}")
        self._by_event = {**self._by_event, event: (*self._by_event.get(event, ()), fn)}
        if event == "dead" and hasattr(self._backend, "report_reclaimed"):
            self._backend.report_reclaimed(self._reclaimed_dead)

    def _reclaimed_dead(self, job_ids: Iterable[str]) -> None:
        """Jobs a write's lease reclaim dead-lettered (after its fsync): `dead` for each
        still there (not requeued or deleted since)."""
        for job_id in job_ids:
            try:
                job = self._backend.get(job_id)
            except NobrokerError:
                continue
            if job.state is JobState.DEAD:
                self.fire("dead", job)

    def wants(self, event: str) -> bool:
        """Whether any hook listens to `event` (to skip work done only for hooks)."""
        return event in self._by_event

    def fire(self, event: str, job: Job) -> None:
        """Call every hook of `event` with `job`; a hook that raises is logged, skipped."""
        for fn in self._by_event.get(event, ()):
            try:
                fn(job)
            except Exception:  # a hook's bug must never fail the job: say so and go on
                log.exception("%s hook %s failed on job %s", event,
                              getattr(fn, "__qualname__", repr(fn)), job.id)

    def fire_each(self, event: str, jobs: Iterable[Job]) -> None:
        if event in self._by_event:
            for job in jobs:
                self.fire(event, job)
