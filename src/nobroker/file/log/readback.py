"""Reading a log file's bytes back by offset: a record, the payloads and outcomes
compaction copies and a handle hands out, and CRCs of a prefix.

Functions over a descriptor (the log file's, logfile.py), no state of their
own: the log file keeps where its batches end; these only read what lies where
an index said a record is, and refuse (CorruptLogError) what is not there.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any, Final

from ...errors import CorruptLogError
from ..disk.fs import FileSystem
from . import framing
from .records import (
    FINISHED_AT,
    ID,
    PAYLOAD_KEY_TEXT,
    RESULT,
    RESULT_KEEP,
    RESULT_KEY_TEXT,
    TIME,
    Record,
    RecordType,
)
from .tail import decode_payload

__all__ = ["READ_CHUNK", "last_nonzero", "record_at", "payload_texts", "outcome_records",
           "prefix_crc", "finished_outcome"]

READ_CHUNK: Final = 4 << 20
_PAYLOAD_KEY: Final = PAYLOAD_KEY_TEXT.encode()
_RESULT_KEY: Final = RESULT_KEY_TEXT.encode()
# Record type holding a kept finished job's outcome -> its field for the finishing time.
_OUTCOME_FIELD: Final[dict[int, str]] = {RecordType.ACK: TIME, RecordType.CANCEL: TIME,
                                         RecordType.FINISHED: FINISHED_AT}


def last_nonzero(fs: FileSystem, fd: int, start: int, end: int) -> int:
    """The offset after the last non-zero byte at or after `start` (or `start`)."""
    while end > start:
        chunk_start = max(start, end - READ_CHUNK)
        chunk = fs.pread(fd, end - chunk_start, chunk_start)
        stripped = chunk.rstrip(b"\0")
        if stripped:
            return chunk_start + len(stripped)
        end = chunk_start
    return start


def record_at(fs: FileSystem, fd: int, offset: int) -> tuple[int, Record] | None:
    """The (type, record) at `offset`, if an intact record starts there."""
    head = fs.pread(fd, 4096, offset)
    length = int.from_bytes(head[:4], "little") if len(head) >= 4 else 0
    if framing.RECORD_HEADER.size + length > len(head):
        head = fs.pread(fd, framing.RECORD_HEADER.size + min(length, framing.MAX_RECORD),
                        offset)
    outcome, type_byte, payload, _ = framing.decode_record(head, 0)
    record = decode_payload(payload) if outcome == framing.RECORD else None
    return None if record is None else (type_byte & framing.TYPE_MASK, record)


def payload_texts(fs: FileSystem, fd: int, path: str, locs: list[int],
                  chunk: int = READ_CHUNK) -> Iterator[str]:
    """The payload JSON text of the records at `locs`, CRC-checked, without parsing.

    Reads ahead in large chunks, so increasing offsets (the usual order)
    cost one read per chunk rather than two per record. A record's payload
    key is always its last: `..., "p": PAYLOAD}`; the first `,"p":` in the
    text is that key, because a quote inside a JSON string is escaped.
    """
    buf = b""
    buf_start = 0
    for loc in locs:
        rel = loc - buf_start
        if rel < 0 or rel + framing.RECORD_HEADER.size > len(buf):
            buf, buf_start, rel = fs.pread(fd, chunk, loc), loc, 0
        length = int.from_bytes(buf[rel:rel + 4], "little")
        if rel + framing.RECORD_HEADER.size + length > len(buf):
            need = max(chunk, framing.RECORD_HEADER.size + min(length, framing.MAX_RECORD))
            buf, buf_start, rel = fs.pread(fd, need, loc), loc, 0
        outcome, _, payload, _ = framing.decode_record(buf, rel)
        key = payload.find(_PAYLOAD_KEY) if outcome == framing.RECORD else -1
        if key < 0 or not payload.endswith(b"}"):
            raise CorruptLogError(path, loc, "payload record unreadable")
        yield payload[key + len(_PAYLOAD_KEY):-1].decode("utf-8")


def outcome_records(fs: FileSystem, fd: int, path: str,
                    locs: list[int]) -> Iterator[tuple[int, Record, str | None]]:
    """(type, record, result JSON text or None) of the records at `locs`, which hold
    finished jobs' outcomes (a result is always a record's last key, "r")."""
    for loc in locs:
        found = record_at(fs, fd, loc)
        if found is None:
            raise CorruptLogError(path, loc, "finished job's record unreadable")
        rtype, record = found
        text = None
        if RESULT in record:
            head = fs.pread(fd, framing.RECORD_HEADER.size, loc)
            length = int.from_bytes(head[:4], "little")
            payload = fs.pread(fd, length, loc + framing.RECORD_HEADER.size)
            key = payload.find(_RESULT_KEY)
            if key < 0 or not payload.endswith(b"}"):
                raise CorruptLogError(path, loc, "result record unreadable")
            text = payload[key + len(_RESULT_KEY):-1].decode("utf-8")
        yield rtype, record, text


def prefix_crc(fs: FileSystem, fd: int, end: int, start: int = 0, crc: int = 0) -> int:
    """CRC-32 of the file's first `end` bytes, read from disk; or, given the CRC
    of the first `start` bytes, of the first `end` reading only the rest."""
    pos = start
    while pos < end:
        chunk = fs.pread(fd, min(READ_CHUNK, end - pos), pos)
        if not chunk:
            break
        crc = zlib.crc32(chunk, crc)
        pos += len(chunk)
    return crc


def finished_outcome(found: tuple[int, Record] | None, path: str, offset: int,
                     job_id: str, now: float) -> tuple[float, Any]:
    """A kept finished job's (finished_at, result) at `now`, from `found`, the record at
    `offset` (record_at's answer): an ACK, CANCEL or FINISHED record of that job, else
    CorruptLogError. A result past its "rkeep" (a keyed job's, 1.2) is None."""
    if found is None or found[0] not in _OUTCOME_FIELD or found[1].get(ID) != job_id:
        raise CorruptLogError(path, offset, "finished job's record unreadable")
    record = found[1]
    finished_at = float(record[_OUTCOME_FIELD[found[0]]])
    if RESULT_KEEP in record and finished_at + record[RESULT_KEEP] <= now:
        return finished_at, None
    return finished_at, record.get(RESULT)
