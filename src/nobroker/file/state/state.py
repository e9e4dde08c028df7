"""The replay state: decoded records in, queue state out.

This module is the queue's meaning, kept apart from every file and clock so
that it can be tested without a disk and so that replaying the same records
twice gives equal states. It must never import os, time, random or threads.
Anything that depends on the present time (which jobs are ready, which leases
have expired) takes `now` as an argument and only *reads*; the state changes
only through `apply_batch`.

How the jobs are stored (columns, ids, the indexes of due jobs) is the job
table's business (jobtable.py); the state owns one (`table`), applies the
rules to it and keeps the counters. What each job record does is in
transitions.py, what the records naming no job the table holds do (ENQUEUE among
them) in other_records.py, and what a snapshot's records do in snapshots.py (functions
of the state, called here by record type); the checks of a record's fields are
in fieldchecks.py, and the jobs by id (`jobs`) in jobindex.py. The running jobs'
progress and metadata (format 1.2) are in notes.py; the records that end a job drop
its note (an ACK or DELETE in transitions.py; PURGE, FORGET and ENQUEUE in
other_records.py).

Rules it enforces, each a ReplayError (the caller turns it into
CorruptLogError) when a record breaks it:
- batch numbers rise by exactly one per batch inside one log file;
- every record is a JSON object of the documented shape for its type;
- transitions follow TRANSITIONS (transitions.py), which `_apply` consults for every
  record naming a job; an ack/nack/extend/expire must carry the job's
  current fencing token.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Iterable, Iterator, Sequence

from ...limits import Limits
from ...result_deadlines import ResultDeadlines
from ...revivals import Dormant
from ..log.records import (
    ACKED,
    BATCH,
    CONCURRENCY_KEY,
    ID,
    RATE_KEY,
    TIME,
    TOKEN,
    Applied,
    Record,
    RecordType,
    ReplayError,
)
from .checkpointcolumns import table_columns, table_from_columns
from .fieldchecks import check_totals, field
from .jobindex import JobIndex
from .jobtable import JobTable
from .limited import LimitedJobs
from .listing import entries
from .notes import Notes
from .other_records import adopt_limited, apply_enqueue_run, apply_other
from .relocation import relocate
from .settle_run import SETTLES, apply_settle_run
from .transitions import ALLOWED, FENCED, JOB_RECORDS, TRANSITIONS, expect_state
from .vocabulary import (
    CANCELLED,
    DEAD,
    DONE,
    LEASED,
    PENDING,
    SEQ_LIMIT,
    WAITING,
    Columns,
    Entry,
    JobState,
    id_seq,
    seq_id,
)
from .waits import Waits

__all__ = ["JobState", "Entry", "JobIndex", "Columns", "QueueState", "ReplayError",
           "TRANSITIONS", "Applied", "replay", "check_totals", "seq_id", "id_seq", "SEQ_LIMIT"]


class QueueState:
    """Everything the log says, indexed for the writer's questions.

    The jobs themselves live in a JobTable (see jobtable.py); the state owns it,
    decides every change to it by the rules above, and counts what it holds.
    """

    def __init__(self, table: JobTable | None = None,
                 done_keys: dict[str, float] | None = None) -> None:
        self.table = JobTable() if table is None else table
        # Finished keyed job id -> when acked.
        self.done_keys: dict[str, float] = {} if done_keys is None else dict(done_keys)
        self.jobs = JobIndex(self.table, self.done_keys, self.live)
        self.waits = Waits()  # the waiting jobs' unmet prerequisites (depends_on=)
        self.notes = Notes()  # the jobs' progress and metadata, for those that have any
        self.limited = LimitedJobs()  # limited jobs' keys, due indexes and windows
        self.dormant = Dormant()  # cancelled dependents a requeue revives (revivals.py)
        self.result_ends = ResultDeadlines()  # kept keyed jobs whose result ends first
        self.waiting = 0
        self.pending = 0
        self.leased = 0
        self.dead = 0
        self.kept = 0  # finished jobs kept (done or cancelled), less result_ends at a time
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
        # (done_at, id) of remembered keys, a heap (stale items skipped: forgettable).
        self._key_times = [(done_at, job_id) for job_id, done_at in self.done_keys.items()]
        heapq.heapify(self._key_times)

    def live(self) -> int:
        """How many jobs are live (pending, leased, dead or waiting)."""
        return self.pending + self.leased + self.dead + self.waiting

    def kept_at(self, now: float) -> int:
        """Finished jobs kept with their outcome at `now` (stats().kept): less the keyed
        ones whose result has ended ("rkeep"), which no record marks."""
        return self.kept - self.result_ends.ended(now)

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
        return self.table.next_seq

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
        state = cls(table_from_columns(columns, next_seq), done_keys)
        states = columns.states
        state.pending, state.leased, state.dead, state.waiting, done_kept, cancelled = (
            states.count(code) for code in (PENDING, LEASED, DEAD, WAITING, DONE, CANCELLED))
        state.kept = done_kept + cancelled
        if type(paused) is not bool:
            raise ReplayError(0, f"bad paused flag {paused!r}")
        state.paused = paused
        state.live_bytes = sum(columns.size)
        state.last_batch, state.next_token, state.done = last_batch, next_token, done
        state.snapshot_seen = snapshot_seen
        return state

    def columns(self) -> Columns:
        """The jobs (live and kept finished ones) as columns in enqueue order."""
        return table_columns(self.table)

    # -- applying records ---------------------------------------------------

    def apply_batch(self, batch: Sequence[Applied]) -> None:
        first_offset = batch[0][2]
        number = batch[0][1].get(BATCH)
        if type(number) is not int or number < 1:
            raise ReplayError(first_offset, f"bad batch number {number!r}")
        if self.last_batch and number != self.last_batch + 1:
            raise ReplayError(first_offset,
                              f"batch {number} follows batch {self.last_batch}")
        latest = self.latest_time
        table = self.table
        table.start_batch()
        if self.waits.touched:  # left over from a batch that failed half-way
            self.waits.touched = {}
        if batch[0][0] == RecordType.ENQUEUE and len(batch) > 1:  # enqueue_many's
            run = apply_enqueue_run(self, batch, number)
            if run:
                stamp = batch[0][1][TIME]
                latest = stamp if stamp > latest else latest
                for _, rec, offset, _ in batch[:run]:  # limited jobs: to their keys' index
                    if RATE_KEY in rec or CONCURRENCY_KEY in rec:
                        adopt_limited(self, rec[ID], rec, offset)
                batch = batch[run:]
        elif batch[0][0] in SETTLES:  # a worker's acks and leases (settle_run.py)
            run, latest = self._apply_settle_run(batch, number, latest)
            batch = batch[run:]
        for rtype, rec, offset, size in batch:
            if rec.get(BATCH) != number:
                raise ReplayError(offset, f"record of batch {rec.get('b')!r} inside batch {number}")
            self._apply(rtype, rec, offset, size)
            stamp = rec.get(TIME)
            if stamp is None:
                stamp = rec.get(ACKED)
            if type(stamp) is float and stamp > latest:
                latest = stamp
        if self.waits.touched:
            settled = self.waits.unsettled()
            if settled is not None:
                raise ReplayError(batch[-1][2] if batch else first_offset,
                                  f"batch {number} leaves job {settled!r} waiting although "
                                  "its prerequisites settle it (a RELEASE or CANCEL is "
                                  "missing)")
        self.latest_time = latest
        self.last_batch = number
        table.pack_if_sparse()

    def _apply(self, rtype: int, rec: Record, offset: int, size: int) -> None:
        """One record: the job records through the TRANSITIONS table, the rest through
        `_apply_other`."""
        allowed = ALLOWED.get(rtype)
        if allowed is None:
            self._apply_other(rtype, rec, offset, size)
            return
        job_id = rec.get(ID)
        if type(job_id) is not str:
            job_id = field(rec, ID, str, offset)
        table = self.table
        held = table.held.get(job_id)
        slot = table.find(job_id) if held is None else table.slot(held)
        if slot < 0:
            raise ReplayError(offset, f"record type {rtype} for unknown job {job_id!r}")
        if table.code[slot] not in allowed:
            expect_state(table, slot, job_id, allowed, offset)
        if rtype in FENCED:
            token = rec.get(TOKEN)
            current = table.leases[table.seqs[slot]][0]
            if type(token) is not int:
                token = field(rec, TOKEN, int, offset)
            if current != token:
                raise ReplayError(offset,
                                  f"token {token} is not job {job_id!r}'s lease {current}")
        limited = self.limited
        if limited.keys or limited.windows:  # limited.py: holders and windows follow
            before = table.code[slot]
            JOB_RECORDS[rtype](self, slot, job_id, rec, offset, size)
            limited.after(table, slot, before, rec if rtype == RecordType.LEASE else None,
                          offset)
            return
        JOB_RECORDS[rtype](self, slot, job_id, rec, offset, size)

    def adopt_keys(self, job_id: str, rec: Record, offset: int) -> None:
        """A job just added by `rec` (or revived with its keys), if it has limit keys:
        into its keys' index (other_records.adopt_limited)."""
        adopt_limited(self, job_id, rec, offset)

    # The records that name no job the table holds (other_records.py), as a method.
    _apply_other = apply_other
    # A leading run of ACK and LEASE records in one step (tests replace it by the general path).
    _apply_settle_run = apply_settle_run

    # -- bookkeeping (the record functions' too) --------------------------

    def count(self, code: int, delta: int) -> None:
        """`delta` more jobs in state `code`."""
        if code == PENDING:
            self.pending += delta
        elif code == LEASED:
            self.leased += delta
        elif code == DEAD:
            self.dead += delta
        elif code == WAITING:
            self.waiting += delta
        else:
            self.kept += delta

    def set_state(self, slot: int, code: int) -> None:
        """Job `slot` moves to state `code`, counted."""
        self.count(self.table.set_code(slot, code), -1)
        self.count(code, 1)

    def remember(self, job_id: str, done_at: float) -> None:
        """Keyed job `job_id`, finished at `done_at`: its key is kept for a while."""
        self.done_keys[job_id] = done_at
        heapq.heappush(self._key_times, (done_at, job_id))

    def settle_notes(self, job_id: str) -> None:
        """Drop `job_id`'s note once the queue keeps neither the job nor its key."""
        if self.table.find(job_id) < 0 and job_id not in self.done_keys:
            self.notes.set(job_id, None)

    def relocate(self, source_offset: int, shift: int, seqs: array[int],
                 names: dict[int, str], locs: array[int], sizes: array[int]) -> bool:
        """Move payload locations to a new generation written by another handle.

        The snapshot's jobs (`seqs`/`names` in enqueue order, at `locs`/`sizes`)
        are ours whose record lies before `source_offset`; records after it were
        copied unchanged, `shift` bytes further. False (nothing changed) if the
        snapshot does not hold the jobs we know."""
        live_bytes = relocate(self.table, source_offset, shift, seqs, names, locs, sizes)
        if live_bytes is None:
            return False
        self.live_bytes = live_bytes
        return True

    # -- questions (read-only with respect to the state's meaning) ----------

    def ready(self, now: float, count: int, limits: Limits | None = None) -> list[Entry]:
        """Up to `count` leasable jobs: highest priority first, FIFO within a priority;
        none over the `limits` the caller declared (limited.py)."""
        table = self.table
        if self.limited.groups or limits:
            return self.limited.ready(table, now, count, limits or Limits())
        return table.due.ready(table, now, count)

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
        table = self.table
        return table.due.expired(table, now)

    def next_wakeup(self, limits: Limits | None = None, now: float = 0.0) -> float | None:
        """Earliest moment a job may become leasable (-inf or a past time: one is ready
        now; None: nothing is due), no sooner than `limits` allow as of `now`."""
        table = self.table
        if self.limited.groups or limits:
            return self.limited.next_wakeup(table, limits or Limits(), now)
        return table.due.next_wakeup(table)

    def entries(self, state: JobState | None = None, skip: int = 0, *,
                finished: bool = False) -> Iterator[Entry]:
        """Jobs in enqueue order, optionally of one state, after the first `skip`;
        without a state, the live jobs (and with `finished`, the kept finished ones
        too). Do not apply records while iterating: a pack would move the slots
        (RuntimeError)."""
        return entries(self.table, state, skip, finished=finished)

    def retention_over(self, before: float) -> list[str]:
        """Kept finished jobs whose retention ends at or before `before`, in that order."""
        table = self.table
        return [table.id(slot) for slot in table.retention.kept_until_before(table, before)]

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
                self.dead, self.kept, self.done, self.next_token, self.paused,
                self.waiting, self.waits.fingerprint(), self.limited.fingerprint(),
                self.notes.fingerprint(), self.dormant.fingerprint(),
                tuple(map(tuple, self.result_ends.items())))

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
