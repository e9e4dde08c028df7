"""Record types, and the JSON text of records.

A record payload is a JSON object. Its first key is always "b", the batch
number of the API call that wrote it (see framing.RESYNC_MARKER). The other
keys depend on the type; docs/FORMAT.md lists them. Records are encoded and
decoded by the strict codec (codec.py, shared with every backend), which
refuses what another reader would not accept: NaN and Infinity, and nesting
deep enough to blow the stack.
"""

from __future__ import annotations

import json
from enum import IntEnum
from typing import Any, Final, NamedTuple

from ...codec import MAX_DEPTH, MAX_PAYLOAD_BYTES, dumps, encode_payload, loads
from .framing import MAX_RECORD

__all__ = [
    "RecordType",
    "ReplayError",
    "Record",
    "Applied",
    "dumps",
    "enqueue_text",
    "ack_text",
    "lease_text",
    "loads",
    "encode_payload",
    "MAX_DEPTH",
    "MAX_PAYLOAD_BYTES",
]

Record = dict[str, Any]
# The strict JSON codec is shared with every backend (codec.py); a payload of
# MAX_PAYLOAD_BYTES must fit one record with the fields a snapshot JOB record adds.
assert MAX_PAYLOAD_BYTES + (64 << 10) <= MAX_RECORD


class ReplayError(ValueError):
    """A record that no correct writer produces (internal: the log reader
    turns it into CorruptLogError at `offset`)."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


class Applied(NamedTuple):
    """A record as the log reader hands it over (and a writer's batch applies it)."""

    type: int  # a RecordType value
    record: Record  # the decoded JSON object (its payload replaced by None)
    offset: int  # where its frame starts in the log file
    size: int  # bytes of its frame


class RecordType(IntEnum):
    ENQUEUE = 1  # a new job
    LEASE = 2  # a job handed to a holder until a deadline, under a fencing token
    ACK = 3  # the holder finished the job
    NACK = 4  # the holder failed; retry later or dead-letter
    EXTEND = 5  # the holder moved its deadline
    EXPIRE = 6  # a lease ran out: counts as a failed attempt
    REQUEUE = 7  # a dead job revived
    PURGE = 8  # every pending job removed
    JOB = 9  # snapshot: one live job, written by compaction
    KEY = 10  # snapshot: an idempotency key of a finished job, still remembered
    SNAPSHOT = 11  # snapshot: end marker with the queue's counters
    FORGET = 12  # a finished job's retention ran out: its key or kept outcome is dropped
    CANCEL = 13  # a pending or leased job cancelled; kept as cancelled for a while
    DELETE = 14  # a dead job deleted
    PAUSE = 15  # nothing is leased until RESUME
    RESUME = 16  # leasing goes on
    FINISHED = 17  # snapshot: a finished job kept with its outcome (done or cancelled)
    SNOOZE = 18  # the holder gave the job back untried: pending again, attempt not counted


_quote: Final = json.encoder.encode_basestring_ascii


def enqueue_text(number: int, job_id: str, priority: int, at: float, t: float,
                 max_attempts: int, keyed: bool, payload_text: str, durable: int = 0) -> str:
    """An ENQUEUE record's JSON text, the text `dumps` gives its fields followed by
    the payload, built without a dict: this is every enqueue's path."""
    key = ',"k":true' if keyed else ""
    known = f',"d":{durable:d}' if durable else ""
    return (f'{{"b":{number:d}{known},"id":{_quote(job_id)},"pr":{priority:d},"at":{at!r},'
            f'"t":{t!r},"ma":{max_attempts:d}{key},"p":{payload_text}}}')


def ack_text(number: int, job_id: str, token: int, t: float, durable: int = 0) -> str:
    """An ACK record's JSON text (no result), as `dumps` gives its fields: every ack's
    path (and ack_and_lease's), built without a dict."""
    known = f',"d":{durable:d}' if durable else ""
    return f'{{"b":{number:d}{known},"id":{_quote(job_id)},"tok":{token:d},"t":{t!r}}}'


def lease_text(number: int, job_id: str, token: int, until: float, t: float,
               durable: int = 0) -> str:
    """A LEASE record's JSON text, as `dumps` gives its fields: every lease's path."""
    known = f',"d":{durable:d}' if durable else ""
    return (f'{{"b":{number:d}{known},"id":{_quote(job_id)},"tok":{token:d},'
            f'"until":{until!r},"t":{t!r}}}')
