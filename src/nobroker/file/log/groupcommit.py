"""Group commit between threads: one fdatasync serves every thread whose records
were written before it started.

The log file (logfile.py) owns one GroupCommit and asks it to make its bytes
durable up to an offset. A failed fdatasync fails every later call. Each
process syncs for itself (sharing fdatasyncs between processes through a
file was measured, and did not pay: docs/BENCHMARKS.md).
"""

from __future__ import annotations

import threading
from typing import Protocol

from ..disk.fs import FileSystem

__all__ = ["GroupCommit", "SyncedLog"]


class SyncedLog(Protocol):
    """What group commit needs of a log file (logfile.LogFile)."""

    fs: FileSystem
    fd: int
    end: int  # the logical end: after the last batch written


class GroupCommit:
    """How far one log file is durable, and the threads waiting for more (see the
    module doc)."""

    def __init__(self) -> None:
        # Group commit between threads: one fdatasync serves everyone whose records
        # were written before it started. A waiter sleeps on a lock of its own, so
        # that the syncer wakes exactly the waiters its fdatasync covered and one
        # more to run the next, after letting go of the mutex: a Condition's
        # notify_all would wake every waiter, each to queue for the mutex the
        # notifier still holds and most to go back to sleep (measured with 4
        # threads: a context switch and ~10 us of CPU more per call).
        self._sync_mutex = threading.Lock()
        self._sync_waiters: list[tuple[int, threading.Lock]] = []  # (offset, until woken)
        self._durable = 0  # bytes before this offset are known to be on disk
        self._syncing = False
        self._sync_failed: OSError | None = None

    @property
    def durable(self) -> int:
        """Bytes before this offset are known to be on disk: an fsync of this
        process that covered them has returned (0 until one has)."""
        return self._durable

    def sync_to(self, log: SyncedLog, offset: int) -> bool:
        """Return once `log`'s bytes before `offset` are on disk; True if this thread
        issued an fdatasync for it (False: another thread's covered it).

        A thread that finds an fsync already running waits for it and, if
        that one did not cover its offset, runs the next (one waiter is woken
        for it), covering everyone who wrote meanwhile. A failed fsync fails
        every waiter and every later call: the kernel may have dropped the
        pages, so retrying proves nothing.
        """
        mutex = self._sync_mutex
        wake: list[threading.Lock] | None
        while True:
            with mutex:
                failed = self._sync_failed
                if failed is not None or self._durable >= offset:
                    # Leaving without syncing: if we were woken to run the next
                    # fdatasync, whoever still waits needs another to run it.
                    wake = [] if self._syncing else self._wake_after_sync()
                    break
                if not self._syncing:
                    self._syncing = True
                    target = log.end  # written before we start, so covered by this fsync
                    wake = None
                    break
                woken = threading.Lock()
                woken.acquire()
                self._sync_waiters.append((offset, woken))
            try:
                woken.acquire()  # released by a syncer: covered, or chosen to run the next
            except BaseException:  # a signal's exception (KeyboardInterrupt) in the wait
                self._abandon_wait(offset, woken)
                raise
        if wake is not None:  # not the syncer
            for waiter in wake:
                waiter.release()
            if failed is not None:
                raise failed
            return False
        try:
            log.fs.fdatasync(log.fd)
        except BaseException as exc:
            with mutex:
                if isinstance(exc, OSError):
                    self._sync_failed = exc
                self._syncing = False
                # Every waiter: to fail, or (interrupted, not failed) to sync anew.
                woken_all = [waiter for _, waiter in self._sync_waiters]
                self._sync_waiters = []
            for waiter in woken_all:
                waiter.release()
            raise
        with mutex:
            self._durable = max(self._durable, target)
            self._syncing = False
            covered = self._wake_after_sync()
        for waiter in covered:
            waiter.release()
        return True

    def _wake_after_sync(self) -> list[threading.Lock]:
        """Under the mutex, no fdatasync running: the waiters to wake (everyone now
        covered, and the first one not, to run the next); the others sleep on,
        covered by that next one, since they wrote before it starts."""
        if not self._sync_waiters:
            return []
        durable = self._durable
        wake = [waiter for waited, waiter in self._sync_waiters if waited <= durable]
        rest = [(waited, waiter) for waited, waiter in self._sync_waiters if waited > durable]
        if rest:
            wake.append(rest.pop(0)[1])
        self._sync_waiters = rest
        return wake

    def _abandon_wait(self, offset: int, woken: threading.Lock) -> None:
        """A waiter leaves early: out of the list, or, if a syncer already woke it
        (perhaps to run the next fdatasync), that turn passes to another."""
        with self._sync_mutex:
            if (offset, woken) in self._sync_waiters:
                self._sync_waiters.remove((offset, woken))
                wake = []
            else:
                wake = [] if self._syncing else self._wake_after_sync()
        for waiter in wake:
            waiter.release()

    def learn_durable(self, offset: int) -> None:
        """Another handle's "d" says an fsync covering `offset` returned: the batches
        this handle writes next carry that proof too (see state/batch.py)."""
        with self._sync_mutex:
            self._durable = max(self._durable, offset)

    def lower(self, end: int) -> None:
        """The log was cut to `end`: nothing beyond it is durable any more."""
        with self._sync_mutex:
            self._durable = min(self._durable, end)
