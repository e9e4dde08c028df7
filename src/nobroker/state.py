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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from .records import Record, RecordType

__all__ = ["JobState", "Entry", "QueueState", "ReplayError", "TRANSITIONS", "Applied"]


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


class ReplayError(ValueError):
    """A record that no correct writer produces (internal; see CorruptLogError)."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


@dataclass(slots=True, eq=True)
class Entry:
    """One job as the state knows it. The payload stays on disk at `loc`."""

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
    version: int = 0  # stamp of the latest index entry; older heap entries are stale


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


class QueueState:
    """Everything the log says, indexed for the writer's questions."""

    def __init__(self) -> None:
        self.jobs: dict[str, Entry] = {}
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
        self._next_seq = 0
        self._stamp = 0  # never reused, so a re-enqueued id cannot revive stale entries
        # Lazy heaps: an entry is valid only while its version matches.
        self._delayed: list[tuple[float, int, int, str]] = []  # (available_at, seq, ver, id)
        self._ready: list[tuple[int, int, int, str]] = []  # (-priority, seq, ver, id)
        self._leases: list[tuple[float, int, str]] = []  # (lease_until, token, id)
        self._key_times: list[tuple[float, str]] = []  # (done_at, id) of remembered keys

    @classmethod
    def restore(cls, entries: Sequence[Entry], done_keys: dict[str, float], *,
                last_batch: int, next_token: int, done: int,
                snapshot_seen: bool) -> QueueState:
        """The state holding `entries` (in enqueue order), as a checkpoint saved it."""
        state = cls()
        jobs = state.jobs
        delayed = state._delayed
        leases = state._leases
        pending, leased = JobState.PENDING, JobState.LEASED
        live = 0
        for seq, entry in enumerate(entries):
            entry.seq = seq
            entry.version = seq + 1
            jobs[entry.id] = entry
            live += entry.size
            if entry.state is pending:
                delayed.append((entry.available_at, seq, seq + 1, entry.id))
            elif entry.state is leased:
                leases.append((entry.lease_until, entry.token, entry.id))
        if len(jobs) != len(entries):
            raise ReplayError(0, "a job id appears twice in a checkpoint")
        state.live_bytes = live
        state.pending, state.leased = len(delayed), len(leases)
        state.dead = len(entries) - len(delayed) - len(leases)
        heapq.heapify(delayed)
        heapq.heapify(leases)
        state._stamp = state._next_seq = len(entries)
        state.done_keys = dict(done_keys)
        state._key_times = [(done_at, job_id) for job_id, done_at in done_keys.items()]
        heapq.heapify(state._key_times)
        state.last_batch, state.next_token, state.done = last_batch, next_token, done
        state.snapshot_seen = snapshot_seen
        return state

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
        for rtype, rec, offset, size in batch:
            if rec.get("b") != number:
                raise ReplayError(offset, f"record of batch {rec.get('b')!r} inside batch {number}")
            self._apply(rtype, rec, offset, size)
            stamp = rec.get("t", rec.get("done"))
            if type(stamp) is float and stamp > clock:
                clock = stamp
        self.clock = clock
        self.last_batch = number

    def _apply(self, rtype: int, rec: Record, offset: int, size: int) -> None:
        if rtype == RecordType.PURGE:
            for entry in [e for e in self.jobs.values() if e.state is JobState.PENDING]:
                self._remove(entry)
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
        found = self.jobs.get(job_id)
        if found is None:
            raise ReplayError(offset, f"record type {rtype} for unknown job {job_id!r}")
        entry = found
        if rtype == RecordType.REQUEUE:
            self._expect(entry, JobState.DEAD, offset)
            entry.attempts = 0
            entry.available_at = _field(rec, "at", float, offset)
            self._set_state(entry, JobState.PENDING)
            return
        token = _field(rec, "tok", int, offset)
        if rtype == RecordType.LEASE:
            self._expect(entry, JobState.PENDING, offset)
            if token < 1:
                raise ReplayError(offset, f"bad fencing token {token}")
            entry.attempts += 1
            entry.token = token
            entry.lease_until = _field(rec, "until", float, offset)
            self.next_token = max(self.next_token, token + 1)
            self._set_state(entry, JobState.LEASED)
            return
        self._expect(entry, JobState.LEASED, offset)
        if entry.token != token:
            raise ReplayError(offset, f"token {token} is not job {job_id!r}'s lease {entry.token}")
        if rtype == RecordType.ACK:
            done_at = _field(rec, "t", float, offset)
            self._remove(entry)
            self.done += 1
            if entry.keyed:
                self._remember(job_id, done_at)
        elif rtype == RecordType.EXTEND:
            entry.lease_until = _field(rec, "until", float, offset)
            heapq.heappush(self._leases, (entry.lease_until, token, job_id))
        elif rtype in (RecordType.NACK, RecordType.EXPIRE):
            at = _field(rec, "at", float, offset)
            if rtype == RecordType.NACK:
                entry.last_error = _opt_str(rec, "err", offset)
            else:
                entry.last_error = f"lease expired (attempt {entry.attempts})"
            entry.token = 0
            if entry.attempts >= entry.max_attempts:
                self._set_state(entry, JobState.DEAD)
            else:
                entry.available_at = at
                self._set_state(entry, JobState.PENDING)
        else:
            raise ReplayError(offset, f"unknown record type {rtype}")

    def _apply_enqueue(self, job_id: str, rec: Record, offset: int, size: int) -> None:
        # The hot path of replay: check every field in one expression, and only
        # when something is off, walk the checks one by one to name it.
        pr, at, t, ma, keyed = rec.get("pr"), rec.get("at"), rec.get("t"), rec.get("ma"), \
            rec.get("k", False)
        if (type(pr) is int and -_INT64 <= pr < _INT64 and type(ma) is int
                and 1 <= ma < _INT64 and type(at) is float and type(t) is float
                and type(keyed) is bool and "p" in rec and job_id not in self.jobs):
            self.done_keys.pop(job_id, None)
            self._add(Entry(job_id, 0, pr, at, t, ma, 0, JobState.PENDING, 0, 0.0, None,
                            keyed, offset, size))
            return
        if job_id in self.jobs:
            raise ReplayError(offset, f"job {job_id!r} enqueued twice")
        if "p" not in rec:
            raise ReplayError(offset, f"enqueue of {job_id!r} has no payload")
        self.done_keys.pop(job_id, None)
        keyed = rec.get("k", False)
        if type(keyed) is not bool:
            raise ReplayError(offset, "field 'k' must be a boolean")
        self._add(Entry(
            id=job_id, seq=0,
            priority=_field(rec, "pr", int, offset),
            available_at=_field(rec, "at", float, offset),
            enqueued_at=_field(rec, "t", float, offset),
            max_attempts=self._max_attempts(rec, offset),
            attempts=0, state=JobState.PENDING, token=0, lease_until=0.0,
            last_error=None, keyed=keyed, loc=offset, size=size,
        ))

    def _apply_snapshot_job(self, job_id: str, rec: Record, offset: int, size: int) -> None:
        if job_id in self.jobs:
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
        entry = Entry(
            id=job_id, seq=0,
            priority=_field(rec, "pr", int, offset),
            available_at=_field(rec, "at", float, offset),
            enqueued_at=_field(rec, "t", float, offset),
            max_attempts=self._max_attempts(rec, offset),
            attempts=attempts, state=JobState.PENDING, token=token,
            lease_until=_field(rec, "until", float, offset) if "until" in rec else 0.0,
            last_error=_opt_str(rec, "err", offset), keyed=keyed, loc=offset, size=size,
        )
        self._add(entry)
        if state is not JobState.PENDING:
            self._set_state(entry, state)
        self.next_token = max(self.next_token, token + 1)

    def _apply_snapshot_end(self, rec: Record, offset: int) -> None:
        jobs = _field(rec, "jobs", int, offset)
        if jobs != len(self.jobs):
            raise ReplayError(offset, f"snapshot announces {jobs} jobs, holds {len(self.jobs)}")
        self.next_token = max(self.next_token, _field(rec, "tok", int, offset))
        self.done = _field(rec, "done", int, offset)
        self.snapshot_seen = True

    @staticmethod
    def _max_attempts(rec: Record, offset: int) -> int:
        value = _field(rec, "ma", int, offset)
        if value < 1:
            raise ReplayError(offset, f"max_attempts {value} < 1")
        return int(value)

    @staticmethod
    def _expect(entry: Entry, state: JobState, offset: int) -> None:
        if entry.state is not state:
            raise ReplayError(offset, f"job {entry.id!r} is {entry.state}, expected {state}")

    # -- bookkeeping --------------------------------------------------------

    def _count(self, state: JobState, delta: int) -> None:
        if state is JobState.PENDING:
            self.pending += delta
        elif state is JobState.LEASED:
            self.leased += delta
        elif state is JobState.DEAD:
            self.dead += delta

    def _add(self, entry: Entry) -> None:
        entry.seq = self._next_seq
        self._next_seq += 1
        self.jobs[entry.id] = entry
        self.live_bytes += entry.size
        self._count(entry.state, 1)
        self._index(entry)

    def _remove(self, entry: Entry) -> None:
        del self.jobs[entry.id]
        self.live_bytes -= entry.size
        self._count(entry.state, -1)

    def _set_state(self, entry: Entry, state: JobState) -> None:
        self._count(entry.state, -1)
        entry.state = state
        self._count(state, 1)
        self._index(entry)

    def _index(self, entry: Entry) -> None:
        self._stamp += 1
        version = entry.version = self._stamp
        if entry.state is JobState.PENDING:
            heapq.heappush(self._delayed, (entry.available_at, entry.seq, version, entry.id))
        elif entry.state is JobState.LEASED:
            heapq.heappush(self._leases, (entry.lease_until, entry.token, entry.id))

    # -- questions (read-only with respect to the state's meaning) ----------

    def ready(self, now: float, count: int) -> list[Entry]:
        """Up to `count` leasable jobs: highest priority first, FIFO within a priority."""
        delayed, ready, jobs = self._delayed, self._ready, self.jobs
        moved = 0
        while delayed and delayed[0][0] <= now:
            if moved == 256:  # many came due at once (a fresh open): one linear pass
                self._promote_all(now)
                break
            _, seq, version, job_id = heapq.heappop(delayed)
            entry = jobs.get(job_id)
            if entry is not None and entry.version == version:
                heapq.heappush(ready, (-entry.priority, seq, version, job_id))
            moved += 1
        chosen: list[tuple[int, int, int, str]] = []
        while ready and len(chosen) < count:
            item = heapq.heappop(ready)
            entry = jobs.get(item[3])
            if entry is not None and entry.version == item[2]:
                chosen.append(item)
        for item in chosen:  # selection must not change the state; LEASE records will
            heapq.heappush(ready, item)
        return [jobs[item[3]] for item in chosen]

    def _promote_all(self, now: float) -> None:
        """Move every due delayed entry to the ready heap in O(n), not O(k log n)."""
        jobs = self.jobs
        later: list[tuple[float, int, int, str]] = []
        for item in self._delayed:
            if item[0] > now:
                later.append(item)
                continue
            entry = jobs.get(item[3])
            if entry is not None and entry.version == item[2]:
                self._ready.append((-entry.priority, item[1], item[2], item[3]))
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

    def _jobs_version(self, job_id: str) -> int:
        entry = self.jobs.get(job_id)
        return -1 if entry is None else entry.version

    def expired(self, now: float) -> list[Entry]:
        """Leased jobs whose deadline is at or before `now`."""
        leases, jobs = self._leases, self.jobs
        found: list[tuple[float, int, str]] = []
        seen: set[str] = set()
        while leases and leases[0][0] <= now:
            item = heapq.heappop(leases)
            entry = jobs.get(item[2])
            # An EXTEND to the deadline the lease already had pushes a second,
            # identical heap entry; answering the job twice would plan two EXPIREs.
            if (entry is not None and entry.state is JobState.LEASED and item[2] not in seen
                    and entry.token == item[1] and entry.lease_until == item[0]):
                found.append(item)
                seen.add(item[2])
        for item in found:
            heapq.heappush(leases, item)
        return [jobs[item[2]] for item in found]

    def next_wakeup(self) -> float | None:
        """Earliest moment a job may become leasable: -inf if one is ready now, the
        first delayed job's time or lease deadline otherwise, None if neither exists."""
        jobs = self._jobs_version
        ready, delayed, leases = self._ready, self._delayed, self._leases
        while ready and jobs(ready[0][3]) != ready[0][2]:
            heapq.heappop(ready)
        if ready:
            return float("-inf")
        while delayed and jobs(delayed[0][3]) != delayed[0][2]:
            heapq.heappop(delayed)
        while leases:
            entry = self.jobs.get(leases[0][2])
            if (entry is not None and entry.state is JobState.LEASED
                    and entry.token == leases[0][1] and entry.lease_until == leases[0][0]):
                break
            heapq.heappop(leases)
        times = [heap[0][0] for heap in (delayed, leases) if heap]
        return min(times) if times else None

    def entries(self, state: JobState | None = None) -> Iterator[Entry]:
        """Jobs in enqueue order, optionally of one state."""
        for entry in sorted(self.jobs.values(), key=lambda e: e.seq):
            if state is None or entry.state is state:
                yield entry

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
