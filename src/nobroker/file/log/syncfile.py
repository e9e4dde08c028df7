"""Group commit between processes: `NAME.sync`, who fdatasynced how far.

An fdatasync covers every byte written to the file before it started,
whoever wrote it (the page cache is per inode). So a process whose batch
was written before another process's fdatasync began need not issue its own,
if it can prove that. This file is the proof, in two 64-byte slots:

  written  the log's end after the last commit; set by the writer under the
           queue lock, after its write returned;
  durable  an offset an fdatasync covered; set by a syncer holding the flock
           on this file, after its fdatasync returned, to the `written` it
           read before that fdatasync started.

A slot names the log it speaks of (boot id, generation, device, inode) and
carries a CRC-32: a torn or garbage slot, one of another generation (a
retired log never publishes into its successor's record) or of an earlier
boot (the file is never fsynced: after a power cut its content proves
nothing) is ignored. A syncer takes the flock, and returns at once if
`durable` already covers it; else it reads `written`, fdatasyncs, publishes,
releases. Waiters queue on the flock and mostly find themselves covered; the
kernel drops the flock of a process killed holding it.

Where the OS offers no flock or no boot id (Windows, macOS) `open` returns
None and every process fdatasyncs for itself, as before. docs/FORMAT.md
("Group commit across processes") has the layout and why it survives crashes.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from typing import Final, Protocol

from ..disk.fs import FileSystem

__all__ = ["SharedSync", "SyncedLog", "sync_filename", "SLOT", "WRITTEN", "DURABLE"]

MAGIC: Final = b"NBSY"
VERSION: Final = 1
WRITTEN: Final = 0
DURABLE: Final = 1
# <magic> <version> <which> <boot id> <generation> <st_dev> <st_ino> <offset>, then the CRC.
_BODY: Final = struct.Struct("<4sHH16sQQQQ")
_CRC: Final = struct.Struct("<I")
SLOT: Final = 64  # each slot at its own 64-byte offset; the rest is zero padding
_PAD: Final = bytes(SLOT - _BODY.size - _CRC.size)


class SyncedLog(Protocol):
    """What this module (and group commit) needs of a log file (logfile.LogFile)."""

    fs: FileSystem
    fd: int
    generation: int
    end: int  # the logical end: after the last batch written
    # (generation, st_dev, st_ino): what NAME.sync's slots name (SharedSync fills it in).
    sync_identity: tuple[int, int, int] | None


def sync_filename(name: str) -> str:
    return f"{name}.sync"


class SharedSync:
    """One handle's descriptor on NAME.sync (see the module doc)."""

    def __init__(self, fs: FileSystem, fd: int, boot: bytes) -> None:
        self.fs = fs
        self.fd = fd
        self.boot = boot

    @classmethod
    def open(cls, fs: FileSystem, directory: str, name: str) -> SharedSync | None:
        """The queue's sync file, created if missing; None where it cannot work."""
        boot = fs.boot_id()
        if boot is None:
            return None
        try:
            fd = fs.open(os.path.join(directory, sync_filename(name)),
                         os.O_RDWR | os.O_CREAT)
        except OSError:
            return None  # e.g. its name taken by a directory: sync alone, as before
        return cls(fs, fd, boot)

    def close(self) -> None:
        self.fs.close(self.fd)

    def _identity(self, log: SyncedLog) -> tuple[int, int, int]:
        if log.sync_identity is None:
            st = self.fs.fstat(log.fd)
            log.sync_identity = (log.generation, st.st_dev, st.st_ino)
        return log.sync_identity

    def _encode(self, which: int, log: SyncedLog, offset: int) -> bytes:
        body = _BODY.pack(MAGIC, VERSION, which, self.boot, *self._identity(log), offset)
        return body + _CRC.pack(zlib.crc32(body)) + _PAD

    def _read(self, log: SyncedLog) -> tuple[int | None, int | None]:
        """(written, durable) for this log in this boot; None for a slot that is not."""
        data = self.fs.pread(self.fd, 2 * SLOT, 0)
        identity = self._identity(log)
        found: list[int | None] = []
        for which in (WRITTEN, DURABLE):
            start = which * SLOT
            body = data[start:start + _BODY.size]
            crc = data[start + _BODY.size:start + _BODY.size + _CRC.size]
            value = None
            if len(crc) == _CRC.size and _CRC.unpack(crc)[0] == zlib.crc32(body):
                magic, version, kind, boot, *rest, offset = _BODY.unpack(body)
                if (magic, version, kind, boot) == (MAGIC, VERSION, which, self.boot) \
                        and tuple(rest) == identity:
                    value = offset
            found.append(value)
        return found[0], found[1]

    def wrote(self, log: SyncedLog) -> None:
        """Publish the log's end after a commit; under the queue lock, after the
        write returned, so a peer's fdatasync that reads it before starting covers it."""
        try:
            self.fs.write_all(self.fd, self._encode(WRITTEN, log, log.end), WRITTEN * SLOT)
        except OSError:
            pass  # nobody learns of this batch: we fdatasync it ourselves

    def flush(self, log: SyncedLog, need: int, own: int,
              fdatasync: Callable[[], None]) -> int:
        """Make the log's bytes before `need` durable; returns an offset now proven
        durable. `own` is what this process had written before calling (covered by
        an fdatasync of ours). Raises what `fdatasync` raises, publishing nothing."""
        try:
            durable = self._read(log)[1]  # no flock yet: a torn read just fails its CRC
            if durable is not None and durable >= need:
                return durable
            self.fs.lock(self.fd)
        except OSError:  # NAME.sync failed us, not the log: sync alone, as without it
            fdatasync()
            return own
        try:
            try:
                written, durable = self._read(log)
            except OSError:
                written = durable = None
            if durable is not None and durable >= need:
                return durable  # another process's fdatasync, begun after our write
            fdatasync()
            if written is None:  # retired, torn or never published: claim only our own
                return own
            reached = max(own, written, durable or 0)
            try:  # only now, after the fdatasync returned
                self.fs.write_all(self.fd, self._encode(DURABLE, log, reached), DURABLE * SLOT)
            except OSError:
                pass  # our records are durable; others just do not learn it
            return reached
        finally:
            self.fs.unlock(self.fd)

    def lower(self, log: SyncedLog, end: int) -> None:
        """After a cut to `end`, or an open that found the log ending there (under the
        queue lock): no slot may claim bytes beyond it, which will be replaced or are
        gone. Takes the flock, so no syncer is mid-claim."""
        self.fs.lock(self.fd)
        try:
            written, durable = self._read(log)
            if written is not None and written > end:
                self.fs.write_all(self.fd, self._encode(WRITTEN, log, end), WRITTEN * SLOT)
            if durable is not None and durable > end:
                self.fs.write_all(self.fd, self._encode(DURABLE, log, end), DURABLE * SLOT)
        finally:
            self.fs.unlock(self.fd)
