"""A file descriptor for kombu's event loop (Celery's hub) to watch. Stdlib only.

With an event loop, a Celery worker never blocks in the transport: the hub
polls file descriptors and calls back when one is readable. That is what
keeps a prefork worker reading control messages (revoke, ping, inspect) while
all its processes are busy; without it, Celery's synchronous loop waits for a
free process before it reads the next message of any queue.

nobroker's wait is a blocking call (`Queue.wait`, on every backend), so it
runs in one daemon thread here: while the loop is armed, the thread waits on
the queues the connection consumes and, when one may have a message, writes a
byte into a pipe whose read end the hub watches, then disarms until the loop
has taken what was ready (`serve`). Waiting and leasing stay apart: the thread
never leases; the loop's thread does the leasing, as it did without a loop.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from queue import Empty

from ..errors import NobrokerError
from ..queue import Queue
from .waiting import AnyQueueWaiter

__all__ = ["LoopWaker", "Watched"]

log = logging.getLogger("nobroker.celery")

# The queues to watch now, and whether a channel's prefetch is full (its queues are
# left out until Celery acks something, so the watch is re-checked soon).
Watched = Callable[[], tuple[list[Queue], bool]]

_SLICE = 1.0  # the thread re-reads what to watch (and whether to stop) this often
_FULL_PAUSE = 0.05  # ... and this often while a channel's prefetch is full
_BATCH = 64  # messages delivered per wake-up, before the loop's other work


class LoopWaker:
    """The pipe the hub watches, and the thread that writes to it."""

    def __init__(self, watched: Watched) -> None:
        self._watched = watched
        self._waiter = AnyQueueWaiter()  # used by this object's thread alone
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._lock = threading.Lock()  # the pipe's ends: closed by the thread on its way out
        self._armed = threading.Event()  # set while the loop waits for the next poke
        self._armed.set()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="nobroker-celery-eventloop")
        self._thread.start()

    def fileno(self) -> int:
        """The read end: readable when a consumed queue may have a message."""
        return self._read

    def poke(self) -> None:
        """Make the read end readable (never blocks; a full pipe is readable already)."""
        with self._lock:
            if self._write < 0:
                return
            try:
                os.write(self._write, b"!")
            except BlockingIOError:
                pass

    def serve(self, deliver_one: Callable[[], None]) -> None:
        """The read end is readable: deliver what is ready (`deliver_one` raises
        queue.Empty when nothing is), a batch at most, then watch again."""
        self._take_pokes()
        try:
            for _ in range(_BATCH):
                deliver_one()
        except Empty:
            self._armed.set()  # all taken: watch the queues again
            return
        except BaseException:
            self._armed.set()  # watch again whatever the loop makes of the error
            raise
        self.poke()  # more may be ready: back here after the loop's other work

    def _take_pokes(self) -> None:
        with self._lock:
            if self._read < 0:
                return
            try:
                while os.read(self._read, 512):
                    pass
            except BlockingIOError:
                pass

    def close(self) -> None:
        """Stop the thread; it closes the pipe once it can no longer write to it."""
        self._closed.set()
        self._armed.set()
        self._waiter.close()

    def _run(self) -> None:
        try:
            while not self._closed.is_set():
                if not self._armed.wait(_SLICE) or self._closed.is_set():
                    continue
                try:
                    queues, full = self._watched()
                    ready = self._waiter.wait(queues, _FULL_PAUSE if full else _SLICE)
                except Exception as exc:  # the thread must not die: the worker would go deaf
                    if self._closed.is_set():
                        return  # a queue closed under the wait: the connection is closing
                    # Let the loop lease: an error that lasts reaches Celery from there.
                    log.warning("waiting for the next Celery message: %s", exc,
                                exc_info=not isinstance(exc, NobrokerError))
                    ready = not self._closed.wait(_SLICE)
                if ready:
                    self._armed.clear()  # until the loop has leased what is ready
                    self.poke()
        finally:
            with self._lock:
                os.close(self._read)
                os.close(self._write)
                self._read = self._write = -1
