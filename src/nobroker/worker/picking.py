"""Which queue a multi-queue worker leases from next: priority, weights, caps.

A Worker over several queues (`Worker([high, default, low])`) asks the
picker, for each lease, in which order to try its queues; it tries them in
that order and takes the first job it finds. Pure: no I/O, no clock, no
lock; the worker calls it under its condition.

- Strict priority (no weights): the queues in the order given. A ready job
  of an earlier queue is always taken before one of a later queue.
- Weights (`{"high": 3, "default": 2, "low": 1}`): a smooth weighted
  round-robin (nginx's): each pick adds every queue's weight to its credit,
  the queue with the most credit is tried first, and the one picked pays
  the sum of the weights back. A pick that finds a queue empty restarts the
  round-robin (every credit back to zero), so an empty queue earns no burst
  for later. Deterministic: from a restart on, for as long as no queue is
  found empty, each queue's count over the first n picks is within one pick
  of n * weight / sum of weights. (A window that starts mid-way is within
  two: the round-robin's credits are less than the sum of the weights.) A
  queue at its cap earns no credit while it cannot be picked.
- Caps (`{"emails": 4, "reports": 1}`): at most that many jobs of the queue
  in flight in this worker at once; a queue at its cap is not tried.

With prefetch (rounds.py), the worker leases many jobs in one round: `plan`
gives the next n picks the round-robin would make one at a time if every
queue had ready jobs, caps counted; the worker leases each queue's count in
one write and records the picks it took (`picked`) in the plan's order.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from .. import validation

__all__ = ["QueuePicker"]


class QueuePicker:
    """The lease order over a worker's queues (indexes into its list of queues)."""

    def __init__(self, names: Sequence[str], weights: Mapping[str, int] | None = None,
                 caps: Mapping[str, int] | None = None) -> None:
        self.names = list(names)
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"a worker's queues must have different names: {self.names}")
        self.weights = None if weights is None else self._per_queue("weights", weights)
        self.caps = self._per_queue("queue_concurrency", caps or {}, every=False)
        self._credit = [0] * len(self.names)
        self._every = range(len(self.names))

    def _per_queue(self, what: str, given: Mapping[str, int], *,
                   every: bool = True) -> dict[int, int]:
        unknown = sorted(set(given) - set(self.names))
        if unknown:
            raise ValueError(f"{what} names queues the worker does not work: {unknown}")
        if every and set(given) != set(self.names):
            missing = sorted(set(self.names) - set(given))
            raise ValueError(f"{what} must give every queue a weight; missing: {missing}")
        return {self.names.index(name): validation.integer(f"{what}[{name!r}]", value, 1)
                for name, value in given.items()}

    def room(self, index: int, busy: int) -> int | None:
        """How many more jobs queue `index` may have in flight, `busy` being in flight
        or being leased; None: no cap."""
        cap = self.caps.get(index)
        return None if cap is None else max(cap - busy, 0)

    def order(self, busy: Sequence[int]) -> list[int]:
        """The queues to try for the next pick, best first, leaving out those at their
        cap; `busy[i]` is how many jobs of queue i are in flight or being leased."""
        open_ = self._open(busy)
        if self.weights is None:
            return open_
        weights, credit = self.weights, self._credit
        return sorted(open_, key=lambda i: (-(credit[i] + weights[i]), i))

    def plan(self, count: int, busy: Sequence[int],
             skip: Collection[int] = ()) -> list[int]:
        """The next `count` picks by weight, as if made one at a time with every queue
        but those to `skip` ready, each counted against its queue's cap (fewer if
        the caps run out); records nothing (weights only)."""
        saved, busy = list(self._credit), list(busy)
        weights = self.weights or dict.fromkeys(self._every, 0)  # none: the first open
        picks: list[int] = []
        try:
            while len(picks) < count:
                best = self._best([i for i in self._open(busy) if i not in skip], weights)
                if best is None:
                    break
                picks.append(best)
                busy[best] += 1
                self.picked(best, (), busy)
        finally:
            self._credit = saved
        return picks

    def picked(self, index: int, tried: Sequence[int], busy: Sequence[int]) -> None:
        """Record a pick from queue `index`, after the queues `tried` were found empty
        (weights only: strict priority keeps no state)."""
        if self.weights is None:
            return
        if tried:  # a queue ran dry: start afresh
            self._credit = [0] * len(self.names)
            return
        weights, credit = self.weights, self._credit
        earning = self._open(busy)  # the queues at their cap sit out
        if index not in earning:
            earning = [*earning, index]
        total = 0
        for i in earning:
            credit[i] += weights[i]
            total += weights[i]
        credit[index] -= total

    # Called for every pick of every round (plan, then picked once more as each job
    # is queued): these skip the sorting and the lists `order` builds.

    def _open(self, busy: Sequence[int]) -> list[int]:
        """The queues below their cap, in the worker's order."""
        if not self.caps:
            return list(self._every)
        return [i for i in self._every if self.room(i, busy[i]) != 0]

    def _best(self, open_: list[int], weights: Mapping[int, int]) -> int | None:
        """`order(...)[0]` over `open_`: the most credit, the earlier on a tie."""
        credit = self._credit
        best, most = None, 0
        for i in open_:
            if best is None or credit[i] + weights[i] > most:
                best, most = i, credit[i] + weights[i]
        return best
