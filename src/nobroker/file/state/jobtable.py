"""The job table: how the replay state stores its jobs, compactly. QueueState
(state.py) decides what records mean; this module keeps the jobs they describe
and finds them again. Pure: no os, time, random or threads.

Jobs live in columns (arrays, one slot per job in enqueue order), not one
object each: a pending job costs about 70 bytes. A job's sequence number `seq`
rises in log order and a generated id *is* its seq (seq_id), so only other ids
(idempotency keys, older versions' ids) need a dict; fields most jobs never use
(lease, error) are sparse dicts by seq. The table keeps the index of what is
due (a FIFO lane per priority, lazy heaps, lease deadlines: due.py).

A finished job whose outcome is kept (acked with a result, or cancelled) stays
in its slot, DONE or CANCELLED, until its retention ends (then in
`available_at`); `record_offset`/`size` locate the record holding its result
(an ACK, a CANCEL or a snapshot's FINISHED); `retention` (retention.py) orders
these jobs by that end, with no Python object per job.

Functions over the table read it out (checkpointcolumns.py, listing.py) and
move its payload locations after a peer's compaction (relocation.py); the ids a
writer gives its next jobs are jobindex.py's. It keeps no counters (the
state's). The state reads the columns directly on its hot paths, but changes
them only through the methods below.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import compress
from typing import Any, Final

from ..log.records import ReplayError
from .due import LANED, DueJobs
from .retention import KeptJobs
from .vocabulary import (
    CODE_STATES,
    FREE,
    FREE_TO_ZERO,
    KEYED,
    LEASED,
    NAMED,
    PENDING,
    SEQ_LIMIT,
    SEQ_MAX,
    Entry,
    id_seq,
    seq_id,
)

__all__ = ["JobTable"]

_PACK_AT: Final = 1024  # holes removals may leave before the columns are packed
_RECENT_MAX: Final = 1 << 14  # ids of a batch's new jobs whose slot is cached
# The per-slot columns that pack() compacts (code and flags are bytearrays, apart).
_COLUMN_NAMES: Final = ("seqs", "priority", "available_at", "enqueued_at", "max_attempts",
                        "attempts", "record_offset", "size")


class JobTable:
    """The live jobs (and kept finished ones) in columns, found by id or seq."""

    def __init__(self) -> None:
        self.next_seq = 0  # the next job's seq; carried by snapshots and checkpoints
        self.expect: str | None = seq_id(0)  # the id a writer gives it (replay fast path)
        # The columns. A removed job leaves a hole (FREE) until pack().
        self.seqs = array("q")
        self.code = bytearray()
        self.flags = bytearray()
        self.priority = array("q")
        self.available_at = array("d")
        self.enqueued_at = array("d")
        self.max_attempts = array("q")
        self.attempts = array("q")
        self.record_offset = array("q")  # offset of the record holding the payload
        self.size = array("I")  # bytes of that record, for the live-bytes estimate
        self.holes = 0
        self.layout = 0  # bumped when slots move, so a running listing can tell
        self.ids: dict[str, int] = {}  # id -> seq, for ids that are not seq_id(seq)
        self.names: dict[int, str] = {}  # seq -> such an id
        self.leases: dict[int, tuple[int, float]] = {}  # seq -> (token, lease_until)
        self.held: dict[str, int] = {}  # leased jobs' id -> seq: every settle looks it up
        # Their entries, built on first look (held_entry: most leases applied are peers',
        # never looked at here) and dropped when the lease changes: snapshots.
        self._held_views: dict[str, Entry] = {}
        # The slots of the jobs the latest batch added: the writer views each of them
        # right after its commit, and would otherwise parse every id back.
        self.recent: dict[str, int] = {}
        self.errors: dict[int, str] = {}  # seq -> last_error
        self.due = DueJobs()  # the indexes of due jobs (due.py)
        self.retention = KeptJobs()  # the kept finished jobs by end of retention

    # -- finding jobs -------------------------------------------------------

    def slot(self, seq: int) -> int:
        """The slot of the live job `seq`, or -1."""
        seqs = self.seqs
        if not seqs:
            return -1
        slot = seq - seqs[0]  # exact while no hole before it has been packed out
        if not (0 <= slot < len(seqs) and seqs[slot] == seq):
            slot = bisect_left(seqs, seq)
            if slot == len(seqs) or seqs[slot] != seq:
                return -1
        return -1 if self.code[slot] == FREE else slot

    def find(self, job_id: str) -> int:
        """The slot of the live job `job_id`, or -1."""
        if not isinstance(job_id, str):
            return -1
        slot = self.recent.get(job_id, -1)
        if slot >= 0 and self.code[slot] != FREE:
            return slot
        seq = self.ids.get(job_id)
        generated = seq is None
        if seq is None:
            seq = id_seq(job_id)
            if seq < 0:
                return -1
        slot = self.slot(seq)
        if slot < 0 or (generated and self.flags[slot] & NAMED):
            return -1
        return slot

    def held_entry(self, job_id: str) -> Entry | None:
        """The entry of leased job `job_id` (None if it holds no lease)."""
        view = self._held_views.get(job_id)
        if view is None:
            seq = self.held.get(job_id)
            if seq is None:
                return None
            view = self._held_views[job_id] = self.entry(self.slot(seq), job_id)
        return view

    def id(self, slot: int) -> str:
        seq = self.seqs[slot]
        return self.names[seq] if self.flags[slot] & NAMED else f"{seq:016x}"

    def entry(self, slot: int, job_id: str | None = None) -> Entry:
        seq, code = self.seqs[slot], self.code[slot]
        token, until = self.leases[seq] if code == LEASED else (0, 0.0)
        errors = self.errors
        return Entry(job_id or self.id(slot), seq, self.priority[slot], self.available_at[slot],
                     self.enqueued_at[slot], self.max_attempts[slot], self.attempts[slot],
                     CODE_STATES[code], token, until, errors.get(seq) if errors else None,
                     self.flags[slot] & KEYED == KEYED, self.record_offset[slot], self.size[slot])

    # -- changing jobs (the state's rules decide when; counting is theirs) ---

    def set_next_seq(self, seq: int) -> None:
        self.next_seq = seq
        self.expect = seq_id(seq) if seq < SEQ_LIMIT else None

    def add(self, job_id: str, keyed: bool, code: int, priority: int, at: float,
            enqueued_at: float, max_attempts: int, attempts: int, loc: int,
            size: int, recent: bool = False) -> int:
        """Append a job that is not in the table yet; returns its slot. `recent`: a
        new job the writer is about to view (its slot is cached until the next batch)."""
        seq = self.next_seq
        flags = 0
        if keyed:
            flags = KEYED | NAMED
        elif job_id != self.expect:
            generated = id_seq(job_id)
            if generated >= seq:  # a generated id; some seqs were skipped
                seq = generated
            else:  # another kind of id, or a generated one from the past
                flags = NAMED
        if seq >= SEQ_MAX:
            raise ReplayError(loc, "sequence numbers ran out")
        if flags & NAMED:
            self.ids[job_id] = seq
            self.names[seq] = job_id
        following = self.next_seq = seq + 1  # set_next_seq, inlined: once per job
        self.expect = f"{following:016x}" if following < SEQ_LIMIT else None
        slot = len(self.seqs)
        if code == PENDING:
            if self.due.enter_lane(seq, priority, at):
                flags |= LANED
            else:
                self.due.push(seq, at)
        if recent and len(self.recent) < _RECENT_MAX:
            self.recent[job_id] = slot
        self.seqs.append(seq)
        self.code.append(code)
        self.flags.append(flags)
        self.priority.append(priority)
        self.available_at.append(at)
        self.enqueued_at.append(enqueued_at)
        self.max_attempts.append(max_attempts)
        self.attempts.append(attempts)
        self.record_offset.append(loc)
        self.size.append(size)
        return slot

    def add_run(self, count: int, priority: int, at: float, enqueued_at: float,
                max_attempts: int, locs: list[int], sizes: list[int]) -> bool:
        """add() of `count` new unkeyed pending jobs alike but for their records, whose
        ids are the next `count` generated ones (the caller checked): enqueue_many's
        batch, in one step. False, and nothing changed, unless they all join their
        priority's lane (the other case is add()'s, one job at a time)."""
        seq = self.next_seq
        end = seq + count
        if end > SEQ_LIMIT:
            return False
        seqs = range(seq, end)
        if not self.due.enter_lane_run(seqs, priority, at):
            return False
        # Not cached in `recent`: enqueue_many views its jobs without a lookup, and
        # formatting their ids again would cost more than all the columns together.
        self.seqs.extend(seqs)
        self.code.extend(bytes((PENDING,)) * count)
        self.flags.extend(bytes((LANED,)) * count)
        # A one-item array times count: a hundred times quicker than extend(repeat()).
        self.priority.extend(array("q", (priority,)) * count)
        self.available_at.extend(array("d", (at,)) * count)
        self.enqueued_at.extend(array("d", (enqueued_at,)) * count)
        self.max_attempts.extend(array("q", (max_attempts,)) * count)
        self.attempts.extend(array("q", (0,)) * count)
        self.record_offset.extend(locs)
        self.size.extend(sizes)
        self.set_next_seq(end)
        return True

    def lease(self, slot: int, job_id: str, token: int, until: float) -> None:
        """Pending job `slot` becomes leased, one more attempt used: set_code's part
        of the move and hold(), unrolled, as every lease passes here."""
        seq = self.seqs[slot]
        self.code[slot] = LEASED
        self.attempts[slot] += 1
        flags = self.flags[slot]
        due = self.due
        if flags & LANED:
            self.flags[slot] = flags ^ LANED
        else:
            due.drop(seq)
        self.leases[seq] = (token, until)
        due.add_deadline(until, token, seq)
        self.held[job_id] = seq
        self._held_views.pop(job_id, None)

    def hold(self, slot: int, job_id: str, token: int, until: float) -> None:
        """Record leased job `slot`'s (new) lease; its code is LEASED already."""
        seq = self.seqs[slot]
        self.leases[seq] = (token, until)
        self.due.add_deadline(until, token, seq)
        self.held[job_id] = seq
        self._held_views.pop(job_id, None)

    def unhold(self, seq: int, job_id: str) -> None:
        """Forget leased job `seq`'s lease, before its code changes."""
        del self.leases[seq]
        del self.held[job_id]
        self._held_views.pop(job_id, None)

    def remove(self, slot: int, job_id: str | None = None) -> int:
        """Drop the job at `slot`, leaving a hole; returns its record's size."""
        seq, code = self.seqs[slot], self.code[slot]
        if code == LEASED:  # an ack: the common case
            del self.leases[seq]
            job_id = self.id(slot) if job_id is None else job_id
            del self.held[job_id]
            self._held_views.pop(job_id, None)
        elif code == PENDING:
            self.due.drop(seq)
        self.code[slot] = FREE
        self.holes += 1
        if self.flags[slot] & NAMED:
            del self.ids[self.names.pop(seq)]
        if self.errors:
            self.errors.pop(seq, None)
        return self.size[slot]

    def remove_pending(self) -> tuple[int, int]:
        """Drop every pending job; returns how many, and the bytes of their records."""
        removed = size = 0
        slot = self.code.find(PENDING)
        while slot >= 0:
            size += self.remove(slot)
            removed += 1
            slot = self.code.find(PENDING, slot + 1)
        self.due.clear_pending()
        return removed, size

    def finish(self, slot: int, job_id: str, code: int, keep: float, kept_until: float,
               loc: int, size: int) -> int:
        """Pending or leased job `slot` finishes as DONE or CANCELLED and is kept `keep`
        seconds, until `kept_until`, its outcome in the record at `loc`; returns its old
        record's size."""
        seq, old = self.seqs[slot], self.code[slot]
        if old == LEASED:
            self.unhold(seq, job_id)
        elif old == PENDING:  # its lane and heap entries are stale from now on
            self.flags[slot] &= ~LANED & 0xFF
            self.due.drop(seq)
        self.code[slot] = code
        self.available_at[slot] = kept_until
        freed = self.size[slot]
        self.record_offset[slot], self.size[slot] = loc, size
        self.retention.keep(seq, keep, kept_until)
        return freed

    def unfinish(self, slot: int, code: int, at: float) -> None:
        """Kept finished job `slot` is live again in state `code` (not PENDING or LEASED:
        a revived dependent waits), from `at`; its record stays where it is."""
        self.code[slot] = code
        self.available_at[slot] = at
        self.retention.unkeep()

    def set_available(self, slot: int, at: float) -> None:
        """Job `slot`'s available_at, for a job that is not pending (see set_code)."""
        self.available_at[slot] = at

    def start_batch(self) -> None:
        """A new batch is being applied: the previous one's new jobs are viewed already."""
        self.recent.clear()

    def set_error(self, seq: int, error: str | None) -> None:
        """Job `seq`'s last error (None: it has none)."""
        if error is None:
            self.errors.pop(seq, None)
        else:
            self.errors[seq] = error

    def make_pending(self, slot: int, at: float, *, reset_attempts: bool = False) -> int:
        """Job `slot` becomes pending again, leasable from `at` (a retry, or a dead
        job requeued with a fresh attempt budget); returns its old code."""
        self.available_at[slot] = at
        if reset_attempts:
            self.attempts[slot] = 0
        return self.set_code(slot, PENDING)

    def pack_if_sparse(self) -> None:
        """pack() once removals left many holes, and most slots are holes."""
        if self.holes > _PACK_AT and self.holes * 2 > len(self.code):
            self.pack()

    def set_code(self, slot: int, code: int) -> int:
        """Move job `slot` to state `code` (not LEASED: see lease); returns the old code."""
        old = self.code[slot]
        self.code[slot] = code
        seq = self.seqs[slot]
        if old == PENDING:  # its lane and heap entries are stale from now on
            self.flags[slot] &= ~LANED & 0xFF
            self.due.drop(seq)
        if code == PENDING:  # back from a lease or the DLQ: out of enqueue order
            self.due.push(seq, self.available_at[slot])
        return old

    def pack(self) -> None:
        """Drop the holes removed jobs left (lanes and heaps hold seqs, not slots)."""
        holes, self.holes, self.layout = self.holes, 0, self.layout + 1
        self.recent.clear()
        lead = len(self.code) - len(self.code.lstrip(bytes([FREE])))
        if lead == holes:  # FIFO consumption: the holes are a prefix, cut it
            for name in _COLUMN_NAMES:
                del getattr(self, name)[:lead]
            self.code, self.flags = self.code[lead:], self.flags[lead:]  # frees memory
            return
        live = self.code.translate(FREE_TO_ZERO)
        for name in _COLUMN_NAMES:
            column: array[Any] = getattr(self, name)
            setattr(self, name, array(column.typecode, compress(column, live)))
        self.code = bytearray(compress(self.code, live))
        self.flags = bytearray(compress(self.flags, live))

    def move_records(self, record_offset: array[int], size: array[int]) -> None:
        """Every job's record moved (a peer's compaction, relocation.py): these are the
        new `record_offset` and `size` columns."""
        self.record_offset, self.size = record_offset, size
        self._held_views.clear()  # their record offsets moved: build them again
