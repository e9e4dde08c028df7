"""Clock jumps, with an injected clock: what they do to timing, and what they never do.

What a clock jump does to nobroker (quotable for the README)
------------------------------------------------------------

nobroker reads the wall clock (`time.time`, or the `clock=` you pass) only
when a call writes: the time is recorded in the log, and every deadline --
a lease's expiry, a delayed job's or a retry's ready time, how long a
finished job's idempotency key is remembered -- is stored as an absolute
queue time. Replay never reads the clock. Writers record
max(clock, the latest time already in the log), so recorded queue time never
goes backwards, whichever process writes and however its clock was set.

* A forward jump of D seconds makes deadlines arrive D seconds early: leases
  expire and their jobs are handed out again (each expiry counts as a failed
  attempt, so a job near `max_attempts` can land in the dead-letter queue),
  delayed jobs and retries run early, and idempotency keys are forgotten D
  early. Nothing is lost, and no job ever has two holders: every lease has
  a new fencing token, and the old holder's `ack`/`nack`/`extend` raises
  `NotLeasedError`.
* A backward jump of D seconds stops queue time, for every handle, until
  the clock catches up: for up to D seconds nothing expires and nothing
  delayed becomes ready, so a dead worker's job is reclaimed up to D
  seconds late. The times written stand still rather than go back.
* A forward jump that is later undone is both: its deadlines arrive early,
  and then the log remembers the jumped-to time, so queue time stands still
  until the real clock reaches it again (up to D seconds of no expiries and
  no delays running out).
* A frozen clock (or identical timestamps) changes nothing but timing:
  order within a priority is enqueue order, not time order.
* Compaction keeps only the times of what it keeps (each live job's enqueue
  time, each remembered key's ack time), so just after a compaction a
  handle whose clock is behind may start from a slightly earlier time than
  the latest one before it -- never earlier than any time a live job carries.

In short: a clock jump can cause an extra delivery (at-least-once allows
it; fencing refuses the stale holder) or a late one; it never loses a job,
never lets two holders settle one, and never resurrects an acked job.
"""

from __future__ import annotations

import random
import unittest
from dataclasses import dataclass, field

from harness.support import FakeClock, TempDirTestCase

import nobroker
from nobroker import BackoffPolicy, JobState, NotLeasedError

HOUR = 3600.0
VT = 30.0  # visibility timeout used throughout
EPOCH = 1_700_000_000.0


class ClockTestCase(TempDirTestCase):
    def open(self, clock: FakeClock, **kw: object) -> nobroker.Queue:
        options: dict[str, object] = {"visibility_timeout": VT, "max_attempts": 100,
                                      "backoff": BackoffPolicy(base=0.0, jitter=0.0)}
        options.update(kw)
        q = nobroker.Queue(self.tmp / "q", clock=clock, **options)  # type: ignore[arg-type]
        self.addCleanup(q.close)
        return q


def lease_after_expiry(q: nobroker.Queue) -> nobroker.Job | None:
    """Lease, allowing one call for the expiry: a call that expires a lease writes the
    EXPIRE and plans its lease against the state before it, so the job comes next call."""
    return q.lease_one() or q.lease_one()


class ForwardJumpTest(ClockTestCase):
    def test_jump_past_every_deadline_redelivers_but_fences_the_old_holder(self) -> None:
        clock = FakeClock(EPOCH)
        q = self.open(clock)
        q.enqueue("work")
        first = q.lease_one()
        assert first is not None
        clock.advance(HOUR)
        second = lease_after_expiry(q)
        assert second is not None
        self.assertEqual(second.id, first.id)
        self.assertNotEqual(second.token, first.token)
        self.assertEqual(second.attempts, 2, "the expired lease counts as an attempt")
        for stale in (lambda: q.ack(first), lambda: q.nack(first), lambda: q.extend(first, 5)):
            with self.assertRaises(NotLeasedError):
                stale()
        q.ack(second)
        with self.assertRaises(NotLeasedError):
            q.ack(second)
        self.assertEqual(q.stats().done, 1)
        self.assertEqual(q.stats().total, 0)

    def test_jump_runs_delays_and_retries_early_and_loses_nothing(self) -> None:
        clock = FakeClock(EPOCH)
        q = self.open(clock)
        later = q.enqueue("later", delay=HOUR)
        failing = q.enqueue("retry")
        job = q.lease_one()
        assert job is not None and job.id == failing.id
        q.nack(job, delay=HOUR)
        self.assertIsNone(q.lease_one())
        clock.advance(HOUR)
        got = {j.id for j in q.lease(10)}
        self.assertEqual(got, {later.id, failing.id})

    def test_jump_shortens_the_idempotency_window_by_the_jump(self) -> None:
        clock = FakeClock(EPOCH)
        q = self.open(clock, key_retention=2 * HOUR)
        q.enqueue("once", job_id="key")
        job = q.lease_one()
        assert job is not None
        q.ack(job)
        self.assertEqual(q.enqueue("again", job_id="key").state, JobState.DONE)
        clock.advance(3 * HOUR)
        self.assertEqual(q.enqueue("again", job_id="key").state, JobState.PENDING)

    def test_expiry_can_dead_letter_a_job_on_its_last_attempt(self) -> None:
        clock = FakeClock(EPOCH)
        q = self.open(clock, max_attempts=1)
        q.enqueue("fragile")
        job = q.lease_one()
        assert job is not None
        clock.advance(HOUR)
        self.assertIsNone(q.lease_one())
        self.assertEqual([j.id for j in q.dlq()], [job.id])
        with self.assertRaises(NotLeasedError):
            q.ack(job)


class BackwardJumpTest(ClockTestCase):
    def test_running_handle_freezes_queue_time_instead_of_going_back(self) -> None:
        clock = FakeClock(EPOCH)
        q = self.open(clock)
        before = q.enqueue("before")
        job = q.lease_one()
        assert job is not None and job.lease_expires_at is not None
        clock.advance(-HOUR)
        after = q.enqueue("after")
        self.assertGreaterEqual(after.enqueued_at, before.enqueued_at)
        self.assertEqual(after.enqueued_at, job.lease_expires_at - VT)  # stood still
        clock.advance(HOUR - 1)  # still before the recorded deadline
        self.assertEqual([j.id for j in q.lease(5)], [after.id])
        self.assertEqual(q.get(job.id).state, JobState.LEASED, "a lease expired early")
        q.ack(job)

    def test_reopened_handle_reclaims_late_by_the_jump_but_does_reclaim(self) -> None:
        clock = FakeClock(EPOCH)
        q = self.open(clock)
        q.enqueue("work")
        job = q.lease_one()  # the holder then dies
        assert job is not None and job.lease_expires_at is not None
        q.close()
        clock.advance(-HOUR)  # the machine's clock is stepped back, the worker restarts
        q = self.open(clock)
        clock.advance(HOUR)  # an hour of real time later the lease is only just due
        self.assertIsNone(q.lease_one())
        clock.now = job.lease_expires_at
        again = lease_after_expiry(q)
        assert again is not None
        self.assertEqual(again.id, job.id)
        with self.assertRaises(NotLeasedError):
            q.ack(job)
        q.ack(again)

    def test_an_older_handle_does_not_expire_a_newer_handles_fresh_lease(self) -> None:
        # Regression (reliability.md §4.9): queue time was once monotonic per handle
        # only. After the clock stepped back, a freshly opened handle recorded
        # leases an hour "in the past" of an older handle, which then expired them
        # at its next call: deliveries churned and burned attempts. The log now
        # remembers the latest time, so every writer records at least that.
        clock_old, clock_new = FakeClock(EPOCH), FakeClock(EPOCH)
        old = self.open(clock_old)
        old.enqueue("work")
        old.stats()
        clock_old.advance(-HOUR)  # the step hits both processes' clocks
        clock_new.now = clock_old.now
        new = self.open(clock_new)
        job = new.lease_one()
        assert job is not None
        clock_old.advance(1.0)
        clock_new.advance(1.0)
        old.enqueue("anything")  # the older handle writes: it must not expire our lease
        new.ack(job)


    def test_undone_forward_jump_holds_queue_time_until_the_clock_catches_up(self) -> None:
        clock = FakeClock(EPOCH)
        start = clock.now
        q = self.open(clock)
        clock.advance(HOUR)
        q.enqueue("written during the jump")
        clock.now = start + 1  # the jump is undone
        q.close()
        q = self.open(clock)  # even a fresh handle: the log remembers
        q.enqueue("work")
        job = next(j for j in q.lease(5) if j.payload == "work")
        self.assertEqual(job.lease_expires_at, start + HOUR + VT)
        clock.now = start + HOUR  # an hour later, the lease is still young
        self.assertIsNone(q.lease_one())
        clock.now = start + HOUR + VT
        q.stats()
        self.assertIn(job.id, [j.id for j in q.lease(5) or q.lease(5)])


class FrozenClockTest(ClockTestCase):
    def test_frozen_clock_keeps_enqueue_order_and_expires_nothing(self) -> None:
        clock = FakeClock(EPOCH)
        q = self.open(clock)
        ids = [q.enqueue(i).id for i in range(50)]
        held = q.lease(10)
        self.assertEqual([j.id for j in held], ids[:10])
        self.assertEqual(len({j.enqueued_at for j in held}), 1)
        for _ in range(5):
            self.assertEqual([j.id for j in q.lease(1)], ids[10 + _:11 + _])
        for job in held:
            q.ack(job)  # no lease ever expired
        self.assertEqual(q.stats().done, 10)

    def test_extend_to_the_same_deadline_then_expiry_keeps_the_log_sound(self) -> None:
        # Regression: extending a lease to the deadline it already had (a frozen or
        # coarse clock) left two identical lease entries; the expiry then planned two
        # EXPIRE records in one batch, which replay refuses -- the queue could no
        # longer be opened.
        clock = FakeClock(EPOCH)
        q = self.open(clock)
        q.enqueue("a")
        job = q.lease_one()
        assert job is not None
        job = q.extend(job, VT)
        job = q.extend(job, VT)
        clock.advance(HOUR)
        q.enqueue("b")
        again = lease_after_expiry(q)
        assert again is not None
        q.close()
        with nobroker.Queue(self.tmp / "q", clock=clock) as reopened:
            self.assertEqual(reopened.stats().leased, 1)
            reopened.ack(again)

    def test_priorities_still_win_under_identical_timestamps(self) -> None:
        clock = FakeClock(EPOCH)
        q = self.open(clock)
        low = [q.enqueue(f"low{i}").id for i in range(3)]
        high = [q.enqueue(f"high{i}", priority=5).id for i in range(3)]
        self.assertEqual([j.id for j in q.lease(6)], high + low)


# --------------------------------------------------------------------------
# randomized: several handles, each with its own erratic clock


@dataclass
class Books:
    enqueued: set[str] = field(default_factory=set)
    current: dict[str, int] = field(default_factory=dict)  # job -> newest token handed out
    acked: set[str] = field(default_factory=set)
    held: list[nobroker.Job] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


def erratic_run(directory: str, seed: int, steps: int = 400, handles: int = 3) -> Books:
    """Random calls through `handles` handles whose clocks jump, freeze and drift."""
    rng = random.Random(seed)
    base = 1_700_000_000.0
    clocks = [FakeClock(base + rng.uniform(-5, 5)) for _ in range(handles)]
    queues: list[nobroker.Queue] = []
    books = Books()
    last_written: dict[int, float] = {}

    def open_handle(i: int) -> nobroker.Queue:
        return nobroker.Queue(directory, clock=clocks[i], visibility_timeout=VT,
                              max_attempts=1000, backoff=BackoffPolicy(base=0.5, jitter=0.5))

    queues = [open_handle(i) for i in range(handles)]
    try:
        for step in range(steps):
            i = rng.randrange(handles)
            q, clock = queues[i], clocks[i]
            roll = rng.random()
            if roll < 0.05:
                clock.advance(rng.choice((-HOUR, -60.0, 60.0, HOUR, 2 * VT)))
            elif roll < 0.5:
                clock.advance(rng.uniform(0, VT / 3))
            # else: frozen this step
            op = rng.random()
            try:
                if op < 0.25:
                    job = q.enqueue({"step": step})
                    books.enqueued.add(job.id)
                    stamp = job.enqueued_at
                    if stamp < last_written.get(i, stamp):
                        books.violations.append(f"handle {i} wrote time backwards at {step}")
                    last_written[i] = stamp
                elif op < 0.5:
                    for job in q.lease(rng.randint(1, 3)):
                        assert job.token is not None
                        if books.tokens and job.token <= books.tokens[-1]:
                            books.violations.append(f"token {job.token} not increasing")
                        books.tokens.append(job.token)
                        books.current[job.id] = job.token
                        books.held.append(job)
                elif op < 0.85 and books.held:
                    job = books.held.pop(rng.randrange(len(books.held)))
                    how = rng.choice(("ack", "ack", "nack", "extend"))
                    try:
                        if how == "ack":
                            q.ack(job)
                        elif how == "nack":
                            q.nack(job, delay=rng.choice((0.0, 5.0)))
                        else:
                            books.held.append(q.extend(job, VT))
                    except NotLeasedError:
                        continue
                    if books.current.get(job.id) != job.token:
                        books.violations.append(
                            f"{how} with superseded token {job.token} of {job.id} succeeded")
                    if how == "ack":
                        if job.id in books.acked:
                            books.violations.append(f"{job.id} acked twice")
                        books.acked.add(job.id)
                elif op < 0.9:
                    q.compact()
                elif op < 0.95:
                    q.close()
                    queues[i] = open_handle(i)
                    last_written.pop(i, None)  # a new handle remembers no later time
                else:
                    q.stats()
            except nobroker.CompactionError as exc:  # pragma: no cover - reported below
                books.violations.append(f"compaction failed: {exc}")
        # The end: let every clock run far ahead so that everything can be drained.
        final = nobroker.Queue(directory, clock=lambda: base + 1e7)
        try:
            while True:
                jobs = final.lease(100)
                if not jobs:
                    break
                for job in jobs:
                    final.ack(job)
                    if job.id in books.acked:
                        books.violations.append(f"resurrected: {job.id} leased after its ack")
                    books.acked.add(job.id)
            leftover = {j.id for j in final.list_jobs()}
            lost = books.enqueued - books.acked - leftover
            if lost:
                books.violations.append(f"lost {sorted(lost)}")
            if final.stats().done != len(books.acked):
                books.violations.append(f"done {final.stats().done} != acked {len(books.acked)}")
        finally:
            final.close()
    finally:
        for q in queues:
            q.close()
    return books


class ErraticClocksTest(TempDirTestCase):
    def test_erratic_clocks_never_lose_a_job_or_let_two_holders_settle_one(self) -> None:
        for seed in range(6):
            books = erratic_run(str(self.tmp / f"s{seed}"), seed)
            self.assertEqual(books.violations, [], f"seed {seed}")
            self.assertGreater(len(books.acked), 20)


if __name__ == "__main__":
    unittest.main()
