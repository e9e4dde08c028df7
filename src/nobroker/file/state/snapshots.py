"""A snapshot's records: the JOB, FINISHED and KEY records compaction writes, and
the SNAPSHOT record that ends them with the queue's counters.

Functions of the replay state (state.py's `_apply_other` hands these records
here), typed by what they use of it: transitions.ReplayState. Fields at their
default value are left out of a snapshot record; a snapshot written before a
field existed (the next sequence number, the totals) lacks it. Pure: no os,
time, random or threads.
"""

from __future__ import annotations

from typing import Final

from ..log.records import (
    ACKED,
    AT,
    ATTEMPTS,
    ERROR,
    FAILED_PREREQUISITES,
    FINISHED_AT,
    IS_KEY,
    JOBS,
    KEEP,
    KEPT,
    NEXT_SEQ,
    PAUSED,
    PAYLOAD,
    PRIORITY,
    STATE,
    TIME,
    TOKEN,
    TOTALS,
    UNTIL,
    WAIT,
    Record,
    ReplayError,
)
from .fieldchecks import check_result_keep, check_totals, field, max_attempts_field, opt_str
from .reviving import revivable_fields
from .transitions import ReplayState
from .vocabulary import CANCELLED, CODES, DONE, PENDING, SEQ_MAX, JobState
from .waits import prerequisites_field

__all__ = ["apply_snapshot_job", "apply_snapshot_finished", "apply_snapshot_end"]

_SNAPSHOT_STATES: Final = {"pending": JobState.PENDING, "leased": JobState.LEASED,
                           "dead": JobState.DEAD, "waiting": JobState.WAITING}
_FINISHED_STATES: Final = {"done": DONE, "cancelled": CANCELLED}


def apply_snapshot_job(state: ReplayState, job_id: str, rec: Record, offset: int,
                       size: int) -> None:
    table = state.table
    if table.find(job_id) >= 0:
        raise ReplayError(offset, f"job {job_id!r} twice in a snapshot")
    if PAYLOAD not in rec:
        raise ReplayError(offset, f"snapshot of {job_id!r} has no payload")
    # Fields at their default value are left out of a snapshot record.
    code = rec.get(STATE, "pending")
    job_state = _SNAPSHOT_STATES.get(code) if type(code) is str else None
    if job_state is None:
        raise ReplayError(offset, f"bad snapshot state {rec.get('s')!r}")
    attempts = field(rec, ATTEMPTS, int, offset) if ATTEMPTS in rec else 0
    token = field(rec, TOKEN, int, offset) if TOKEN in rec else 0
    if attempts < 0 or token < 0 or (job_state is JobState.LEASED) != (token > 0):
        raise ReplayError(offset, "inconsistent attempts/token in snapshot job")
    keyed = rec.get(IS_KEY, False)
    if type(keyed) is not bool:
        raise ReplayError(offset, "field 'k' must be a boolean")
    priority = field(rec, PRIORITY, int, offset)
    at = field(rec, AT, float, offset)
    enqueued_at = field(rec, TIME, float, offset)
    max_attempts = max_attempts_field(rec, offset)
    until = field(rec, UNTIL, float, offset) if UNTIL in rec else 0.0
    error = opt_str(rec, ERROR, offset)
    # What a waiting job still waits for, as an ENQUEUE's "w", "af" and "of"; checked
    # before anything changes (a tolerant replay goes on after a refused record).
    if (job_state is JobState.WAITING) != (WAIT in rec):
        raise ReplayError(offset, f"a snapshot job {code} with prerequisites {rec.get(WAIT)!r}")
    unmet, mode = prerequisites_field(rec, job_id, offset) if WAIT in rec else ([], "")
    job_code = CODES[job_state]
    slot = table.add(job_id, keyed, job_code, priority, at, enqueued_at,
                     max_attempts, attempts, offset, size)
    if job_code == PENDING:  # most snapshot jobs are
        state.pending += 1
    else:
        state.count(job_code, 1)
    state.live_bytes += size
    if error is not None:
        table.set_error(table.seqs[slot], error)
    if job_state is JobState.LEASED:
        table.hold(slot, job_id, token, until)
    if unmet:
        state.waits.add(job_id, unmet, mode)
    state.next_token = max(state.next_token, token + 1)


def apply_snapshot_finished(state: ReplayState, job_id: str, rec: Record, offset: int,
                            size: int) -> None:
    """A FINISHED record: a job kept with its outcome, its result (if any) in "r"."""
    table = state.table
    if table.find(job_id) >= 0:
        raise ReplayError(offset, f"job {job_id!r} twice in a snapshot")
    label = rec.get(STATE)
    code = _FINISHED_STATES.get(label) if type(label) is str else None
    if code is None:
        raise ReplayError(offset, f"bad finished state {rec.get('s')!r}")
    attempts = field(rec, ATTEMPTS, int, offset) if ATTEMPTS in rec else 0
    keyed = rec.get(IS_KEY, False)
    if attempts < 0 or type(keyed) is not bool:
        raise ReplayError(offset, "bad attempts or 'k' in a finished job")
    finished_at, keep = field(rec, FINISHED_AT, float, offset), field(rec, KEEP, float, offset)
    if keep < 0:
        raise ReplayError(offset, f"negative retention {keep!r}")
    result_keep = check_result_keep(rec, keep, offset)
    error = opt_str(rec, ERROR, offset)
    slot = table.add(job_id, keyed, code, field(rec, PRIORITY, int, offset), 0.0,
                     field(rec, TIME, float, offset), max_attempts_field(rec, offset),
                     attempts, offset, size)
    table.finish(slot, job_id, code, keep, finished_at + keep, offset, size)
    if error is not None:
        table.set_error(table.seqs[slot], error)
    if FAILED_PREREQUISITES in rec:  # a revivable cancelled dependent (format 1.2)
        if code != CANCELLED:
            raise ReplayError(offset, f"revivable {job_id!r} is not cancelled")
        state.dormant.add(job_id, *revivable_fields(rec, job_id, offset))
    state.kept += 1
    state.live_bytes += size
    if result_keep is not None:  # kept without its result from then on (stats().kept)
        state.result_ends.add(job_id, finished_at + result_keep)


def apply_snapshot_end(state: ReplayState, rec: Record, offset: int) -> None:
    jobs = field(rec, JOBS, int, offset)
    live = state.pending + state.leased + state.dead + state.waiting
    if jobs != live:
        raise ReplayError(offset, f"snapshot announces {jobs} jobs, holds {live}")
    kept = field(rec, KEPT, int, offset) if KEPT in rec else 0
    if kept != state.kept:
        raise ReplayError(offset, f"snapshot announces {kept} finished jobs, "
                                  f"holds {state.kept}")
    paused = rec.get(PAUSED, False)
    if type(paused) is not bool:
        raise ReplayError(offset, "field 'paused' must be a boolean")
    state.paused = paused
    if NEXT_SEQ in rec:  # absent in snapshots written before ids were sequence numbers
        next_seq = field(rec, NEXT_SEQ, int, offset)
        if not 0 <= next_seq <= SEQ_MAX:
            raise ReplayError(offset, f"bad next sequence number {next_seq}")
        state.table.set_next_seq(max(state.table.next_seq, next_seq))
    state.next_token = max(state.next_token, field(rec, TOKEN, int, offset))
    state.done = field(rec, ACKED, int, offset)
    if TOTALS in rec:  # absent in snapshots written before the totals were counted
        state.enqueued, state.retried, state.dead_lettered = check_totals(rec[TOTALS], offset)
    state.snapshot_seen = True
