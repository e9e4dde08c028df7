"""Byte layout of a log file: the file header and one framed record.

Pure functions over bytes; nothing here holds a file. docs/FORMAT.md is the
specification and this module follows it:

    file header  <8s magic><H version><I generation><H reserved>   16 bytes
    record       <I length><B type><I crc32><payload>              9 + length

`crc32` covers the first five header bytes (length and type) and then the
payload, so nine zero bytes are never a valid record (crc32 of an empty
payload alone would be 0). Length 0 and type 0 are invalid for the same
reason: a zero-filled region, which a power cut or preallocation leaves
behind, must read as "no record here". The top bit of the type byte marks a
record that is not the last of its batch (one API call = one batch).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Final

__all__ = [
    "MAGIC",
    "FORMAT_VERSION",
    "FILE_HEADER",
    "RECORD_HEADER",
    "MAX_RECORD",
    "MORE",
    "TYPE_MASK",
    "RESYNC_MARKER",
    "FrameError",
    "encode_file_header",
    "decode_file_header",
    "encode_record",
    "encode_batch",
    "decode_record",
    "RECORD",
    "END",
    "INCOMPLETE",
    "BAD",
]

MAGIC: Final = b"NOBROKER"
FORMAT_VERSION: Final = 1
FILE_HEADER: Final = struct.Struct("<8sHIH")
RECORD_HEADER: Final = struct.Struct("<IBI")
# Large enough for any sane payload, small enough that a corrupt length field
# can never make a reader allocate more than this.
MAX_RECORD: Final = 16 * 1024 * 1024
MORE: Final = 0x80
TYPE_MASK: Final = 0x7F
# Every payload is a JSON object whose first key is the batch number, so a
# reader can find candidate record starts in damaged bytes with bytes.find.
RESYNC_MARKER: Final = b'{"b":'

_LEN_TYPE = struct.Struct("<IB")
_ZERO_HEADER = bytes(RECORD_HEADER.size)

# decode_record outcomes
RECORD: Final = 0
END: Final = 1
INCOMPLETE: Final = 2
BAD: Final = 3


class FrameError(ValueError):
    """A file header that is not a nobroker log header (internal; see CorruptLogError)."""


def encode_file_header(generation: int) -> bytes:
    return FILE_HEADER.pack(MAGIC, FORMAT_VERSION, generation, 0)


def decode_file_header(data: bytes) -> int:
    """Return the generation stored in a file header, or raise FrameError."""
    if len(data) < FILE_HEADER.size:
        raise FrameError(f"file header is {len(data)} bytes, expected {FILE_HEADER.size}")
    magic, version, generation, reserved = FILE_HEADER.unpack_from(data)
    if magic != MAGIC:
        raise FrameError(f"bad magic {magic!r}: not a nobroker log")
    if version != FORMAT_VERSION:
        newer = " (written by a newer nobroker)" if version > FORMAT_VERSION else ""
        raise FrameError(f"unsupported format version {version}{newer}")
    if reserved != 0:
        raise FrameError(f"reserved header field is {reserved}, expected 0")
    return int(generation)


def encode_record(rtype: int, payload: bytes, more: bool = False) -> bytes:
    type_byte = rtype | MORE if more else rtype
    head = _LEN_TYPE.pack(len(payload), type_byte)
    crc = zlib.crc32(payload, zlib.crc32(head))
    return head + crc.to_bytes(4, "little") + payload


def encode_batch(records: Sequence[tuple[int, bytes]]) -> tuple[bytes, list[int]]:
    """The frames of one batch, the MORE bit on all but the last, as one string, and
    each frame's size."""
    # encode_record's steps inlined, and one join for the whole batch: enqueue_many
    # frames thousands of records per call.
    pack_len_type, pack_header, crc32 = _LEN_TYPE.pack, RECORD_HEADER.pack, zlib.crc32
    parts: list[bytes] = []
    sizes: list[int] = []
    append, size = parts.append, sizes.append
    last = len(records) - 1
    for index, (rtype, payload) in enumerate(records):
        type_byte = rtype | MORE if index < last else rtype
        length = len(payload)
        append(pack_header(length, type_byte, crc32(payload, crc32(pack_len_type(length,
                                                                               type_byte)))))
        append(payload)
        size(length + 9)
    return b"".join(parts), sizes


def decode_record(buf: bytes | memoryview, pos: int) -> tuple[int, int, bytes, int]:
    """Decode the record starting at `pos` of `buf`.

    Returns (outcome, type_byte, payload, next_pos). For BAD, the payload slot
    carries the reason as ASCII bytes. END means the buffer ends exactly here
    or the next nine bytes are zero; whether everything after is zero too is
    the caller's question.
    """
    end = len(buf)
    if pos >= end:
        return END, 0, b"", pos
    if end - pos < RECORD_HEADER.size:
        if not any(buf[pos:end]):
            return END, 0, b"", pos
        return INCOMPLETE, 0, b"", pos
    length, type_byte, crc = RECORD_HEADER.unpack_from(buf, pos)
    if length == 0 and type_byte == 0 and crc == 0:
        return END, 0, b"", pos
    if length == 0 or length > MAX_RECORD:
        return BAD, 0, b"length %d out of range" % length, pos
    if type_byte & TYPE_MASK == 0:
        return BAD, 0, b"record type 0", pos
    start = pos + RECORD_HEADER.size
    stop = start + length
    if stop > end:
        return INCOMPLETE, 0, b"", pos
    payload = bytes(buf[start:stop])
    if zlib.crc32(payload, zlib.crc32(buf[pos : pos + 5])) != crc:
        return BAD, 0, b"crc mismatch", pos
    return RECORD, type_byte, payload, stop
