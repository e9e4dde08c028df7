"""The replay state: decoded records in, queue state out.

This module is the queue's meaning, kept apart from every file and clock so
that it can be tested without a disk and so that replaying the same records
twice gives equal states. It must never import os, time, random or threads.
Anything that depends on the present time (which jobs are ready, which leases
have expired) takes `now` as an argument and only *reads*; the state changes
only through `apply_batch`.

How the jobs are stored (columns, ids, the indexes of due jobs) is the job
table's business (jobtable.py); this module applies the rules to it and keeps
the counters.

Rules it enforces, each a ReplayError (the caller turns it into
CorruptLogError) when a record breaks it:
- batch numbers rise by exactly one per batch inside one log file;
- every record is a JSON object of the documented shape for its type;
- transitions follow TRANSITIONS below, which `_apply` consults for every
  record naming a job; an ack/nack/extend/expire must carry the job's
  current fencing token.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

from .columns import (
    CANCELLED,
    CODE_STATES,
    CODES,
    DEAD,
    DONE,
    FINISHED_CODES,
    KEYED,
    LEASED,
    PENDING,
    SEQ_LIMIT,
    SEQ_MAX,
    Columns,
    Entry,
    JobState,
    ReplayError,
    id_seq,
    seq_id,
)
from .jobtable import JobTable
from .records import Applied, Record, RecordType

__all__ = ["JobState", "Entry", "JobIndex", "Columns", "QueueState", "ReplayError",
           "TRANSITIONS", "Applied", "replay", "check_totals", "seq_id", "id_seq", "SEQ_LIMIT"]


# (record type, the job's state before) -> the states it may be in after (None: the
# job, or its key, is gone). _apply takes the states a record may find its job in
# from here; docs/FORMAT.md shows the same table, and tests/file/test_state.py keeps
# the two equal. PURGE applies to every pending job at once; FORGET to a finished
# job: a remembered key, or a job kept with its outcome (done or cancelled).
TRANSITIONS: Final[dict[tuple[RecordType, JobState | None], tuple[JobState | None, ...]]] = {
    (RecordType.ENQUEUE, None): (JobState.PENDING,),
    (RecordType.LEASE, JobState.PENDING): (JobState.LEASED,),
    (RecordType.ACK, JobState.LEASED): (JobState.DONE,),
    (RecordType.NACK, JobState.LEASED): (JobState.PENDING, JobState.DEAD),
    (RecordType.EXTEND, JobState.LEASED): (JobState.LEASED,),
    (RecordType.EXPIRE, JobState.LEASED): (JobState.PENDING, JobState.DEAD),
    (RecordType.REQUEUE, JobState.DEAD): (JobState.PENDING,),
    (RecordType.PURGE, JobState.PENDING): (None,),
    (RecordType.FORGET, JobState.DONE): (None,),
    (RecordType.FORGET, JobState.CANCELLED): (None,),
    (RecordType.CANCEL, JobState.PENDING): (JobState.CANCELLED,),
    (RecordType.CANCEL, JobState.LEASED): (JobState.CANCELLED,),
    (RecordType.DELETE, JobState.DEAD): (None,),
}
# The records a job's holder writes: they must carry its current fencing token.
_FENCED: Final = frozenset({RecordType.ACK, RecordType.NACK, RecordType.EXTEND,
                            RecordType.EXPIRE})


_SNAPSHOT_STATES: Final = {"pending": JobState.PENDING, "leased": JobState.LEASED,
                           "dead": JobState.DEAD}
_FINISHED_STATES: Final = {"done": DONE, "cancelled": CANCELLED}

_INT64: Final = 2**63


def _field(rec: Record, key: str, kind: type, offset: int) -> Any:
    value = rec.get(key)
    if type(value) is not kind and not (kind is float and type(value) is int):
        raise ReplayError(offset, f"field {key!r} must be {kind.__name__}, got {value!r:.60}")
    if type(value) is int:
        if not -_INT64 <= value < _INT64:  # no writer stores these, and checkpoints cannot
            raise ReplayError(offset, f"field {key!r} is out of range")
        if kind is float:  # as a checkpoint would give it back: replay and checkpoint agree
            return float(value)
    return value


def _opt_str(rec: Record, key: str, offset: int) -> str | None:
    value = rec.get(key)
    if value is not None and type(value) is not str:
        raise ReplayError(offset, f"field {key!r} must be a string or null")
    return value


class JobIndex:
    """The live jobs by id: a read-only mapping whose Entry values are built on demand.
    Lookups go straight to the job table; the count and reserve() are the state's."""

    __slots__ = ("_state", "_table")

    def __init__(self, state: QueueState, table: JobTable) -> None:
        self._state = state
        self._table = table

    def get(self, job_id: str) -> Entry | None:
        held = self._table.held.get(job_id)
        if held is not None:
            return held
        slot = self._table.find(job_id)
        return None if slot < 0 else self._table.entry(slot, job_id)

    def __getitem__(self, job_id: str) -> Entry:
        held = self._table.held.get(job_id)
        if held is not None:
            return held
        slot = self._table.find(job_id)
        if slot < 0:
            raise KeyError(job_id)
        return self._table.entry(slot, job_id)

    def __contains__(self, job_id: object) -> bool:
        return isinstance(job_id, str) and self._table.find(job_id) >= 0

    def __len__(self) -> int:  # the live jobs; lookups find kept finished ones too
        state = self._state
        return state.pending + state.leased + state.dead

    def __iter__(self) -> Iterator[str]:
        return (entry.id for entry in self._table.entries())

    def keys(self) -> Iterator[str]:
        return iter(self)

    def values(self) -> Iterator[Entry]:
        return self._table.entries()

    def items(self) -> Iterator[tuple[str, Entry]]:
        return ((entry.id, entry) for entry in self._table.entries())

    def reserve(self) -> str | None:
        """A generated id for a job about to be enqueued (None once they run out): one
        that neither a live job nor a remembered key holds."""
        return self._table.reserve(self._state.done_keys)


class QueueState:
    """Everything the log says, indexed for the writer's questions.

    The jobs themselves live in a JobTable (see jobtable.py); the state owns it,
    decides every change to it by the rules above, and counts what it holds.
    """

    def __init__(self, table: JobTable | None = None) -> None:
        self._table = JobTable() if table is None else table
        self.jobs = JobIndex(self, self._table)
        self.done_keys: dict[str, float] = {}  # finished keyed job id -> when acked
        self.pending = 0
        self.leased = 0
        self.dead = 0
        self.kept = 0  # finished jobs kept with their outcome (done or cancelled)
        self.done = 0  # acks ever applied, carried across compaction
        self.paused = False  # PAUSE applied and no RESUME since: nothing is leased
        # Lifetime totals, carried across compaction like `done` (see `totals`).
        self.enqueued = 0  # ENQUEUE records applied
        self.retried = 0  # nacks and expired leases that left the job pending
        self.dead_lettered = 0  # nacks and expired leases that made the job dead
        self.next_token = 1
        self.last_batch = 0
        self.snapshot_seen = False
        self.latest_time = 0.0  # latest time any record carries: writers never record earlier
        self.live_bytes = 0
        self._key_times: list[tuple[float, str]] = []  # (done_at, id) of remembered keys

    @property
    def totals(self) -> tuple[int, int, int]:
        """(enqueued, retried, dead_lettered) since the queue was created, or since
        counting began: a log compacted before these were counted starts them at 0."""
        return self.enqueued, self.retried, self.dead_lettered

    def set_totals(self, totals: Sequence[int]) -> None:
        self.enqueued, self.retried, self.dead_lettered = totals

    @property
    def next_seq(self) -> int:
        """The next job's seq; carried by snapshots and checkpoints."""
        return self._table.next_seq

    @classmethod
    def restore(cls, entries: Sequence[Entry], done_keys: dict[str, float], *,
                last_batch: int, next_token: int, done: int, snapshot_seen: bool,
                next_seq: int = 0, paused: bool = False) -> QueueState:
        """The state holding `entries` (in enqueue order): what replaying a snapshot
        of them gives (their seq fields are ignored and assigned as replay does)."""
        columns, counter = Columns.of_entries(entries)
        return cls.from_columns(columns, done_keys, last_batch=last_batch,
                                next_token=next_token, done=done,
                                snapshot_seen=snapshot_seen, next_seq=max(counter, next_seq),
                                paused=paused)

    @classmethod
    def from_columns(cls, columns: Columns, done_keys: dict[str, float], *,
                     last_batch: int, next_token: int, done: int, snapshot_seen: bool,
                     next_seq: int, paused: bool = False) -> QueueState:
        """The state a checkpoint's columns describe; ReplayError if they cannot be."""
        state = cls(JobTable.from_columns(columns, next_seq))
        states = columns.states
        state.pending, state.leased, state.dead, done_kept, cancelled = (
            states.count(code) for code in (PENDING, LEASED, DEAD, DONE, CANCELLED))
        state.kept = done_kept + cancelled
        if type(paused) is not bool:
            raise ReplayError(0, f"bad paused flag {paused!r}")
        state.paused = paused
        state.live_bytes = sum(columns.size)
        state.done_keys = dict(done_keys)
        state._key_times = [(done_at, job_id) for job_id, done_at in done_keys.items()]
        heapq.heapify(state._key_times)
        state.last_batch, state.next_token, state.done = last_batch, next_token, done
        state.snapshot_seen = snapshot_seen
        return state

    def columns(self) -> Columns:
        """The jobs (live and kept finished ones) as columns in enqueue order."""
        return self._table.columns()

    # -- applying records ---------------------------------------------------

    def apply_batch(self, batch: Sequence[Applied]) -> None:
        first_offset = batch[0][2]
        number = batch[0][1].get("b")
        if type(number) is not int or number < 1:
            raise ReplayError(first_offset, f"bad batch number {number!r}")
        if self.last_batch and number != self.last_batch + 1:
            raise ReplayError(first_offset,
                              f"batch {number} follows batch {self.last_batch}")
        latest = self.latest_time
        table = self._table
        table.start_batch()
        for rtype, rec, offset, size in batch:
            if rec.get("b") != number:
                raise ReplayError(offset, f"record of batch {rec.get('b')!r} inside batch {number}")
            self._apply(rtype, rec, offset, size)
            stamp = rec.get("t", rec.get("done"))
            if type(stamp) is float and stamp > latest:
                latest = stamp
        self.latest_time = latest
        self.last_batch = number
        table.pack_if_sparse()

    def _apply(self, rtype: int, rec: Record, offset: int, size: int) -> None:
        """One record: the job records through the TRANSITIONS table, the rest here."""
        allowed = _ALLOWED.get(rtype)
        if allowed is None:
            self._apply_other(rtype, rec, offset, size)
            return
        job_id = _field(rec, "id", str, offset)
        table = self._table
        held = table.held.get(job_id)
        slot = table.find(job_id) if held is None else table.slot(held.seq)
        if slot < 0:
            raise ReplayError(offset, f"record type {rtype} for unknown job {job_id!r}")
        if table.code[slot] not in allowed:
            self._expect_state(slot, job_id, allowed, offset)
        if rtype in _FENCED:
            token = _field(rec, "tok", int, offset)
            current = table.leases[table.seqs[slot]][0]
            if current != token:
                raise ReplayError(offset,
                                  f"token {token} is not job {job_id!r}'s lease {current}")
        _JOB_RECORDS[rtype](self, slot, job_id, rec, offset, size)

    def _apply_other(self, rtype: int, rec: Record, offset: int, size: int) -> None:
        """The records that name no job the table holds: a new job, PURGE, PAUSE and
        RESUME, the keys, and a snapshot's records."""
        if rtype == RecordType.PURGE:
            removed, freed = self._table.remove_pending()
            self.pending -= removed
            self.live_bytes -= freed
            return
        if rtype == RecordType.SNAPSHOT:
            self._apply_snapshot_end(rec, offset)
            return
        if rtype == RecordType.PAUSE or rtype == RecordType.RESUME:
            _field(rec, "t", float, offset)
            self.paused = rtype == RecordType.PAUSE
            return
        job_id = _field(rec, "id", str, offset)
        if rtype == RecordType.ENQUEUE:
            self._apply_enqueue(job_id, rec, offset, size)
        elif rtype == RecordType.JOB:
            self._apply_snapshot_job(job_id, rec, offset, size)
        elif rtype == RecordType.KEY:
            if job_id in self.done_keys:
                raise ReplayError(offset, f"key {job_id!r} twice in a snapshot")
            self._remember(job_id, _field(rec, "done", float, offset))
        elif rtype == RecordType.FORGET:
            self._apply_forget(job_id, offset)
        elif rtype == RecordType.FINISHED:
            self._apply_snapshot_finished(job_id, rec, offset, size)
        else:
            raise ReplayError(offset, f"unknown record type {rtype}")

    # The job records, each in the state TRANSITIONS requires (and, for a leased
    # job, under its current token): _apply has checked both.

    def _apply_lease(self, slot: int, job_id: str, rec: Record, offset: int,
                     size: int) -> None:
        token = _field(rec, "tok", int, offset)
        if token < 1:
            raise ReplayError(offset, f"bad fencing token {token}")
        until = _field(rec, "until", float, offset)
        if token >= self.next_token:
            self.next_token = token + 1
        self.pending -= 1  # _set_state(slot, LEASED), unrolled: every lease passes here
        self.leased += 1
        self._table.lease(slot, job_id, token, until)

    def _apply_ack(self, slot: int, job_id: str, rec: Record, offset: int,
                   size: int) -> None:
        table = self._table
        done_at = _field(rec, "t", float, offset)
        self.leased -= 1
        self.done += 1
        if "r" in rec:  # acked with a result: kept, result and all, for "keep" seconds
            self._finish(slot, job_id, DONE, done_at, rec, offset, size)
            return
        keyed = table.flags[slot] & KEYED
        self.live_bytes -= table.remove(slot, job_id)
        if keyed:
            self._remember(job_id, done_at)

    def _finish(self, slot: int, job_id: str, code: int, finished_at: float, rec: Record,
                offset: int, size: int) -> None:
        """Job `slot` (counted out of its old state already) is kept as finished for
        the record's "keep" seconds; the record at `offset` holds its outcome."""
        keep = _field(rec, "keep", float, offset)
        if keep < 0:
            raise ReplayError(offset, f"negative retention {keep!r}")
        self.live_bytes += size - self._table.finish(slot, job_id, code, keep,
                                                     finished_at + keep, offset, size)
        self.kept += 1

    def _apply_cancel(self, slot: int, job_id: str, rec: Record, offset: int,
                      size: int) -> None:
        self._count(self._table.code[slot], -1)
        self._finish(slot, job_id, CANCELLED, _field(rec, "t", float, offset), rec, offset,
                     size)

    def _apply_delete(self, slot: int, job_id: str, rec: Record, offset: int,
                      size: int) -> None:
        self.dead -= 1
        self.live_bytes -= self._table.remove(slot, job_id)

    def _apply_forget(self, job_id: str, offset: int) -> None:
        """FORGET: a kept finished job's retention, or a remembered key's, ran out."""
        table = self._table
        slot = table.find(job_id)
        if slot >= 0:
            if table.code[slot] not in FINISHED_CODES:
                self._expect_state(slot, job_id, FINISHED_CODES, offset)
            self.kept -= 1
            self.live_bytes -= table.remove(slot, job_id)
        elif self.done_keys.pop(job_id, None) is None:
            raise ReplayError(offset, f"forget of {job_id!r}, which is not remembered")

    def _apply_extend(self, slot: int, job_id: str, rec: Record, offset: int,
                      size: int) -> None:
        self._table.hold(slot, job_id, _field(rec, "tok", int, offset),
                         _field(rec, "until", float, offset))

    def _apply_retry(self, slot: int, job_id: str, rec: Record, offset: int,
                     error: str | None) -> None:
        """NACK and EXPIRE: dead on the last attempt, else pending again from `at`."""
        table = self._table
        at = _field(rec, "at", float, offset)
        seq = table.seqs[slot]
        table.set_error(seq, error)
        table.unhold(seq, job_id)
        if table.attempts[slot] >= table.max_attempts[slot]:
            table.set_available(slot, at)  # a dead job's `at`: when it died (FORMAT.md)
            self._set_state(slot, DEAD)
            self.dead_lettered += 1
        else:
            self._count(table.make_pending(slot, at), -1)
            self.pending += 1
            self.retried += 1

    def _apply_nack(self, slot: int, job_id: str, rec: Record, offset: int,
                    size: int) -> None:
        self._apply_retry(slot, job_id, rec, offset, _opt_str(rec, "err", offset))

    def _apply_expire(self, slot: int, job_id: str, rec: Record, offset: int,
                      size: int) -> None:
        error = f"lease expired (attempt {self._table.attempts[slot]})"
        self._apply_retry(slot, job_id, rec, offset, error)

    def _apply_requeue(self, slot: int, job_id: str, rec: Record, offset: int,
                       size: int) -> None:
        at = _field(rec, "at", float, offset)
        self._count(self._table.make_pending(slot, at, reset_attempts=True), -1)
        self.pending += 1

    def _apply_enqueue(self, job_id: str, rec: Record, offset: int, size: int) -> None:
        # The hot path of replay: check every field in one expression, and only
        # when something is off, walk the checks one by one to name it. A writer's
        # generated id is the next seq's, which no live job can hold.
        table = self._table
        pr, at, t, ma, keyed = rec.get("pr"), rec.get("at"), rec.get("t"), rec.get("ma"), \
            rec.get("k", False)
        if (type(pr) is int and -_INT64 <= pr < _INT64 and type(ma) is int
                and 1 <= ma < _INT64 and type(at) is float and type(t) is float
                and type(keyed) is bool and "p" in rec
                and ((job_id == table.expect and job_id not in table.ids)
                     or table.find(job_id) < 0)):
            self.done_keys.pop(job_id, None)
            table.add(job_id, keyed, PENDING, pr, at, t, ma, 0, offset, size, recent=True)
            self.pending += 1
            self.enqueued += 1
            self.live_bytes += size
            return
        if table.find(job_id) >= 0:
            raise ReplayError(offset, f"job {job_id!r} enqueued twice")
        if "p" not in rec:
            raise ReplayError(offset, f"enqueue of {job_id!r} has no payload")
        self.done_keys.pop(job_id, None)
        keyed = rec.get("k", False)
        if type(keyed) is not bool:
            raise ReplayError(offset, "field 'k' must be a boolean")
        table.add(job_id, keyed, PENDING, _field(rec, "pr", int, offset),
                  _field(rec, "at", float, offset), _field(rec, "t", float, offset),
                  self._max_attempts(rec, offset), 0, offset, size)
        self.pending += 1
        self.enqueued += 1
        self.live_bytes += size

    def _apply_snapshot_job(self, job_id: str, rec: Record, offset: int, size: int) -> None:
        table = self._table
        if table.find(job_id) >= 0:
            raise ReplayError(offset, f"job {job_id!r} twice in a snapshot")
        if "p" not in rec:
            raise ReplayError(offset, f"snapshot of {job_id!r} has no payload")
        # Fields at their default value are left out of a snapshot record.
        code = rec.get("s", "pending")
        state = _SNAPSHOT_STATES.get(code) if type(code) is str else None
        if state is None:
            raise ReplayError(offset, f"bad snapshot state {rec.get('s')!r}")
        attempts = _field(rec, "a", int, offset) if "a" in rec else 0
        token = _field(rec, "tok", int, offset) if "tok" in rec else 0
        if attempts < 0 or token < 0 or (state is JobState.LEASED) != (token > 0):
            raise ReplayError(offset, "inconsistent attempts/token in snapshot job")
        keyed = rec.get("k", False)
        if type(keyed) is not bool:
            raise ReplayError(offset, "field 'k' must be a boolean")
        priority = _field(rec, "pr", int, offset)
        at = _field(rec, "at", float, offset)
        enqueued_at = _field(rec, "t", float, offset)
        max_attempts = self._max_attempts(rec, offset)
        until = _field(rec, "until", float, offset) if "until" in rec else 0.0
        error = _opt_str(rec, "err", offset)
        job_code = CODES[state]
        slot = table.add(job_id, keyed, job_code, priority, at, enqueued_at,
                         max_attempts, attempts, offset, size)
        if job_code == PENDING:  # most snapshot jobs are
            self.pending += 1
        else:
            self._count(job_code, 1)
        self.live_bytes += size
        if error is not None:
            table.set_error(table.seqs[slot], error)
        if state is JobState.LEASED:
            table.hold(slot, job_id, token, until)
        self.next_token = max(self.next_token, token + 1)

    def _apply_snapshot_finished(self, job_id: str, rec: Record, offset: int,
                                 size: int) -> None:
        """A FINISHED record: a job kept with its outcome, its result (if any) in "r"."""
        table = self._table
        if table.find(job_id) >= 0:
            raise ReplayError(offset, f"job {job_id!r} twice in a snapshot")
        label = rec.get("s")
        code = _FINISHED_STATES.get(label) if type(label) is str else None
        if code is None:
            raise ReplayError(offset, f"bad finished state {rec.get('s')!r}")
        attempts = _field(rec, "a", int, offset) if "a" in rec else 0
        keyed = rec.get("k", False)
        if attempts < 0 or type(keyed) is not bool:
            raise ReplayError(offset, "bad attempts or 'k' in a finished job")
        finished_at, keep = _field(rec, "fin", float, offset), _field(rec, "keep", float, offset)
        if keep < 0:
            raise ReplayError(offset, f"negative retention {keep!r}")
        error = _opt_str(rec, "err", offset)
        slot = table.add(job_id, keyed, code, _field(rec, "pr", int, offset), 0.0,
                         _field(rec, "t", float, offset), self._max_attempts(rec, offset),
                         attempts, offset, size)
        table.finish(slot, job_id, code, keep, finished_at + keep, offset, size)
        if error is not None:
            table.set_error(table.seqs[slot], error)
        self.kept += 1
        self.live_bytes += size

    def _apply_snapshot_end(self, rec: Record, offset: int) -> None:
        jobs = _field(rec, "jobs", int, offset)
        if jobs != len(self.jobs):
            raise ReplayError(offset, f"snapshot announces {jobs} jobs, holds {len(self.jobs)}")
        kept = _field(rec, "kept", int, offset) if "kept" in rec else 0
        if kept != self.kept:
            raise ReplayError(offset, f"snapshot announces {kept} finished jobs, "
                                      f"holds {self.kept}")
        paused = rec.get("paused", False)
        if type(paused) is not bool:
            raise ReplayError(offset, "field 'paused' must be a boolean")
        self.paused = paused
        if "seq" in rec:  # absent in snapshots written before ids were sequence numbers
            next_seq = _field(rec, "seq", int, offset)
            if not 0 <= next_seq <= SEQ_MAX:
                raise ReplayError(offset, f"bad next sequence number {next_seq}")
            self._table.set_next_seq(max(self.next_seq, next_seq))
        self.next_token = max(self.next_token, _field(rec, "tok", int, offset))
        self.done = _field(rec, "done", int, offset)
        if "tot" in rec:  # absent in snapshots written before the totals were counted
            self.set_totals(check_totals(rec["tot"], offset))
        self.snapshot_seen = True

    @staticmethod
    def _max_attempts(rec: Record, offset: int) -> int:
        value = _field(rec, "ma", int, offset)
        if value < 1:
            raise ReplayError(offset, f"max_attempts {value} < 1")
        return int(value)

    def _expect_state(self, slot: int, job_id: str, codes: tuple[int, ...],
                      offset: int) -> None:
        actual = self._table.code[slot]
        if actual not in codes:
            expected = " or ".join(str(CODE_STATES[code]) for code in codes)
            raise ReplayError(offset, f"job {job_id!r} is {CODE_STATES[actual]}, "
                                      f"expected {expected}")

    # -- bookkeeping --------------------------------------------------------

    def _count(self, code: int, delta: int) -> None:
        if code == PENDING:
            self.pending += delta
        elif code == LEASED:
            self.leased += delta
        elif code == DEAD:
            self.dead += delta
        else:
            self.kept += delta

    def _set_state(self, slot: int, code: int) -> None:
        self._count(self._table.set_code(slot, code), -1)
        self._count(code, 1)

    def _remember(self, job_id: str, done_at: float) -> None:
        self.done_keys[job_id] = done_at
        heapq.heappush(self._key_times, (done_at, job_id))

    def relocate(self, source_offset: int, shift: int, seqs: array[int],
                 names: dict[int, str], locs: array[int], sizes: array[int]) -> bool:
        """Move payload locations to a new generation written by another handle.

        The snapshot's jobs (`seqs`/`names` in enqueue order, at `locs`/`sizes`)
        are ours whose record lies before `source_offset`; records after it were
        copied unchanged, `shift` bytes further. False (nothing changed) if the
        snapshot does not hold the jobs we know."""
        live_bytes = self._table.relocate(source_offset, shift, seqs, names, locs, sizes)
        if live_bytes is None:
            return False
        self.live_bytes = live_bytes
        return True

    # -- questions (read-only with respect to the state's meaning) ----------

    def ready(self, now: float, count: int) -> list[Entry]:
        """Up to `count` leasable jobs: highest priority first, FIFO within a priority."""
        return self._table.ready(now, count)

    def forgettable(self, before: float) -> list[str]:
        """Remembered keys whose job finished at or before `before`, oldest first."""
        heap, keys = self._key_times, self.done_keys
        found: list[tuple[float, str]] = []
        seen: set[str] = set()
        while heap and heap[0][0] <= before:
            item = heapq.heappop(heap)
            if keys.get(item[1]) == item[0] and item[1] not in seen:  # once per key
                found.append(item)
                seen.add(item[1])
        for item in found:  # selection must not change the state; FORGET records will
            heapq.heappush(heap, item)
        return [job_id for _, job_id in found]

    def expired(self, now: float) -> list[Entry]:
        """Leased jobs whose deadline is at or before `now`."""
        return self._table.expired(now)

    def next_wakeup(self) -> float | None:
        """Earliest moment a job may become leasable: -inf or a past time if one is
        ready now, the first delayed job's time or lease deadline otherwise, None if
        neither exists."""
        return self._table.next_wakeup()

    def entries(self, state: JobState | None = None, skip: int = 0, *,
                finished: bool = False) -> Iterator[Entry]:
        """Jobs in enqueue order, optionally of one state, after the first `skip`;
        without a state, the live jobs (and with `finished`, the kept finished ones
        too). Do not apply records while iterating: a pack would move the slots
        (RuntimeError)."""
        return self._table.entries(state, skip, finished=finished)

    def retention_over(self, before: float) -> list[str]:
        """Kept finished jobs whose retention ends at or before `before`, in that order."""
        table = self._table
        return [table.id(slot) for slot in table.kept_until_before(before)]

    def fingerprint(self) -> tuple[object, ...]:
        """Everything that defines the state; equal logs give equal fingerprints.
        The lifetime totals are statistics, not state: an old snapshot restarts them."""
        jobs = tuple(
            (e.id, e.priority, e.available_at, e.enqueued_at, e.max_attempts, e.attempts,
             str(e.state), e.token, e.lease_until if e.state is JobState.LEASED else 0.0,
             e.last_error, e.keyed)
            for e in self.entries(finished=True)
        )
        return (jobs, tuple(sorted(self.done_keys.items())), self.pending, self.leased,
                self.dead, self.kept, self.done, self.next_token, self.paused)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QueueState):
            return NotImplemented
        return self.fingerprint() == other.fingerprint()

    __hash__ = None  # type: ignore[assignment]


# Record type -> the QueueState method that applies it to a job in an allowed state.
_JOB_RECORDS: Final[dict[int, Callable[[QueueState, int, str, Record, int, int], None]]] = {
    RecordType.LEASE: QueueState._apply_lease,
    RecordType.ACK: QueueState._apply_ack,
    RecordType.NACK: QueueState._apply_nack,
    RecordType.EXTEND: QueueState._apply_extend,
    RecordType.EXPIRE: QueueState._apply_expire,
    RecordType.REQUEUE: QueueState._apply_requeue,
    RecordType.CANCEL: QueueState._apply_cancel,
    RecordType.DELETE: QueueState._apply_delete,
}
# The states each of them may find its job in, read off TRANSITIONS.
_ALLOWED: Final[dict[int, tuple[int, ...]]] = {
    rtype: tuple(CODES[before] for (other, before) in TRANSITIONS
                 if other == rtype and before is not None)
    for rtype in _JOB_RECORDS}
assert all(_ALLOWED.values()), "every job record has a state in TRANSITIONS"


def check_totals(value: object, offset: int) -> tuple[int, int, int]:
    """A snapshot's or checkpoint's `tot`: three integers >= 0, or ReplayError."""
    if (type(value) is not list or len(value) != 3
            or any(type(n) is not int or not 0 <= n < _INT64 for n in value)):
        raise ReplayError(offset, f"bad totals {value!r:.60}")
    return value[0], value[1], value[2]


def replay(batches: Iterable[Sequence[Applied]]) -> QueueState:
    """The state a sequence of batches describes."""
    state = QueueState()
    for batch in batches:
        state.apply_batch(batch)
    return state
