"""Reading log bytes on its own terms: frames, complete batches, generations.

Independent of nobroker.file.log.framing on purpose: mutation tests patch that.

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator
from typing import Any

from .recording import _LOG_NAME, Event


def _log_inodes(events: Iterable[Event]) -> set[int]:
    """Inodes that are, at some point, named like a log generation (NAME.NNNNNN.log)."""
    out = set()
    for event in events:
        if (event.kind == "create" and _LOG_NAME.fullmatch(event.name)) or \
                (event.kind == "rename" and _LOG_NAME.fullmatch(event.name2)):
            out.add(event.ino)
    return out


def _frames(data: bytes, start: int) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    """(type byte, offset, size, record) of each well-formed frame from `start` on."""
    pos = start
    while pos + 9 <= len(data):
        length, type_byte, _ = struct.unpack_from("<IBI", data, pos)
        if not length or not type_byte & 0x7F or pos + 9 + length > len(data):
            return
        try:
            record = json.loads(data[pos + 9:pos + 9 + length])
        except ValueError:
            return
        if not isinstance(record, dict) or type(record.get("b")) is not int:
            return
        yield type_byte, pos, 9 + length, record
        pos += 9 + length


def _complete_batches(data: bytes, start: int) -> Iterator[tuple[int, list[tuple[int, dict[
        str, Any], int, int]]]]:
    """(end offset, records) of each complete batch from `start` on, as replay takes them."""
    batch: list[tuple[int, dict[str, Any], int, int]] = []
    for type_byte, pos, size, record in _frames(data, start):
        batch.append((type_byte & 0x7F, record, pos, size))
        if not type_byte & 0x80:
            yield pos + size, batch
            batch = []


def _generation(data: bytes | bytearray) -> int | None:
    if len(data) < 16 or data[:8] != b"NOBROKER":
        return None
    return int(struct.unpack_from("<I", data, 10)[0])


def _scan_frames(data: bytes) -> list[tuple[int, int, dict[str, Any]]]:
    """(type, offset, record) of each whole frame at the start of `data` (no CRC check).

    Independent of nobroker.file.log.framing on purpose: mutation tests patch that.
    """
    out = []
    pos = 0
    while pos + 9 <= len(data):
        length, type_byte, _ = struct.unpack_from("<IBI", data, pos)
        if not length or pos + 9 + length > len(data):
            break
        try:
            record = json.loads(data[pos + 9:pos + 9 + length])
        except ValueError:
            break
        if isinstance(record, dict) and type(record.get("b")) is int:
            out.append((type_byte & 0x7F, pos, record))
        pos += 9 + length
    return out
