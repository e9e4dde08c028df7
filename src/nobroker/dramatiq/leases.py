"""The leases of one queue's delivered messages, kept alive until Dramatiq settles them.
Stdlib only.

A message Dramatiq holds (prefetched, waiting for a worker thread, or
running) is a leased nobroker job. The book is per queue and per broker, not
per consumer: Dramatiq replaces a consumer that failed while its worker
threads still run that consumer's messages, and their acks must still find
the leases (with their current fencing tokens). A daemon thread per book,
started with its first lease, extends every held lease each third of the
visibility timeout, so two renewals in a row can be late before a lease runs
out; it does not depend on the consumer thread, which Dramatiq stops calling
while a worker is paused. A killed worker renews nothing: its leases run out
and the messages are delivered again.
"""

from __future__ import annotations

import logging
import threading

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
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._held)

    def add(self, job: Job) -> None:
        with self._lock:
            self._held[job.id] = job
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"nobroker-dramatiq-leases-{self.queue.name}")
                self._thread.start()

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

    def close(self) -> None:
        """Stop renewing (the broker is closing)."""
        self._closed.set()

    def _run(self) -> None:
        while not self._closed.wait(self.renew_every):
            self.renew()

    def renew(self) -> None:
        """Extend every held lease by the visibility timeout from now."""
        with self._lock:
            held = list(self._held.values())
        for job in held:
            try:
                fresh = self.queue.extend(job, self.visibility_timeout)
            except NotLeasedError:
                # The lease ran out first (the process stalled for longer than the
                # visibility timeout), or the job was settled meanwhile.
                if self.take(job.id) is not None:
                    log.warning("job %s in %s: its lease was lost before Dramatiq settled "
                                "it; another worker may run it too (at-least-once)", job.id,
                                self.queue)
                continue
            except NobrokerError as exc:  # e.g. a passing I/O error: the next round retries
                log.warning("could not extend the lease of job %s: %s", job.id, exc)
                continue
            with self._lock:
                if job.id in self._held:
                    self._held[job.id] = fresh
