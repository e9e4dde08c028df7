"""Reading a log as raw records, for `nobroker inspect` and for debugging.

Read-only: it never takes the queue's lock and never repairs anything, so it
is safe to point at a queue that is in use or damaged. It reports what the
bytes say, record by record. Where a record does not decode, it reports a
DAMAGED region (its offset, length and why) and goes on at the next offset
where a record frames again, so the intact batches after damage are shown
too; `nobroker recover --salvage` keeps those.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import CorruptLogError, NobrokerError
from .disk.fs import OS
from .generations.current import read_current
from .log import framing
from .log.logfile import log_filename
from .log.records import RecordType, loads
from .opening import queue_exists

__all__ = ["RawRecord", "current_log_path", "read_records"]


@dataclass(frozen=True, slots=True)
class RawRecord:
    offset: int
    type: str  # RecordType name, or "type N" for an unknown one
    more: bool  # not the last record of its batch
    length: int
    crc_ok: bool
    payload: Any  # the decoded JSON object, or None when it does not decode
    error: str | None  # why this record stops the reader, if it does


def current_log_path(directory: str, name: str = "default") -> str:
    """The path of the log generation NAME.current names (generation 0 without it);
    NobrokerError if there is no such queue in `directory`."""
    if not queue_exists(directory, name):
        raise NobrokerError(f"no queue named {name!r} in {directory}")
    return os.path.join(directory, log_filename(name, read_current(OS, directory, name)))


def read_records(path: str) -> Iterator[RawRecord]:
    """Every record of one log file, in order, with a DAMAGED entry for each region
    that does not frame (a bad file header included: the records after it are
    shown all the same); raises CorruptLogError for a file too short for a header."""
    with open(path, "rb") as handle:
        data = handle.read()
    if len(data) < framing.FILE_HEADER.size:
        raise CorruptLogError(path, 0, f"{len(data)} bytes: too short for a log header")
    pos = framing.FILE_HEADER.size
    end = len(data.rstrip(b"\0"))
    try:
        framing.decode_file_header(data)
    except framing.FrameError as exc:
        resume = _next_record(data, 0, end) if end > pos else pos
        yield RawRecord(0, "DAMAGED", False, resume, False, None, f"file header: {exc}")
        pos = resume
    while pos < end:
        outcome, type_byte, payload, nxt = framing.decode_record(data, pos)
        if outcome != framing.RECORD:
            if outcome == framing.END:
                reason = "zeros, then non-zero bytes"
            elif outcome == framing.BAD:
                reason = payload.decode("ascii")
            else:
                reason = "record runs past the end of the file"
            resume = _next_record(data, pos, end)
            yield RawRecord(pos, "DAMAGED", False, resume - pos, False, None, reason)
            pos = resume
            continue
        code = type_byte & framing.TYPE_MASK
        try:
            name = RecordType(code).name
        except ValueError:
            name = f"type {code}"
        try:
            decoded, error = loads(payload), None
        except ValueError as exc:
            decoded, error = None, f"payload is not JSON: {exc}"
        yield RawRecord(pos, name, bool(type_byte & framing.MORE), len(payload), True,
                        decoded, error)
        pos = nxt


def _next_record(data: bytes, pos: int, end: int) -> int:
    """The first offset after `pos` where an intact record frames (or `end`), never
    inside the file header."""
    marker = framing.RESYNC_MARKER
    start = max(pos + 1, framing.FILE_HEADER.size) + framing.RECORD_HEADER.size
    hit = data.find(marker, start, end)
    while hit != -1:
        start = hit - framing.RECORD_HEADER.size
        if framing.decode_record(data, start)[0] == framing.RECORD:
            return start
        hit = data.find(marker, hit + 1, end)
    return end
