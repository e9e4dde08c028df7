"""The job table: how the replay state stores its jobs, compactly.

QueueState (state.py) decides what records mean; this module only keeps the
jobs they describe and finds them again. Like state.py it is pure: it must
never import os, time, random or threads, and anything about the present
time takes `now` as an argument.

Jobs live in columns (arrays, one slot per job in enqueue order) rather than
one object each: a pending job costs about 70 bytes. Every job has a
sequence number `seq`, rising in log order; a generated id *is* its seq
(seq_id), so only other ids (idempotency keys, ids of older versions) need
a dict. Fields most jobs never use (lease, error) are sparse dicts by seq.
The table also keeps the indexes that answer "which job is due": a FIFO
lane per priority, lazy heaps for the rest, and the lease deadlines.

It keeps no counters: the state counts jobs by state, and bytes, as it
applies the rules. The state reads the columns directly, on its hot paths,
but changes them only through the methods below (add, lease, hold, unhold,
make_pending, set_code, set_error, remove, ...).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, islice
from typing import Any, Final

from ..models import JobState

__all__ = ["JobState", "Entry", "ReplayError", "Columns", "JobTable",
           "seq_id", "id_seq", "SEQ_LIMIT", "SEQ_MAX", "PENDING", "LEASED", "DEAD", "FREE",
           "KEYED", "CODES", "CODE_STATES"]


# Entry and ReplayError belong to the state's vocabulary (state.py re-exports
# them); they are defined here because the table stores and builds them.

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


# Generated job ids are the job's sequence number as 16 hex digits, below 2**48 so
# that they start with "0000": id -> job is arithmetic, and no id string is kept.
SEQ_LIMIT: Final = 1 << 48
_HEX: Final = "0123456789abcdef"
SEQ_MAX: Final = 1 << 62  # past it a seq could overflow an int64 column

# Slot state codes (the checkpoint's too) and flags.
PENDING, LEASED, DEAD, FREE = 0, 1, 2, 3
CODE_STATES: Final = (JobState.PENDING, JobState.LEASED, JobState.DEAD)
CODES: Final = {JobState.PENDING: PENDING, JobState.LEASED: LEASED, JobState.DEAD: DEAD}
KEYED: Final = 1  # the id is a caller's idempotency key
_NAMED: Final = 2  # the id is not seq_id(seq): it lives in the ids/names dicts
_LANED: Final = 4  # pending since its enqueue and queued in its priority's lane

_FREE_TO_ZERO: Final = bytes([1, 1, 1, 0] + [1] * 252)  # live slot -> 1, hole -> 0
_PENDING_MASK: Final = bytes([1] + [0] * 255)  # pending slot -> 1
_WITH_LANED: Final = bytes((flags | _LANED) & 0xFF for flags in range(256))
_MAX_LANES: Final = 16  # ready() looks at every lane: other priorities use the heaps
_PACK_AT: Final = 1024  # holes removals may leave before the columns are packed
_SKIP_CHUNK: Final = 1 << 16  # slots counted per C call when a page skips jobs
_RECENT_MAX: Final = 1 << 14  # ids of a batch's new jobs whose slot is cached
# The per-slot columns that pack() compacts (code and flags are bytearrays, apart).
_COLUMN_NAMES: Final = ("seqs", "priority", "available_at", "enqueued_at", "max_attempts",
                        "attempts", "record_offset", "size")


def seq_id(seq: int) -> str:
    """The generated job id of sequence number `seq` (< SEQ_LIMIT)."""
    return f"{seq:016x}"


def id_seq(job_id: str) -> int:
    """The sequence number a generated-form id names, or -1 for any other id."""
    if len(job_id) == 16 and job_id.startswith("0000") and not job_id.strip(_HEX):
        return int(job_id, 16)
    return -1


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


class JobTable:
    """The live jobs in columns, found by id or seq, and scheduled by due time."""

    def __init__(self) -> None:
        self.next_seq = 0  # the next job's seq; carried by snapshots and checkpoints
        self.expect: str | None = seq_id(0)  # the id a writer gives it (replay fast path)
        self._issued = 0  # writer side: seqs handed out as ids for records not yet applied
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
        self._layout = 0  # bumped when slots move, so a running entries() can tell
        self.ids: dict[str, int] = {}  # id -> seq, for ids that are not seq_id(seq)
        self.names: dict[int, str] = {}  # seq -> such an id
        self.leases: dict[int, tuple[int, float]] = {}  # seq -> (token, lease_until)
        # Leased jobs are few and each call that settles one looks it up, twice: keep
        # their entries built (replaced, never changed, so entries stay snapshots).
        self.held: dict[str, Entry] = {}
        # The slots of the jobs the latest batch added: the writer views each of them
        # right after its commit, and would otherwise parse every id back.
        self.recent: dict[str, int] = {}
        self.errors: dict[int, str] = {}  # seq -> last_error
        self._lanes: dict[int, _Lane] = {}  # priority -> lane
        # Pending jobs outside the lanes sit in lazy heaps: an entry is valid only
        # while its stamp is the job's current one (stamps are never reused).
        self._stamp = 0
        self._versions: dict[int, int] = {}  # seq -> stamp, for those jobs only
        self._delayed: list[tuple[float, int, int]] = []  # (available_at, seq, stamp)
        self._ready: list[tuple[int, int, int]] = []  # (-priority, seq, stamp)
        self._deadlines: list[tuple[float, int, int]] = []  # (lease_until, token, seq)

    @classmethod
    def from_columns(cls, columns: Columns, next_seq: int) -> JobTable:
        """The table a checkpoint's columns describe; ReplayError if they cannot be."""
        c = columns
        count = len(c.seqs)
        if not all(len(column) == count for column in (
                c.states, c.keyed, c.priority, c.available_at, c.enqueued_at,
                c.max_attempts, c.attempts, c.token, c.lease_until, c.loc, c.size)):
            raise ReplayError(0, "column lengths disagree")
        seqs = c.seqs
        if (c.states.translate(None, b"\0\1\2") or c.keyed.translate(None, b"\0\1")
                or type(next_seq) is not int or not 0 <= next_seq <= SEQ_MAX
                or (count and not (0 <= seqs[0] and seqs[-1] < next_seq))
                or not all(map(int.__lt__, seqs, islice(seqs, 1, None)))):
            raise ReplayError(0, "bad states, flags or sequence numbers")
        table = cls()
        table.seqs, table.priority, table.available_at = seqs, c.priority, c.available_at
        table.enqueued_at, table.max_attempts = c.enqueued_at, c.max_attempts
        table.attempts, table.record_offset, table.size = c.attempts, c.loc, c.size
        table.code = bytearray(c.states)
        flags = table.flags = bytearray(c.keyed)  # KEYED is 1
        for index, job_id in c.names.items():
            if not 0 <= index < count or type(job_id) is not str:
                raise ReplayError(0, "bad job id")
            flags[index] |= _NAMED
            table.ids[job_id] = seqs[index]
            table.names[seqs[index]] = job_id
        if len(table.ids) != len(c.names):
            raise ReplayError(0, "a job id appears twice in a checkpoint")
        for job_id in c.names.values():  # nor may a key look like another job's seq id
            slot = table.slot(id_seq(job_id)) if id_seq(job_id) >= 0 else -1
            if slot >= 0 and not flags[slot] & _NAMED:
                raise ReplayError(0, "a job id appears twice in a checkpoint")
        high = bisect_left(seqs, SEQ_LIMIT)
        if any(not flags[slot] & _NAMED for slot in range(high, count)):
            raise ReplayError(0, "a job without an id")
        for index, error in c.errors.items():
            if not 0 <= index < count or type(error) is not str:
                raise ReplayError(0, "error for a job that does not exist")
            table.errors[seqs[index]] = error
        states = c.states
        slot = states.find(LEASED)
        while slot >= 0:
            seq, token, until = seqs[slot], c.token[slot], c.lease_until[slot]
            table.leases[seq] = (token, until)
            table._deadlines.append((until, token, seq))
            table.held[table.id(slot)] = table.entry(slot)
            slot = states.find(LEASED, slot + 1)
        heapq.heapify(table._deadlines)
        table._schedule_all()
        table.set_next_seq(next_seq)
        return table

    def _schedule_all(self) -> None:
        """Queue every pending job of freshly restored columns, as add() would have."""
        count = len(self.seqs)
        pr, at = self.priority, self.available_at
        if (count and self.code.count(PENDING) == count and pr.count(pr[0]) == count
                and all(map(float.__le__, at, islice(at, 1, None)))):
            # The usual queue: one priority, due in enqueue order. One lane, no loop.
            lane = self._lanes[pr[0]] = _Lane()
            lane.seqs = array("q", self.seqs)
            lane.last_at = at[-1]
            self.flags = bytearray(self.flags.translate(_WITH_LANED))
            return
        seqs = self.seqs
        for slot in compress(range(count), self.code.translate(_PENDING_MASK)):
            when = at[slot]
            if self._enter_lane(seqs[slot], pr[slot], when):
                self.flags[slot] |= _LANED
            else:
                self._stamp += 1
                self._versions[seqs[slot]] = self._stamp
                self._delayed.append((when, seqs[slot], self._stamp))
        heapq.heapify(self._delayed)

    def columns(self) -> Columns:
        """The live jobs as columns in enqueue order (see Columns)."""
        live = self.code.translate(_FREE_TO_ZERO) if self.holes else None

        def packed(column: array[Any]) -> array[Any]:
            return array(column.typecode, column if live is None else compress(column, live))

        seqs = packed(self.seqs)
        count = len(seqs)
        states = bytes(self.code if live is None else compress(self.code, live))
        keyed = bytes(self.flags if live is None else compress(self.flags, live))
        keyed = keyed.translate(bytes(flags & KEYED for flags in range(256)))
        token, until = array("q", bytes(8 * count)), array("d", bytes(8 * count))
        for seq, (tok, deadline) in self.leases.items():
            index = bisect_left(seqs, seq)
            token[index], until[index] = tok, deadline
        return Columns(
            seqs, states, keyed, packed(self.priority), packed(self.available_at),
            packed(self.enqueued_at), packed(self.max_attempts), packed(self.attempts), token,
            until, packed(self.record_offset), packed(self.size),
            names={bisect_left(seqs, seq): name for seq, name in self.names.items()},
            errors={bisect_left(seqs, seq): error for seq, error in self.errors.items()})

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
        if slot < 0 or (generated and self.flags[slot] & _NAMED):
            return -1
        return slot

    def id(self, slot: int) -> str:
        seq = self.seqs[slot]
        return self.names[seq] if self.flags[slot] & _NAMED else f"{seq:016x}"

    def entry(self, slot: int, job_id: str | None = None) -> Entry:
        seq, code = self.seqs[slot], self.code[slot]
        token, until = self.leases[seq] if code == LEASED else (0, 0.0)
        errors = self.errors
        return Entry(job_id or self.id(slot), seq, self.priority[slot], self.available_at[slot],
                     self.enqueued_at[slot], self.max_attempts[slot], self.attempts[slot],
                     CODE_STATES[code], token, until, errors.get(seq) if errors else None,
                     self.flags[slot] & KEYED == KEYED, self.record_offset[slot], self.size[slot])

    def reserve(self, taken: Container[str]) -> str | None:
        """A generated id held by no live job and not in `taken`, never the same twice."""
        seq = max(self._issued, self.next_seq)
        while seq < SEQ_LIMIT:
            job_id = f"{seq:016x}"
            seq += 1
            if job_id not in self.ids and job_id not in taken:
                self._issued = seq
                return job_id
        return None

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
            flags = KEYED | _NAMED
        elif job_id != self.expect:
            generated = id_seq(job_id)
            if generated >= seq:  # a generated id; some seqs were skipped
                seq = generated
            else:  # another kind of id, or a generated one from the past
                flags = _NAMED
        if seq >= SEQ_MAX:
            raise ReplayError(loc, "sequence numbers ran out")
        if flags & _NAMED:
            self.ids[job_id] = seq
            self.names[seq] = job_id
        following = self.next_seq = seq + 1  # set_next_seq, inlined: once per job
        self.expect = f"{following:016x}" if following < SEQ_LIMIT else None
        slot = len(self.seqs)
        if code == PENDING:
            if self._enter_lane(seq, priority, at):
                flags |= _LANED
            else:
                self._push(seq, at)
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

    def _enter_lane(self, seq: int, priority: int, at: float) -> bool:
        """Append pending job `seq` to its priority's lane if that keeps the lane in
        due order (and a lane is free for a new priority); False: it belongs in the
        heaps. The one place a job joins a lane."""
        lanes = self._lanes
        lane = lanes.get(priority)
        if lane is None:
            if len(lanes) >= _MAX_LANES:
                return False
            lane = lanes[priority] = _Lane()
        if at < lane.last_at:
            return False
        lane.seqs.append(seq)
        lane.last_at = at
        return True

    def _push(self, seq: int, at: float) -> None:
        """Put pending job `seq` in the delayed heap, superseding its older entries."""
        self._stamp += 1
        self._versions[seq] = self._stamp
        heapq.heappush(self._delayed, (at, seq, self._stamp))

    def lease(self, slot: int, job_id: str, token: int, until: float) -> None:
        """Pending job `slot` becomes leased, one more attempt used: set_code's part
        of the move and hold(), unrolled, as every lease passes here."""
        seq = self.seqs[slot]
        self.code[slot] = LEASED
        self.attempts[slot] += 1
        flags = self.flags[slot]
        if flags & _LANED:
            self.flags[slot] = flags ^ _LANED
        else:
            self._versions.pop(seq, None)
        self.leases[seq] = (token, until)
        heapq.heappush(self._deadlines, (until, token, seq))
        self.held[job_id] = self.entry(slot, job_id)

    def hold(self, slot: int, job_id: str, token: int, until: float) -> None:
        """Record leased job `slot`'s (new) lease; its code is LEASED already."""
        seq = self.seqs[slot]
        self.leases[seq] = (token, until)
        heapq.heappush(self._deadlines, (until, token, seq))
        self.held[job_id] = self.entry(slot, job_id)

    def unhold(self, seq: int, job_id: str) -> None:
        """Forget leased job `seq`'s lease, before its code changes."""
        del self.leases[seq]
        del self.held[job_id]

    def remove(self, slot: int, job_id: str | None = None) -> int:
        """Drop the job at `slot`, leaving a hole; returns its record's size."""
        seq, code = self.seqs[slot], self.code[slot]
        if code == LEASED:  # an ack: the common case
            del self.leases[seq]
            del self.held[self.id(slot) if job_id is None else job_id]
        else:
            self._versions.pop(seq, None)
        self.code[slot] = FREE
        self.holes += 1
        if self.flags[slot] & _NAMED:
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
        self._lanes.clear()  # nothing pending is left to find in them
        self._delayed.clear()
        self._ready.clear()
        return removed, size

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
            self.flags[slot] &= ~_LANED & 0xFF
            self._versions.pop(seq, None)
        if code == PENDING:  # back from a lease or the DLQ: out of enqueue order
            self._push(seq, self.available_at[slot])
        return old

    def pack(self) -> None:
        """Drop the holes removed jobs left (lanes and heaps hold seqs, not slots)."""
        holes, self.holes, self._layout = self.holes, 0, self._layout + 1
        self.recent.clear()
        lead = len(self.code) - len(self.code.lstrip(b"\3"))
        if lead == holes:  # FIFO consumption: the holes are a prefix, cut it
            for name in _COLUMN_NAMES:
                del getattr(self, name)[:lead]
            self.code, self.flags = self.code[lead:], self.flags[lead:]  # frees memory
            return
        live = self.code.translate(_FREE_TO_ZERO)
        for name in _COLUMN_NAMES:
            column: array[Any] = getattr(self, name)
            setattr(self, name, array(column.typecode, compress(column, live)))
        self.code = bytearray(compress(self.code, live))
        self.flags = bytearray(compress(self.flags, live))

    def relocate(self, source_offset: int, shift: int, seqs: array[int],
                 names: dict[int, str], locs: array[int], sizes: array[int]) -> int | None:
        """Move payload locations to a new generation written by another handle.

        The snapshot's jobs (`seqs`/`names` in enqueue order, at `locs`/`sizes`)
        are ours whose record lies before `source_offset`; records after it were
        copied unchanged, `shift` bytes further. Returns the live jobs' bytes
        after the move, or None (nothing changed) if the snapshot does not hold
        the jobs we know."""
        code, flags, my_seqs = self.code, self.flags, self.seqs
        if not self.names and not names:
            live_bytes = self._relocate_in_bulk(source_offset, shift, seqs, locs, sizes)
            if live_bytes is not None:
                return live_bytes
        new_locs, new_sizes = array("q", self.record_offset), array("I", self.size)
        index, count, live = 0, len(seqs), 0
        for slot in range(len(code)):
            if code[slot] == FREE:
                continue
            loc = self.record_offset[slot]
            if loc >= source_offset:
                new_locs[slot] = loc + shift
                live += self.size[slot]
                continue
            seq = my_seqs[slot]
            mine = self.names[seq] if flags[slot] & _NAMED else None
            while index < count:
                theirs = names.get(index)
                if (seqs[index] == seq if mine is None and theirs is None
                        else (mine or seq_id(seq)) == (theirs or seq_id(seqs[index]))):
                    break
                index += 1
            if index == count:
                return None
            new_locs[slot], new_sizes[slot] = locs[index], sizes[index]
            live += sizes[index]
            index += 1
        self.record_offset, self.size = new_locs, new_sizes
        self._rebuild_held()
        return live

    def _relocate_in_bulk(self, source_offset: int, shift: int, seqs: array[int],
                          locs: array[int], sizes: array[int]) -> int | None:
        """relocate() in the usual shape, with array slices instead of a loop per job.

        The usual shape: every removed job's hole is at the front (FIFO), so our
        live slots are one run; the snapshot holds them in the same order, after
        the jobs removed since its offset; and every slot after them was
        appended after that offset. Whatever else is true, it is checked: the
        jobs matched by position are compared seq by seq (in C), and the slots
        left over must all lie past the offset. None (nothing changed) otherwise.
        """
        code, my_seqs, old_loc, old_size = self.code, self.seqs, self.record_offset, self.size
        slots = len(code)
        lead = slots - len(code.lstrip(bytes([FREE]))) if self.holes else 0
        if lead != self.holes or seqs.typecode != "q" or locs.typecode != "q" \
                or sizes.typecode != "I":
            return None
        first = bisect_left(seqs, my_seqs[lead]) if lead < slots else len(seqs)
        last = lead + len(seqs) - first  # slots [lead, last) are the snapshot's jobs
        if last > slots or my_seqs[lead:last] != seqs[first:]:
            return None
        moved = old_loc[last:]  # appended after the snapshot: a few, copied unchanged
        if any(loc < source_offset for loc in moved):
            return None
        new_loc = old_loc[:lead]
        new_loc.extend(locs[first:])
        new_loc.extend(array("q", [loc + shift for loc in moved]))
        new_size = old_size[:lead]
        new_size.extend(sizes[first:])
        new_size.extend(old_size[last:])
        self.record_offset, self.size = new_loc, new_size
        self._rebuild_held()
        return sum(sizes[first:]) + sum(old_size[last:])

    def _rebuild_held(self) -> None:
        for job_id, entry in self.held.items():
            self.held[job_id] = self.entry(self.slot(entry.seq), job_id)

    # -- finding due jobs (read-only with respect to what the table holds) ---

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
                heapq.heappush(ready, (-self.priority[self.slot(seq)], seq, stamp))
            moved += 1
        if not ready and len(self._lanes) == 1:  # the usual queue: one lane, nothing else
            priority, lane = next(iter(self._lanes.items()))
            return [self.entry(slot)
                    for _, _, slot in self._lane_due(priority, lane, now, count)]
        chosen: list[tuple[int, int, int]] = []
        while ready and len(chosen) < count:
            item = heapq.heappop(ready)
            if versions.get(item[1]) == item[2]:
                chosen.append(item)
        for item in chosen:  # selection must not change the state; LEASE records will
            heapq.heappush(ready, item)
        found = [(item[0], item[1], self.slot(item[1])) for item in chosen]
        for priority, lane in list(self._lanes.items()):
            found += self._lane_due(priority, lane, now, count)
        found.sort()
        return [self.entry(slot) for _, _, slot in found[:count]]

    def _lane_due(self, priority: int, lane: _Lane, now: float, count: int
                  ) -> list[tuple[int, int, int]]:
        """The first `count` jobs of a lane that are due at `now`, as (-priority, seq,
        slot); drops stale items at the head for good."""
        seqs, flags, at, slot_of = lane.seqs, self.flags, self.available_at, self.slot
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
                self._ready.append((-self.priority[self.slot(item[1])], item[1], item[2]))
        heapq.heapify(later)
        heapq.heapify(self._ready)
        self._delayed = later

    def _lease_current(self, item: tuple[float, int, int]) -> bool:
        return self.leases.get(item[2]) == (item[1], item[0])

    def expired(self, now: float) -> list[Entry]:
        """Leased jobs whose deadline is at or before `now`."""
        deadlines = self._deadlines
        found: list[tuple[float, int, int]] = []
        seen: set[int] = set()
        while deadlines and deadlines[0][0] <= now:
            item = heapq.heappop(deadlines)
            # An EXTEND to the deadline the lease already had pushes a second,
            # identical heap entry; answering the job twice would plan two EXPIREs.
            if self._lease_current(item) and item[2] not in seen:
                found.append(item)
                seen.add(item[2])
        for item in found:
            heapq.heappush(deadlines, item)
        return [self.entry(self.slot(item[2])) for item in found]

    def next_wakeup(self) -> float | None:
        """Earliest moment a job may become leasable (see QueueState.next_wakeup)."""
        versions = self._versions
        ready, delayed, deadlines = self._ready, self._delayed, self._deadlines
        while ready and versions.get(ready[0][1]) != ready[0][2]:
            heapq.heappop(ready)
        if ready:
            return float("-inf")
        while delayed and versions.get(delayed[0][1]) != delayed[0][2]:
            heapq.heappop(delayed)
        while deadlines and not self._lease_current(deadlines[0]):
            heapq.heappop(deadlines)
        times = [heap[0][0] for heap in (delayed, deadlines) if heap]
        for priority, lane in list(self._lanes.items()):
            first = self._lane_due(priority, lane, float("inf"), 1)
            if first:
                times.append(self.available_at[first[0][2]])
        return min(times) if times else None

    def _nth(self, wanted: int | None, n: int) -> int:
        """The slot of the job after the first `n` live ones (of code `wanted`, or of
        any state), or len(code): counted a chunk at a time in C, so that a page deep
        in a million jobs costs milliseconds, not a Python step per job skipped."""
        code, start, size = self.code, 0, len(self.code)
        while start < size:
            end = min(size, start + _SKIP_CHUNK)
            here = (code.count(wanted, start, end) if wanted is not None
                    else end - start - code.count(FREE, start, end))
            if here > n:
                break
            n, start = n - here, end
        for slot in range(start, size):
            if code[slot] != FREE and (wanted is None or code[slot] == wanted):
                if n == 0:
                    return slot
                n -= 1
        return size

    def entries(self, state: JobState | None = None, skip: int = 0) -> Iterator[Entry]:
        """Jobs in enqueue order, optionally of one state, after the first `skip` of
        them. Do not change the table while iterating: a pack would move the slots
        (RuntimeError)."""
        code, layout = self.code, self._layout
        wanted = None if state is None else CODES.get(state)
        if state is not None and wanted is None:  # DONE: finished jobs are not kept
            return
        if skip:
            slot = self._nth(wanted, skip)
            while slot < len(code):
                if wanted is not None:
                    slot = code.find(wanted, slot)
                    if slot < 0:
                        return
                elif code[slot] == FREE:
                    slot += 1
                    continue
                if self._layout != layout:
                    raise RuntimeError("the state changed during entries()")
                yield self.entry(slot)
                slot += 1
            return
        if wanted is not None:
            slot = code.find(wanted)
            while slot >= 0:
                if self._layout != layout:
                    raise RuntimeError("the state changed during entries()")
                yield self.entry(slot)
                slot = code.find(wanted, slot + 1)
            return
        # All of them: zip the columns rather than index them, it is several times faster.
        names, errors, leases = self.names, self.errors, self.leases
        states, none = CODE_STATES, (0, 0.0)
        for seq, job_code, flags, pr, at, t, ma, att, loc, size in zip(
                self.seqs, code, self.flags, self.priority, self.available_at,
                self.enqueued_at, self.max_attempts, self.attempts, self.record_offset,
                self.size, strict=True):
            if job_code == FREE:
                continue
            if self._layout != layout:
                raise RuntimeError("the state changed during entries()")
            token, until = leases[seq] if job_code == LEASED else none
            yield Entry(names[seq] if flags & _NAMED else f"{seq:016x}", seq, pr, at, t, ma,
                        att, states[job_code], token, until,
                        errors.get(seq) if errors else None, bool(flags & KEYED), loc, size)
