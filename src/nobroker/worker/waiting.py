"""An idle multi-queue worker's wait: every queue's wake-up channel, one answer.

A worker over one queue idles in `Queue.wait`, which blocks on that queue's
wake-up channel (the file backend's named pipe, PostgreSQL's LISTEN
connection) until a producer's poke or the queue's next due time. The
Backend seam offers that one wait per queue and nothing that waits on
several at once (one `select` over several pipes, one connection LISTENing
on several channels: a backend method neither backend has yet). So a worker
over several queues fans in: one waiter thread per queue, each blocked in its
own queue's `wait`, and the dispatcher waits on one condition that the first
waiter to be woken signals.

Rules, so that idling costs what a single-queue worker's does:
- a waiter waits only while the dispatcher does: `wait()` arms every waiter
  for one round, and a waiter whose queue was poked while the dispatcher was
  busy keeps that news for the next round (it ends the next wait at once)
  rather than waiting again and taking pokes meant for other processes;
- a waiter blocks in its queue's wait with the dispatcher's timeout (at most
  the worker's idle slice, 0.5 s), so an idle worker wakes as often as a
  single-queue one per queue, and `close()` ends within one slice;
- the time from a poke to the dispatcher is one thread switch;
- a queue whose wait said "ready" and whose lease then found nothing may be
  paused: its waiter asks, and waits a poll interval first, rather than
  spinning (the single-queue dispatcher does the same);
- a waiter never leases, and an error in a wait ends the round as a wake-up,
  so that the dispatcher's next lease meets the error and handles it;
- a round names the queues to wait on: a queue at its cap sits out (its
  ready jobs would end every wait at once, and it cannot take one anyway);
- a wake-up says which queues are *quiet*: their waiters are still blocked,
  so no job was ready when their wait began (a wait returns at once for a
  ready or due job) and no poke came since. The pick after the wake-up
  skips them: over PostgreSQL an empty lease is a round trip, and strict
  priority would otherwise ask every earlier queue before the one woken.
  (A poke that lands while its waiter is waking, a fraction of a
  millisecond, counts as after the pick: as if the enqueue came later.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence

from ..errors import NobrokerError
from ..queue import Queue
from .shared import log

__all__ = ["QueueWaits"]


class QueueWaits:
    """Waiter threads over several queues, and the dispatcher's one wait on them."""

    def __init__(self, queues: Sequence[Queue], poll_interval: float) -> None:
        self.queues = list(queues)
        self.poll_interval = poll_interval
        self._cond = threading.Condition()
        # Guarded by _cond:
        self._round = 0  # the dispatcher's current wait; waiters wait once per round
        self._timeout = 0.0
        self._which: frozenset[int] = frozenset()  # the queues this round waits on
        self._waiting = 0  # waiters still in this round's wait
        self._rung = False  # a waiter was woken since the dispatcher last looked
        self._watching: set[int] = set()  # queues whose waiter is blocked in its wait
        self._closing = False
        self._threads = [threading.Thread(target=self._waiter, args=(index, queue),
                                          daemon=True, name=f"nobroker-wait-{queue.name}")
                         for index, queue in enumerate(self.queues)]
        for thread in self._threads:
            thread.start()

    def wait(self, timeout: float, which: Collection[int]) -> tuple[bool, frozenset[int]]:
        """Block until one of the queues `which` (indexes) may have a ready job
        (True) or every waiter's wait of `timeout` seconds passed (False); with
        the queues that are quiet (see the module doc)."""
        with self._cond:
            if not self._rung:
                self._round += 1
                self._timeout = timeout
                self._which = frozenset(which)
                self._waiting = len(self._which)
                self._cond.notify_all()
                # A waiter still in an earlier round's wait joins this one when that
                # ends; the margin covers it, and thread scheduling.
                self._cond.wait_for(lambda: self._rung or self._waiting == 0, timeout * 2)
            rung, self._rung = self._rung, False
            return rung, frozenset(self._watching)

    def close(self) -> None:
        """Stop the waiters; returns once each has left its queue's wait."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()

    def _waiter(self, index: int, queue: Queue) -> None:
        seen = 0
        woken = False
        while True:
            with self._cond:
                while not self._closing and (self._round == seen or index not in self._which):
                    seen = self._round  # a round this queue sits out
                    self._cond.wait()
                if self._closing:
                    return
                seen, timeout = self._round, self._timeout
            if woken and self._paused(queue):
                self._pause()
            with self._cond:
                self._watching.add(index)
            woken = self._wait_on(queue, timeout)
            with self._cond:
                self._watching.discard(index)
                if woken:
                    self._rung = True
                if seen == self._round:
                    self._waiting -= 1
                self._cond.notify_all()

    def _wait_on(self, queue: Queue, timeout: float) -> bool:
        try:
            return queue.wait(timeout)
        except NobrokerError as exc:  # the dispatcher's lease meets it and decides
            log.debug("waiting on queue %r failed: %s", queue.name, exc)
            time.sleep(min(timeout, self.poll_interval))
            return True

    def _paused(self, queue: Queue) -> bool:
        try:
            return bool(queue.stats().paused)
        except NobrokerError:
            return False

    def _pause(self) -> None:
        """Wait a poll interval (or until close) before a paused queue's next wait."""
        with self._cond:
            self._cond.wait_for(lambda: self._closing, self.poll_interval)
