"""The leases a Celery consumer holds, kept alive until Celery acks them. Stdlib only.

A message handed to Celery is a leased nobroker job. Celery may hold it long
(prefetched, waiting for its eta, or running a long task with acks_late), so
a daemon thread extends every held lease each third of the visibility
timeout. A killed worker stops extending: its leases expire and the jobs are
leased again by another worker, which is the whole at-least-once guarantee.
"""

from __future__ import annotations

import logging
import threading

from ..errors import NobrokerError, NotLeasedError
from ..models import Job
from ..queue import Queue

__all__ = ["LeaseKeeper"]

log = logging.getLogger("nobroker.celery")


class LeaseKeeper:
    """The jobs delivered and not yet settled, by delivery tag; extends their leases."""

    def __init__(self, visibility_timeout: float) -> None:
        self.visibility_timeout = visibility_timeout
        self._held: dict[str, tuple[Queue, Job]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, tag: str, queue: Queue, job: Job) -> None:
        """Keep `job`'s lease alive until `release(tag)`."""
        with self._lock:
            self._held[tag] = (queue, job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="nobroker-celery-leases")
                self._thread.start()

    def release(self, tag: str) -> tuple[Queue, Job] | None:
        """Stop extending the lease of `tag` and hand back its queue and job (the
        latest Job, whose token the ack needs); None if it is not held."""
        with self._lock:
            return self._held.pop(tag, None)

    def release_all(self) -> list[tuple[Queue, Job]]:
        with self._lock:
            held = list(self._held.values())
            self._held.clear()
            return held

    def __len__(self) -> int:
        return len(self._held)

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        interval = self.visibility_timeout / 3
        while not self._stop.wait(interval):
            with self._lock:
                held = list(self._held.items())
            for tag, (queue, job) in held:
                try:
                    fresh = queue.extend(job, self.visibility_timeout)
                except NotLeasedError:
                    # The lease ran out before we extended it (the process stalled
                    # for longer than the visibility timeout): another worker may
                    # run the message too. Celery's ack will say so again.
                    log.warning("lease of job %s in %s lost before its ack", job.id, queue)
                    self.release(tag)
                    continue
                except NobrokerError as exc:  # e.g. a queue closed under us: try again later
                    log.warning("could not extend the lease of job %s: %s", job.id, exc)
                    continue
                with self._lock:
                    if tag in self._held:
                        self._held[tag] = (queue, fresh)
