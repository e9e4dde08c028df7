"""Torn tail or corruption: the rules that read damage at the end of a log.

Reading stops at the end of the last complete batch. What follows must be
all zeros (a clean end); otherwise it is either a torn tail or corruption:

- torn tail: nothing after the damage belongs to a later batch. Only the
  last batch can have been in flight when a writer died or the power went,
  and its caller never got an answer, so the bytes may be cut. They are
  saved to `NAME.NNNNNN.log.torn-OFFSET` first and reported.
- corruption: a well-formed record of a *later* batch follows the damage, so
  the damaged bytes were once durable. Raise CorruptLogError; touch nothing.

Pure functions over bytes already read (logfile.py reads them): no os,
time, random or threads.
"""

from __future__ import annotations

from ...codec import loads_object
from . import framing
from .records import (
    BATCH,
    DURABLE,
    Record,
)

__all__ = ["decode_payload", "unwritten_sector", "later_batch"]


def decode_payload(payload: bytes) -> Record | None:
    """A record's payload as its JSON object; None if it is not one (or does not
    start as every record does, with its batch number)."""
    if not payload.startswith(framing.RESYNC_MARKER):
        return None
    return loads_object(payload)


def unwritten_sector(data: bytes, base: int) -> int:
    """Where, in `data` read from file offset `base`, a never-written sector ends a gap.

    A power cut loses whole sectors (512 bytes or a multiple, aligned), which read
    back as the preallocated zeros: so zeros right before a sector boundary, 16 of
    them or all the way back to `base`, are a gap. Records never hold 16 zero
    bytes in a row (a header has at most 4, JSON text none), and a zeroed region
    that reaches no sector boundary was not left by a crash. Returns len(data)
    if there is none.
    """
    boundary = -base % 512 or 512
    while boundary <= len(data):
        start = max(0, boundary - 16)
        if not any(data[start:boundary]):
            return start
        boundary += 512
    return len(data)


def later_batch(data: bytes, bad_at: int, last_batch: int) -> int | None:
    """A batch number > last_batch + 1, intact in `data` (read from
    `bad_at`, where the damage starts), that proves the damaged bytes were once
    durable; None if nothing does.

    Two kinds of proof. A later batch before the first sector that was never
    written: a crash leaves damage only as lost (zero) sectors or a torn end, so
    damage with intact records right after it is not a crash. Or a later batch,
    anywhere up to the end of the file, whose "d" says that an fsync covering
    `bad_at` had returned before it was written: the damage is in durable bytes
    (a lost or misdirected write, a zeroed sector). Batches beyond a never-written
    sector without such a "d" may have been in the same un-synced window as the
    damage (group commit, a writer that died before its fsync, fsync=False): then
    none of them was acknowledged, and the damage is a torn tail.
    """
    gap = unwritten_sector(data, bad_at)
    marker = framing.RESYNC_MARKER
    hit = data.find(marker, 1)
    while hit != -1:
        start = hit - framing.RECORD_HEADER.size
        if start > 0:
            outcome, _, payload, nxt = framing.decode_record(data, start)
            record = decode_payload(payload) if outcome == framing.RECORD else None
            if record is not None:
                number, known = record.get(BATCH), record.get(DURABLE)
                if type(number) is int and number > last_batch + 1 and (
                        nxt <= gap or (type(known) is int and known > bad_at)):
                    return number
        hit = data.find(marker, hit + 1)
    return None
