"""Waking idle workers without polling: a named pipe per queue, `NAME.wake`.

A worker that finds nothing to lease waits on the pipe's read end with
`select`, until a writer pokes it or until the earliest moment something
could become ready by itself (a delayed job's time, a lease's deadline).
A writer that made work ready writes a few bytes into the pipe, without
blocking: if nobody is reading, or the pipe is full, there is nobody to wake
or they are awake already.

The pipe holds no state and is not part of the durability story: a lost
poke only costs latency, because waiters also wake at their deadline. It is
created by the first waiter (writers never create it). On Windows, which has
no named pipes of this kind, waiting is a plain sleep capped at `poll`.
"""

from __future__ import annotations

import os
import select
import stat
import sys
import time

__all__ = ["WakeChannel"]

_SUPPORTED = sys.platform != "win32" and hasattr(os, "mkfifo")
_POKES_CAP = 64  # one byte per ready job, so several waiters can each take one


class WakeChannel:
    """Both ends of one queue's wake-up pipe, opened lazily."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._reader: int | None = None
        self._keepalive: int | None = None
        self._writer: int | None = None
        self._retry_at = 0.0  # monotonic time before which a failed open is not retried

    def notify(self, jobs: int = 1) -> None:
        """Wake up to `jobs` waiters. Never blocks, never raises."""
        if not _SUPPORTED:
            return
        if self._writer is None:
            if time.monotonic() < self._retry_at:
                return
            try:
                self._writer = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:  # no pipe yet (ENOENT) or no reader (ENXIO): nobody waits
                # A failed open costs more than a whole enqueue's bookkeeping, so
                # do not retry it on every call. A waiter that arrives meanwhile
                # misses at most the pokes of the next 10 ms (it looks at the queue
                # before it sleeps), and only until the first open succeeds: the
                # descriptor is then kept, and readers keep the pipe open.
                self._retry_at = time.monotonic() + 0.01
                return
        try:
            os.write(self._writer, b"!" * max(1, min(jobs, _POKES_CAP)))
        except BlockingIOError:
            pass  # the pipe is full of unread pokes: the waiters have plenty
        except OSError:  # EPIPE: the last reader left; reopen next time
            self._close_writer()

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` seconds for a poke; True if one arrived."""
        if timeout <= 0:
            return False
        reader = self._open_reader() if _SUPPORTED else None
        if reader is None:
            time.sleep(timeout)
            return False
        ready, _, _ = select.select([reader], [], [], timeout)
        if not ready:
            return False
        try:
            return bool(os.read(reader, 1))  # take one poke; leave the rest for others
        except BlockingIOError:
            return False  # another waiter took it first

    def _open_reader(self) -> int | None:
        if self._reader is not None:
            return self._reader
        try:
            os.mkfifo(self.path, 0o600)
        except FileExistsError:
            pass
        except OSError:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)  # something else took the name; fall back to sleeping
            return None
        # Hold a write end too: a pipe whose writers have all gone reads as EOF
        # forever, and select would then return at once, spinning the waiter.
        self._keepalive = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._reader = fd
        return fd

    def prepare(self) -> None:
        """Open the read end now, so a poke sent from here on is not missed."""
        if _SUPPORTED:
            self._open_reader()

    def _close_writer(self) -> None:
        if self._writer is not None:
            try:
                os.close(self._writer)
            except OSError:
                pass
            self._writer = None

    def close(self) -> None:
        self._close_writer()
        for fd in (self._reader, self._keepalive):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:  # pragma: no cover - nothing useful to do
                    pass
        self._reader = self._keepalive = None
