"""The in-memory queue's limited jobs: a ready heap per pair of keys, holders, windows.

What it owns, beside MemoryTable (which keeps one): the ready jobs that
carry limit keys, in a heap per (rate key, concurrency key), so that a lease
skips a saturated key in one step whatever its backlog; how many jobs of each
concurrency key are leased; and a rate window per declared rate key (the
queue's is ""), holding the times of its latest leases. The limits come from
the caller (nobroker.limits: the configuration is code); the counts are the
table's. Pure like the table: `now` comes in as an argument.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Final, Protocol

from ..limit_parking import Parking
from ..limits import QUEUE_KEY, Budget, JobKeys, Limits, Window, latest_caps
from ..models import JobState

__all__ = ["LimitedReady", "Ready", "stored_caps"]

# (-priority, seq, stamp, id): the table's ready heap's items.
Ready = tuple[float, int, int, str]


class _Valid(Protocol):
    def __call__(self, job_id: str, stamp: int) -> bool: ...


class LimitedReady:
    """The limited jobs of one MemoryTable (see the module doc)."""

    def __init__(self) -> None:
        self.groups: dict[JobKeys, list[Ready]] = {}
        self.parking = Parking()  # the groups a lease looks at (limit_parking.Parking: a cache)
        self.in_use: dict[str, int] = {}
        self.windows: dict[str, Window] = {}

    def heap(self, keys: JobKeys) -> list[Ready]:
        """The ready heap of `keys`' jobs."""
        heap = self.groups.get(keys)
        if heap is None:
            heap = self.groups[keys] = []
            self.parking.add(keys)
        return heap

    def held(self, keys: JobKeys, delta: int, cap: int | None = None) -> int:
        """A job of `keys` starts (+1) or stops (-1) holding its concurrency key;
        returns the idle workers to wake: 1 when a slot of a key that was full frees
        (full under `cap`, the job's stored one; without one, any slot)."""
        key = keys[1]
        if key is None:
            return 0
        before = self.in_use.get(key, 0)
        if before + delta:
            self.in_use[key] = before + delta
        else:
            del self.in_use[key]
        if delta > 0:
            return 0
        if self.parking.by_key:  # a slot of the key is free: its parked groups come back
            self.parking.freed(key)
        return int(cap is None or before >= cap)

    def started(self, keys: JobKeys | None, limits: Limits, now: float) -> None:
        """A job of `keys` was leased at `now`: its windows (and the queue's) count it."""
        for key in (QUEUE_KEY, None if keys is None else keys[0]):
            rate = None if key is None else limits.rates.get(key)
            if key is None or rate is None:
                continue
            window = self.windows.get(key)
            if window is None or (window.count, window.period) != (rate.count, rate.period):
                window = self.windows[key] = Window(rate.count, rate.period,
                                                    () if window is None else window.starts)
            window.start(now)

    def choose(self, ready: list[Ready], count: int, limits: Limits, now: float,
               valid: _Valid) -> list[Ready]:
        """Up to `count` ready items within `limits`, best first, taken off their heaps
        (`ready`: the unlimited jobs'); the rest stay. Stale items are dropped."""
        if not limits and not self.groups:  # nothing limited: the best of `ready`
            taken: list[Ready] = []
            while ready and len(taken) < count:
                item = heapq.heappop(ready)
                if valid(item[3], item[2]):
                    taken.append(item)
            return taken
        parking, groups = self.parking, self.groups
        parking.asked_under(limits)
        budget = Budget(limits, self.windows, self.in_use, now)
        found: list[tuple[Ready, JobKeys | None, list[Ready]]] = []
        sources = 0  # heaps that gave items: one (the usual lease) needs no merging
        emptied = False
        for keys, heap in [(None, ready), *((k, groups[k]) for k in list(parking.active))]:
            if not heap:
                emptied = emptied or keys is not None
                continue
            room = budget.room_for(keys)
            if room <= 0:
                if keys is not None:  # a full concurrency key's group: set aside
                    parking.park_if_full(keys, limits, self.in_use)
                continue
            want, looked = (count if count < room else room), 0
            while heap and looked < want:
                item = heapq.heappop(heap)
                if valid(item[3], item[2]):
                    found.append((item, keys, heap))
                    looked += 1
            sources += looked > 0
            emptied = emptied or not heap
        chosen: list[Ready] = []
        if sources == 1:  # one heap's best, within its room and `count` already
            chosen = [item for item, _, _ in found]
        else:  # best first across them, each within what the budget has left
            found.sort(key=lambda entry: entry[0])
            for item, keys, heap in found:
                if len(chosen) < count and budget.allows(keys):
                    budget.take(keys)
                    chosen.append(item)
                else:
                    heapq.heappush(heap, item)
        if emptied:  # a group with no ready job left goes (it comes back with its next)
            for keys in [keys for keys in parking.active if not groups[keys]]:
                del groups[keys]
                parking.remove(keys)
        return chosen

    def next_ready(self, limits: Limits, now: float, ready: list[Ready],
                   valid: _Valid) -> list[float]:
        """When a ready job may next start within `limits`: [-inf] (now), [a window's
        opening], or [] (no ready job, or only keys whose holders are all busy)."""
        self.parking.asked_under(limits)
        budget = Budget(limits, self.windows, self.in_use, now)
        times: list[float] = []
        groups = self.groups  # a parked group waits for an ack's wake-up
        for keys, heap in [(None, ready), *((k, groups[k]) for k in self.parking.active)]:
            while heap and not valid(heap[0][3], heap[0][2]):
                heapq.heappop(heap)
            if heap:
                opens = budget.opens_at(keys)
                if opens is not None:
                    times.append(opens)
        return [min(times)] if times else []


class _Capped(Protocol):
    seq: int
    state: JobState
    keys: JobKeys | None
    cap: int | None


_HOLDING: Final = (JobState.PENDING, JobState.LEASED, JobState.WAITING)


def stored_caps(jobs: Iterable[_Capped]) -> dict[str, int]:
    """Each concurrency key's cap as the most recently enqueued of `jobs` still pending,
    waiting or leased carried it (Queue.limit_use, for keys not declared here)."""
    return latest_caps((job.seq, job.keys[1], job.cap) for job in jobs
                       if job.cap is not None and job.keys is not None
                       and job.keys[1] is not None and job.state in _HOLDING)
