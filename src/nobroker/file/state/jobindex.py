"""The replay state's jobs as a mapping: `state.jobs[job_id]`, `in`, `len`, and the
generated ids a writer may give its next jobs.

A view of the job table (jobtable.py), which it only reads; it keeps no copy of
a job. Pure: no os, time, random or threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .jobtable import JobTable
from .listing import entries
from .vocabulary import Entry

__all__ = ["JobIndex"]


class JobIndex:
    """The live jobs by id: a read-only mapping whose Entry values are built on demand.
    Lookups go straight to the job table; the count is the state's (`live`), and
    reserve() skips the ids the state remembers as keys (`done_keys`)."""

    __slots__ = ("_done_keys", "_live", "_table")

    def __init__(self, table: JobTable, done_keys: dict[str, float],
                 live: Callable[[], int]) -> None:
        self._table = table
        self._done_keys = done_keys
        self._live = live

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
        that neither a live job nor a remembered key holds."""
        return self._table.reserve(self._done_keys)

    def reserve_many(self, count: int) -> list[str]:
        """reserve() up to `count` times, in one step when it can be."""
        return self._table.reserve_many(count, self._done_keys)
