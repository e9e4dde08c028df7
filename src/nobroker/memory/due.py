"""The in-memory queue's due jobs: lazy heaps of pending jobs by time, ready ones by
priority, and leases by deadline.

What it owns, beside MemoryTable (which keeps one, as the file engine's job table
keeps its DueJobs): a pending job enters the time heap; once its time has come,
promote() moves it to the ready heap (a limited one to its keys' heap, limited.py),
whence a lease takes it; a leased job sits in the deadline heap until its lease
ends. The heaps hold ids, not jobs, and are lazy: an entry is valid only while its
job (in the table's `jobs`) still carries the entry's `stamp`, which every move of
the table bumps; a stale one is dropped when it comes to the top. Pure like the
table: `now` comes in as an argument.
"""

from __future__ import annotations

import heapq

from .jobs import MemoryJob
from .limited import LimitedReady, Ready

__all__ = ["DueHeaps"]

Due = tuple[float, int, int, str]  # (time, seq, stamp, id): the time and deadline heaps'


class DueHeaps:
    """The due jobs of one MemoryTable (see the module doc)."""

    def __init__(self, jobs: dict[str, MemoryJob]) -> None:
        self._jobs = jobs  # the table's, which the entries are checked against
        self.waiting: list[Due] = []  # (at, seq, stamp, id)
        self.ready: list[Ready] = []  # (-priority, seq, stamp, id)
        self.deadlines: list[Due] = []  # (until, seq, stamp, id)

    def fresh(self, job_id: str, stamp: int) -> bool:  # limited.py's heaps ask too
        job = self._jobs.get(job_id)
        return job is not None and job.stamp == stamp

    def enter(self, job: MemoryJob) -> None:
        """Pending job `job` becomes ready at its available_at."""
        heapq.heappush(self.waiting, (job.available_at, job.seq, job.stamp, job.id))

    def promote(self, now: float, limited: LimitedReady) -> None:
        """Pending jobs whose time has come move to the ready heap."""
        waiting = self.waiting
        while waiting and waiting[0][0] <= now:
            _, seq, stamp, job_id = heapq.heappop(waiting)
            job = self._jobs.get(job_id)
            if job is not None and job.stamp == stamp:  # a limited one: its keys' heap
                heapq.heappush(self.ready if job.keys is None else limited.heap(job.keys),
                               (-job.priority, seq, stamp, job_id))

    def hold(self, job: MemoryJob, until: float) -> None:
        """Leased job `job`'s lease ends at `until`."""
        job.lease_until = until
        heapq.heappush(self.deadlines, (until, job.seq, job.stamp, job.id))

    def expired(self, now: float) -> list[MemoryJob]:
        """Leased jobs whose deadline is at or before `now` (nothing changes)."""
        found: list[MemoryJob] = []
        heap = self.deadlines
        while heap and heap[0][0] <= now:
            item = heapq.heappop(heap)
            job = self._jobs.get(item[3])
            if job is not None and job.stamp == item[2]:
                found.append(job)
        for job in found:  # still leased until a move says otherwise
            heapq.heappush(heap, (job.lease_until, job.seq, job.stamp, job.id))
        return found

    def next_times(self) -> list[float]:
        """The first pending job's time and the first lease deadline, those there are;
        the stale entries atop all three heaps dropped first."""
        for heap in (self.ready, self.waiting, self.deadlines):
            while heap and not self.fresh(heap[0][3], heap[0][2]):
                heapq.heappop(heap)
        return [heap[0][0] for heap in (self.waiting, self.deadlines) if heap]
