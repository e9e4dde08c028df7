"""The leases of one queue's delivered messages, kept alive until Dramatiq settles them.
Stdlib only.

A message Dramatiq holds (prefetched, waiting for a worker thread, or
running) is a leased nobroker job. The book is per queue and per broker, not
per consumer: Dramatiq replaces a consumer that failed while its worker
threads still run that consumer's messages, and their acks must still find
the leases (with their current fencing tokens). The consumer thread renews
them from its `__next__`, which Dramatiq calls at least once per worker
timeout (a second by default) for as long as the worker runs, its stop
included: every lease is extended each third of the visibility timeout, so
two renewals in a row can be late before a lease runs out. A killed worker
renews nothing: its leases run out and the messages are delivered again.
"""

from __future__ import annotations

import logging
import threading
import time

from ..errors import NobrokerError, NotLeasedError
from ..models import Job
from ..queue import Queue

__all__ = ["LeaseBook"]

log = logging.getLogger("nobroker.dramatiq")


class LeaseBook:
    """Job id -> the latest Job (its token) of every unsettled delivery of `queue`."""

    def __init__(self, queue: Queue, visibility_timeout: float) -> None:
        self.queue = queue
        self.visibility_timeout = visibility_timeout
        self.renew_every = visibility_timeout / 3
        self.settled = threading.Event()  # set whenever a lease leaves the book
        self._held: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._renew_at = time.monotonic() + self.renew_every

    def __len__(self) -> int:
        return len(self._held)

    def add(self, job: Job) -> None:
        with self._lock:
            self._held[job.id] = job

    def take(self, job_id: str) -> Job | None:
        """Stop renewing `job_id` and hand back its latest Job; None if it is not held
        (settled already, or its lease was lost)."""
        with self._lock:
            job = self._held.pop(job_id, None)
        self.settled.set()
        return job

    def take_all(self) -> list[Job]:
        with self._lock:
            jobs = list(self._held.values())
            self._held.clear()
        self.settled.set()
        return jobs

    def renew_due(self) -> None:
        """Extend every held lease if a third of the visibility timeout has passed since
        the last renewal (called by the consumer thread; cheap when nothing is due)."""
        if time.monotonic() < self._renew_at:
            return
        self._renew_at = time.monotonic() + self.renew_every
        with self._lock:
            held = list(self._held.values())
        for job in held:
            try:
                fresh = self.queue.extend(job, self.visibility_timeout)
            except NotLeasedError:
                # The lease ran out first (the process stalled for longer than the
                # visibility timeout): another worker may run the message too.
                log.warning("job %s in %s: its lease was lost before Dramatiq settled "
                            "it; another worker may run it too (at-least-once)", job.id,
                            self.queue)
                self.take(job.id)
                continue
            except NobrokerError as exc:  # e.g. a passing I/O error: the next round retries
                log.warning("could not extend the lease of job %s: %s", job.id, exc)
                continue
            with self._lock:
                if job.id in self._held:
                    self._held[job.id] = fresh
