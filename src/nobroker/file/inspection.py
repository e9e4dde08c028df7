"""Reading a log as raw records, for `nobroker inspect` and for debugging.

Read-only: it never takes the queue's lock and never repairs anything, so it
is safe to point at a queue that is in use or damaged. It reports what the
bytes say, record by record, and stops at the first record that does not
decode, saying why.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import CorruptLogError
from . import framing
from .compaction import current_filename, parse_current
from .logfile import log_filename
from .records import RecordType, loads

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
    """The path of the log generation NAME.current names (generation 0 without it)."""
    current = os.path.join(directory, current_filename(name))
    try:
        with open(current, "rb") as handle:
            data = handle.read(64)
    except FileNotFoundError:
        return os.path.join(directory, log_filename(name, 0))
    generation = parse_current(data)
    if generation is None:
        raise CorruptLogError(current, 0, f"does not name a generation: {data[:20]!r}")
    return os.path.join(directory, log_filename(name, generation))


def read_records(path: str) -> Iterator[RawRecord]:
    """Every record of one log file, in order; raises CorruptLogError for a bad header."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        framing.decode_file_header(data)
    except framing.FrameError as exc:
        raise CorruptLogError(path, 0, str(exc)) from None
    pos = framing.FILE_HEADER.size
    while True:
        outcome, type_byte, payload, nxt = framing.decode_record(data, pos)
        if outcome == framing.END:
            if any(data[pos:]):
                yield _broken(data, pos, "non-zero bytes after an all-zero record header")
            return
        if outcome != framing.RECORD:
            reason = payload.decode("ascii") if payload else "record runs past the end"
            yield _broken(data, pos, reason)
            return
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
        if error:
            return
        pos = nxt


def _broken(data: bytes, pos: int, reason: str) -> RawRecord:
    head = data[pos:pos + framing.RECORD_HEADER.size]
    length = int.from_bytes(head[:4], "little") if len(head) >= 4 else 0
    code = head[4] & framing.TYPE_MASK if len(head) >= 5 else 0
    return RawRecord(pos, f"type {code}", bool(len(head) >= 5 and head[4] & framing.MORE),
                     length, False, None, reason)
