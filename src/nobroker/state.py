"""The replay state: decoded records in, queue state out.

This module is the queue's meaning, kept apart from every file and clock so
that it can be tested without a disk and so that replaying the same records
twice gives equal states. It must never import os, time, random or threads.
Anything that depends on the present time (which jobs are ready, which leases
have expired) takes `now` as an argument and only *reads*; the state changes
only through `apply_batch`.

Rules it enforces, each a ReplayError (the caller turns it into
CorruptLogError) when a record breaks it:
- batch numbers rise by exactly one per batch inside one log file;
- every record is a JSON object of the documented shape for its type;
- transitions follow TRANSITIONS below; an ack/nack/extend/expire must carry
  the job's current fencing token.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import compress, islice
from typing import Any, Final

from .records import Record, RecordType

__all__ = ["JobState", "Entry", "JobIndex", "Columns", "QueueState", "ReplayError",
           "TRANSITIONS", "Applied", "seq_id", "id_seq", "SEQ_LIMIT"]


class JobState(StrEnum):
    PENDING = "pending"  # waiting for its available_at, then leasable
    LEASED = "leased"  # held by one worker until lease_until
    DEAD = "dead"  # failed max_attempts times; in the dead-letter queue
    DONE = "done"  # acked; only keyed jobs are remembered, for a retention period


# (record type, state before) -> state after. The docs are generated from it.
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
}

_NUMBER: Final = frozenset({int, float})

# A record as the log reader hands it over: type, decoded object, offset, size.
Applied = tuple[int, Record, int, int]

_SNAPSHOT_STATES: Final = {"pending": JobState.PENDING, "leased": JobState.LEASED,
                           "dead": JobState.DEAD}


_INT64: Final = 2**63

# Generated job ids are the job's sequence number as 16 hex digits, below 2**48 so
# that they start with "0000": id -> job is arithmetic, and no id string is kept.
SEQ_LIMIT: Final = 1 << 48
_HEX: Final = "0123456789abcdef"
_SEQ_MAX: Final = 1 << 62  # past it a seq could overflow an int64 column

# Slot state codes (the checkpoint's too) and flags.
_PENDING, _LEASED, _DEAD, _FREE = 0, 1, 2, 3
_CODE_STATES: Final = (JobState.PENDING, JobState.LEASED, JobState.DEAD)
_KEYED: Final = 1  # the id is a caller's idempotency key
_NAMED: Final = 2  # the id is not seq_id(seq): it lives in the _ids/_names dicts
_LANED: Final = 4  # pending since its enqueue and queued in its priority's lane


def seq_id(seq: int) -> str:
    """The generated job id of sequence number `seq` (< SEQ_LIMIT)."""
    return f"{seq:016x}"


def id_seq(job_id: str) -> int:
    """The sequence number a generated-form id names, or -1 for any other id."""
    if len(job_id) == 16 and job_id.startswith("0000") and not job_id.strip(_HEX):
        return int(job_id, 16)
    return -1


class ReplayError(ValueError):
    """A record that no correct writer produces (internal; see CorruptLogError)."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


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
    loc: int  # offset of the record holding the payload, in the current generation
    size: int  # bytes of that record, for the live-bytes estimate
    version: int = 0  # unused; kept so that Entry(...) calls keep their shape


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


_FREE_TO_ZERO: Final = bytes([1, 1, 1, 0] + [1] * 252)  # live slot -> 1, hole -> 0
_PENDING_MASK: Final = bytes([1] + [0] * 255)  # pending slot -> 1
_WITH_LANED: Final = bytes((flags | _LANED) & 0xFF for flags in range(256))
_CODES: Final = {JobState.PENDING: _PENDING, JobState.LEASED: _LEASED, JobState.DEAD: _DEAD}
_PACK_AT: Final = 1024  # holes a removal may leave before the columns are packed
_RECENT_MAX: Final = 1 << 14  # ids of a batch's new jobs whose slot is cached
_MAX_LANES: Final = 16  # ready() looks at every lane: other priorities use the heaps


class _Lane:
    """The pending jobs of one priority that were leasable in enqueue order: their
    available_at never decreases along the lane, so the due ones are a prefix.
    8 bytes a job, where a heap entry would cost a tuple and its numbers."""

    __slots__ = ("head", "last_at", "seqs")

    def __init__(self) -> None:
        self.seqs = array("q")
        self.head = 0  # items before it were consumed
        self.last_at = float("-inf")


@dataclass(slots=True)
class Columns:
    """The live jobs in enqueue order, one array per field: what a checkpoint holds."""

    seqs: array[int]
    states: bytes  # 0 pending, 1 leased, 2 dead
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


class JobIndex:
    """The live jobs by id: a read-only mapping whose Entry values are built on demand."""

    __slots__ = ("_state",)

    def __init__(self, state: QueueState) -> None:
        self._state = state

    def get(self, job_id: str) -> Entry | None:
        held = self._state._held.get(job_id)
        if held is not None:
            return held
        slot = self._state._find(job_id)
        return None if slot < 0 else self._state._entry(slot, job_id)

    def __getitem__(self, job_id: str) -> Entry:
        held = self._state._held.get(job_id)
        if held is not None:
            return held
        slot = self._state._find(job_id)
        if slot < 0:
            raise KeyError(job_id)
        return self._state._entry(slot, job_id)

    def __contains__(self, job_id: object) -> bool:
        return isinstance(job_id, str) and self._state._find(job_id) >= 0

    def __len__(self) -> int:
        state = self._state
        return state.pending + state.leased + state.dead

    def __iter__(self) -> Iterator[str]:
        return (entry.id for entry in self._state.entries())

    def keys(self) -> Iterator[str]:
        return iter(self)

    def values(self) -> Iterator[Entry]:
        return self._state.entries()

    def items(self) -> Iterator[tuple[str, Entry]]:
        return ((entry.id, entry) for entry in self._state.entries())

    def reserve(self) -> str | None:
        """A generated id for a job about to be enqueued (None once they run out)."""
        return self._state._reserve()


class QueueState:
    """Everything the log says, indexed for the writer's questions.

    Jobs live in columns (arrays, one slot per job in enqueue order) rather than
    one object each: a pending job costs about 70 bytes. Every job has a
    sequence number `seq`, rising in log order; a generated id *is* its seq
    (seq_id), so only other ids (idempotency keys, ids of older versions) need
    a dict. Fields most jobs never use (lease, error) are sparse dicts by seq.
    """

    def __init__(self) -> None:
        self.jobs = JobIndex(self)
        self.done_keys: dict[str, float] = {}  # finished keyed job id -> when acked
        self.pending = 0
        self.leased = 0
        self.dead = 0
        self.done = 0  # acks ever applied, carried across compaction
        self.next_token = 1
        self.last_batch = 0
        self.snapshot_seen = False
        self.clock = 0.0  # latest time any record carries: writers never record earlier
        self.live_bytes = 0
        self.next_seq = 0  # the next job's seq; carried by snapshots and checkpoints
        self._expect: str | None = seq_id(0)  # the id a writer gives it (replay fast path)
        self._issued = 0  # writer side: seqs handed out as ids for records not yet applied
        # The columns. A removed job leaves a hole (_FREE) until _pack.
        self._seqs = array("q")
        self._code = bytearray()
        self._flags = bytearray()
        self._pr = array("q")
        self._at = array("d")
        self._t = array("d")
        self._ma = array("q")
        self._att = array("q")
        self._loc = array("q")  # offset of the record holding the payload
        self._size = array("I")  # bytes of that record, for the live-bytes estimate
        self._holes = 0
        self._layout = 0  # bumped when slots move, so a running entries() can tell
        self._ids: dict[str, int] = {}  # id -> seq, for ids that are not seq_id(seq)
        self._names: dict[int, str] = {}  # seq -> such an id
        self._lease: dict[int, tuple[int, float]] = {}  # seq -> (token, lease_until)
        # Leased jobs are few and each call that settles one looks it up, twice: keep
        # their entries built (replaced, never changed, so entries stay snapshots).
        self._held: dict[str, Entry] = {}
        # The slots of the jobs the latest batch added: the writer views each of them
        # right after its commit, and would otherwise parse every id back.
        self._recent: dict[str, int] = {}
        self._errors: dict[int, str] = {}  # seq -> last_error
        self._lanes: dict[int, _Lane] = {}  # priority -> lane
        # Pending jobs outside the lanes sit in lazy heaps: an entry is valid only
        # while its stamp is the job's current one (stamps are never reused).
        self._stamp = 0
        self._versions: dict[int, int] = {}  # seq -> stamp, for those jobs only
        self._delayed: list[tuple[float, int, int]] = []  # (available_at, seq, stamp)
        self._ready: list[tuple[int, int, int]] = []  # (-priority, seq, stamp)
        self._leases: list[tuple[float, int, int]] = []  # (lease_until, token, seq)
        self._key_times: list[tuple[float, str]] = []  # (done_at, id) of remembered keys

    @classmethod
    def restore(cls, entries: Sequence[Entry], done_keys: dict[str, float], *,
                last_batch: int, next_token: int, done: int, snapshot_seen: bool,
                next_seq: int = 0) -> QueueState:
        """The state holding `entries` (in enqueue order): what replaying a snapshot
        of them gives (their seq fields are ignored and assigned as replay does)."""
        seqs: array[int] = array("q")
        names: dict[int, str] = {}
        counter = 0
        for index, entry in enumerate(entries):  # _add's rule, without the columns
            if entry.keyed or entry.id != seq_id(counter):
                generated = -1 if entry.keyed else id_seq(entry.id)
                if generated >= counter:
                    counter = generated
                else:
                    names[index] = entry.id
            seqs.append(counter)
            counter += 1
        leased = JobState.LEASED
        columns = Columns(
            seqs, bytes(_CODES[e.state] for e in entries), bytes(e.keyed for e in entries),
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
        return cls.from_columns(columns, done_keys, last_batch=last_batch,
                                next_token=next_token, done=done,
                                snapshot_seen=snapshot_seen, next_seq=max(counter, next_seq))

    @classmethod
    def from_columns(cls, columns: Columns, done_keys: dict[str, float], *,
                     last_batch: int, next_token: int, done: int, snapshot_seen: bool,
                     next_seq: int) -> QueueState:
        """The state a checkpoint's columns describe; ReplayError if they cannot be."""
        c = columns
        count = len(c.seqs)
        if not all(len(column) == count for column in (
                c.states, c.keyed, c.priority, c.available_at, c.enqueued_at,
                c.max_attempts, c.attempts, c.token, c.lease_until, c.loc, c.size)):
            raise ReplayError(0, "column lengths disagree")
        seqs = c.seqs
        if (c.states.translate(None, b"\0\1\2") or c.keyed.translate(None, b"\0\1")
                or type(next_seq) is not int or not 0 <= next_seq <= _SEQ_MAX
                or (count and not (0 <= seqs[0] and seqs[-1] < next_seq))
                or not all(map(int.__lt__, seqs, islice(seqs, 1, None)))):
            raise ReplayError(0, "bad states, flags or sequence numbers")
        state = cls()
        state._seqs, state._pr, state._at, state._t = seqs, c.priority, c.available_at, \
            c.enqueued_at
        state._ma, state._att, state._loc, state._size = c.max_attempts, c.attempts, c.loc, \
            c.size
        state._code = bytearray(c.states)
        flags = state._flags = bytearray(c.keyed)  # _KEYED is 1
        for index, job_id in c.names.items():
            if not 0 <= index < count or type(job_id) is not str:
                raise ReplayError(0, "bad job id")
            flags[index] |= _NAMED
            state._ids[job_id] = seqs[index]
            state._names[seqs[index]] = job_id
        if len(state._ids) != len(c.names):
            raise ReplayError(0, "a job id appears twice in a checkpoint")
        for job_id in c.names.values():  # nor may a key look like another job's seq id
            slot = state._slot(id_seq(job_id)) if id_seq(job_id) >= 0 else -1
            if slot >= 0 and not flags[slot] & _NAMED:
                raise ReplayError(0, "a job id appears twice in a checkpoint")
        high = bisect_left(seqs, SEQ_LIMIT)
        if any(not flags[slot] & _NAMED for slot in range(high, count)):
            raise ReplayError(0, "a job without an id")
        for index, error in c.errors.items():
            if not 0 <= index < count or type(error) is not str:
                raise ReplayError(0, "error for a job that does not exist")
            state._errors[seqs[index]] = error
        states = c.states
        state.pending, state.leased, state.dead = (states.count(code)
                                                   for code in (_PENDING, _LEASED, _DEAD))
        state.live_bytes = sum(c.size)
        slot = states.find(_LEASED)
        while slot >= 0:
            seq, token, until = seqs[slot], c.token[slot], c.lease_until[slot]
            state._lease[seq] = (token, until)
            state._leases.append((until, token, seq))
            state._held[state._id(slot)] = state._entry(slot)
            slot = states.find(_LEASED, slot + 1)
        heapq.heapify(state._leases)
        state._schedule_all()
        state._finish_restore(done_keys, last_batch=last_batch, next_token=next_token,
                              done=done, snapshot_seen=snapshot_seen, next_seq=next_seq)
        return state

    def _finish_restore(self, done_keys: dict[str, float], *, last_batch: int,
                        next_token: int, done: int, snapshot_seen: bool,
                        next_seq: int) -> None:
        self._set_next_seq(max(self.next_seq, next_seq))
        self.done_keys = dict(done_keys)
        self._key_times = [(done_at, job_id) for job_id, done_at in done_keys.items()]
        heapq.heapify(self._key_times)
        self.last_batch, self.next_token, self.done = last_batch, next_token, done
        self.snapshot_seen = snapshot_seen

    def _schedule_all(self) -> None:
        """Queue every pending job of freshly restored columns, as _add would have."""
        count = len(self._seqs)
        pr, at = self._pr, self._at
        if (count and self.pending == count and pr.count(pr[0]) == count
                and all(map(float.__le__, at, islice(at, 1, None)))):
            # The usual queue: one priority, due in enqueue order. One lane, no loop.
            lane = self._lanes[pr[0]] = _Lane()
            lane.seqs = array("q", self._seqs)
            lane.last_at = at[-1]
            self._flags = bytearray(self._flags.translate(_WITH_LANED))
            return
        seqs, lanes = self._seqs, self._lanes
        for slot in compress(range(count), self._code.translate(_PENDING_MASK)):
            priority, when = pr[slot], at[slot]
            into = lanes.get(priority)
            if into is None and len(lanes) < _MAX_LANES:
                into = lanes[priority] = _Lane()
            if into is not None and when >= into.last_at:
                into.seqs.append(seqs[slot])
                into.last_at = when
                self._flags[slot] |= _LANED
            else:
                self._stamp += 1
                self._versions[seqs[slot]] = self._stamp
                self._delayed.append((when, seqs[slot], self._stamp))
        heapq.heapify(self._delayed)

    def columns(self) -> Columns:
        """The live jobs as columns in enqueue order (see Columns)."""
        live = self._code.translate(_FREE_TO_ZERO) if self._holes else None

        def packed(column: array[Any]) -> array[Any]:
            return array(column.typecode, column if live is None else compress(column, live))

        seqs = packed(self._seqs)
        count = len(seqs)
        states = bytes(self._code if live is None else compress(self._code, live))
        keyed = bytes(self._flags if live is None else compress(self._flags, live))
        keyed = keyed.translate(bytes(flags & _KEYED for flags in range(256)))
        token, until = array("q", bytes(8 * count)), array("d", bytes(8 * count))
        for seq, (tok, deadline) in self._lease.items():
            index = bisect_left(seqs, seq)
            token[index], until[index] = tok, deadline
        return Columns(
            seqs, states, keyed, packed(self._pr), packed(self._at), packed(self._t),
            packed(self._ma), packed(self._att), token, until, packed(self._loc),
            packed(self._size),
            names={bisect_left(seqs, seq): name for seq, name in self._names.items()},
            errors={bisect_left(seqs, seq): error for seq, error in self._errors.items()})

    # -- finding jobs -------------------------------------------------------

    def _slot(self, seq: int) -> int:
        """The slot of the live job `seq`, or -1."""
        seqs = self._seqs
        if not seqs:
            return -1
        slot = seq - seqs[0]  # exact while no hole before it has been packed out
        if not (0 <= slot < len(seqs) and seqs[slot] == seq):
            slot = bisect_left(seqs, seq)
            if slot == len(seqs) or seqs[slot] != seq:
                return -1
        return -1 if self._code[slot] == _FREE else slot

    def _find(self, job_id: str) -> int:
        """The slot of the live job `job_id`, or -1. (On every call's path: inlined.)"""
        if not isinstance(job_id, str):
            return -1
        slot = self._recent.get(job_id, -1)
        if slot >= 0 and self._code[slot] != _FREE:
            return slot
        seq = self._ids.get(job_id)
        generated = seq is None
        if seq is None:  # id_seq, inlined
            if len(job_id) != 16 or not job_id.startswith("0000") or job_id.strip(_HEX):
                return -1
            seq = int(job_id, 16)
        seqs = self._seqs
        if not seqs:
            return -1
        slot = seq - seqs[0]  # exact while no hole before it has been packed out
        if not (0 <= slot < len(seqs) and seqs[slot] == seq):
            slot = bisect_left(seqs, seq)
            if slot == len(seqs) or seqs[slot] != seq:
                return -1
        if self._code[slot] == _FREE or (generated and self._flags[slot] & _NAMED):
            return -1
        return slot

    def _id(self, slot: int) -> str:
        seq = self._seqs[slot]
        return self._names[seq] if self._flags[slot] & _NAMED else f"{seq:016x}"

    def _entry(self, slot: int, job_id: str | None = None) -> Entry:
        seq, code = self._seqs[slot], self._code[slot]
        token, until = self._lease[seq] if code == _LEASED else (0, 0.0)
        errors = self._errors
        return Entry(job_id or self._id(slot), seq, self._pr[slot], self._at[slot],
                     self._t[slot], self._ma[slot], self._att[slot], _CODE_STATES[code],
                     token, until, errors.get(seq) if errors else None,
                     self._flags[slot] & _KEYED == _KEYED, self._loc[slot], self._size[slot])

    def _reserve(self) -> str | None:
        seq = max(self._issued, self.next_seq)
        while seq < SEQ_LIMIT:
            job_id = f"{seq:016x}"
            seq += 1
            if job_id not in self._ids and job_id not in self.done_keys:
                self._issued = seq
                return job_id
        return None

    # -- applying records ---------------------------------------------------

    def apply_batch(self, batch: Sequence[Applied]) -> None:
        first_offset = batch[0][2]
        number = batch[0][1].get("b")
        if type(number) is not int or number < 1:
            raise ReplayError(first_offset, f"bad batch number {number!r}")
        if self.last_batch and number != self.last_batch + 1:
            raise ReplayError(first_offset,
                              f"batch {number} follows batch {self.last_batch}")
        clock = self.clock
        self._recent.clear()
        for rtype, rec, offset, size in batch:
            if rec.get("b") != number:
                raise ReplayError(offset, f"record of batch {rec.get('b')!r} inside batch {number}")
            self._apply(rtype, rec, offset, size)
            stamp = rec.get("t", rec.get("done"))
            if type(stamp) is float and stamp > clock:
                clock = stamp
        self.clock = clock
        self.last_batch = number
        if self._holes > _PACK_AT and self._holes * 2 > len(self._code):
            self._pack()

    def _apply(self, rtype: int, rec: Record, offset: int, size: int) -> None:
        if rtype == RecordType.PURGE:
            slot = self._code.find(_PENDING)
            while slot >= 0:
                self._remove(slot)
                slot = self._code.find(_PENDING, slot + 1)
            self._lanes.clear()  # nothing pending is left to find in them
            self._delayed.clear()
            self._ready.clear()
            return
        if rtype == RecordType.SNAPSHOT:
            self._apply_snapshot_end(rec, offset)
            return
        job_id = _field(rec, "id", str, offset)
        if rtype == RecordType.ENQUEUE:
            self._apply_enqueue(job_id, rec, offset, size)
            return
        if rtype == RecordType.JOB:
            self._apply_snapshot_job(job_id, rec, offset, size)
            return
        if rtype == RecordType.KEY:
            if job_id in self.done_keys:
                raise ReplayError(offset, f"key {job_id!r} twice in a snapshot")
            self._remember(job_id, _field(rec, "done", float, offset))
            return
        if rtype == RecordType.FORGET:
            if self.done_keys.pop(job_id, None) is None:
                raise ReplayError(offset, f"forget of {job_id!r}, which is not remembered")
            return
        held = self._held.get(job_id)
        slot = self._find(job_id) if held is None else self._slot(held.seq)
        if slot < 0:
            raise ReplayError(offset, f"record type {rtype} for unknown job {job_id!r}")
        seq = self._seqs[slot]
        if rtype == RecordType.REQUEUE:
            self._expect_state(slot, job_id, _DEAD, offset)
            self._att[slot] = 0
            self._at[slot] = _field(rec, "at", float, offset)
            self._set_state(slot, _PENDING)
            return
        token = _field(rec, "tok", int, offset)
        if rtype == RecordType.LEASE:
            if self._code[slot] != _PENDING:
                self._expect_state(slot, job_id, _PENDING, offset)
            if token < 1:
                raise ReplayError(offset, f"bad fencing token {token}")
            until = _field(rec, "until", float, offset)
            self._att[slot] += 1
            if token >= self.next_token:
                self.next_token = token + 1
            # _set_state(slot, _LEASED), unrolled: every lease passes here
            self.pending -= 1
            self.leased += 1
            self._code[slot] = _LEASED
            flags = self._flags[slot]
            if flags & _LANED:
                self._flags[slot] = flags ^ _LANED
            else:
                self._versions.pop(seq, None)
            self._hold(slot, job_id, token, until)
            return
        if self._code[slot] != _LEASED:
            self._expect_state(slot, job_id, _LEASED, offset)
        current = self._lease[seq][0]
        if current != token:
            raise ReplayError(offset, f"token {token} is not job {job_id!r}'s lease {current}")
        if rtype == RecordType.ACK:
            done_at = _field(rec, "t", float, offset)
            keyed = self._flags[slot] & _KEYED
            self._remove(slot, job_id)
            self.done += 1
            if keyed:
                self._remember(job_id, done_at)
        elif rtype == RecordType.EXTEND:
            self._hold(slot, job_id, token, _field(rec, "until", float, offset))
        elif rtype in (RecordType.NACK, RecordType.EXPIRE):
            at = _field(rec, "at", float, offset)
            if rtype == RecordType.NACK:
                error = _opt_str(rec, "err", offset)
            else:
                error = f"lease expired (attempt {self._att[slot]})"
            if error is None:
                self._errors.pop(seq, None)
            else:
                self._errors[seq] = error
            del self._lease[seq]
            del self._held[job_id]
            if self._att[slot] >= self._ma[slot]:
                self._set_state(slot, _DEAD)
            else:
                self._at[slot] = at
                self._set_state(slot, _PENDING)
        else:
            raise ReplayError(offset, f"unknown record type {rtype}")

    def _apply_enqueue(self, job_id: str, rec: Record, offset: int, size: int) -> None:
        # The hot path of replay: check every field in one expression, and only
        # when something is off, walk the checks one by one to name it. A writer's
        # generated id is the next seq's, which no live job can hold.
        pr, at, t, ma, keyed = rec.get("pr"), rec.get("at"), rec.get("t"), rec.get("ma"), \
            rec.get("k", False)
        if (type(pr) is int and -_INT64 <= pr < _INT64 and type(ma) is int
                and 1 <= ma < _INT64 and type(at) is float and type(t) is float
                and type(keyed) is bool and "p" in rec
                and ((job_id == self._expect and job_id not in self._ids)
                     or self._find(job_id) < 0)):
            self.done_keys.pop(job_id, None)
            slot = self._add(job_id, keyed, _PENDING, pr, at, t, ma, 0, offset, size)
            if len(self._recent) < _RECENT_MAX:
                self._recent[job_id] = slot
            return
        if self._find(job_id) >= 0:
            raise ReplayError(offset, f"job {job_id!r} enqueued twice")
        if "p" not in rec:
            raise ReplayError(offset, f"enqueue of {job_id!r} has no payload")
        self.done_keys.pop(job_id, None)
        keyed = rec.get("k", False)
        if type(keyed) is not bool:
            raise ReplayError(offset, "field 'k' must be a boolean")
        self._add(job_id, keyed, _PENDING, _field(rec, "pr", int, offset),
                  _field(rec, "at", float, offset), _field(rec, "t", float, offset),
                  self._max_attempts(rec, offset), 0, offset, size)

    def _apply_snapshot_job(self, job_id: str, rec: Record, offset: int, size: int) -> None:
        if self._find(job_id) >= 0:
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
        slot = self._add(job_id, keyed, _CODES[state], priority, at, enqueued_at,
                         max_attempts, attempts, offset, size)
        seq = self._seqs[slot]
        if error is not None:
            self._errors[seq] = error
        if state is JobState.LEASED:
            self._hold(slot, job_id, token, until)
        self.next_token = max(self.next_token, token + 1)

    def _apply_snapshot_end(self, rec: Record, offset: int) -> None:
        jobs = _field(rec, "jobs", int, offset)
        if jobs != len(self.jobs):
            raise ReplayError(offset, f"snapshot announces {jobs} jobs, holds {len(self.jobs)}")
        if "seq" in rec:  # absent in snapshots written before ids were sequence numbers
            next_seq = _field(rec, "seq", int, offset)
            if not 0 <= next_seq <= _SEQ_MAX:
                raise ReplayError(offset, f"bad next sequence number {next_seq}")
            self._set_next_seq(max(self.next_seq, next_seq))
        self.next_token = max(self.next_token, _field(rec, "tok", int, offset))
        self.done = _field(rec, "done", int, offset)
        self.snapshot_seen = True

    @staticmethod
    def _max_attempts(rec: Record, offset: int) -> int:
        value = _field(rec, "ma", int, offset)
        if value < 1:
            raise ReplayError(offset, f"max_attempts {value} < 1")
        return int(value)

    def _expect_state(self, slot: int, job_id: str, code: int, offset: int) -> None:
        if self._code[slot] != code:
            raise ReplayError(offset, f"job {job_id!r} is {_CODE_STATES[self._code[slot]]}, "
                                      f"expected {_CODE_STATES[code]}")

    # -- bookkeeping --------------------------------------------------------

    def _set_next_seq(self, seq: int) -> None:
        self.next_seq = seq
        self._expect = seq_id(seq) if seq < SEQ_LIMIT else None

    def _count(self, code: int, delta: int) -> None:
        if code == _PENDING:
            self.pending += delta
        elif code == _LEASED:
            self.leased += delta
        elif code == _DEAD:
            self.dead += delta

    def _add(self, job_id: str, keyed: bool, code: int, priority: int, at: float,
             enqueued_at: float, max_attempts: int, attempts: int, loc: int,
             size: int) -> int:
        """Append a job that is not in the state yet; returns its slot."""
        seq = self.next_seq
        flags = 0
        if keyed:
            flags = _KEYED | _NAMED
        elif job_id != self._expect:
            generated = id_seq(job_id)
            if generated >= seq:  # a generated id; some seqs were skipped
                seq = generated
            else:  # another kind of id, or a generated one from the past
                flags = _NAMED
        if seq >= _SEQ_MAX:
            raise ReplayError(loc, "sequence numbers ran out")
        if flags & _NAMED:
            self._ids[job_id] = seq
            self._names[seq] = job_id
        following = self.next_seq = seq + 1  # _set_next_seq, inlined: once per job
        self._expect = f"{following:016x}" if following < SEQ_LIMIT else None
        slot = len(self._seqs)
        if code == _PENDING:
            self.pending += 1
            lanes = self._lanes
            lane = lanes.get(priority)
            if lane is None and len(lanes) < _MAX_LANES:
                lane = lanes[priority] = _Lane()
            if lane is not None and at >= lane.last_at:
                lane.seqs.append(seq)
                lane.last_at = at
                flags |= _LANED
            else:
                self._push(seq, at)
        else:
            self._count(code, 1)
        self._seqs.append(seq)
        self._code.append(code)
        self._flags.append(flags)
        self._pr.append(priority)
        self._at.append(at)
        self._t.append(enqueued_at)
        self._ma.append(max_attempts)
        self._att.append(attempts)
        self._loc.append(loc)
        self._size.append(size)
        self.live_bytes += size
        return slot

    def _push(self, seq: int, at: float) -> None:
        """Put pending job `seq` in the delayed heap, superseding its older entries."""
        self._stamp += 1
        self._versions[seq] = self._stamp
        heapq.heappush(self._delayed, (at, seq, self._stamp))

    def _hold(self, slot: int, job_id: str, token: int, until: float) -> None:
        """Record leased job `slot`'s (new) lease; its code is _LEASED already."""
        seq = self._seqs[slot]
        self._lease[seq] = (token, until)
        heapq.heappush(self._leases, (until, token, seq))
        self._held[job_id] = self._entry(slot, job_id)

    def _remove(self, slot: int, job_id: str | None = None) -> None:
        seq, code = self._seqs[slot], self._code[slot]
        if code == _LEASED:  # an ack: the common case
            self.leased -= 1
            del self._lease[seq]
            del self._held[self._id(slot) if job_id is None else job_id]
        else:
            self._count(code, -1)
            self._versions.pop(seq, None)
        self.live_bytes -= self._size[slot]
        self._code[slot] = _FREE
        self._holes += 1
        if self._flags[slot] & _NAMED:
            del self._ids[self._names.pop(seq)]
        if self._errors:
            self._errors.pop(seq, None)

    def _set_state(self, slot: int, code: int) -> None:
        old = self._code[slot]
        self._count(old, -1)
        self._code[slot] = code
        self._count(code, 1)
        seq = self._seqs[slot]
        if old == _PENDING:  # its lane and heap entries are stale from now on
            self._flags[slot] &= ~_LANED & 0xFF
            self._versions.pop(seq, None)
        if code == _PENDING:  # back from a lease or the DLQ: out of enqueue order
            self._push(seq, self._at[slot])

    def _pack(self) -> None:
        """Drop the holes removed jobs left (lanes and heaps hold seqs, not slots)."""
        holes, self._holes, self._layout = self._holes, 0, self._layout + 1
        self._recent.clear()
        lead = len(self._code) - len(self._code.lstrip(b"\3"))
        if lead == holes:  # FIFO consumption: the holes are a prefix, cut it
            for name in ("_seqs", "_pr", "_at", "_t", "_ma", "_att", "_loc", "_size"):
                del getattr(self, name)[:lead]
            self._code, self._flags = self._code[lead:], self._flags[lead:]  # frees memory
            return
        live = self._code.translate(_FREE_TO_ZERO)
        for name in ("_seqs", "_pr", "_at", "_t", "_ma", "_att", "_loc", "_size"):
            column: array[Any] = getattr(self, name)
            setattr(self, name, array(column.typecode, compress(column, live)))
        self._code = bytearray(compress(self._code, live))
        self._flags = bytearray(compress(self._flags, live))

    def relocate(self, source_offset: int, shift: int, seqs: array[int],
                 names: dict[int, str], locs: array[int], sizes: array[int]) -> bool:
        """Move payload locations to a new generation written by another handle.

        The snapshot's jobs (`seqs`/`names` in enqueue order, at `locs`/`sizes`)
        are ours whose record lies before `source_offset`; records after it were
        copied unchanged, `shift` bytes further. False (nothing changed) if the
        snapshot does not hold the jobs we know."""
        code, flags, my_seqs = self._code, self._flags, self._seqs
        if not self._names and not names and self._relocate_in_bulk(
                source_offset, shift, seqs, locs, sizes):
            return True
        new_locs, new_sizes = array("q", self._loc), array("I", self._size)
        index, count, live = 0, len(seqs), 0
        for slot in range(len(code)):
            if code[slot] == _FREE:
                continue
            loc = self._loc[slot]
            if loc >= source_offset:
                new_locs[slot] = loc + shift
                live += self._size[slot]
                continue
            seq = my_seqs[slot]
            mine = self._names[seq] if flags[slot] & _NAMED else None
            while index < count:
                theirs = names.get(index)
                if (seqs[index] == seq if mine is None and theirs is None
                        else (mine or seq_id(seq)) == (theirs or seq_id(seqs[index]))):
                    break
                index += 1
            if index == count:
                return False
            new_locs[slot], new_sizes[slot] = locs[index], sizes[index]
            live += sizes[index]
            index += 1
        self._loc, self._size, self.live_bytes = new_locs, new_sizes, live
        self._rebuild_held()
        return True

    def _relocate_in_bulk(self, source_offset: int, shift: int, seqs: array[int],
                          locs: array[int], sizes: array[int]) -> bool:
        """relocate() in the usual shape, with array slices instead of a loop per job.

        The usual shape: every removed job's hole is at the front (FIFO), so our
        live slots are one run; the snapshot holds them in the same order, after
        the jobs removed since its offset; and every slot after them was
        appended after that offset. Whatever else is true, it is checked: the
        jobs matched by position are compared seq by seq (in C), and the slots
        left over must all lie past the offset. False (nothing changed) otherwise.
        """
        code, my_seqs, old_loc, old_size = self._code, self._seqs, self._loc, self._size
        slots = len(code)
        lead = slots - len(code.lstrip(bytes([_FREE]))) if self._holes else 0
        if lead != self._holes or seqs.typecode != "q" or locs.typecode != "q" \
                or sizes.typecode != "I":
            return False
        first = bisect_left(seqs, my_seqs[lead]) if lead < slots else len(seqs)
        last = lead + len(seqs) - first  # slots [lead, last) are the snapshot's jobs
        if last > slots or my_seqs[lead:last] != seqs[first:]:
            return False
        moved = old_loc[last:]  # appended after the snapshot: a few, copied unchanged
        if any(loc < source_offset for loc in moved):
            return False
        new_loc = old_loc[:lead]
        new_loc.extend(locs[first:])
        new_loc.extend(array("q", [loc + shift for loc in moved]))
        new_size = old_size[:lead]
        new_size.extend(sizes[first:])
        new_size.extend(old_size[last:])
        self._loc, self._size = new_loc, new_size
        self.live_bytes = sum(sizes[first:]) + sum(old_size[last:])
        self._rebuild_held()
        return True

    def _rebuild_held(self) -> None:
        for job_id, entry in self._held.items():
            self._held[job_id] = self._entry(self._slot(entry.seq), job_id)

    # -- questions (read-only with respect to the state's meaning) ----------

    def ready(self, now: float, count: int) -> list[Entry]:
        """Up to `count` leasable jobs: highest priority first, FIFO within a priority."""
        delayed, ready, versions = self._delayed, self._ready, self._versions
        moved = 0
        while delayed and delayed[0][0] <= now:
            if moved == 256:  # many came due at once: one linear pass
                self._promote_all(now)
                break
            _, seq, stamp = heapq.heappop(delayed)
            if versions.get(seq) == stamp:
                heapq.heappush(ready, (-self._pr[self._slot(seq)], seq, stamp))
            moved += 1
        if not ready and len(self._lanes) == 1:  # the usual queue: one lane, nothing else
            priority, lane = next(iter(self._lanes.items()))
            return [self._entry(slot)
                    for _, _, slot in self._lane_due(priority, lane, now, count)]
        chosen: list[tuple[int, int, int]] = []
        while ready and len(chosen) < count:
            item = heapq.heappop(ready)
            if versions.get(item[1]) == item[2]:
                chosen.append(item)
        for item in chosen:  # selection must not change the state; LEASE records will
            heapq.heappush(ready, item)
        found = [(item[0], item[1], self._slot(item[1])) for item in chosen]
        for priority, lane in list(self._lanes.items()):
            found += self._lane_due(priority, lane, now, count)
        found.sort()
        return [self._entry(slot) for _, _, slot in found[:count]]

    def _lane_due(self, priority: int, lane: _Lane, now: float, count: int
                  ) -> list[tuple[int, int, int]]:
        """The first `count` jobs of a lane that are due at `now`, as (-priority, seq,
        slot); drops stale items at the head for good."""
        seqs, flags, at, slot_of = lane.seqs, self._flags, self._at, self._slot
        due: list[tuple[int, int, int]] = []
        index = lane.head
        while index < len(seqs) and len(due) < count:
            seq = seqs[index]
            slot = slot_of(seq)
            if slot < 0 or not flags[slot] & _LANED:  # leased or removed since
                index += 1
                if not due:
                    lane.head = index
                continue
            if at[slot] > now:
                break
            due.append((-priority, seq, slot))
            index += 1
        if lane.head == len(seqs):  # all consumed: a later job may start it afresh
            del self._lanes[priority]
        elif lane.head > 4096 and lane.head * 2 > len(seqs):
            del seqs[:lane.head]
            lane.head = 0
        return due

    def _promote_all(self, now: float) -> None:
        """Move every due delayed entry to the ready heap in O(n), not O(k log n)."""
        versions = self._versions
        later: list[tuple[float, int, int]] = []
        for item in self._delayed:
            if item[0] > now:
                later.append(item)
            elif versions.get(item[1]) == item[2]:
                self._ready.append((-self._pr[self._slot(item[1])], item[1], item[2]))
        heapq.heapify(later)
        heapq.heapify(self._ready)
        self._delayed = later

    def _remember(self, job_id: str, done_at: float) -> None:
        self.done_keys[job_id] = done_at
        heapq.heappush(self._key_times, (done_at, job_id))

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

    def _lease_current(self, item: tuple[float, int, int]) -> bool:
        return self._lease.get(item[2]) == (item[1], item[0])

    def expired(self, now: float) -> list[Entry]:
        """Leased jobs whose deadline is at or before `now`."""
        leases = self._leases
        found: list[tuple[float, int, int]] = []
        seen: set[int] = set()
        while leases and leases[0][0] <= now:
            item = heapq.heappop(leases)
            # An EXTEND to the deadline the lease already had pushes a second,
            # identical heap entry; answering the job twice would plan two EXPIREs.
            if self._lease_current(item) and item[2] not in seen:
                found.append(item)
                seen.add(item[2])
        for item in found:
            heapq.heappush(leases, item)
        return [self._entry(self._slot(item[2])) for item in found]

    def next_wakeup(self) -> float | None:
        """Earliest moment a job may become leasable: -inf or a past time if one is
        ready now, the first delayed job's time or lease deadline otherwise, None if
        neither exists."""
        versions = self._versions
        ready, delayed, leases = self._ready, self._delayed, self._leases
        while ready and versions.get(ready[0][1]) != ready[0][2]:
            heapq.heappop(ready)
        if ready:
            return float("-inf")
        while delayed and versions.get(delayed[0][1]) != delayed[0][2]:
            heapq.heappop(delayed)
        while leases and not self._lease_current(leases[0]):
            heapq.heappop(leases)
        times = [heap[0][0] for heap in (delayed, leases) if heap]
        for priority, lane in list(self._lanes.items()):
            first = self._lane_due(priority, lane, float("inf"), 1)
            if first:
                times.append(self._at[first[0][2]])
        return min(times) if times else None

    def entries(self, state: JobState | None = None) -> Iterator[Entry]:
        """Jobs in enqueue order, optionally of one state. Do not apply records while
        iterating: a pack would move the slots (RuntimeError)."""
        code, layout = self._code, self._layout
        if state is not None:
            wanted = _CODES.get(state)
            if wanted is None:  # DONE: finished jobs are not kept
                return
            slot = code.find(wanted)
            while slot >= 0:
                if self._layout != layout:
                    raise RuntimeError("the state changed during entries()")
                yield self._entry(slot)
                slot = code.find(wanted, slot + 1)
            return
        # All of them: zip the columns rather than index them, it is several times faster.
        names, errors, leases = self._names, self._errors, self._lease
        states, none = _CODE_STATES, (0, 0.0)
        for seq, job_code, flags, pr, at, t, ma, att, loc, size in zip(
                self._seqs, code, self._flags, self._pr, self._at, self._t, self._ma,
                self._att, self._loc, self._size, strict=True):
            if job_code == _FREE:
                continue
            if self._layout != layout:
                raise RuntimeError("the state changed during entries()")
            token, until = leases[seq] if job_code == _LEASED else none
            yield Entry(names[seq] if flags & _NAMED else f"{seq:016x}", seq, pr, at, t, ma,
                        att, states[job_code], token, until,
                        errors.get(seq) if errors else None, bool(flags & _KEYED), loc, size)

    def fingerprint(self) -> tuple[object, ...]:
        """Everything that defines the state; equal logs give equal fingerprints."""
        jobs = tuple(
            (e.id, e.priority, e.available_at, e.enqueued_at, e.max_attempts, e.attempts,
             str(e.state), e.token, e.lease_until if e.state is JobState.LEASED else 0.0,
             e.last_error, e.keyed)
            for e in self.entries()
        )
        return (jobs, tuple(sorted(self.done_keys.items())), self.pending, self.leased,
                self.dead, self.done, self.next_token)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QueueState):
            return NotImplemented
        return self.fingerprint() == other.fingerprint()

    __hash__ = None  # type: ignore[assignment]


def replay(batches: Iterable[Sequence[Applied]]) -> QueueState:
    """The state a sequence of batches describes."""
    state = QueueState()
    for batch in batches:
        state.apply_batch(batch)
    return state
