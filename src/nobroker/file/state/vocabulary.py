"""The replay state's vocabulary: a job as an Entry, slot codes, ids, and Columns.

Shared by the job table (jobtable.py) and its indexes, the replay state
(state.py) and checkpoints (checkpoint.py): what one job looks like when the
state hands it out, the slot codes and flags, how a generated job id is its
sequence number, the live jobs as one array per field (what a checkpoint
saves), and the table's columns as its indexes read them (JobColumns).
Pure: no os, time, random or threads.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from ...models import JobState

__all__ = ["JobState", "Entry", "Columns", "seq_id", "id_seq", "SEQ_LIMIT",
           "SEQ_MAX", "PENDING", "LEASED", "DEAD", "WAITING", "DONE", "CANCELLED", "FREE",
           "FINISHED_CODES",
           "KEYED", "NAMED", "FREE_TO_ZERO", "CODES", "CODE_STATES", "JobColumns"]


@dataclass(slots=True, eq=True)
class Entry:
    """One job as the state knows it, copied out of the state's columns (a snapshot:
    later records do not change it). The payload stays on disk at `loc`."""

    id: str
    seq: int
    priority: int
    available_at: float
    enqueued_at: float
    max_attempts: int
    attempts: int
    state: JobState
    token: int
    lease_until: float
    last_error: str | None
    keyed: bool
    loc: int  # offset of the record holding the payload (a finished job: its result)
    size: int  # bytes of that record, for the live-bytes estimate


# Generated job ids are the job's sequence number as 16 hex digits, below 2**48 so
# that they start with "0000": id -> job is arithmetic, and no id string is kept.
SEQ_LIMIT: Final = 1 << 48
_HEX: Final = "0123456789abcdef"
SEQ_MAX: Final = 1 << 62  # past it a seq could overflow an int64 column

# Slot state codes (the checkpoint's too) and flags. DONE and CANCELLED are finished
# jobs kept with their outcome for a while (see jobtable.py); FREE is a hole. The live
# codes (a job the queue holds unfinished) are those up to WAITING: a job waiting for
# its prerequisites (the state's `waits` says which), leased by nobody.
PENDING, LEASED, DEAD, WAITING, DONE, CANCELLED, FREE = 0, 1, 2, 3, 4, 5, 6
CODE_STATES: Final = (JobState.PENDING, JobState.LEASED, JobState.DEAD, JobState.WAITING,
                      JobState.DONE, JobState.CANCELLED)
CODES: Final = {JobState.PENDING: PENDING, JobState.LEASED: LEASED, JobState.DEAD: DEAD,
                JobState.WAITING: WAITING, JobState.DONE: DONE, JobState.CANCELLED: CANCELLED}
FINISHED_CODES: Final = (DONE, CANCELLED)
KEYED: Final = 1  # the id is a caller's idempotency key
NAMED: Final = 2  # the id is not seq_id(seq); it lives in the table's ids/names dicts
# (4 is LANED, the due index's, and 8 GROUPED, a limited group's: see due.py)
FREE_TO_ZERO: Final = bytes([1] * FREE + [0] + [1] * (255 - FREE))  # a hole -> 0, else 1


def seq_id(seq: int) -> str:
    """The generated job id of sequence number `seq` (< SEQ_LIMIT)."""
    return f"{seq:016x}"


def id_seq(job_id: str) -> int:
    """The sequence number a generated-form id names, or -1 for any other id."""
    if len(job_id) == 16 and job_id.startswith("0000") and not job_id.strip(_HEX):
        return int(job_id, 16)
    return -1


@dataclass(slots=True)
class Columns:
    """The jobs (live, and finished ones kept) in enqueue order, one array per field:
    what a checkpoint holds."""

    seqs: array[int]
    states: bytes  # 0 pending, 1 leased, 2 dead, 3 waiting, 4 done, 5 cancelled
    keyed: bytes  # 0 or 1
    priority: array[int]
    available_at: array[float]
    enqueued_at: array[float]
    max_attempts: array[int]
    attempts: array[int]
    token: array[int]  # 0 unless leased
    lease_until: array[float]  # 0.0 unless leased
    loc: array[int]
    size: array[int]
    names: dict[int, str]  # index -> id, for ids that are not seq_id(seq)
    errors: dict[int, str]  # index -> last_error

    @classmethod
    def of_entries(cls, entries: Sequence[Entry]) -> tuple[Columns, int]:
        """`entries` (in enqueue order) as columns, and the next seq after them: their
        seq fields are ignored and assigned as replay does."""
        seqs: array[int] = array("q")
        names: dict[int, str] = {}
        counter = 0
        for index, entry in enumerate(entries):  # JobTable.add's rule, without the columns
            if entry.keyed or entry.id != seq_id(counter):
                generated = -1 if entry.keyed else id_seq(entry.id)
                if generated >= counter:
                    counter = generated
                else:
                    names[index] = entry.id
            seqs.append(counter)
            counter += 1
        leased = JobState.LEASED
        columns = cls(
            seqs, bytes(CODES[e.state] for e in entries), bytes(e.keyed for e in entries),
            array("q", [e.priority for e in entries]),
            array("d", [e.available_at for e in entries]),
            array("d", [e.enqueued_at for e in entries]),
            array("q", [e.max_attempts for e in entries]),
            array("q", [e.attempts for e in entries]),
            array("q", [e.token if e.state is leased else 0 for e in entries]),
            array("d", [e.lease_until if e.state is leased else 0.0 for e in entries]),
            array("q", [e.loc for e in entries]), array("I", [e.size for e in entries]),
            names=names,
            errors={index: e.last_error for index, e in enumerate(entries)
                    if e.last_error is not None})
        return columns, counter


class JobColumns(Protocol):
    """The job table's per-slot columns (one array item per slot) and lookups, as the
    table's indexes (due.py, retention.py) read them; JobTable (jobtable.py) has them."""

    seqs: array[int]
    code: bytearray
    flags: bytearray
    priority: array[int]
    available_at: array[float]
    leases: dict[int, tuple[int, float]]  # seq -> (token, lease_until)

    def slot(self, seq: int) -> int: ...

    def entry(self, slot: int, job_id: str | None = None) -> Entry: ...
