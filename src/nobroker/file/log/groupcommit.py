"""Writing one generation of the log: append, group commit, cut.

A mixin of LogFile (logfile.py). The file is preallocated with zeros ahead
of the records (durably, before records land in the new space), so that an
fdatasync after a write flushes data only. One fdatasync serves every thread
whose records were written before it started (group commit); a failed one
fails every later call. Given the queue's SharedSync (syncfile.py), the one
thread that syncs asks it first whether another process's fdatasync already
covered us, and publishes its own for them. A torn tail is saved to a side file before it is cut.
"""

from __future__ import annotations

import os
import threading
import zlib
from typing import TYPE_CHECKING, Final

from ..disk.fs import FileSystem

if TYPE_CHECKING:
    from .syncfile import SharedSync

__all__ = ["LogWriter", "PREALLOCATE", "MIN_PREALLOCATE"]

PREALLOCATE: Final = 1 << 20  # grow the file by up to this many zero bytes at a time
MIN_PREALLOCATE: Final = 64 << 10


class LogWriter:
    """The writing half of a LogFile (see the module doc)."""

    # The log file's fields these methods read and advance (LogFile defines them).
    fs: FileSystem
    fd: int
    path: str
    generation: int
    end: int
    crc: int
    size: int

    def _init_sync(self) -> None:
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
        self._issued = False  # the shared path's fdatasync ran (see sync_to)
        self._sync_failed: OSError | None = None
        # (generation, st_dev, st_ino): what NAME.sync's slots name (SharedSync fills it).
        self.sync_identity: tuple[int, int, int] | None = None

    @property
    def durable(self) -> int:
        """Bytes before this offset are known to be on disk: an fsync of this
        process that covered them has returned (0 until one has)."""
        return self._durable

    def append(self, data: bytes) -> None:
        """Write `data` at the logical end (not durable until `sync`)."""
        start = self.end
        need = start + len(data)
        if need > self.size:
            # Double a small file, then grow in fixed steps: tiny queues stay tiny.
            grow = max(need - self.size, min(PREALLOCATE, max(MIN_PREALLOCATE, self.size)))
            self.fs.write_all(self.fd, bytes(grow), self.size)
            # The new space must be durable zeros before records land in it: a crash
            # could otherwise show the grown size with garbage where un-synced records
            # should be, and garbage (unlike zeros) before an intact later batch reads
            # as corruption. One extra fsync per growth step.
            self.fs.fdatasync(self.fd)
            self.size += grow
        self.fs.write_all(self.fd, data, start)
        self.crc = zlib.crc32(data, self.crc)
        self.end = need

    def sync(self) -> None:
        """Make everything written so far durable."""
        self.sync_to(self.end)

    def sync_to(self, offset: int, shared: SharedSync | None = None) -> bool:
        """Return once the bytes before `offset` are on disk; True if this thread
        issued an fdatasync for it (False: another thread's, or process's, covered it).

        A thread that finds an fsync already running waits for it and, if
        that one did not cover its offset, runs the next (one waiter is woken
        for it), covering everyone who wrote meanwhile; with `shared`, that
        next one may be another process's. A failed fsync fails every waiter
        and every later call: the kernel may have dropped the pages, so
        retrying proves nothing.
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
                    target = self.end  # written before we start, so covered by this fsync
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
        issued = True
        try:
            if shared is None:
                self.fs.fdatasync(self.fd)
            else:  # what it returns was proven durable: ours, or a peer's fdatasync
                self._issued = False  # only the one syncing thread touches it
                target = shared.flush(self, offset, target, self._fdatasync)
                issued = self._issued
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
        return issued

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

    def _fdatasync(self) -> None:
        self._issued = True
        self.fs.fdatasync(self.fd)

    def _learn_durable(self, offset: int) -> None:
        """Another handle's "d" says an fsync covering `offset` returned: the batches
        this handle writes next carry that proof too (see commands.Batch)."""
        with self._sync_mutex:
            self._durable = max(self._durable, offset)

    def cut(self, end: int) -> None:
        """Drop everything from `end` on (torn tail, failed write) and make it durable."""
        self.fs.ftruncate(self.fd, end)
        self.fs.fsync(self.fd)
        self.size = end
        self.end = min(self.end, end)
        with self._sync_mutex:
            self._durable = min(self._durable, end)

    def save_torn(self, offset: int, length: int) -> str:
        """Copy a torn tail to a side file before it is cut; returns the side file's path."""
        side = f"{self.path}.torn-{offset}"
        data = self.fs.pread(self.fd, length, offset)
        fd = self.fs.open(side, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            self.fs.write_all(fd, data, 0)
            self.fs.fsync(fd)
        finally:
            self.fs.close(fd)
        return side
