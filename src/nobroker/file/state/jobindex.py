"""The replay state's jobs as a mapping: `state.jobs[job_id]`, `in`, `len`, and the
generated ids a writer may give its next jobs.

A view of the job table (jobtable.py), which it only reads; it keeps no copy of
a job, only how far the writer's generated ids went. Pure: no os, time, random
or threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .jobtable import JobTable
from .listing import entries
from .vocabulary import SEQ_LIMIT, Entry

__all__ = ["JobIndex"]


class JobIndex:
    """The live jobs by id: a read-only mapping whose Entry values are built on demand.
    Lookups go straight to the job table; the count is the state's (`live`), and
    reserve() skips the ids the state remembers as keys (`done_keys`)."""

    __slots__ = ("_done_keys", "_issued", "_live", "_table")

    def __init__(self, table: JobTable, done_keys: dict[str, float],
                 live: Callable[[], int]) -> None:
        self._table = table
        self._done_keys = done_keys
        self._live = live
        self._issued = 0  # seqs handed out as ids for records not yet applied

    def get(self, job_id: str) -> Entry | None:
        held = self._table.held_entry(job_id)
        if held is not None:
            return held
        slot = self._table.find(job_id)
        return None if slot < 0 else self._table.entry(slot, job_id)

    def __getitem__(self, job_id: str) -> Entry:
        held = self._table.held_entry(job_id)
        if held is not None:
            return held
        slot = self._table.find(job_id)
        if slot < 0:
            raise KeyError(job_id)
        return self._table.entry(slot, job_id)

    def __contains__(self, job_id: object) -> bool:
        return isinstance(job_id, str) and self._table.find(job_id) >= 0

    def __len__(self) -> int:  # the live jobs; lookups find kept finished ones too
        return self._live()

    def __iter__(self) -> Iterator[str]:
        return (entry.id for entry in entries(self._table))

    def keys(self) -> Iterator[str]:
        return iter(self)

    def values(self) -> Iterator[Entry]:
        return entries(self._table)

    def items(self) -> Iterator[tuple[str, Entry]]:
        return ((entry.id, entry) for entry in entries(self._table))

    def reserve(self) -> str | None:
        """A generated id for a job about to be enqueued (None once they run out): one
        that neither a live job nor a remembered key holds, never the same twice."""
        table, taken = self._table, self._done_keys
        seq = max(self._issued, table.next_seq)
        while seq < SEQ_LIMIT:
            job_id = f"{seq:016x}"
            seq += 1
            if job_id not in table.ids and job_id not in taken:
                self._issued = seq
                return job_id
        return None

    def reserve_many(self, count: int) -> list[str]:
        """reserve() up to `count` times (fewer once ids run out), in one step when none
        of the next `count` generated ids is held: the usual case of enqueue_many."""
        seq = max(self._issued, self._table.next_seq)
        if seq + count <= SEQ_LIMIT:
            ids = [f"{n:016x}" for n in range(seq, seq + count)]
            named, taken = self._table.ids, self._done_keys
            if not any(job_id in named or job_id in taken for job_id in ids):
                self._issued = seq + count
                return ids
        reserved: list[str] = []
        for _ in range(count):
            job_id = self.reserve()
            if job_id is None:
                break
            reserved.append(job_id)
        return reserved
