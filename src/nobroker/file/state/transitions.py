"""The job records: what each does to its job, by the TRANSITIONS table.

TRANSITIONS says, for every record type that names a job, the states it may find the job
in and leave it in; replay (state.py's `_apply`) looks the allowed states up in ALLOWED,
checks a holder's fencing token (FENCED), and calls the record's function from
JOB_RECORDS; ENQUEUE and FORGET, which may find no job, come through `_apply_other`
(other_records.py, which also applies a batch's leading run of enqueue_many's ENQUEUE
records in one step, and FORGET's `apply_forget` from here). docs/FORMAT.md shows the
same table; tests/file/test_state.py keeps them equal.

Functions of the replay state (QueueState, state.py; typed here by what they use
of it, ReplayState): they change its job table, counters and notes, nothing else.
Pure: no os, time, random or threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from ...dependencies import FAILURE, SUCCESS
from ...result_deadlines import ResultDeadlines
from ...revivals import Dormant
from ..log.records import (
    AT,
    DEAD_LETTER,
    ERROR,
    KEEP,
    PAYLOAD,
    RESULT,
    TIME,
    TOKEN,
    UNTIL,
    Record,
    RecordType,
    ReplayError,
)
from .fieldchecks import INT64, check_result_keep, field, opt_str
from .jobtable import JobTable
from .limitfields import key_fields, record_cap, record_keys
from .notes import Notes, apply_progress
from .reviving import revive_wait
from .vocabulary import (
    CANCELLED,
    CODE_STATES,
    CODES,
    DEAD,
    DONE,
    FINISHED_CODES,
    KEYED,
    WAITING,
    JobState,
)
from .waits import Waits

__all__ = ["TRANSITIONS", "FENCED", "JOB_RECORDS", "ALLOWED", "ReplayState", "apply_forget",
           "expect_state"]


# (record type, the job's state before) -> the states it may be in after (None: the
# job, or its key, is gone). _apply takes the states a record may find its job in
# from here. PURGE applies to every pending job at once; FORGET to a finished
# job: a remembered key, or a job kept with its outcome (done or cancelled).
TRANSITIONS: Final[dict[tuple[RecordType, JobState | None], tuple[JobState | None, ...]]] = {
    (RecordType.ENQUEUE, None): (JobState.PENDING, JobState.WAITING),
    (RecordType.RELEASE, JobState.WAITING): (JobState.PENDING,),
    (RecordType.LEASE, JobState.PENDING): (JobState.LEASED,),
    (RecordType.ACK, JobState.LEASED): (JobState.DONE,),
    (RecordType.NACK, JobState.LEASED): (JobState.PENDING, JobState.DEAD),
    (RecordType.EXTEND, JobState.LEASED): (JobState.LEASED,),
    (RecordType.EXPIRE, JobState.LEASED): (JobState.PENDING, JobState.DEAD),
    (RecordType.SNOOZE, JobState.LEASED): (JobState.PENDING,),
    (RecordType.REQUEUE, JobState.DEAD): (JobState.PENDING,),
    (RecordType.PURGE, JobState.PENDING): (None,),
    (RecordType.FORGET, JobState.DONE): (None,),
    (RecordType.FORGET, JobState.CANCELLED): (None,),
    (RecordType.CANCEL, JobState.PENDING): (JobState.CANCELLED,),
    (RecordType.CANCEL, JobState.LEASED): (JobState.CANCELLED,),
    (RecordType.CANCEL, JobState.WAITING): (JobState.CANCELLED,),
    (RecordType.DELETE, JobState.DEAD): (None,),
    (RecordType.REVIVE, JobState.CANCELLED): (JobState.WAITING,),
    (RecordType.PROGRESS, JobState.LEASED): (JobState.LEASED,),  # format 1.2
}
# The records a job's holder writes: they must carry its current fencing token.
FENCED: Final = frozenset({RecordType.ACK, RecordType.NACK, RecordType.EXTEND,
                            RecordType.EXPIRE, RecordType.SNOOZE, RecordType.PROGRESS})


class ReplayState(Protocol):
    """What the record functions read and change of the replay state: its job table
    and its counters (QueueState in state.py is the one implementation)."""

    table: JobTable
    waits: Waits  # the waiting jobs' unmet prerequisites
    dormant: Dormant  # the cancelled dependents a requeue revives
    notes: Notes  # the jobs' progress and metadata (format 1.2)
    result_ends: ResultDeadlines  # kept keyed jobs whose result ends first ("rkeep")
    done_keys: dict[str, float]  # finished keyed job id -> when acked
    pending: int
    leased: int
    dead: int
    waiting: int
    kept: int
    done: int
    enqueued: int
    retried: int
    dead_lettered: int
    next_token: int
    live_bytes: int
    paused: bool  # PAUSE applied and no RESUME since (or a snapshot's flag)
    snapshot_seen: bool

    def count(self, code: int, delta: int) -> None: ...
    def set_state(self, slot: int, code: int) -> None: ...
    def remember(self, job_id: str, done_at: float) -> None: ...

    def adopt_keys(self, job_id: str, rec: Record, offset: int) -> None: ...


# The job records, each in the state TRANSITIONS requires (and, for a leased
# job, under its current token): _apply has checked both.

def apply_lease(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                size: int) -> None:
    # Every lease passes here: both fields checked at once, one by one only when off.
    token, until = rec.get(TOKEN), rec.get(UNTIL)
    if not (type(token) is int and 1 <= token < INT64 and type(until) is float):
        token = field(rec, TOKEN, int, offset)
        if token < 1:
            raise ReplayError(offset, f"bad fencing token {token}")
        until = field(rec, UNTIL, float, offset)
    if token >= state.next_token:
        state.next_token = token + 1
    state.pending -= 1  # set_state(slot, LEASED), unrolled: every lease passes here
    state.leased += 1
    state.table.lease(slot, job_id, token, until)


def apply_ack(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
              size: int) -> None:
    table = state.table
    done_at = rec.get(TIME)
    if type(done_at) is not float:
        done_at = field(rec, TIME, float, offset)
    if state.waits:  # its dependents strike it off (the writer released any it freed)
        state.waits.finished(job_id)
    if state.dormant:
        state.dormant.finished(job_id, ok=True)
    state.leased -= 1
    state.done += 1
    if RESULT in rec:  # acked with a result: kept, result and all, for "keep" seconds
        _finish(state, slot, job_id, DONE, done_at, rec, offset, size)
        return
    keyed = table.flags[slot] & KEYED
    state.live_bytes -= table.remove(slot, job_id)
    if keyed:
        state.remember(job_id, done_at)  # its note (if any) is kept with its key
    elif state.notes.by_job:
        state.notes.set(job_id, None)


def _finish(state: ReplayState, slot: int, job_id: str, code: int, finished_at: float,
            rec: Record, offset: int, size: int) -> None:
    """Job `slot` (counted out already) is kept "keep" s, its outcome in the record."""
    keep = field(rec, KEEP, float, offset)
    if keep < 0:
        raise ReplayError(offset, f"negative retention {keep!r}")
    result_keep = check_result_keep(rec, keep, offset)  # the result's end: the views'
    state.live_bytes += size - state.table.finish(slot, job_id, code, keep,
                                                 finished_at + keep, offset, size)
    state.kept += 1
    if result_keep is not None:  # and stats().kept's from then on
        state.result_ends.add(job_id, finished_at + result_keep)


def apply_cancel(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                 size: int) -> None:
    """Cancelled (`err`: a dependent's names its failed prerequisite); dependents lose it."""
    table = state.table
    code = table.code[slot]
    cancelled_at = field(rec, TIME, float, offset)  # the fields checked before any change
    if field(rec, KEEP, float, offset) < 0:
        raise ReplayError(offset, f"negative retention {rec[KEEP]!r}")
    wait = state.waits.by_job.get(job_id) if code == WAITING else None
    keys, cap = record_keys(rec, offset), record_cap(rec, offset)
    if PAYLOAD in rec and (wait is None or not wait.failed):
        raise ReplayError(offset, f"cancel of {job_id!r} with its payload, but no failed "
                                  "prerequisite")
    if ERROR in rec:
        table.set_error(table.seqs[slot], opt_str(rec, ERROR, offset))
    if wait is not None:
        state.waits.remove(job_id)
    if state.waits:
        state.waits.finished(job_id, failed=True)
    if state.dormant:
        state.dormant.finished(job_id, ok=False)
    state.count(code, -1)
    _finish(state, slot, job_id, CANCELLED, cancelled_at, rec, offset, size)
    if PAYLOAD in rec and wait is not None:  # a dependent a failure cancels: revivable
        state.dormant.add(job_id, wait.unmet, wait.failed, keys, cap)


def apply_delete(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                 size: int) -> None:
    state.dead -= 1
    state.live_bytes -= state.table.remove(slot, job_id)
    if state.dormant:  # it never succeeds: what its death cancelled stays cancelled
        state.dormant.gone(job_id)
    state.notes.set(job_id, None)


def apply_forget(state: ReplayState, job_id: str, offset: int) -> None:
    """FORGET: a kept finished job's retention, or a remembered key's, ran out."""
    table = state.table
    slot = table.find(job_id)
    if slot >= 0:
        if table.code[slot] not in FINISHED_CODES:
            expect_state(table, slot, job_id, FINISHED_CODES, offset)
        state.kept -= 1
        state.result_ends.discard(job_id)
        state.live_bytes -= table.remove(slot, job_id)
        if state.dormant:
            state.dormant.remove(job_id)
            state.dormant.gone(job_id)
    elif state.done_keys.pop(job_id, None) is None:
        raise ReplayError(offset, f"forget of {job_id!r}, which is not remembered")


def apply_extend(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                 size: int) -> None:
    state.table.hold(slot, job_id, field(rec, TOKEN, int, offset),
                     field(rec, UNTIL, float, offset))


def _retry(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                error: str | None, dead: bool = False) -> None:
    """NACK and EXPIRE: dead on the last attempt (or a NACK's `dl`), else pending again
    from `at`."""
    table = state.table
    at = field(rec, AT, float, offset)
    seq = table.seqs[slot]
    table.set_error(seq, error)
    table.unhold(seq, job_id)
    if dead or table.attempts[slot] >= table.max_attempts[slot]:
        table.set_available(slot, at)  # a dead job's `at`: when it died (FORMAT.md)
        state.set_state(slot, DEAD)
        state.dead_lettered += 1
        if state.waits:
            state.waits.finished(job_id, died=True)
        if state.dormant:
            state.dormant.finished(job_id, ok=False)
    else:
        state.count(table.make_pending(slot, at), -1)
        state.pending += 1
        state.retried += 1


def apply_nack(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
               size: int) -> None:
    dead = rec.get(DEAD_LETTER, False)
    if type(dead) is not bool:
        raise ReplayError(offset, f"field {DEAD_LETTER!r} must be a boolean")
    _retry(state, slot, job_id, rec, offset, opt_str(rec, ERROR, offset), dead)


def apply_expire(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                 size: int) -> None:
    error = f"lease expired (attempt {state.table.attempts[slot]})"
    _retry(state, slot, job_id, rec, offset, error)


def apply_snooze(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                 size: int) -> None:
    """Pending again from `at`, with the attempts it had before its lease."""
    table = state.table
    at = field(rec, AT, float, offset)
    seq = table.seqs[slot]
    table.set_error(seq, opt_str(rec, ERROR, offset))
    table.unhold(seq, job_id)
    table.attempts[slot] = max(0, table.attempts[slot] - 1)
    state.count(table.make_pending(slot, at), -1)
    state.pending += 1


def apply_release(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                  size: int) -> None:
    """Pending from its own `at` (delay= holds), once nothing is left to wait for (FAILURE
    mode: once a prerequisite died)."""
    wait = state.waits.by_job.get(job_id)
    if wait is None or (wait.unmet if wait.mode != FAILURE else not wait.died):
        left = "?" if wait is None else ", ".join(wait.unmet) or "a failure"
        raise ReplayError(offset, f"release of {job_id!r}, which still waits for {left}")
    state.waits.remove(job_id)
    table = state.table
    state.count(table.make_pending(slot, table.available_at[slot]), -1)
    state.pending += 1


def apply_requeue(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                  size: int) -> None:
    at = field(rec, AT, float, offset)
    state.count(state.table.make_pending(slot, at, reset_attempts=True), -1)
    state.pending += 1
    if state.dormant:  # what its death cancelled may wait again (the writer's REVIVEs)
        state.dormant.requeued(job_id)


def apply_revive(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                 size: int) -> None:
    """A dependent a failure cancelled waits again, from `at`, for `w` (what replay kept of
    it: nothing failed left); its payload and record stay where its cancel put them."""
    wait = revive_wait(rec, job_id, state.dormant.by_job.get(job_id), offset)
    at = field(rec, AT, float, offset)
    sleeper = state.dormant.remove(job_id)
    state.dormant.requeued(job_id)  # its own revivable dependents: unmet again
    table = state.table
    table.unfinish(slot, WAITING, at)
    table.set_error(table.seqs[slot], None)
    state.waits.add(job_id, wait, SUCCESS)
    state.kept -= 1
    state.waiting += 1
    if sleeper is not None and sleeper.keys is not None:  # its limit keys and cap, as it had
        state.adopt_keys(job_id, key_fields(sleeper.keys, sleeper.cap), offset)


def expect_state(table: JobTable, slot: int, job_id: str, codes: tuple[int, ...],
                 offset: int) -> None:
    actual = table.code[slot]
    if actual not in codes:
        expected = " or ".join(str(CODE_STATES[code]) for code in codes)
        raise ReplayError(offset, f"job {job_id!r} is {CODE_STATES[actual]}, "
                                  f"expected {expected}")


# Record type -> the function that applies it to a job in an allowed state.
JOB_RECORDS: Final[dict[int, Callable[[ReplayState, int, str, Record, int, int], None]]] = {
    RecordType.LEASE: apply_lease,
    RecordType.ACK: apply_ack,
    RecordType.NACK: apply_nack,
    RecordType.EXTEND: apply_extend,
    RecordType.EXPIRE: apply_expire,
    RecordType.SNOOZE: apply_snooze,
    RecordType.RELEASE: apply_release,
    RecordType.REQUEUE: apply_requeue,
    RecordType.CANCEL: apply_cancel,
    RecordType.DELETE: apply_delete,
    RecordType.REVIVE: apply_revive,
    RecordType.PROGRESS: apply_progress,
}
# The states each of them may find its job in, read off TRANSITIONS.
ALLOWED: Final[dict[int, tuple[int, ...]]] = {
    rtype: tuple(CODES[before] for (other, before) in TRANSITIONS
                 if other == rtype and before is not None)
    for rtype in JOB_RECORDS}
assert all(ALLOWED.values()), "every job record has a state in TRANSITIONS"
