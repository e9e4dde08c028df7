"""Which jobs are due: the job table's indexes of pending jobs and lease deadlines.

The questions every write asks (which jobs may be leased now, in what
order? which leases have run out? when may something next become
leasable?) answered without scanning the table. Pending jobs that became
leasable in enqueue order sit in a FIFO lane per priority (8 bytes a job,
and the due ones are a prefix); the others, and jobs back from a lease or
the dead-letter queue, sit in lazy heaps whose entries are valid only while
their stamp is the job's current one. Lease deadlines sit in a heap too.

The job table (jobtable.py) owns one DueJobs and keeps it as it changes
jobs (`enter_lane`, `push`, `drop`, `add_deadline`); the questions (`ready`,
`expired`, `next_wakeup`) take the table, whose columns they read, and never
change what it holds: only the records that follow do. The index holds seqs,
never slots, so packing the table does not touch it. Pure: no os, time,
random or threads.
"""

from __future__ import annotations

import heapq
from array import array
from itertools import compress, islice
from typing import Final

from .vocabulary import PENDING, Entry, JobColumns

__all__ = ["DueJobs", "LANED", "GROUPED"]

LANED: Final = 4  # a slot flag: pending since its enqueue and queued in its priority's lane
GROUPED: Final = 8  # the same in a limited job's group's own DueJobs (limited.py)
_PENDING_MASK: Final = bytes([1] + [0] * 255)  # pending slot -> 1
_WITHLANED: Final = bytes((flags | LANED) & 0xFF for flags in range(256))
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


class DueJobs:
    """The due-job indexes of a JobTable (see the module doc), or of one group of its
    limited jobs (limited.py), whose lanes' jobs carry `lane_flag` instead of LANED."""

    def __init__(self, lane_flag: int = LANED) -> None:
        self._lane_flag = lane_flag  # the slot flag of a job in one of these lanes
        self.lanes: dict[int, _Lane] = {}  # priority -> lane
        # Pending jobs outside the lanes sit in lazy heaps: an entry is valid only
        # while its stamp is the job's current one (stamps are never reused).
        self._stamp = 0
        self._versions: dict[int, int] = {}  # seq -> stamp, for those jobs only
        self._delayed: list[tuple[float, int, int]] = []  # (available_at, seq, stamp)
        self._ready: list[tuple[int, int, int]] = []  # (-priority, seq, stamp)
        self._deadlines: list[tuple[float, int, int]] = []  # (lease_until, token, seq)

    def schedule_all(self, table: JobColumns) -> None:
        """Queue every pending job of freshly restored columns, as add() would have
        (setting their LANED flags in the table)."""
        seqs, flags = table.seqs, table.flags
        count = len(seqs)
        pr, at = table.priority, table.available_at
        if (count and table.code.count(PENDING) == count and pr.count(pr[0]) == count
                and all(map(float.__le__, at, islice(at, 1, None)))):
            # The usual queue: one priority, due in enqueue order. One lane, no loop.
            lane = self.lanes[pr[0]] = _Lane()
            lane.seqs = array("q", seqs)
            lane.last_at = at[-1]
            flags[:] = flags.translate(_WITHLANED)
            return
        for slot in compress(range(count), table.code.translate(_PENDING_MASK)):
            when = at[slot]
            if self.enter_lane(seqs[slot], pr[slot], when):
                flags[slot] |= LANED
            else:
                self._stamp += 1
                self._versions[seqs[slot]] = self._stamp
                self._delayed.append((when, seqs[slot], self._stamp))
        heapq.heapify(self._delayed)

    def restore_deadlines(self, deadlines: list[tuple[float, int, int]]) -> None:
        """The (lease_until, token, seq) of every leased job of restored columns."""
        heapq.heapify(deadlines)
        self._deadlines = deadlines

    def enter_lane(self, seq: int, priority: int, at: float) -> bool:
        """Append pending job `seq` to its priority's lane if that keeps the lane in
        due order (and a lane is free for a new priority); False: it belongs in the
        heaps. The one place a job joins a lane (enter_lane_run: many at once)."""
        lane = self._lane_taking(priority, at)
        if lane is None:
            return False
        lane.seqs.append(seq)
        return True

    def enter_lane_run(self, seqs: range, priority: int, at: float) -> bool:
        """enter_lane of every job in `seqs`, all of `priority` and due at `at`: all
        of them join the lane (True), or none does."""
        lane = self._lane_taking(priority, at)
        if lane is None:
            return False
        lane.seqs.extend(seqs)
        return True

    def _lane_taking(self, priority: int, at: float) -> _Lane | None:
        """`priority`'s lane, created if a lane is free, with its due time moved to
        `at`, if jobs due then keep it in due order (the caller appends them); else
        None (such jobs belong in the heaps)."""
        lane = self.lanes.get(priority)
        if lane is None:
            if len(self.lanes) >= _MAX_LANES:
                return None
            lane = self.lanes[priority] = _Lane()
        if at < lane.last_at:
            return None
        lane.last_at = at
        return lane

    def push(self, seq: int, at: float) -> None:
        """Put pending job `seq` in the delayed heap, superseding its older entries."""
        self._stamp += 1
        self._versions[seq] = self._stamp
        heapq.heappush(self._delayed, (at, seq, self._stamp))

    def drop(self, seq: int) -> None:
        """Job `seq` is no longer pending (nor in a lane: the table clears LANED): its
        heap entries are stale from now on."""
        self._versions.pop(seq, None)

    def add_deadline(self, until: float, token: int, seq: int) -> None:
        """Job `seq` holds lease `token` until `until` (a later lease supersedes it)."""
        heapq.heappush(self._deadlines, (until, token, seq))

    def clear_pending(self) -> None:
        """Every pending job is gone (PURGE): nothing is left to find in the lanes
        and heaps of pending jobs."""
        self.lanes.clear()
        self._delayed.clear()
        self._ready.clear()

    def holds_any(self) -> bool:
        """Whether any pending job may be in these indexes (False: ready() finds none)."""
        return bool(self.lanes or self._ready or self._delayed)

    def ready(self, table: JobColumns, now: float, count: int) -> list[Entry]:
        """Up to `count` of the table's leasable jobs: highest priority first, FIFO
        within a priority."""
        delayed, ready, versions = self._delayed, self._ready, self._versions
        moved = 0
        while delayed and delayed[0][0] <= now:
            if moved == 256:  # many came due at once: one linear pass
                self._promote_all(table, now)
                break
            _, seq, stamp = heapq.heappop(delayed)
            if versions.get(seq) == stamp:
                heapq.heappush(ready, (-table.priority[table.slot(seq)], seq, stamp))
            moved += 1
        if not ready and len(self.lanes) == 1:  # the usual queue: one lane, nothing else
            priority, lane = next(iter(self.lanes.items()))
            return [table.entry(slot)
                    for _, _, slot in self._lane_due(table, priority, lane, now, count)]
        chosen: list[tuple[int, int, int]] = []
        while ready and len(chosen) < count:
            item = heapq.heappop(ready)
            if versions.get(item[1]) == item[2]:
                chosen.append(item)
        for item in chosen:  # selection must not change the state; LEASE records will
            heapq.heappush(ready, item)
        found = [(item[0], item[1], table.slot(item[1])) for item in chosen]
        for priority, lane in list(self.lanes.items()):
            found += self._lane_due(table, priority, lane, now, count)
        found.sort()
        return [table.entry(slot) for _, _, slot in found[:count]]

    def _lane_due(self, table: JobColumns, priority: int, lane: _Lane, now: float,
                  count: int) -> list[tuple[int, int, int]]:
        """The first `count` jobs of a lane that are due at `now`, as (-priority, seq,
        slot); drops stale items at the head for good."""
        seqs, flags, at, slot_of = lane.seqs, table.flags, table.available_at, table.slot
        laned = self._lane_flag
        due: list[tuple[int, int, int]] = []
        index = lane.head
        while index < len(seqs) and len(due) < count:
            seq = seqs[index]
            slot = slot_of(seq)
            if slot < 0 or not flags[slot] & laned:  # leased or removed since
                index += 1
                if not due:
                    lane.head = index
                continue
            if at[slot] > now:
                break
            due.append((-priority, seq, slot))
            index += 1
        if lane.head == len(seqs):  # all consumed: a later job may start it afresh
            del self.lanes[priority]
        elif lane.head > 4096 and lane.head * 2 > len(seqs):
            del seqs[:lane.head]
            lane.head = 0
        return due

    def _promote_all(self, table: JobColumns, now: float) -> None:
        """Move every due delayed entry to the ready heap in O(n), not O(k log n)."""
        versions = self._versions
        later: list[tuple[float, int, int]] = []
        for item in self._delayed:
            if item[0] > now:
                later.append(item)
            elif versions.get(item[1]) == item[2]:
                self._ready.append((-table.priority[table.slot(item[1])], item[1], item[2]))
        heapq.heapify(later)
        heapq.heapify(self._ready)
        self._delayed = later

    def expired(self, table: JobColumns, now: float) -> list[Entry]:
        """The table's leased jobs whose deadline is at or before `now`."""
        deadlines, leases = self._deadlines, table.leases
        found: list[tuple[float, int, int]] = []
        seen: set[int] = set()
        while deadlines and deadlines[0][0] <= now:
            item = heapq.heappop(deadlines)
            # An EXTEND to the deadline the lease already had pushes a second,
            # identical heap entry; answering the job twice would plan two EXPIREs.
            if leases.get(item[2]) == (item[1], item[0]) and item[2] not in seen:
                found.append(item)
                seen.add(item[2])
        for item in found:
            heapq.heappush(deadlines, item)
        return [table.entry(table.slot(item[2])) for item in found]

    def next_wakeup(self, table: JobColumns) -> float | None:
        """Earliest moment a job may become leasable (see QueueState.next_wakeup)."""
        versions, leases = self._versions, table.leases
        ready, delayed, deadlines = self._ready, self._delayed, self._deadlines
        while ready and versions.get(ready[0][1]) != ready[0][2]:
            heapq.heappop(ready)
        if ready:
            return float("-inf")
        while delayed and versions.get(delayed[0][1]) != delayed[0][2]:
            heapq.heappop(delayed)
        while deadlines and leases.get(deadlines[0][2]) != (deadlines[0][1], deadlines[0][0]):
            heapq.heappop(deadlines)
        times = [heap[0][0] for heap in (delayed, deadlines) if heap]
        for priority, lane in list(self.lanes.items()):
            first = self._lane_due(table, priority, lane, float("inf"), 1)
            if first:
                times.append(table.available_at[first[0][2]])
        return min(times) if times else None
