"""The records that name no job the table holds: a new job (ENQUEUE: one, a waiting one,
or a run of enqueue_many's), PURGE, PAUSE and RESUME, LIMIT, FORGET, and a snapshot's
records (JOB, KEY, FINISHED, SNAPSHOT).

Functions of the replay state (QueueState, state.py, whose `_apply` hands a record here
when no job record of TRANSITIONS matches its type; `apply_batch` hands a run of
ENQUEUE records to `apply_enqueue_run`), typed by what they use of it: OtherState. A
job's note (notes.py) starts with an ENQUEUE's `m` or a snapshot record's `pg` and `m`,
and PURGE and FORGET drop it; a limited job (limited.py) joins its keys' index as its
ENQUEUE or JOB record adds it. Pure: no os, time, random or threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..log.records import (
    ACKED,
    AT,
    BATCH,
    CONCURRENCY_KEY,
    ID,
    IS_KEY,
    MAX_ATTEMPTS,
    META,
    PAYLOAD,
    PRIORITY,
    RATE_KEY,
    TIME,
    WAIT,
    Applied,
    Record,
    RecordType,
    ReplayError,
)
from .fieldchecks import INT64, field, max_attempts_field
from .limited import LimitedJobs
from .limitfields import record_cap, record_keys
from .notes import note_of
from .snapshots import apply_snapshot_end, apply_snapshot_finished, apply_snapshot_job
from .transitions import ReplayState, apply_forget
from .vocabulary import LEASED, PENDING, WAITING
from .waits import prerequisites_field

_UNFINISHED = (PENDING, LEASED, WAITING)  # what a waiting job's `w` may name

__all__ = ["OtherState", "apply_other", "apply_enqueue", "apply_enqueue_run", "adopt_limited"]


class OtherState(ReplayState, Protocol):
    """What these records use of the replay state beyond the job records' ReplayState."""

    limited: LimitedJobs  # the limited jobs' keys, due indexes and windows

    def settle_notes(self, job_id: str) -> None: ...


def apply_other(state: OtherState, rtype: int, rec: Record, offset: int, size: int) -> None:
    """The records that name no job the table holds: a new job, PURGE, PAUSE and
    RESUME, the keys, and a snapshot's records."""
    if rtype == RecordType.PURGE:
        removed, freed = state.table.remove_pending()
        state.pending -= removed
        state.live_bytes -= freed
        for noted in list(state.notes.by_job):
            state.settle_notes(noted)
        if state.limited.keys:
            state.limited.purged(state.table)
        if state.waits:  # purged prerequisites (the writer settles their dependents next)
            for gone in [p for p in state.waits.dependents if state.table.find(p) < 0]:
                state.waits.finished(gone, failed=True)
        if state.dormant:  # purged prerequisites never succeed
            for gone in [p for p in state.dormant.watching if state.table.find(p) < 0]:
                state.dormant.gone(gone)
        return
    if rtype == RecordType.SNAPSHOT:
        apply_snapshot_end(state, rec, offset)
        return
    if rtype == RecordType.PAUSE or rtype == RecordType.RESUME:
        field(rec, TIME, float, offset)
        state.paused = rtype == RecordType.PAUSE
        return
    if rtype == RecordType.LIMIT:
        state.limited.declare(rec, offset)
        return
    job_id = field(rec, ID, str, offset)
    if rtype == RecordType.FORGET:
        apply_forget(state, job_id, offset)
        state.settle_notes(job_id)
        return
    if rtype == RecordType.ENQUEUE:
        note = note_of(rec, offset) if META in rec else None  # enqueue(meta=), 1.2
        apply_enqueue(state, job_id, rec, offset, size)
    else:
        note = note_of(rec, offset)  # a snapshot record's note (1.2), checked first
        if rtype == RecordType.JOB:
            apply_snapshot_job(state, job_id, rec, offset, size)
        elif rtype == RecordType.KEY:
            if job_id in state.done_keys:
                raise ReplayError(offset, f"key {job_id!r} twice in a snapshot")
            state.remember(job_id, field(rec, ACKED, float, offset))
        elif rtype == RecordType.FINISHED:
            apply_snapshot_finished(state, job_id, rec, offset, size)
        else:
            raise ReplayError(offset, f"unknown record type {rtype}")
    if note is not None or state.notes:  # a remembered key's note is not its new job's
        state.notes.set(job_id, note)
    if (rtype == RecordType.ENQUEUE or rtype == RecordType.JOB) and (
            RATE_KEY in rec or CONCURRENCY_KEY in rec):  # a limited job (limited.py)
        adopt_limited(state, job_id, rec, offset)


def adopt_limited(state: OtherState, job_id: str, rec: Record, offset: int) -> None:
    """A job just added by `rec`, if it has limit keys: into its keys' index."""
    keys = record_keys(rec, offset)
    if keys is not None:
        state.limited.adopt(state.table, state.table.find(job_id), keys,
                            record_cap(rec, offset))


def apply_enqueue_waiting(state: ReplayState, job_id: str, rec: Record, offset: int,
                          size: int) -> None:
    """An ENQUEUE with prerequisites (`w`, `af`): waiting, not leased until a RELEASE."""
    unmet, mode = prerequisites_field(rec, job_id, offset)
    table = state.table
    for prerequisite in unmet:  # writers name only jobs not yet finished (FORMAT.md)
        slot = table.find(prerequisite)
        if slot < 0 or table.code[slot] not in _UNFINISHED:
            raise ReplayError(offset, f"enqueue of {job_id!r} waits for "
                                      f"{prerequisite!r}, which is not an unfinished job")
    keyed = rec.get(IS_KEY, False)
    if PAYLOAD not in rec or state.table.find(job_id) >= 0 or type(keyed) is not bool:
        raise ReplayError(offset, f"enqueue of {job_id!r}: no payload, a bad 'k', or twice")
    fields = (field(rec, PRIORITY, int, offset), field(rec, AT, float, offset),
              field(rec, TIME, float, offset), max_attempts_field(rec, offset))
    state.done_keys.pop(job_id, None)
    state.table.add(job_id, keyed, WAITING, *fields, 0, offset, size)
    state.waits.add(job_id, unmet, mode)
    state.waiting += 1
    state.enqueued += 1
    state.live_bytes += size


def apply_enqueue(state: ReplayState, job_id: str, rec: Record, offset: int, size: int) -> None:
    if WAIT in rec:
        apply_enqueue_waiting(state, job_id, rec, offset, size)
        return
    # The hot path of replay: check every field in one expression, and only when something
    # is off, walk the checks one by one to name it. A writer's generated id is the next
    # seq's, which no live job can hold.
    table = state.table
    pr, at, t = rec.get(PRIORITY), rec.get(AT), rec.get(TIME)
    ma, keyed = rec.get(MAX_ATTEMPTS), rec.get(IS_KEY, False)
    if (type(pr) is int and -INT64 <= pr < INT64 and type(ma) is int
            and 1 <= ma < INT64 and type(at) is float and type(t) is float
            and type(keyed) is bool and PAYLOAD in rec
            and ((job_id == table.expect and job_id not in table.ids)
                 or table.find(job_id) < 0)):
        state.done_keys.pop(job_id, None)
        table.add(job_id, keyed, PENDING, pr, at, t, ma, 0, offset, size, recent=True)
        state.pending += 1
        state.enqueued += 1
        state.live_bytes += size
        return
    if table.find(job_id) >= 0:
        raise ReplayError(offset, f"job {job_id!r} enqueued twice")
    if PAYLOAD not in rec:
        raise ReplayError(offset, f"enqueue of {job_id!r} has no payload")
    state.done_keys.pop(job_id, None)
    keyed = rec.get(IS_KEY, False)
    if type(keyed) is not bool:
        raise ReplayError(offset, "field 'k' must be a boolean")
    table.add(job_id, keyed, PENDING, field(rec, PRIORITY, int, offset),
              field(rec, AT, float, offset), field(rec, TIME, float, offset),
              max_attempts_field(rec, offset), 0, offset, size)
    state.pending += 1
    state.enqueued += 1
    state.live_bytes += size


def apply_enqueue_run(state: ReplayState, batch: Sequence[Applied], number: int) -> int:
    """The leading ENQUEUE records of `batch` that enqueue_many writes (unkeyed,
    the next generated ids in order, every other field equal to the first's),
    applied in one step: how many (0: none, and the records go one by one).
    Each record is checked as apply_enqueue's fast path checks it."""
    first = batch[0][1]
    pr, at, t, ma = first.get(PRIORITY), first.get(AT), first.get(TIME), first.get(MAX_ATTEMPTS)
    if not (type(pr) is int and -INT64 <= pr < INT64 and type(ma) is int
            and 1 <= ma < INT64 and type(at) is float and type(t) is float):
        return 0
    table = state.table
    seq, named = table.next_seq, table.ids
    enqueue = RecordType.ENQUEUE
    locs: list[int] = []
    sizes: list[int] = []
    for rtype, rec, offset, size in batch:
        if (rtype != enqueue or rec.get(BATCH) != number or IS_KEY in rec or PAYLOAD not in rec
                or WAIT in rec or META in rec or rec.get(ID) != f"{seq:016x}"
                or rec.get(PRIORITY) != pr or type(rec.get(PRIORITY)) is not int
                or rec.get(MAX_ATTEMPTS) != ma or type(rec.get(MAX_ATTEMPTS)) is not int
                or rec.get(AT) != at or type(rec.get(AT)) is not float
                or rec.get(TIME) != t or type(rec.get(TIME)) is not float):
            break
        if named and rec[ID] in named:
            break
        locs.append(offset)
        sizes.append(size)
        seq += 1
    count = len(locs)
    if count < 2 or not table.add_run(count, pr, at, t, ma, locs, sizes):
        return 0
    if state.done_keys:
        for run_seq in range(seq - count, seq):
            state.done_keys.pop(f"{run_seq:016x}", None)
    state.pending += count
    state.enqueued += count
    state.live_bytes += sum(sizes)
    return count
