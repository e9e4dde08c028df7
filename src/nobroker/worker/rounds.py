"""Prefetch over several queues: many jobs leased in one round, a write per queue.

A Worker with `prefetch=K` over several queues (or one queue with a cap)
fills its inbox K jobs at a time, as a one-queue worker does, instead of
one pick, and one lease write, per job. A round leases up to n jobs
(`_lease_round`), asking each queue once, through `send(index, count)`: the
dispatcher's plain lease, or the acker's `ack_many_and_lease` for a queue
whose jobs it is acking in the same round (one write for both). What holds:

- Strict priority: the queues are asked in order, each for what is still
  wanted after the earlier ones answered. At each round, a job of a later
  queue is leased only when every earlier queue had fewer ready jobs than
  it was asked for. Jobs already prefetched are not taken back: a job of an
  earlier queue enqueued after a round waits behind that round's jobs (at
  most `concurrency + K` of them in this worker).
- Weights: the round takes the picker's plan (picking.py `plan`: the next n
  picks of the smooth weighted round-robin, caps counted), leases each
  queue's count in one write, and queues the jobs in the plan's order, so
  the slots start them in the order one-at-a-time picks would have made.
  While every queue has ready jobs, each queue's share of any run of picks
  is within one pick of its weight's share, as without prefetch. A queue
  that gives fewer jobs than planned was found empty: its places in the
  plan are dropped and the round-robin restarts at the next pick taken.
  Round size (`_ahead`): a round over n queues is a write per queue where
  one queue's round is one write, so under weights the worker holds up to
  n x (concurrency + K) jobs rather than concurrency + K: each queue's part
  of a round is then, on average, what a one-queue worker leases in one
  write, and the writes per job are one queue's (with rounds of
  concurrency + K, three queues drained at about half one queue's rate:
  docs/FLOW.md). Strict priority keeps concurrency + K: its rounds mostly
  ask one queue.
- Caps: each queue's planned count is reserved against its cap (`_leasing`)
  before the write, under the worker's condition, as a single pick is.
- One weighted round at a time (`_in_round`): the dispatcher and the acker
  both lease in rounds, and a plan is the round-robin's next picks only if
  no other round plans from the same credits or queues jobs between its
  plan and its last place.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Mapping

from ..models import Job
from .leasing import Leasing
from .shared import Flight

Send = Callable[[int, int], list[Job]]  # (queue index, count) -> the jobs it leased


class LeaseRounds(Leasing):
    """Rounds of leases over several queues into the inbox; part of the Worker."""

    _in_round = False  # a weighted round is under way (_cond)

    @property
    def _ahead(self) -> int:
        """How many jobs to hold leased beyond the running ones: K; under weights over
        n queues, n x (concurrency + K) - concurrency, so that a round asks each queue
        for about what a one-queue worker's round leases (a write per queue asked:
        per job, the writes of one queue)."""
        if not self.prefetch or self._picker.weights is None:
            return self.prefetch
        return len(self.queues) * (self.concurrency + self.prefetch) - self.concurrency

    def _lease_into_slots(self, want: int) -> int:
        """The dispatcher's lease: with prefetch over several queues, a round (as many
        jobs as wanted, a write per queue) rather than one pick."""
        if not self.prefetch or self._one_queue:
            return super()._lease_into_slots(want)
        into: list[Flight] = []
        self._lease_round(want, self._lease_from, into)
        return len(into)

    def _lease_round(self, want: int, send: Send, into: list[Flight],
                     acking: Mapping[int, int] | None = None) -> None:
        """Lease up to `want` jobs over the queues into the inbox (and `into`, as they
        are admitted, so that a caller knows them even if `send` raises). `acking`:
        per queue, the jobs the caller acks in this round (the acker's, in its lease's
        write), no longer held: not counted against a cap."""
        if self._picker.weights is None:
            self._round_by_priority(want, send, into, acking or {})
            return
        with self._cond:  # the dispatcher's and the acker's rounds take turns
            while self._in_round:
                self._cond.wait()
            self._in_round = True
        try:
            self._round_by_weights(want, send, into, acking or {})
        finally:
            with self._cond:
                self._in_round = False
                self._cond.notify_all()

    def _held(self, acking: Mapping[int, int]) -> list[int]:
        """_busy(None) less the jobs acked in this round (under _cond)."""
        busy = self._busy(None)
        if self._picker.caps:  # _busy counts flights only then
            for index, count in acking.items():
                busy[index] = max(busy[index] - count, 0)
        return busy

    def _round_by_priority(self, want: int, send: Send, into: list[Flight],
                           acking: Mapping[int, int]) -> None:
        with self._cond:
            order = self._picker.order(self._held(acking))
        for index in order:
            with self._cond:  # reserve against the cap, now that earlier queues answered
                left = want - len(into)
                if left <= 0:
                    return
                room = self._picker.room(index, self._held(acking)[index])
                asked = left if room is None else min(left, room)
                if asked == 0:
                    continue
                self._leasing[index] += asked
            jobs: list[Job] = []
            try:
                jobs = send(index, asked)
            finally:
                with self._cond:
                    self._leasing[index] -= asked
                    into += self._admit(jobs, index, into_inbox=True)

    def _round_by_weights(self, want: int, send: Send, into: list[Flight],
                          acking: Mapping[int, int]) -> None:
        """Plan, lease, queue in the plan's order; while a queue came up short and more
        are wanted, plan the rest over the queues not found empty (as a pick tries
        the next queue when one is empty): at most one pass per queue."""
        empty: set[int] = set()
        tried: list[int] = []  # found empty since the last pick taken
        while len(into) < want:
            with self._cond:
                plan = self._picker.plan(want - len(into), self._held(acking), skip=empty)
                counts = Counter(plan)
                for index, count in counts.items():
                    self._leasing[index] += count
            if not plan:
                return
            leased: dict[int, deque[Job]] = {}
            try:
                for index in dict.fromkeys(plan):  # each queue once, in the plan's order
                    leased[index] = deque(send(index, counts[index]))
            finally:
                short = {i for i in counts if len(leased.get(i, ())) < counts[i]}
                with self._cond:
                    for index, count in counts.items():
                        self._leasing[index] -= count
                    tried = self._queue_in_order(plan, leased, tried, into)
            if not short - empty:
                return
            empty |= short

    def _queue_in_order(self, plan: list[int], leased: dict[int, deque[Job]],
                        tried: list[int], into: list[Flight]) -> list[int]:
        """Admit the leased jobs into the inbox in the plan's order, recording each pick
        taken; a place whose queue ran dry is a try that found it empty. Returns the
        queues found empty since the last pick (under _cond)."""
        busy = self._busy(None)
        for index in plan:
            jobs = leased.get(index)
            if not jobs:  # ran dry (or never asked: send raised)
                if index not in tried:
                    tried = [*tried, index]
                continue
            into += self._admit([jobs.popleft()], index, into_inbox=True)
            busy[index] += 1
            self._picker.picked(index, tried, busy)
            tried = []
        return tried
