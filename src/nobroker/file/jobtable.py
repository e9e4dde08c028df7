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
The table also keeps the indexes that answer "which job is due" (a FIFO
lane per priority, lazy heaps for the rest, and the lease deadlines): they
are schedule.py's, a mixin of the table.

A finished job whose outcome is kept (acked with a result, or cancelled)
stays in its slot with the code DONE or CANCELLED until its retention ends:
for it, `available_at` holds the moment its retention ends, and
`record_offset`/`size` locate the record that holds its result and the time
it finished (an ACK, a CANCEL or a snapshot's FINISHED record). The result
stays on disk; retention.py (another mixin) indexes these jobs by the end of
their retention, with no Python object per job.

It keeps no counters: the state counts jobs by state, and bytes, as it
applies the rules. The state reads the columns directly, on its hot paths,
but changes them only through the methods below (add, lease, hold, unhold,
make_pending, set_code, set_error, remove, ...).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Container, Iterator
from itertools import compress, islice
from typing import Any, Final

from .columns import (
    CODE_STATES,
    CODES,
    DEAD,
    FINISHED_CODES,
    FREE,
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
from .relocation import NAMED, Relocation
from .retention import KeptJobs
from .schedule import LANED, DueJobs

__all__ = ["JobTable"]

_FREE_TO_ZERO: Final = bytes([1] * FREE + [0] + [1] * (255 - FREE))  # a hole -> 0, else 1
_KEPT_MASK: Final = bytes(code in FINISHED_CODES for code in range(256))  # kept -> 1
_PACK_AT: Final = 1024  # holes removals may leave before the columns are packed
_SKIP_CHUNK: Final = 1 << 16  # slots counted per C call when a page skips jobs
_RECENT_MAX: Final = 1 << 14  # ids of a batch's new jobs whose slot is cached
# The per-slot columns that pack() compacts (code and flags are bytearrays, apart).
_COLUMN_NAMES: Final = ("seqs", "priority", "available_at", "enqueued_at", "max_attempts",
                        "attempts", "record_offset", "size")


class JobTable(DueJobs, Relocation, KeptJobs):
    """The live jobs (and kept finished ones) in columns, found by id or seq, and
    scheduled by due time."""

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
        self._init_due()  # the indexes of due jobs (schedule.py)
        self._init_kept()  # the kept finished jobs by end of retention (retention.py)

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
        if (c.states.translate(None, b"\0\1\2\3\4") or c.keyed.translate(None, b"\0\1")
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
            flags[index] |= NAMED
            table.ids[job_id] = seqs[index]
            table.names[seqs[index]] = job_id
        if len(table.ids) != len(c.names):
            raise ReplayError(0, "a job id appears twice in a checkpoint")
        for job_id in c.names.values():  # nor may a key look like another job's seq id
            slot = table.slot(id_seq(job_id)) if id_seq(job_id) >= 0 else -1
            if slot >= 0 and not flags[slot] & NAMED:
                raise ReplayError(0, "a job id appears twice in a checkpoint")
        high = bisect_left(seqs, SEQ_LIMIT)
        if any(not flags[slot] & NAMED for slot in range(high, count)):
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
        table._restore_kept(compress(seqs, c.states.translate(_KEPT_MASK)))
        table.set_next_seq(next_seq)
        return table

    def columns(self) -> Columns:
        """The jobs (live and kept) as columns in enqueue order (see Columns)."""
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
        if slot < 0 or (generated and self.flags[slot] & NAMED):
            return -1
        return slot

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
            if self._enter_lane(seq, priority, at):
                flags |= LANED
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

    def lease(self, slot: int, job_id: str, token: int, until: float) -> None:
        """Pending job `slot` becomes leased, one more attempt used: set_code's part
        of the move and hold(), unrolled, as every lease passes here."""
        seq = self.seqs[slot]
        self.code[slot] = LEASED
        self.attempts[slot] += 1
        flags = self.flags[slot]
        if flags & LANED:
            self.flags[slot] = flags ^ LANED
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
        elif code == PENDING:
            self._versions.pop(seq, None)
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
        self._lanes.clear()  # nothing pending is left to find in them
        self._delayed.clear()
        self._ready.clear()
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
            self._versions.pop(seq, None)
        self.code[slot] = code
        self.available_at[slot] = kept_until
        freed = self.size[slot]
        self.record_offset[slot], self.size[slot] = loc, size
        self._keep(seq, keep, kept_until)
        return freed

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
            self._versions.pop(seq, None)
        if code == PENDING:  # back from a lease or the DLQ: out of enqueue order
            self._push(seq, self.available_at[slot])
        return old

    def pack(self) -> None:
        """Drop the holes removed jobs left (lanes and heaps hold seqs, not slots)."""
        holes, self.holes, self._layout = self.holes, 0, self._layout + 1
        self.recent.clear()
        lead = len(self.code) - len(self.code.lstrip(bytes([FREE])))
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

    # -- finding due jobs (read-only with respect to what the table holds) ---

    def _nth(self, wanted: int | None, n: int, finished: bool = False) -> int:
        """The slot of the job after the first `n` of code `wanted` (or, with None, the
        first `n` live ones, and kept finished ones with `finished`), or len(code):
        counted a chunk at a time in C, so that a page deep in a million jobs costs
        milliseconds, not a Python step per job skipped."""
        code, start, size = self.code, 0, len(self.code)
        while start < size:
            end = min(size, start + _SKIP_CHUNK)
            if wanted is not None:
                here = code.count(wanted, start, end)
            elif finished:
                here = end - start - code.count(FREE, start, end)
            else:
                here = sum(code.count(live, start, end) for live in (PENDING, LEASED, DEAD))
            if here > n:
                break
            n, start = n - here, end
        for slot in range(start, size):
            found = code[slot]
            if (found == wanted if wanted is not None
                    else found != FREE and (finished or found <= DEAD)):
                if n == 0:
                    return slot
                n -= 1
        return size

    def entries(self, state: JobState | None = None, skip: int = 0, *,
                finished: bool = False) -> Iterator[Entry]:
        """Jobs in enqueue order, optionally of one state, after the first `skip` of
        them; without a state, the live ones (pending, leased, dead) and with
        `finished` the kept finished ones too. Do not change the table while
        iterating: a pack would move the slots (RuntimeError)."""
        code, layout = self.code, self._layout
        wanted = None if state is None else CODES[state]
        if skip:
            slot = self._nth(wanted, skip, finished)
            while slot < len(code):
                if wanted is not None:
                    slot = code.find(wanted, slot)
                    if slot < 0:
                        return
                elif code[slot] == FREE or (code[slot] > DEAD and not finished):
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
            if job_code == FREE or (job_code > DEAD and not finished):
                continue
            if self._layout != layout:
                raise RuntimeError("the state changed during entries()")
            token, until = leases[seq] if job_code == LEASED else none
            yield Entry(names[seq] if flags & NAMED else f"{seq:016x}", seq, pr, at, t, ma,
                        att, states[job_code], token, until,
                        errors.get(seq) if errors else None, bool(flags & KEYED), loc, size)
