"""Where a worker's jobs come from: leasing from its queues, and idling.

A Worker works one queue or several (`Worker([high, default, low])`). Every
lease goes through `_pick`: the picker (picking.py) gives the order to try
the queues in (strict priority, or weights), leaving out those at their cap;
the first queue that has a ready job gives it. Two callers:

- the dispatcher fills free slots (`_lease_into_slots`): under strict
  priority as many jobs as it can from the first queue that has any, under
  weights one pick at a time, so that each lease follows the round-robin;
- a slot that acked a job leases its next one (`_lease_after`). It tries the
  queues in the picker's order too: a queue before its own job's is leased
  from plainly (empty, the usual case under strict priority, that is a
  read), then its own acks and leases in one write (`Queue.ack_and_lease`),
  as a single-queue worker always does (with one queue, that is the only
  try). Under weights the next pick is mostly another queue that has jobs:
  the lease there, then the ack, are writes to two queues, one after the
  other on the slot's thread. Overlapping them (the ack on a helper thread)
  was slower where measured (ext4): two fsyncs of two files at once cost
  more than one after the other, and the hand-off costs a thread switch
  (docs/FLOW.md, "Cost").

Caps are exact within the worker: a try reserves its lease count against the
queue's cap under the worker's condition before the lease is sent, and the
jobs it brings become flights in the same step that gives the reservation
back. `_wait_for_work` is the only place the worker waits for work: on the
queue's wake-up channel (`Queue.wait`), or, over several queues, on all of
theirs at once (waiting.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..errors import NobrokerError
from ..models import Job
from ..queue import Queue
from .picking import QueuePicker
from .shared import PASSING, Flight, Shared, log
from .waiting import QueueWaits

# Longest the dispatcher blocks without looking at its flags. Python runs signal
# handlers on the main thread only, and a signal the kernel hands to another thread
# waits until the main thread next runs bytecode: this bounds that delay.
TICK = 0.1
# How long one wait on a queue's wake-up channel may last: a producer's poke ends it
# early, so this only bounds how late an idle worker sees a stop request.
_IDLE_SLICE = 0.5
_WAKE_CHANNEL = hasattr(os, "mkfifo")  # elsewhere Queue.wait is a plain sleep


class Leasing(Shared):
    """The leasing and idling part of the Worker."""

    queues: list[Queue]
    poll_interval: float
    idle_timeout: float | None
    _picker: QueuePicker
    _waits: QueueWaits | None  # over several queues; None: wait on the one queue
    _leasing: list[int]  # per queue: leases being sent, counted against its cap (_cond)
    _woken: bool  # the last wait said a job may be ready (dispatcher only)
    _quiet: frozenset[int]  # queues the last wake-up found quiet (dispatcher only)
    _drained: bool  # a slot's pick just found every queue empty (_cond)
    _sleep: Callable[[float], None] | None

    # -- leasing ------------------------------------------------------------

    def _lease_into_slots(self, want: int) -> int:
        """Lease up to `want` jobs into the slots' inbox (one pick); how many."""
        if self._one_queue:
            jobs = self._lease_from(0, want)
            with self._cond:
                return len(self._admit(jobs, 0, into_inbox=True))
        with self._cond:
            drained, self._drained = self._drained, False
        if drained:  # asked every queue just now: wait, which looks first, then blocks
            return 0
        count = want if self._picker.weights is None else 1
        quiet, self._quiet = self._quiet, frozenset()  # for the pick after a wake-up only
        return len(self._pick(count, into_inbox=True, quiet=quiet))

    def _lease_after(self, flight: Flight, ack: Callable[[], None],
                     ack_and_lease: Callable[[], Job | None], found: list[Flight]) -> None:
        """Ack a slot's `flight`, which succeeded, and lease its next job into `found`.

        The queues are tried in the picker's order: those before its own with plain
        leases, its own with `ack_and_lease` (one write), then the rest. If no try
        reached its own queue, the ack follows, on this thread: one write after the
        other (see the module doc). Raises what the ack raised."""
        own = flight.queue_index
        if self._one_queue:  # what a single-queue worker always did: one write
            following = ack_and_lease()
            with self._cond:
                found += self._admit([] if following is None else [following], own, False)
            return
        acked: list[bool] = []

        def lease_own(count: int) -> list[Job]:
            acked.append(True)
            following = ack_and_lease()
            return [] if following is None else [following]

        found += self._pick(1, into_inbox=False, own=own, lease_own=lease_own)
        if not acked:
            ack()
        self._note_drained(found)

    def _note_drained(self, found: list[Flight]) -> None:
        """After a slot's pick over several queues found nothing, the dispatcher's
        next lease would ask every queue again (over PostgreSQL, a round trip
        each): it goes straight to its wait instead, whose waiters look at their
        queues before they block."""
        if not found:
            with self._cond:
                self._drained = True

    def _pick(self, count: int, *, into_inbox: bool, own: int | None = None,
              lease_own: Callable[[int], list[Job]] | None = None,
              quiet: frozenset[int] = frozenset()) -> list[Flight]:
        """Up to `count` jobs of the first queue, in the picker's order, that has any,
        as flights; `own` is the queue of a job being acked, leased by `lease_own`;
        `quiet` queues are known to have none (waiting.py) and not asked."""
        with self._cond:
            order = self._picker.order(self._busy(own))
        tried: list[int] = [index for index in order if index in quiet]
        for index in order:
            if index in quiet:
                continue
            with self._cond:  # reserve against the cap, now that earlier tries are done
                room = self._picker.room(index, self._busy(own)[index])
                if room == 0:
                    continue
                asked = count if room is None else min(count, room)
                self._leasing[index] += asked
            jobs: list[Job] = []
            try:
                if index == own and lease_own is not None:
                    jobs = lease_own(asked)
                else:
                    jobs = self._lease_from(index, asked)
            finally:
                with self._cond:
                    self._leasing[index] -= asked
                    flights = self._admit(jobs, index, into_inbox)
                    if flights:
                        self._picker.picked(index, tried, self._busy(None))
            if flights:
                return flights
            tried.append(index)
        return []

    @property
    def _one_queue(self) -> bool:
        """One queue and no cap: every lease is of that queue, as it always was."""
        return len(self.queues) == 1 and not self._picker.caps

    def _busy(self, leaving: int | None) -> list[int]:
        """Per queue: jobs in flight or being leased, less the one of `leaving` whose
        slot is settling it (under _cond)."""
        busy = list(self._leasing)
        if self._picker.caps:
            for flight in self._flights:
                busy[flight.queue_index] += 1
            if leaving is not None:
                busy[leaving] -= 1
        return busy

    def _lease_from(self, index: int, count: int) -> list[Job]:
        try:
            return self.queues[index].lease(count, visibility_timeout=self.visibility_timeout)
        except PASSING as exc:
            log.warning("could not lease: %s; trying again", exc)
        except NobrokerError as exc:
            self._fail(exc)
        return []

    def _admit(self, jobs: list[Job], index: int, into_inbox: bool) -> list[Flight]:
        """Freshly leased jobs as flights, handed to the slots if `into_inbox` (under
        _cond)."""
        if not jobs:
            return []
        now = self._clock()
        flights = [Flight(job, now + self.heartbeat_interval, queue_index=index)
                   for job in jobs]
        self._flights.update(flights)
        self._last_busy = now
        if into_inbox:
            self._inbox.extend(flights)
            self._arrivals.notify(len(flights))
        return flights

    # -- idling -------------------------------------------------------------

    def _wait_for_work(self) -> None:
        """Idle until a job may be ready; the caller then tries to lease again.

        With the queues' wake-up channels (`Queue.wait`), a producer's enqueue
        ends the wait at once, so the wait can be long: up to `_IDLE_SLICE`,
        which bounds how late an idle worker notices a stop request. Without
        one (or where the channel is a plain sleep, as on Windows) this is
        polling: wait `poll_interval`, waking early only for a stop request
        or a slot that finished.
        """
        queue = self.queues[0]
        wait = getattr(queue, "wait", None)
        timeout = self.poll_interval
        if callable(wait) and _WAKE_CHANNEL:
            timeout = max(timeout, _IDLE_SLICE)
        with self._cond:
            if self.idle_timeout is not None:
                timeout = min(timeout, max(self.idle_timeout - self._idle_for(), 0.001))
            open_ = self._picker.order(self._busy(None))
            if not open_:  # every queue at its cap: only a slot finishing makes room
                self._cond.wait(timeout)
                return
        if self._waits is not None:
            self._woken, self._quiet = self._waits.wait(timeout, open_)
            return
        if callable(wait):
            # A paused queue's ready jobs end a wait at once, so a wake that
            # leased nothing asks whether the queue is paused before waiting
            # again; asking after every wake would put a round trip between
            # an enqueue and its pickup.
            if self._woken and self._paused(queue):
                self._pause_for(self.poll_interval)
            self._woken = bool(wait(timeout))
            return
        if self._sleep is not None:
            self._sleep(timeout)
            return
        deadline = self._clock() + timeout
        with self._cond:
            while self._stop_reason is None:
                left = deadline - self._clock()
                if left <= 0 or self._cond.wait(min(left, TICK)):
                    return  # time to look again, or a slot finished: capacity changed

    def _paused(self, queue: Queue) -> bool:
        """Whether the queue is paused (asked only after a lease came back empty)."""
        try:
            return bool(getattr(queue.stats(), "paused", False))
        except NobrokerError:
            return False

    def _pause_for(self, seconds: float) -> None:
        with self._cond:
            if seconds > 0 and self._stop_reason is None:
                self._cond.wait(seconds)

    def _idle_for(self) -> float:
        return 0.0 if self._flights else self._clock() - self._last_busy
