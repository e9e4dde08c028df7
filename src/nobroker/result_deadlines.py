"""When the results of finished keyed jobs end, for `stats().kept` at any time.

A keyed job acked with a result is kept for key_retention (its id still
deduplicates) but shows its result only for its result_ttl, when that is
shorter (the file engine's ACK "rkeep", memory://'s `result_until`). From then
on it is kept without an outcome, as a keyed job acked without a result, and
`kept` (finished jobs kept with their outcome) no longer counts it: nothing is
written at that time, so a read subtracts `ended(now)` from its count.

The file engine's replay state and memory://'s table each hold one, added to
when such a job finishes, discarded from when it is forgotten. Pure: the time
comes in as an argument. A sorted list: `ended` is a bisection; adding and
discarding move the entries after the one changed (C memmove, cheap next to
the write that asks for it).
"""

from __future__ import annotations

import bisect

__all__ = ["ResultDeadlines"]


class ResultDeadlines:
    """The kept jobs whose result ends before they are forgotten: id -> that time."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._order: list[tuple[float, str]] = []  # (until, id), sorted

    def add(self, job_id: str, until: float) -> None:
        self.discard(job_id)
        self._until[job_id] = until
        bisect.insort(self._order, (until, job_id))

    def discard(self, job_id: str) -> None:
        """`job_id` is forgotten (or finished again): its result's end no longer counts."""
        until = self._until.pop(job_id, None)
        if until is not None:
            del self._order[bisect.bisect_left(self._order, (until, job_id))]

    def ended(self, now: float) -> int:
        """How many of these jobs' results have ended at `now` (their kept count's less)."""
        return bisect.bisect_right(self._order, now, key=lambda entry: entry[0])

    def items(self) -> list[list[str | float]]:
        """[[id, until], ...]: what a checkpoint keeps of it."""
        return [[job_id, until] for until, job_id in self._order]

    def restore(self, items: list[list[str | float]]) -> None:
        for job_id, until in items:
            self.add(str(job_id), float(until))

    def __len__(self) -> int:
        return len(self._until)
