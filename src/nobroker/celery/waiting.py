"""Block until any of several queues may have a job, without polling. Stdlib only.

`Queue.wait` blocks on one queue (woken by a producer in any process). A
worker consuming `-Q a,b` needs to wake for either: one daemon thread per
queue waits on its queue while the consumer is idle (the gate is set), and
the first to see work wakes the consumer. With one queue, no thread at all.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ..errors import NobrokerError
from ..queue import Queue

__all__ = ["AnyQueueWaiter"]

_SLICE = 1.0  # a waiter thread re-checks the gate (and closing) this often


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
