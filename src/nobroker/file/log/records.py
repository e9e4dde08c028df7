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
    "RecordType", "ReplayError", "Record", "Applied", "dumps", "enqueue_text", "ack_text",
    "lease_text", "loads", "encode_payload", "MAX_DEPTH", "MAX_PAYLOAD_BYTES", "FIELDS",
    "PAYLOAD_KEY_TEXT", "RESULT_KEY_TEXT",
    # the record keys
    "BATCH", "DURABLE", "ID", "PRIORITY", "AT", "TIME", "MAX_ATTEMPTS", "IS_KEY", "PAYLOAD",
    "TOKEN", "UNTIL", "RESULT", "KEEP", "ERROR", "STATE", "ATTEMPTS", "FINISHED_AT", "ACKED",
    "JOBS", "KEPT", "PAUSED", "NEXT_SEQ", "TOTALS", "NONCE", "WAIT", "ALLOW_FAILURE",
    "FRACTION", "META",
    "RATE_KEY", "CONCURRENCY_KEY", "CONCURRENCY_CAP", "LIMIT_COUNT", "PERIOD", "STARTS",
    "DEAD_LETTER", "FAILED_PREREQUISITES", "RESULT_KEEP",
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
    RELEASE = 19  # a waiting job's prerequisites all finished: pending (format 1.1)
    PROGRESS = 20  # the holder's progress and metadata of its job (format 1.2)
    LIMIT = 21  # a rate limit's window: its key, count and period (format 1.2)
    REVIVE = 22  # a dependent a death cancelled waits again: the death was requeued (1.2)


# The keys of a record's JSON object, each named once here; docs/FORMAT.md says which
# record types carry which (a test keeps the two in step). Short, because every
# record repeats them. The fast text builders below spell out the same keys.
BATCH: Final = "b"  # every record's first key: the batch number of the call that wrote it
DURABLE: Final = "d"  # a batch's first record: bytes before it were on disk when written
ID: Final = "id"  # the job's id
PRIORITY: Final = "pr"
AT: Final = "at"  # available from (a dead job's: when it died)
TIME: Final = "t"  # when the record's call ran (ENQUEUE: enqueued at)
MAX_ATTEMPTS: Final = "ma"
IS_KEY: Final = "k"  # true: the id is a caller's idempotency key
PAYLOAD: Final = "p"  # the job's payload, always a record's last key
TOKEN: Final = "tok"  # a lease's fencing token (SNAPSHOT: the next token)
UNTIL: Final = "until"  # a lease's deadline
RESULT: Final = "r"  # a finished job's result, always a record's last key
KEEP: Final = "keep"  # seconds a finished job is kept with its outcome
ERROR: Final = "err"  # the job's last error
STATE: Final = "s"  # a snapshot job's state
ATTEMPTS: Final = "a"  # a snapshot job's attempts
FINISHED_AT: Final = "fin"  # when a snapshot's finished job finished
ACKED: Final = "done"  # KEY: when its job was acked; SNAPSHOT: acks so far
JOBS: Final = "jobs"  # SNAPSHOT: how many JOB records it holds
KEPT: Final = "kept"  # SNAPSHOT: how many FINISHED records it holds
PAUSED: Final = "paused"  # SNAPSHOT: the queue's pause flag
NEXT_SEQ: Final = "seq"  # SNAPSHOT: the next sequence number
TOTALS: Final = "tot"  # SNAPSHOT: jobs enqueued, retried, dead-lettered so far
NONCE: Final = "n"  # SNAPSHOT: a random name for it; replay ignores it
WAIT: Final = "w"  # ENQUEUE, JOB: the prerequisites a waiting job waits for (format 1.1)
ALLOW_FAILURE: Final = "af"  # ENQUEUE, JOB: a failed prerequisite counts as done for it
FRACTION: Final = "pg"  # PROGRESS, JOB, FINISHED, KEY: [fraction, note or null] (1.2)
META: Final = "m"  # PROGRESS, JOB, FINISHED, KEY: the job's metadata, a JSON object (format 1.2)
ON_FAILURE: Final = "of"  # ENQUEUE, JOB: released by a prerequisite's death (format 1.2)
RATE_KEY: Final = "rk"  # ENQUEUE, JOB: the job's rate limit key; LIMIT: the window's (1.2)
CONCURRENCY_KEY: Final = "ck"  # ENQUEUE, JOB: the job's concurrency key (format 1.2)
# ENQUEUE, JOB, a revivable CANCEL or FINISHED: the holders at once its enqueuer declared
# for "ck" (shown, not enforced; 1.2)
CONCURRENCY_CAP: Final = "cc"
LIMIT_COUNT: Final = "lim"  # LIMIT: the starts a window of the key may hold (format 1.2)
PERIOD: Final = "per"  # LIMIT: the window's length in seconds (format 1.2)
STARTS: Final = "st"  # LIMIT: the key's latest starts, oldest first (a snapshot's; 1.2)
DEAD_LETTER: Final = "dl"  # NACK: dead now, whatever attempts remain (format 1.2)
# FINISHED: the failed prerequisites a revivable dependent stays cancelled for (its `w`:
# those it still waits for; format 1.2)
FAILED_PREREQUISITES: Final = "wf"
# ACK, FINISHED: seconds a keyed job's result is kept, less than its "keep" (its id's
# retention): the result is gone at "t" (or "fin") + this, the id still remembered (1.2)
RESULT_KEEP: Final = "rkeep"
# The text a record's last key (payload or result) starts with: readers of a payload
# or result find it by this, without parsing the record (a quote inside a JSON string
# is escaped, so the first occurrence is the key).
PAYLOAD_KEY_TEXT: Final = f',"{PAYLOAD}":'
RESULT_KEY_TEXT: Final = f',"{RESULT}":'
FIELDS: Final = (BATCH, DURABLE, ID, PRIORITY, AT, TIME, MAX_ATTEMPTS, IS_KEY, PAYLOAD, TOKEN,
                 UNTIL, RESULT, KEEP, ERROR, STATE, ATTEMPTS, FINISHED_AT, ACKED, JOBS, KEPT,
                 PAUSED, NEXT_SEQ, TOTALS, NONCE, WAIT, ALLOW_FAILURE, FRACTION, META,
                 ON_FAILURE, RATE_KEY, CONCURRENCY_KEY, LIMIT_COUNT, PERIOD, STARTS,
                 DEAD_LETTER, FAILED_PREREQUISITES, CONCURRENCY_CAP, RESULT_KEEP)


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
