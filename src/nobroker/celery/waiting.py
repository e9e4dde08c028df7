"""Block until any of several queues may have a job, without polling. Stdlib only.

`Queue.wait` blocks on one queue (woken by a producer in any process). A
worker consuming `-Q a,b` needs to wake for either: one daemon thread per
queue waits on its queue while the consumer is idle (the gate is set), and
the first to see work wakes the consumer. With one queue, no thread at all.

The transport's `drain_events` (without an event loop) delivers a message
if one is ready, and else waits here (`drain`) on the queues its channels
consume (`consumed_queues`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from queue import Empty
from typing import Protocol

from ..errors import NobrokerError
from ..queue import Queue

__all__ = ["AnyQueueWaiter", "Consuming", "consumed_queues", "drain"]

_SLICE = 1.0  # a waiter thread re-checks the gate (and closing) this often
_IDLE_SLICE = 1.0  # an idle drain_events re-checks its consumers this often
_FULL_PAUSE = 0.05  # prefetch full: nothing to lease until Celery acks something


class Consuming(Protocol):
    """A channel, as consumed_queues sees it (transport.Channel)."""

    def consumable_queues(self) -> list[Queue] | None: ...


def consumed_queues(channels: Iterable[Consuming]) -> tuple[list[Queue], bool]:
    """The queues to wait on, and whether a channel's prefetch is full: its acks wake
    no queue, so it is left out and re-checked soon, while the others are waited on
    (a worker's pidbox beside its task queues)."""
    queues: list[Queue] = []
    full = False
    for channel in channels:
        found = channel.consumable_queues()
        if found is None:
            full = True
        else:
            queues.extend(q for q in found if q not in queues)
    return queues, full


def drain(deliver_one: Callable[[], object], consumed: Callable[[], tuple[list[Queue], bool]],
          waiter: AnyQueueWaiter, timeout: float | None) -> None:
    """Deliver one message (`deliver_one`: Empty while none is ready); while none is,
    block in nobroker's wait on the `consumed` queues. TimeoutError after `timeout`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            deliver_one()
            return
        except Empty:
            pass
        left = _IDLE_SLICE if deadline is None else deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError()  # socket.timeout, which kombu's callers expect
        step = min(left, _IDLE_SLICE)
        queues, full = consumed()
        waiter.wait(queues, min(step, _FULL_PAUSE) if full else step)


class AnyQueueWaiter:
    """Waits on a changing set of queues; `wait(queues, timeout)` is called by one
    consumer thread at a time."""

    def __init__(self) -> None:
        self._gate = threading.Event()  # set while the consumer is waiting
        self._woken = threading.Event()
        self._closed = threading.Event()
        self._threads: dict[int, threading.Thread] = {}

    def wait(self, queues: Sequence[Queue], timeout: float) -> bool:
        """True when one of `queues` may have a ready job; False after `timeout`."""
        if not queues:
            self._closed.wait(timeout)
            return False
        if len(queues) == 1:
            return queues[0].wait(timeout)
        for queue in queues:
            if id(queue) not in self._threads:
                thread = threading.Thread(target=self._watch, args=(queue,), daemon=True,
                                          name=f"nobroker-celery-wait-{queue.name}")
                self._threads[id(queue)] = thread
                thread.start()
        self._woken.clear()
        self._gate.set()
        try:
            return self._woken.wait(timeout)
        finally:
            self._gate.clear()

    def _watch(self, queue: Queue) -> None:
        while not self._closed.is_set():
            if not self._gate.wait(_SLICE):
                continue
            try:
                if queue.wait(_SLICE):
                    self._woken.set()
                    self._closed.wait(0.01)  # let the consumer close the gate
            except NobrokerError:
                return  # the queue was closed: the consumer is going away

    def close(self) -> None:
        self._closed.set()
