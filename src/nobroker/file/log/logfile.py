"""One generation of the write-ahead log: `NAME.NNNNNN.log`.

Owns the file descriptor, the logical end (the byte after the last complete
batch), the physical size (zeros are preallocated, durably, ahead of the
records, so that an fdatasync after a write flushes data only) and the
GroupCommit that makes writes durable (groupcommit.py).

Reading stops at the end of the last complete batch. What follows must be
all zeros (a clean end); otherwise it is a torn tail (reported, and cut by
the opener after saving it) or corruption (CorruptLogError, nothing touched):
tail.py holds the rules that tell the two apart; a torn tail is saved to a
side file before it is cut. This module knows frames and batches, not what
records mean (state/), and reads records back by offset with readback.py.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from ...errors import CorruptLogError
from ..disk.fs import FileSystem
from . import framing
from .gcpause import paused_gc
from .groupcommit import GroupCommit
from .readback import (
    READ_CHUNK,
    last_nonzero,
    outcome_records,
    payload_texts,
    prefix_crc,
    record_at,
)
from .records import (
    BATCH,
    DURABLE,
    Applied,
    Record,
    ReplayError,
)
from .tail import decode_payload, later_batch

__all__ = ["LogFile", "ScanResult", "log_filename", "paused_gc", "PREALLOCATE", "READ_CHUNK"]

PREALLOCATE: Final = 1 << 20  # grow the file by up to this many zero bytes at a time
MIN_PREALLOCATE: Final = 64 << 10

_ZERO_HEADER: Final = bytes(framing.RECORD_HEADER.size)
_HEADER_SIZE: Final = framing.RECORD_HEADER.size


def log_filename(name: str, generation: int) -> str:
    return f"{name}.{generation:06d}.log"


@dataclass(slots=True)
class ScanResult:
    """What reading forward found."""

    end: int  # logical end: after the last complete batch
    records: int  # records in the complete batches applied
    torn_offset: int | None = None  # where a torn tail starts, if one was found
    torn_bytes: int = 0  # its length up to the last non-zero byte
    torn_reason: str = ""


class LogFile:
    """An open generation of the log."""

    def __init__(self, fs: FileSystem, directory: str, name: str, generation: int,
                 fd: int, size: int) -> None:
        self.fs = fs
        self.directory = directory
        self.name = name
        self.generation = generation
        self.path = os.path.join(directory, log_filename(name, generation))
        self.fd = fd
        self.end = framing.FILE_HEADER.size
        # CRC-32 of every byte before `end`, kept as batches are read or written;
        # a checkpoint records it so that a damaged, already-durable record can
        # never hide behind the checkpoint.
        self.crc = zlib.crc32(framing.encode_file_header(generation))
        self.size = size
        self.inflight = 0  # fsyncs running outside the lock; close waits for them
        self.retired = False
        self.commits = GroupCommit()  # how far it is durable; the threads waiting for more

    # -- opening ------------------------------------------------------------

    @classmethod
    def create(cls, fs: FileSystem, directory: str, name: str, generation: int,
               filename: str | None = None) -> LogFile:
        """Create a new generation holding only its header; durable on return.

        With `filename`, the file gets that (temporary) name instead; `rename`
        gives it its real one later.
        """
        path = os.path.join(directory, filename or log_filename(name, generation))
        fd = fs.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        try:
            fs.write_all(fd, framing.encode_file_header(generation), 0)
            fs.fsync(fd)  # the header is on disk before the name can be relied on
        except BaseException:
            fs.close(fd)
            raise
        fs.fsync_dir(directory)  # the new name itself survives a power cut
        created = cls(fs, directory, name, generation, fd, framing.FILE_HEADER.size)
        created.path = path
        return created

    def rename(self) -> None:
        """Give a generation created under a temporary name its real name, durably."""
        final = os.path.join(self.directory, log_filename(self.name, self.generation))
        self.fs.replace(self.path, final)
        self.fs.fsync_dir(self.directory)  # the name is durable before anything refers to it
        self.path = final

    @classmethod
    def open(cls, fs: FileSystem, directory: str, name: str, generation: int, *,
             readonly: bool = False) -> LogFile:
        """Open an existing generation and check its header (not its records);
        `readonly` opens it for reading only (for a handle that never writes)."""
        path = os.path.join(directory, log_filename(name, generation))
        fd = fs.open(path, os.O_RDONLY if readonly else os.O_RDWR)
        try:
            size = fs.fstat(fd).st_size
            header = fs.pread(fd, framing.FILE_HEADER.size, 0)
            try:
                found = framing.decode_file_header(header)
            except framing.FrameError as exc:
                raise CorruptLogError(path, 0, str(exc)) from None
            if found != generation:
                raise CorruptLogError(path, 0, f"header says generation {found}, "
                                      f"file name says {generation}")
        except BaseException:
            fs.close(fd)
            raise
        return cls(fs, directory, name, generation, fd, size)

    # -- writing --------------------------------------------------------------

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

    @property
    def durable(self) -> int:  # bytes before it are known to be on disk
        return self.commits.durable

    def sync(self) -> None:
        """Make everything written so far durable."""
        self.commits.sync_to(self, self.end)

    def sync_to(self, offset: int) -> bool:
        """Return once the bytes before `offset` are on disk; True if this thread
        issued the fdatasync that did it (GroupCommit.sync_to)."""
        return self.commits.sync_to(self, offset)

    def cut(self, end: int) -> None:
        """Drop everything from `end` on (torn tail, failed write) and make it durable."""
        self.fs.ftruncate(self.fd, end)
        self.fs.fsync(self.fd)
        self.size = end
        self.end = min(self.end, end)
        self.commits.lower(end)

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

    # -- reading ------------------------------------------------------------

    def scan(self, on_batch: Callable[[list[Applied]], None], last_batch: int,
             *, full: bool = True, limit: int | None = None,
             locked: bool = True) -> ScanResult:
        """Read every complete batch after `self.end`, handing each to `on_batch`.

        Advances `self.end`. Raises CorruptLogError for damage followed by a
        later batch; reports (without repairing) a torn tail. With `full`,
        also checks that everything after the last record is zero; a live
        read-forward skips that, since a writer killed mid-write leaves a
        prefix of its bytes and then zeros, never bytes further on.

        Without the queue's lock (`locked=False`: a compaction catching up
        beside the writers) a batch still being written can read as zeros or
        garbage, and a later read of the file can find the batches written
        after it: that proves nothing. Such a scan stops at the first
        incomplete batch, judging nothing; the locked read that follows does.
        """
        pos = self.end
        buf = b""
        chunk = READ_CHUNK
        if not full:
            # The common case, nothing new: one small read shows zeros (or EOF) at our end.
            # A page rather than a sector: it costs the same system call, and holds the
            # few batches each of N worker processes' calls finds, so they need no second.
            buf = self.fs.pread(self.fd, 4096, pos)
            if not buf or buf[:framing.RECORD_HEADER.size] == _ZERO_HEADER:
                return ScanResult(end=pos, records=0)
            chunk = 16384
        self.size = self.fs.fstat(self.fd).st_size
        buf_start = pos
        batch: list[Applied] = []
        batch_start = pos
        count = 0
        reason = ""
        crc = self.crc
        folded = 0  # where in `buf` the bytes not yet in `crc` start (folded per batch)
        # Every record of every peer batch passes here: framing.decode_record's intact
        # case is inlined (anything else goes to it), and Applied built without its
        # keyword-parsing __new__.
        header, crc32, applied = framing.RECORD_HEADER.unpack_from, zlib.crc32, tuple.__new__
        while True:
            if limit is not None and pos >= limit:
                return ScanResult(end=self.end, records=count)  # a prefix was asked for
            rel = pos - buf_start
            start = rel + _HEADER_SIZE
            length, type_byte, stored = header(buf, rel) if start <= len(buf) else (0, 0, 0)
            nxt = start + length
            if (0 < length <= framing.MAX_RECORD and type_byte & framing.TYPE_MASK
                    and nxt <= len(buf)
                    and crc32(buf[start:nxt], crc32(buf[rel:rel + 5])) == stored):
                outcome, payload = framing.RECORD, buf[start:nxt]
            else:  # anything but an intact record: framing's full answer
                outcome, type_byte, payload, nxt = framing.decode_record(buf, rel)
            if outcome == framing.INCOMPLETE or (
                    outcome == framing.END and len(buf) - rel < _HEADER_SIZE):
                have = buf_start + len(buf)
                if have >= self.size:
                    if outcome == framing.INCOMPLETE:
                        reason = "record runs past the end of the file"
                    elif batch:
                        reason = "batch never finished"
                    break
                more = self.fs.pread(self.fd, chunk, have)
                chunk = min(chunk * 4, READ_CHUNK)
                if not more:
                    reason = "file shrank while reading"
                    break
                crc = crc32(buf[folded:rel], crc)  # this batch's records read so far
                buf = buf[rel:] + more
                buf_start, folded = pos, 0
                continue
            if outcome == framing.END:
                if batch:
                    reason = "batch never finished"
                break
            if outcome == framing.BAD:
                reason = payload.decode("ascii")
                break
            record = decode_payload(payload)
            if record is None:
                reason = "record is not a JSON object"
                break
            batch.append(applied(Applied, (type_byte & framing.TYPE_MASK, record, pos,
                                           _HEADER_SIZE + len(payload))))
            pos = buf_start + nxt
            if not type_byte & framing.MORE:
                crc = crc32(buf[folded:nxt], crc)
                folded = nxt
                try:
                    on_batch(batch)
                except ReplayError as exc:  # the state refused a record
                    raise CorruptLogError(self.path, exc.offset, exc.reason) from None
                count += len(batch)
                head = batch[0][1]
                last_batch = head[BATCH]
                known = head.get(DURABLE)
                if type(known) is int and self.commits.durable < known <= batch_start:
                    self.commits.learn_durable(known)  # a peer's fsync covered this much
                self.end = pos
                self.crc = crc
                batch = []
                batch_start = pos
        result = ScanResult(end=self.end, records=count)
        stop = batch_start  # the first byte that is not part of a complete batch
        if not (full or reason) or not locked:
            return result
        tail_end = last_nonzero(self.fs, self.fd, stop, self.size)  # past it: zeros
        if tail_end > stop:
            bad_at = pos if reason else stop
            later = self._later_batch_after(bad_at, tail_end, last_batch)
            if later is not None:
                raise CorruptLogError(self.path, bad_at, f"{reason or 'damaged bytes'}, "
                                      f"followed by intact batch {later} at a later offset")
            result.torn_offset = stop
            result.torn_bytes = tail_end - stop
            result.torn_reason = reason or "garbage after the last batch"
        return result

    def _later_batch_after(self, bad_at: int, tail_end: int, last_batch: int) -> int | None:
        """A batch number > last_batch + 1, intact after `bad_at`, that proves the
        damaged bytes were once durable; None if nothing does (tail.later_batch
        over the bytes up to `tail_end`)."""
        return later_batch(self.fs.pread(self.fd, tail_end - bad_at, bad_at), bad_at,
                           last_batch)

    def record_at(self, offset: int) -> tuple[int, Record] | None:
        """The (type, record) at `offset`, if an intact record starts there."""
        return record_at(self.fs, self.fd, offset)

    def read_payload(self, offset: int) -> str:
        """The payload JSON text of the record at `offset` (one lookup, one small read)."""
        return next(payload_texts(self.fs, self.fd, self.path, [offset], chunk=4096))

    def payload_texts(self, locs: list[int]) -> Iterator[str]:  # readback.payload_texts
        return payload_texts(self.fs, self.fd, self.path, locs)

    def outcome_records(self, locs: list[int]) -> Iterator[tuple[int, Record, str | None]]:
        """(type, record, result JSON text or None) of finished jobs' records at `locs`."""
        return outcome_records(self.fs, self.fd, self.path, locs)

    def prefix_crc(self, end: int, start: int = 0, crc: int = 0) -> int:
        """CRC-32 of the file's first `end` bytes, read from disk; or, given the CRC
        of the first `start` bytes, of the first `end` reading only the rest."""
        return prefix_crc(self.fs, self.fd, end, start, crc)

    # -- the checkpoint sidecar (a cache; see checkpoint.py) -------------------

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.directory, f"{self.name}.{self.generation:06d}.ckpt")

    @property
    def switch_checkpoint_path(self) -> str:
        """The checkpoint the compaction that switched to this generation published:
        only that switch writes this name, so a later checkpoint (NAME.GGGGGG.ckpt)
        never replaces what peers that have not moved yet need to follow it."""
        return os.path.join(self.directory, f"{self.name}.{self.generation:06d}.switch.ckpt")

    def holds(self, start: int, end: int, crc_before: int, crc_after: int) -> bool:
        """Whether bytes `start` to `end` are still those that, chained from
        `crc_before`, had the CRC `crc_after` (read again; a file cut shorter
        reads fewer bytes, so its CRC differs). Below a logical end found under
        the lock the log never changes; bytes read without it may since have
        been cut by their writer (store._commit)."""
        return self.prefix_crc(end, start, crc_before) == crc_after

    def read_checkpoint(self, path: str | None = None) -> bytes | None:
        """The bytes of the checkpoint at `path` (checkpoint_path), None if missing."""
        try:
            fd = self.fs.open(self.checkpoint_path if path is None else path, os.O_RDONLY)
        except OSError:
            return None
        try:
            size = self.fs.fstat(fd).st_size
            return self.fs.pread(fd, size, 0)
        finally:
            self.fs.close(fd)

    def write_checkpoint(self, data: bytes) -> None:
        """Replace the checkpoint atomically. No fsync: a torn or lost checkpoint
        fails its CRC or is missing, and opening then replays the log instead."""
        self.fs.replace(self.stage_checkpoint(data), self.checkpoint_path)

    def stage_checkpoint(self, data: bytes) -> str:
        """Write checkpoint bytes under a temporary name of our own and return it;
        renaming it to `checkpoint_path` is the caller's. Our own name, so two
        processes saving at once cannot interleave their bytes in one file."""
        temp = f"{self.checkpoint_path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
        fd = self.fs.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            self.fs.write_all(fd, data, 0)
        finally:
            self.fs.close(fd)
        return temp

    def close(self) -> None:
        self.fs.close(self.fd)
