"""The heartbeat thread: keeps every in-flight lease alive, and notices fencing.

One thread extends each in-flight lease every third of the visibility
timeout, so two heartbeats in a row can fail before a lease runs out. A
heartbeat that finds its lease gone (it expired and the job went to someone
else) marks the job lost: its slot will neither ack nor nack it, and a child
process still running it is killed to free the slot. Leases being settled
are left alone: the ack, not a rival, ends them.
"""

from __future__ import annotations

from ..errors import NobrokerError, NotLeasedError
from .shared import PASSING, Flight, Shared, log


class Heartbeats(Shared):
    """The heartbeat thread's part of the Worker."""

    def _heartbeat_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._beating:
                        return
                    now = self._clock()
                    live = [f for f in self._flights if not (f.settling or f.lost)]
                    due = [f for f in live if f.renew_at <= now]
                    if due:
                        break
                    wake = min((f.renew_at for f in live), default=None)
                    if wake is None:
                        # No flight to renew. A new one comes without waking us (we
                        # wait on _beats, which only the shutdown pokes; a new flight
                        # renews after every older one), so look again well before a
                        # new flight's first renewal.
                        wake = now + self.heartbeat_interval / 2
                    self._beats.wait(wake - now)
            for flight in due:
                self._beat(flight)

    def _beat(self, flight: Flight) -> None:
        """Extend one lease; mark the flight lost if the lease is no longer ours."""
        job = flight.job
        try:
            self.queues[flight.queue_index].extend(job, self.visibility_timeout)
        except NotLeasedError as exc:
            with self._cond:
                if flight.settling or flight not in self._flights:
                    return  # settled meanwhile: the ack, not a rival, ended the lease
                flight.lost = True
                child = flight.child
            log.warning("job %s (attempt %d): heartbeat found the lease lost (%s); this "
                        "worker no longer treats the job as its own and will not settle it",
                        job.id, job.attempts, exc.reason)
            if child is not None:  # a process can be stopped: free the slot (a cancel)
                log.warning("job %s: killing the child process that runs it", job.id)
                child.kill()
            return
        except PASSING as exc:
            retry = min(self.heartbeat_interval / 4, 1.0)
            log.warning("job %s: heartbeat could not extend the lease (%s); retrying in %.2fs",
                        job.id, exc, retry)
            with self._cond:
                flight.renew_at = self._clock() + retry
            return
        except NobrokerError as exc:
            self._fail(exc)
            with self._cond:
                flight.renew_at = self._clock() + self.heartbeat_interval
            return
        with self._cond:
            flight.renew_at = self._clock() + self.heartbeat_interval
            self._counts["heartbeats"] += 1

