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

from .fs import FileSystem

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
        # were written before it started.
        self._sync_cond = threading.Condition()
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
        that one did not cover its offset, runs the next, covering everyone
        who wrote meanwhile; with `shared`, that next one may be another
        process's. A failed fsync fails every waiter and every later call:
        the kernel may have dropped the pages, so retrying proves nothing.
        """
        with self._sync_cond:
            while True:
                if self._sync_failed is not None:
                    raise self._sync_failed
                if self._durable >= offset:
                    return False
                if not self._syncing:
                    break
                self._sync_cond.wait()
            self._syncing = True
            target = self.end  # written before we start, so covered by this fsync
        issued = True
        try:
            if shared is None:
                self.fs.fdatasync(self.fd)
            else:  # what it returns was proven durable: ours, or a peer's fdatasync
                self._issued = False  # only the one syncing thread touches it
                target = shared.flush(self, offset, target, self._fdatasync)
                issued = self._issued
        except OSError as exc:
            with self._sync_cond:
                self._sync_failed = exc
                self._syncing = False
                self._sync_cond.notify_all()
            raise
        with self._sync_cond:
            self._durable = max(self._durable, target)
            self._syncing = False
            self._sync_cond.notify_all()
        return issued

    def _fdatasync(self) -> None:
        self._issued = True
        self.fs.fdatasync(self.fd)

    def _learn_durable(self, offset: int) -> None:
        """Another handle's "d" says an fsync covering `offset` returned: the batches
        this handle writes next carry that proof too (see commands.Batch)."""
        with self._sync_cond:
            self._durable = max(self._durable, offset)

    def cut(self, end: int) -> None:
        """Drop everything from `end` on (torn tail, failed write) and make it durable."""
        self.fs.ftruncate(self.fd, end)
        self.fs.fsync(self.fd)
        self.size = end
        self.end = min(self.end, end)
        with self._sync_cond:
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
