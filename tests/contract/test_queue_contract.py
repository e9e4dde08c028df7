"""The queue's public semantics, as a contract any backend must pass.

`QueueContract` is a mixin: it uses only the public API, never a file, so
every backend runs the same tests by supplying one hook, `make_queue(**kwargs)`:
open the test's queue (the same storage on every call within one test) with
those Queue arguments. What a backend lacks, its `Queue.capabilities` say,
and the tests that need it skip (as huey's storage tests do).

After every test, every queue the test made and left open is reopened
read-only from storage and must list the same jobs and counts (and, where
the backend reports recovery, open clean). "Writes nothing" is checked where
the backend's stats show its storage size (`capabilities.compaction`).

Time is always a `FakeClock` passed as `clock=`; no test sleeps.
"""

from __future__ import annotations

import asyncio
import math
import threading
import unittest
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from harness.support import FakeClock, TempDirTestCase

from contract.dependency_contract import DependencyContract
from contract.graph_contract import GraphContract
from contract.limits_contract import LimitsContract
from contract.progress_contract import ProgressContract
from contract.workflow_contract import WorkflowContract
from nobroker import (
    BackoffPolicy,
    Job,
    JobNotFoundError,
    JobState,
    NobrokerError,
    NotLeasedError,
    Queue,
    QueueClosedError,
    SerializationError,
    TaskFailed,
    TaskLockedError,
)

NO_JITTER = BackoffPolicy(base=10.0, factor=3.0, max_delay=1000.0, jitter=0.0)


def nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def nested_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


class QueueContract(DependencyContract, GraphContract, WorkflowContract, LimitsContract,
                    ProgressContract):
    """Public queue semantics. Mix into a TestCase that defines make_queue()."""

    # -- what a backend supplies ---------------------------------------------

    def make_queue(self, **kwargs: Any) -> Queue:
        raise NotImplementedError

    # -- plumbing -------------------------------------------------------------

    def needs(self, q: Queue, capability: str) -> None:
        """Skip the test unless `q`'s backend has `capability` (see Capabilities)."""
        if not getattr(q.capabilities, capability):
            self.skipTest(f"the backend has no {capability}")  # type: ignore[attr-defined]

    def check_reopened(self, queue: Queue) -> None:
        """Reopen `queue` read-only from storage: the same jobs and counts as in memory."""
        t: unittest.TestCase = self  # type: ignore[assignment]
        try:
            memory = (queue.stats(), queue.list_jobs())
        except QueueClosedError:  # the test closed it: what it left is checked elsewhere
            return
        with self.make_queue(readonly=True) as fresh:
            if fresh.recovery is not None:
                t.assertTrue(fresh.recovery.clean, fresh.recovery.describe())
            t.assertEqual((fresh.stats(), fresh.list_jobs()), memory,
                          "reopening the queue does not give the state in memory")

    def storage_marker(self, queue: Queue) -> object:
        """A value that changes whenever `queue` writes anything (None where the
        backend does not show its storage size)."""
        if not queue.capabilities.compaction:
            return None
        stats = queue.stats()
        return stats.generation, stats.log_bytes

    def queue(self, **kwargs: Any) -> Queue:
        """A queue for this test; checked against storage and closed after the test."""
        q = self.make_queue(**kwargs)
        self.addCleanup(self._finish, q)  # type: ignore[attr-defined]
        return q

    def _finish(self, q: Queue) -> None:
        try:
            self.check_reopened(q)
        finally:
            q.close()

    def clocked(self, **kwargs: Any) -> tuple[Queue, FakeClock]:
        clock = FakeClock()
        return self.queue(clock=clock, **kwargs), clock

    @contextmanager
    def assertWritesNothing(self, q: Queue) -> Iterator[None]:
        t: unittest.TestCase = self  # type: ignore[assignment]
        before_marker, before_stats = self.storage_marker(q), q.stats()
        yield
        t.assertEqual(self.storage_marker(q), before_marker, "the call wrote something")
        t.assertEqual(q.stats(), before_stats)

    # -- enqueue, lease, ack --------------------------------------------------

    def test_enqueue_returns_a_pending_job_that_get_returns_with_its_payload(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked()
        job = q.enqueue({"to": "ada", "n": [1, 2.5, None, True]}, priority=3)
        t.assertEqual((job.state, job.priority, job.attempts, job.token, job.enqueued_at),
                      (JobState.PENDING, 3, 0, None, clock.now))
        got = q.get(job.id)
        t.assertEqual(got, job)
        t.assertEqual(got.payload, {"to": "ada", "n": [1, 2.5, None, True]})

    def test_jobs_enqueue_and_enqueue_many_return_equal_what_get_returns(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked()
        clock.advance(0.123456789)
        returned = [q.enqueue("one", priority=-2, delay=7.25, max_attempts=9),
                    q.enqueue({"k": 1}, job_id="key-7"),
                    *q.enqueue_many([[1], {"x": None}], priority=4, delay=0.5),
                    *q.enqueue_many(["plain"])]
        for job in returned:
            t.assertEqual(q.get(job.id), job)

    def test_json_payloads_round_trip_unchanged(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        payloads = [None, 0, -7, 2**52, 1.25, "", "naïve ☃ \u2028", [], {}, [1, [2, [3]]],
                    {"k": {"deep": ["x", {"y": None}]}}, "a" * 100_000]
        ids = [q.enqueue(p).id for p in payloads]
        t.assertEqual([q.get(i).payload for i in ids], payloads)
        t.assertEqual([j.payload for j in q.lease(len(payloads))], payloads)

    def test_a_leased_job_is_handed_out_once_and_ack_finishes_it(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=30)
        job = q.enqueue("work")
        (leased,) = q.lease()
        t.assertEqual((leased.id, leased.payload, leased.state, leased.attempts),
                      (job.id, "work", JobState.LEASED, 1))
        t.assertIsNotNone(leased.token)
        t.assertEqual(leased.lease_expires_at, clock.now + 30)
        t.assertEqual(q.lease(), [])
        t.assertIsNone(q.lease_one())
        q.ack(leased)
        t.assertRaises(JobNotFoundError, q.get, job.id)
        stats = q.stats()
        t.assertEqual((stats.pending, stats.leased, stats.dead, stats.done, stats.total),
                      (0, 0, 0, 1, 0))

    def test_lease_takes_up_to_count_jobs(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue_many(range(5))
        t.assertEqual(len(q.lease(3)), 3)
        t.assertEqual(len(q.lease(3)), 2)
        t.assertEqual(q.lease(3), [])

    def test_enqueue_many_returns_jobs_in_order_with_distinct_ids(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        jobs = q.enqueue_many([{"i": i} for i in range(50)], priority=2, max_attempts=9)
        t.assertEqual([j.payload for j in jobs], [{"i": i} for i in range(50)])
        t.assertEqual(len({j.id for j in jobs}), 50)
        t.assertTrue(all(j.priority == 2 and j.max_attempts == 9 for j in jobs))
        t.assertEqual(q.enqueue_many([]), [])
        t.assertEqual([j.id for j in q.list_jobs()], [j.id for j in jobs])

    def test_fencing_tokens_differ_between_leases(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue_many(range(3))
        tokens = [j.token for j in q.lease(3)]
        t.assertEqual(len(set(tokens)), 3)

    # -- ordering and time ----------------------------------------------------

    def test_higher_priority_is_leased_first_and_fifo_within_a_priority(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        for name, prio in [("a", 0), ("b", 5), ("c", 0), ("d", 5), ("e", -3), ("f", 5)]:
            q.enqueue(name, priority=prio)
        t.assertEqual([j.payload for j in q.lease(2)], ["b", "d"])
        t.assertEqual([j.payload for j in q.lease(10)], ["f", "a", "c", "e"])

    def test_a_delayed_job_is_invisible_until_its_time(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked()
        start = clock.now
        job = q.enqueue("later", delay=60, priority=9)
        q.enqueue("now")
        t.assertEqual(job.available_at, start + 60)
        t.assertEqual([j.payload for j in q.lease(10)], ["now"])
        clock.advance(59.5)
        t.assertEqual(q.lease(10), [])
        clock.advance(0.5)
        t.assertEqual([j.payload for j in q.lease(10)], ["later"])

    def test_recorded_time_never_goes_backwards_when_the_clock_steps_back(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=10)
        first = q.enqueue("a")
        clock.advance(-500)
        second = q.enqueue("b")
        t.assertGreaterEqual(second.enqueued_at, first.enqueued_at)
        leased = q.lease(2)
        t.assertEqual([j.payload for j in leased], ["a", "b"], "FIFO survives the step back")
        t.assertTrue(all(j.lease_expires_at == first.enqueued_at + 10 for j in leased))

    def test_a_leased_job_stays_invisible_until_its_deadline(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=10, backoff=BackoffPolicy(base=0, jitter=0))
        q.enqueue("x")
        first = q.lease_one()
        clock.advance(9.9)
        t.assertIsNone(q.lease_one())
        clock.advance(0.1)
        again = q.lease_one() or q.lease_one()  # reclaiming may take a call of its own
        assert first is not None and again is not None
        t.assertEqual(again.id, first.id)
        t.assertEqual(again.attempts, 2)
        t.assertNotEqual(again.token, first.token)

    def test_expired_leases_count_as_attempts_then_dead_letter_naming_the_expiry(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=10, max_attempts=2, backoff=NO_JITTER)
        job = q.enqueue("x")
        q.lease_one()
        clock.advance(10)
        t.assertEqual(q.lease(), [])  # reclaims: attempt 1 failed, retry in 10 s
        reclaimed = q.get(job.id)
        t.assertEqual((reclaimed.state, reclaimed.attempts, reclaimed.available_at),
                      (JobState.PENDING, 1, clock.now + 10))
        t.assertIn("expired", reclaimed.last_error or "")
        clock.advance(10)
        second = q.lease_one()
        assert second is not None
        t.assertEqual(second.attempts, 2)
        clock.advance(10)
        t.assertEqual(q.lease(), [])
        dead = q.get(job.id)
        t.assertEqual((dead.state, dead.attempts), (JobState.DEAD, 2))
        t.assertIn("lease expired", dead.last_error or "")
        t.assertEqual([j.id for j in q.dlq()], [job.id])
        t.assertEqual(q.stats().dead, 1)

    def test_a_lease_that_reclaims_a_last_attempt_fires_dead_there_once(self) -> None:
        """`dead` for an expired lease on its last attempt: on the Queue object whose
        lease (an ack-and-lease, a purge) took it back, once, with the job as it died."""
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=10, max_attempts=1)
        other = self.queue(clock=clock, visibility_timeout=10)  # as another process's
        seen: list[tuple[str, str, JobState, str | None]] = []
        for name, handle in (("q", q), ("other", other)):
            handle.on("dead", lambda job, name=name: seen.append(
                (name, job.id, job.state, job.last_error)))

        def died(name: str, *jobs: Job) -> list[tuple[str, str, JobState, str | None]]:
            return [(name, job.id, JobState.DEAD, "lease expired (attempt 1)") for job in jobs]

        first, second, third = (q.enqueue(n) for n in ("first", "second", "third"))
        q.lease(2)  # their holder dies: no ack
        clock.advance(10)
        t.assertEqual([job.id for job in other.lease()], [third.id])  # reclaims, then leases
        t.assertEqual(sorted(seen), sorted(died("other", first, second)))
        fourth, fifth = q.enqueue("fourth"), q.enqueue("fifth")
        held = q.lease_one(visibility_timeout=100)
        assert held is not None and held.id == fourth.id
        clock.advance(10)  # the third's lease ran out
        nxt = q.ack_and_lease(held)
        t.assertEqual(nxt and nxt.id, fifth.id)
        t.assertEqual(seen[2:], died("q", third))
        clock.advance(10)  # the fifth's too
        other.purge()
        t.assertEqual(seen[3:], died("other", fifth))
        clock.advance(10)
        t.assertEqual((q.lease(), other.lease(), len(seen)), ([], [], 4), "once")
        t.assertEqual(q.stats().dead, 4)

    # -- nack and backoff -----------------------------------------------------

    def test_nack_retries_after_the_backoff_delay_then_dead_letters(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(max_attempts=3, backoff=NO_JITTER)
        job = q.enqueue("x")
        for attempt, wait in ((1, 10.0), (2, 30.0)):
            leased = q.lease_one()
            assert leased is not None
            t.assertEqual(leased.attempts, attempt)
            after = q.nack(leased, error=f"failure {attempt}")
            t.assertEqual((after.state, after.available_at, after.last_error),
                          (JobState.PENDING, clock.now + wait, f"failure {attempt}"))
            clock.advance(wait - 0.01)
            t.assertIsNone(q.lease_one())
            clock.advance(0.01)
        last = q.lease_one()
        assert last is not None
        dead = q.nack(last, error="final")
        t.assertEqual((dead.state, dead.attempts, dead.last_error), (JobState.DEAD, 3, "final"))
        t.assertEqual([j.id for j in q.dlq()], [job.id])
        clock.advance(10_000)
        t.assertIsNone(q.lease_one(), "a dead job is never leased")

    def test_nack_with_an_explicit_delay_overrides_the_backoff(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(backoff=NO_JITTER)
        q.enqueue("x")
        leased = q.lease_one()
        assert leased is not None
        t.assertEqual(q.nack(leased, delay=0).available_at, clock.now)
        again = q.lease_one()
        assert again is not None
        t.assertEqual(q.nack(again, delay=2.5).available_at, clock.now + 2.5)

    def test_nack_dead_dead_letters_now_whatever_attempts_remain(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(max_attempts=5, backoff=NO_JITTER)
        fired: list[tuple[str, str, JobState]] = []
        for event in ("retried", "dead"):
            q.on(event, lambda job, event=event: fired.append((event, job.id, job.state)))
        job = q.enqueue("x")
        leased = q.lease_one()
        assert leased is not None
        dead = q.nack(leased, error="rejected", delay=60, dead=True)
        t.assertEqual((dead.id, dead.state, dead.attempts, dead.last_error),
                      (job.id, JobState.DEAD, 1, "rejected"))
        t.assertEqual(q.get(job.id).state, JobState.DEAD)
        t.assertEqual(fired, [("dead", job.id, JobState.DEAD)])
        stats = q.stats()
        t.assertEqual((stats.pending, stats.leased, stats.dead), (0, 0, 1))
        t.assertEqual([j.id for j in q.dlq()], [job.id])
        clock.advance(10_000)
        t.assertIsNone(q.lease_one(), "a dead job is never leased")
        with self.assertWritesNothing(q):  # fenced like nack: its lease is over
            t.assertRaises(NotLeasedError, q.nack, leased, dead=True)
        t.assertTrue(q.requeue_dead(job.id))
        again = q.lease_one()
        assert again is not None
        t.assertEqual(q.nack(again, delay=0, dead=False).state, JobState.PENDING)
        t.assertRaises(TypeError, q.nack, q.lease_one(), dead=1)

    def test_nack_dead_by_a_stale_holder_is_refused_and_writes_nothing(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=10, backoff=BackoffPolicy(base=0, jitter=0))
        q.enqueue("x", max_attempts=5)
        old = q.lease_one()
        clock.advance(11)
        new = q.lease_one() or q.lease_one()  # reclaiming may take a call of its own
        assert old is not None and new is not None
        with self.assertWritesNothing(q):
            t.assertRaises(NotLeasedError, q.nack, old, dead=True)
        t.assertEqual(q.get(new.id).state, JobState.LEASED)

    def test_snooze_gives_the_job_back_untried_even_on_its_last_attempt(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(backoff=NO_JITTER)
        job = q.enqueue("x", max_attempts=1)
        for _ in range(3):  # a nack would have dead-lettered it the first time
            leased = q.lease_one()
            assert leased is not None
            t.assertEqual(leased.attempts, 1)
            back = q.snooze(leased, 2.5, error="lock held")
            t.assertEqual((back.id, back.state, back.attempts, back.last_error,
                           back.available_at), (job.id, JobState.PENDING, 0, "lock held",
                                                clock.now + 2.5))
            t.assertIsNone(q.lease_one(), "hidden until its delay is over")
            t.assertRaises(NotLeasedError, q.snooze, leased, 0)  # its lease is over
            clock.advance(2.5)
        stats = q.stats()
        t.assertEqual((stats.pending, stats.leased, stats.dead), (1, 0, 0))
        leased = q.lease_one()
        assert leased is not None
        q.nack(leased)
        t.assertEqual(q.get(job.id).state, JobState.DEAD, "a nack still counts")
        with t.assertRaises(ValueError):
            q.snooze(leased, -1)

    def test_nack_with_jitter_stays_within_the_policy_bounds(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        policy = BackoffPolicy(base=100.0, factor=2.0, max_delay=1000.0, jitter=0.5)
        q, clock = self.clocked(max_attempts=100, backoff=policy)
        q.enqueue_many(range(20))
        for job in q.lease(20):
            at = q.nack(job).available_at
            t.assertTrue(clock.now + 50 <= at <= clock.now + 100, at - clock.now)

    # -- dead letters, purge --------------------------------------------------

    def _dead_jobs(self, q: Queue, n: int) -> list[Job]:
        jobs = q.enqueue_many(range(n), max_attempts=1)
        for leased in q.lease(n):
            q.nack(leased, error="boom")
        return jobs

    def test_requeue_dead_revives_one_job_with_a_fresh_attempt_budget(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked()
        a, b = self._dead_jobs(q, 2)
        t.assertEqual(q.requeue_dead(a.id), 1)
        revived = q.get(a.id)
        t.assertEqual((revived.state, revived.attempts, revived.available_at),
                      (JobState.PENDING, 0, clock.now))
        t.assertEqual(q.get(b.id).state, JobState.DEAD)
        t.assertEqual([j.id for j in q.lease(5)], [a.id])

    def test_requeue_dead_without_an_id_revives_every_dead_job(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        jobs = self._dead_jobs(q, 4)
        t.assertEqual(q.requeue_dead(), 4)
        t.assertEqual(q.dlq(), [])
        t.assertEqual({j.id for j in q.lease(10)}, {j.id for j in jobs})
        t.assertEqual(q.requeue_dead(), 0)

    def test_requeue_dead_of_a_job_that_is_not_dead_raises_job_not_found(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        pending = q.enqueue("p")
        for job_id in ("no-such-job", pending.id):
            with self.assertWritesNothing(q):
                t.assertRaises(JobNotFoundError, q.requeue_dead, job_id)

    def test_purge_removes_pending_jobs_only_and_leased_ones_finish_normally(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        dead = self._dead_jobs(q, 1)[0]
        leased_job = q.enqueue("leased")
        (leased,) = q.lease()
        q.enqueue_many(["p1", "p2"])
        q.enqueue("delayed", delay=3600)
        t.assertEqual(q.purge(), 3)
        t.assertEqual(q.list_jobs(JobState.PENDING), [])
        t.assertEqual(q.get(dead.id).state, JobState.DEAD)
        t.assertEqual(q.get(leased_job.id).state, JobState.LEASED)
        q.ack(leased)
        stats = q.stats()
        t.assertEqual((stats.pending, stats.leased, stats.dead, stats.done), (0, 0, 1, 1))
        t.assertEqual(q.purge(), 0)

    def test_purge_returns_how_many_jobs_it_removed_even_when_a_lease_just_expired(self
                                                                                  ) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=10, backoff=NO_JITTER)
        q.enqueue_many(["a", "b", "c"])
        q.lease(1)
        clock.advance(11)  # the lease is past its deadline: the job is due back
        before = q.stats().total
        removed = q.purge()
        t.assertEqual(removed, before - q.stats().total)

    # -- extend and stale tokens ----------------------------------------------

    def test_extend_moves_the_deadline_to_seconds_from_now(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=10)
        q.enqueue("x")
        leased = q.lease_one()
        assert leased is not None
        clock.advance(8)
        extended = q.extend(leased, 20)
        t.assertEqual(extended.lease_expires_at, clock.now + 20)
        t.assertEqual(extended.token, leased.token)
        clock.advance(15)  # past the original deadline, before the new one
        t.assertIsNone(q.lease_one())
        q.ack(leased)
        t.assertEqual(q.stats().done, 1)

    def test_a_stale_token_is_refused_by_ack_nack_and_extend(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=10, backoff=BackoffPolicy(base=0, jitter=0))
        q.enqueue("x")
        old = q.lease_one()
        clock.advance(11)
        new = q.lease_one() or q.lease_one()  # reclaiming may take a call of its own
        assert old is not None and new is not None
        t.assertEqual(new.id, old.id)
        for call in (lambda: q.ack(old), lambda: q.nack(old, error="late"),
                     lambda: q.extend(old, 5)):
            with self.assertWritesNothing(q):
                with t.assertRaises(NotLeasedError) as caught:
                    call()
            t.assertEqual(caught.exception.job_id, old.id)
        q.ack(new)
        t.assertEqual(q.stats().done, 1)

    def test_ack_twice_is_refused(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue("x")
        leased = q.lease_one()
        assert leased is not None
        q.ack(leased)
        with self.assertWritesNothing(q):
            t.assertRaises(NotLeasedError, q.ack, leased)

    def test_a_job_that_was_never_leased_cannot_be_acked(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        job = q.enqueue("x")
        with self.assertWritesNothing(q):
            t.assertRaises(NotLeasedError, q.ack, job)
            t.assertRaises(NotLeasedError, q.nack, job)
            t.assertRaises(NotLeasedError, q.extend, job, 5)

    def test_ack_after_the_lease_expired_succeeds_while_nobody_re_leased_the_job(self) -> None:
        # Documented choice: the token is stale only once the job was handed to
        # someone else; a late ack of a lease nobody reclaimed finishes the job.
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=10)
        q.enqueue("x")
        leased = q.lease_one()
        assert leased is not None
        clock.advance(25)
        q.ack(leased)
        t.assertEqual(q.stats().done, 1)
        t.assertIsNone(q.lease_one())

    def test_nack_and_extend_after_the_lease_expired_succeed_while_nobody_re_leased(self
                                                                                  ) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=10, backoff=NO_JITTER)
        q.enqueue("a")
        a = q.lease_one()
        assert a is not None
        clock.advance(25)
        t.assertEqual(q.extend(a, 30).lease_expires_at, clock.now + 30)
        q.ack(a)
        q.enqueue("b")
        b = q.lease_one()
        assert b is not None
        clock.advance(25)
        t.assertEqual(q.nack(b, delay=0).state, JobState.PENDING)

    def test_ack_many_after_the_leases_expired_succeeds_while_nobody_re_leased_them(self
                                                                                   ) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=10)
        q.enqueue_many(["a", "b", "c"])
        jobs = q.lease(3)
        clock.advance(25)
        q.ack_many(jobs)
        t.assertEqual(q.stats().done, 3)
        t.assertEqual(q.stats().total, 0)

    # -- idempotent enqueue ---------------------------------------------------

    def test_enqueue_with_a_known_job_id_returns_the_existing_job_and_writes_nothing(self
                                                                                     ) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue(max_attempts=1)
        first = q.enqueue({"v": 1}, job_id="order-42")
        t.assertEqual(first.id, "order-42")
        with self.assertWritesNothing(q):
            again = q.enqueue({"v": 2}, job_id="order-42", priority=7)
        t.assertEqual(again, first)
        t.assertEqual(again.payload, {"v": 1})
        (leased,) = q.lease()
        with self.assertWritesNothing(q):
            t.assertEqual(q.enqueue("x", job_id="order-42").state, JobState.LEASED)
        q.nack(leased)
        with self.assertWritesNothing(q):
            t.assertEqual(q.enqueue("x", job_id="order-42").state, JobState.DEAD)
        t.assertEqual(q.stats().total, 1)

    def test_a_finished_key_is_remembered_for_key_retention_even_across_compaction(self
                                                                                   ) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(key_retention=100)
        q.enqueue("x", job_id="k")
        q.ack(q.lease()[0])
        done_at = clock.now
        clock.advance(50)
        with self.assertWritesNothing(q):
            remembered = q.enqueue("y", job_id="k")
        t.assertEqual((remembered.id, remembered.state), ("k", JobState.DONE))
        t.assertEqual(q.get("k").state, JobState.DONE)
        q.compact()
        clock.advance(49)
        with self.assertWritesNothing(q):
            t.assertEqual(q.enqueue("y", job_id="k").state, JobState.DONE)
        t.assertEqual(q.get("k").available_at, done_at)

    def test_a_finished_key_is_forgotten_after_key_retention(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(key_retention=100)
        q.enqueue("x", job_id="k")
        q.ack(q.lease()[0])
        clock.advance(101)
        fresh = q.enqueue("new", job_id="k")
        t.assertEqual((fresh.state, fresh.payload), (JobState.PENDING, "new"))
        t.assertEqual(q.stats().pending, 1)

    def test_compaction_after_key_retention_forgets_the_key(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(key_retention=100)
        q.enqueue("x", job_id="k")
        q.ack(q.lease()[0])
        clock.advance(101)
        q.compact()
        t.assertRaises(JobNotFoundError, q.get, "k")

    # -- batches --------------------------------------------------------------

    def test_ack_many_finishes_every_job(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue_many(range(5))
        q.ack_many(q.lease(5))
        t.assertEqual((q.stats().done, q.stats().total), (5, 0))
        q.ack_many([])

    def test_ack_many_with_one_stale_token_finishes_none(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue_many(range(3))
        a, b, c = q.lease(3)
        q.ack(b)
        with self.assertWritesNothing(q):
            with t.assertRaises(NotLeasedError) as caught:
                q.ack_many([a, b, c])
        t.assertEqual(caught.exception.job_id, b.id)
        t.assertEqual(q.stats().leased, 2)
        q.ack_many([a, c])
        t.assertEqual(q.stats().done, 3)

    def test_ack_many_with_a_job_listed_twice_finishes_none(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue_many(range(2))
        a, b = q.lease(2)
        with self.assertWritesNothing(q):
            t.assertRaises(NotLeasedError, q.ack_many, [a, b, a])
        t.assertEqual(q.stats().leased, 2)

    def test_ack_and_lease_acks_one_job_and_leases_the_next(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue_many(["a", "b"])
        first = q.lease_one()
        assert first is not None
        second = q.ack_and_lease(first)
        assert second is not None
        t.assertEqual((second.payload, second.state), ("b", JobState.LEASED))
        t.assertIsNone(q.ack_and_lease(second))
        t.assertEqual((q.stats().done, q.stats().total), (2, 0))

    def test_ack_and_lease_with_a_stale_token_neither_acks_nor_leases(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue_many(["a", "b"])
        first = q.lease_one()
        assert first is not None
        q.ack(first)
        with self.assertWritesNothing(q):
            t.assertRaises(NotLeasedError, q.ack_and_lease, first)
        t.assertEqual(q.stats().pending, 1)

    def test_ack_many_and_lease_acks_every_job_and_leases_the_next_ones(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue_many(["a", "b", "c", "d", "e"])
        first = q.lease(2)
        following = q.ack_many_and_lease(first, 2)
        t.assertEqual([j.payload for j in following], ["c", "d"])
        t.assertTrue(all(j.state is JobState.LEASED and j.token for j in following))
        t.assertEqual((q.stats().done, q.stats().leased, q.stats().pending), (2, 2, 1))
        last = q.ack_many_and_lease(following, 5)  # fewer ready than asked for
        t.assertEqual([j.payload for j in last], ["e"])
        t.assertEqual(q.ack_many_and_lease(last, 0), [])
        t.assertEqual(q.ack_many_and_lease([], 1), [])
        t.assertEqual((q.stats().done, q.stats().total), (5, 0))

    def test_ack_many_and_lease_with_a_stale_token_neither_acks_nor_leases(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue_many(range(4))
        a, b = q.lease(2)
        q.ack(b)
        with self.assertWritesNothing(q):
            with t.assertRaises(NotLeasedError) as caught:
                q.ack_many_and_lease([a, b], 2)
            t.assertRaises(NotLeasedError, q.ack_many_and_lease, [a, a], 2)
        t.assertEqual(caught.exception.job_id, b.id)
        t.assertEqual((q.stats().leased, q.stats().pending), (1, 2))
        t.assertRaises(ValueError, q.ack_many_and_lease, [a], -1)

    # -- views ----------------------------------------------------------------

    def test_list_jobs_is_in_enqueue_order_filtered_by_state_and_limited(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue(max_attempts=1)
        jobs = q.enqueue_many(["a", "b", "c", "d"], priority=0)
        q.enqueue("e", priority=9)
        leased = q.lease(2)  # e, then a
        q.nack(leased[1])  # a is dead
        t.assertEqual([j.payload for j in q.list_jobs()], ["a", "b", "c", "d", "e"])
        t.assertEqual([j.payload for j in q.list_jobs(JobState.PENDING)], ["b", "c", "d"])
        t.assertEqual([j.payload for j in q.list_jobs("pending", limit=2)], ["b", "c"])
        t.assertEqual([j.payload for j in q.list_jobs(JobState.LEASED)], ["e"])
        t.assertEqual([j.payload for j in q.list_jobs(JobState.DEAD)], ["a"])
        t.assertEqual([j.id for j in q.dlq()], [jobs[0].id])
        t.assertEqual(q.list_jobs(limit=0), [])
        t.assertEqual(q.dlq(limit=0), [])
        t.assertEqual(q.list_jobs(JobState.DONE), [], "plain acks keep nothing")
        t.assertRaises(ValueError, q.list_jobs, "bogus")

    def test_list_jobs_pages_with_an_offset(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue(max_attempts=1)
        q.enqueue_many(list(range(10)))
        for job in q.lease(3):  # 0, 1, 2: 0 is dead, 1 acked (gone), 2 leased
            if job.payload == 0:
                q.nack(job)
            elif job.payload == 1:
                q.ack(job)
        t.assertEqual([j.payload for j in q.list_jobs(offset=2, limit=3)], [3, 4, 5])
        t.assertEqual([j.payload for j in q.list_jobs(offset=7)], [8, 9])
        t.assertEqual([j.payload for j in q.list_jobs(JobState.PENDING, offset=1, limit=2)],
                      [4, 5])
        t.assertEqual(q.list_jobs(JobState.DEAD, offset=1), [])
        t.assertEqual(q.list_jobs(offset=50), [])
        t.assertRaises(ValueError, q.list_jobs, offset=-1)
        t.assertRaises(TypeError, q.list_jobs, offset=1.5)

    def test_lifetime_totals_where_the_backend_counts_them(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue(max_attempts=2)
        q.enqueue_many(["a", "b", "c"])
        for job in q.lease(2):
            q.nack(job, delay=0)  # both retried once
        for job in q.lease(3):
            if job.payload == "c":
                q.ack(job)
            else:
                q.nack(job, delay=0)  # a and b: their second attempt, dead
        stats = q.stats()
        t.assertEqual(stats.done, 1)
        counted = {name: getattr(stats, name) for name in ("enqueued", "retried",
                                                           "dead_lettered")}
        expected = {"enqueued": 3, "retried": 2, "dead_lettered": 2}
        for name, value in counted.items():
            if value is not None:  # None: this backend does not count it
                t.assertEqual(value, expected[name], name)

    def test_stats_counts_every_state(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue(max_attempts=1)
        q.enqueue_many(range(6))
        a, b, c = q.lease(3)
        q.ack(a)
        q.nack(b)
        stats = q.stats()
        t.assertEqual((stats.pending, stats.leased, stats.dead, stats.done, stats.total),
                      (3, 1, 1, 1, 5))
        del c

    def test_get_of_an_unknown_id_raises_job_not_found(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        with t.assertRaises(JobNotFoundError) as caught:
            q.get("nope")
        t.assertEqual(caught.exception.job_id, "nope")

    def test_jobs_are_frozen_snapshots(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        job = q.enqueue("x")
        q.lease()
        t.assertEqual(job.state, JobState.PENDING)
        with t.assertRaises(AttributeError):
            job.state = JobState.DONE  # type: ignore[misc]

    # -- refusing bad input ---------------------------------------------------

    def test_non_json_payloads_raise_serialization_error_and_write_nothing(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue("before")
        circular: list[Any] = []
        circular.append(circular)
        bad = {"set": {1, 2}, "bytes": b"raw", "nan": math.nan, "inf": math.inf,
               "nested nan": {"x": [1, -math.inf]}, "object": object(),
               "circular": circular, "deep list": nested_list(100_000),
               "deep dict": nested_dict(100_000), "tuple key": {(1, 2): "v"}}
        for name, payload in bad.items():
            with t.subTest(name):
                with self.assertWritesNothing(q):
                    t.assertRaises(SerializationError, q.enqueue, payload)
                    t.assertRaises(SerializationError, q.enqueue_many, ["fine", payload])
        t.assertTrue(issubclass(SerializationError, ValueError))
        t.assertEqual([j.payload for j in q.list_jobs()], ["before"])

    def test_bad_arguments_raise_type_or_value_errors_and_write_nothing(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue("x")
        leased = q.lease_one()
        q.enqueue("y")
        assert leased is not None
        calls = {
            "negative delay": lambda: q.enqueue("z", delay=-1),
            "nan delay": lambda: q.enqueue("z", delay=math.nan),
            "infinite delay": lambda: q.enqueue("z", delay=math.inf),
            "string delay": lambda: q.enqueue("z", delay="5"),  # type: ignore[arg-type]
            "bool priority": lambda: q.enqueue("z", priority=True),
            "float priority": lambda: q.enqueue("z", priority=1.5),  # type: ignore[arg-type]
            "huge priority": lambda: q.enqueue("z", priority=2**60),
            "zero max_attempts": lambda: q.enqueue("z", max_attempts=0),
            "bool max_attempts": lambda: q.enqueue("z", max_attempts=True),
            "empty job_id": lambda: q.enqueue("z", job_id=""),
            "int job_id": lambda: q.enqueue("z", job_id=5),  # type: ignore[arg-type]
            "control char job_id": lambda: q.enqueue("z", job_id="a\nb"),
            "overlong job_id": lambda: q.enqueue("z", job_id="x" * 1000),
            "enqueue_many bad delay": lambda: q.enqueue_many(["z"], delay=-1),
            "count 0": lambda: q.lease(0),
            "negative count": lambda: q.lease(-1),
            "bool count": lambda: q.lease(True),
            "float count": lambda: q.lease(1.0),  # type: ignore[arg-type]
            "zero visibility": lambda: q.lease(1, visibility_timeout=0),
            "nan visibility": lambda: q.lease(1, visibility_timeout=math.nan),
            "negative nack delay": lambda: q.nack(leased, delay=-1),
            "nan nack delay": lambda: q.nack(leased, delay=math.nan),
            "zero extend": lambda: q.extend(leased, 0),
            "nan extend": lambda: q.extend(leased, math.nan),
            "negative limit": lambda: q.list_jobs(limit=-1),
            "bool limit": lambda: q.list_jobs(limit=True),
        }
        for name, call in calls.items():
            with t.subTest(name):
                with self.assertWritesNothing(q):
                    t.assertRaises((TypeError, ValueError), call)

    def test_bad_queue_settings_are_refused(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        for setting in ({"visibility_timeout": 0}, {"visibility_timeout": math.nan},
                        {"max_attempts": 0}, {"max_attempts": 1.5},
                        {"key_retention": -1}, {"lock_timeout": math.inf},
                        {"auto_compact": 1.5}, {"auto_compact": 0}):
            with t.subTest(setting):
                t.assertRaises((TypeError, ValueError), self.make_queue, **setting)

    # -- lifecycle ------------------------------------------------------------

    def test_a_queue_is_a_context_manager_that_closes(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        with self.queue() as q:
            q.enqueue("x")
        t.assertRaises(QueueClosedError, q.stats)

    def test_every_call_on_a_closed_queue_raises_queue_closed(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue("x")
        leased = q.lease_one()
        assert leased is not None
        q.close()
        q.close()  # closing twice is harmless
        calls = [lambda: q.enqueue("y"), lambda: q.enqueue_many(["y"]), q.lease, q.lease_one,
                 lambda: q.ack(leased), lambda: q.ack_many([leased]),
                 lambda: q.ack_and_lease(leased), lambda: q.nack(leased),
                 lambda: q.extend(leased, 5), lambda: q.get(leased.id), q.stats, q.list_jobs,
                 q.dlq, q.requeue_dead, q.purge, lambda: q.cancel(leased.id),
                 q.pause, q.resume, q.delete_dead, lambda: q.result(leased.id, 0),
                 q.compact]
        for call in calls:
            with t.subTest(call=getattr(call, "__name__", call)):
                t.assertRaises(QueueClosedError, call)

    # -- results, cancel, pause, deleting dead jobs (issue 10) ----------------

    def test_ack_with_a_result_keeps_the_job_done_with_result_attempts_and_time(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked()
        job = q.enqueue({"n": 1})
        leased = q.lease_one()
        assert leased is not None
        clock.advance(2)
        q.ack(leased, result={"sum": [1, 2]})
        got = q.get(job.id)
        t.assertEqual((got.state, got.result, got.attempts, got.max_attempts, got.finished_at),
                      (JobState.DONE, {"sum": [1, 2]}, 1, 5, clock.now))
        t.assertEqual(got.enqueued_at, job.enqueued_at)
        t.assertEqual(q.result(job.id), {"sum": [1, 2]})
        t.assertEqual(q.result(job.id, timeout=0), {"sum": [1, 2]})
        stats = q.stats()
        t.assertEqual((stats.total, stats.done, stats.kept), (0, 1, 1))

    def test_get_of_a_finished_job_has_no_payload_and_a_dead_one_keeps_it(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.clocked()
        done = q.enqueue({"n": 1}, job_id="done")
        dead = q.enqueue({"n": 2}, max_attempts=1)
        cancelled = q.enqueue({"n": 3}, delay=60.0, job_id="cancelled")
        for leased in q.lease(2):
            if leased.id == done.id:
                q.ack(leased, result="ok")
            else:
                q.nack(leased, error="boom")
        t.assertTrue(q.cancel(cancelled.id))
        t.assertEqual([(q.get(j.id).state, q.get(j.id).payload) for j in (done, dead, cancelled)],
                      [(JobState.DONE, None), (JobState.DEAD, {"n": 2}),
                       (JobState.CANCELLED, None)])

    def test_a_read_only_queue_waits_for_another_handle_s_result_and_writes_nothing(self
                                                                                     ) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        first, second = q.enqueue_many(["a", "b"])
        leased = {job.id: job for job in q.lease(2)}
        with self.make_queue(readonly=True) as ro:
            t.assertIsNone(ro.wait_finished(first.id, 0.05), "a pending job finished")
            got: list[Any] = []
            waiter = threading.Thread(target=lambda: got.append(ro.result(second.id, 30)))
            waiter.start()  # waiting already or not yet: either way it must see the ack
            q.ack(leased[second.id], result={"n": 2})
            waiter.join(30)
            t.assertEqual(got, [{"n": 2}])
            q.ack(leased[first.id], result=1)
            with self.assertWritesNothing(q):
                done = ro.wait_finished(first.id, 30)
            assert done is not None
            t.assertEqual((done.state, done.result), (JobState.DONE, 1))

    def test_an_explicit_none_result_is_kept_but_a_plain_ack_keeps_nothing(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        a, b = q.enqueue_many(["a", "b"])
        first, second = q.lease(2)
        q.ack(first, result=None)
        q.ack(second)
        t.assertIs(q.get(a.id).state, JobState.DONE)
        t.assertIsNone(q.result(a.id))
        t.assertRaises(JobNotFoundError, q.get, b.id)
        t.assertRaises(JobNotFoundError, q.result, b.id, 0)
        t.assertEqual(q.stats().kept, 1)

    def test_ack_and_lease_stores_the_result_and_leases_the_next(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        a, b = q.enqueue_many(["a", "b"])
        first = q.lease_one()
        assert first is not None
        nxt = q.ack_and_lease(first, result=[1, "two"])
        t.assertEqual(nxt.id if nxt else None, b.id)
        t.assertEqual(q.result(a.id), [1, "two"])

    def test_a_result_that_is_not_json_raises_and_writes_nothing(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue("a")
        leased = q.lease_one()
        assert leased is not None
        for bad in (object(), float("nan"), {1j: 2}):
            with self.assertWritesNothing(q):
                with t.assertRaises(SerializationError) as caught:
                    q.ack(leased, result=bad)
                t.assertIn("result", str(caught.exception))
                t.assertRaises(SerializationError, q.ack_and_lease, leased, result=bad)
        t.assertIs(q.get(leased.id).state, JobState.LEASED)

    def test_a_result_is_kept_for_result_ttl_across_compaction_then_forgotten(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(result_ttl=100.0)
        a, b = q.enqueue_many(["a", "b"])
        first, second = q.lease(2)
        q.ack(first, result="kept 100 s")
        q.ack(second, result="kept 500 s", result_ttl=500.0)
        clock.advance(99)
        q.compact()  # every backend compacts (what that means is its own)
        t.assertEqual(q.result(a.id), "kept 100 s")
        clock.advance(2)
        q.enqueue("any write forgets what is due")
        t.assertRaises(JobNotFoundError, q.get, a.id)
        t.assertEqual(q.result(b.id), "kept 500 s")
        q.compact()
        t.assertEqual(q.result(b.id), "kept 500 s")
        clock.advance(400)
        q.enqueue("again")
        t.assertRaises(JobNotFoundError, q.result, b.id)
        t.assertEqual(q.stats().kept, 0)

    def test_a_result_past_its_result_ttl_is_gone_before_any_write(self) -> None:
        # The forgetting record is written by the next write; a read in between must
        # not hand out what the queue already agreed to forget.
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(result_ttl=10.0)
        done, cancelled = q.enqueue_many(["a", "b"])
        leased = q.lease_one()
        assert leased is not None
        q.ack(leased, result="kept 10 s")
        q.cancel(cancelled.id)
        clock.advance(9)
        t.assertEqual(q.result(done.id), "kept 10 s")
        t.assertIs(q.get(cancelled.id).state, JobState.CANCELLED)
        clock.advance(2)
        with self.assertWritesNothing(q):
            t.assertRaises(JobNotFoundError, q.get, done.id)
            t.assertRaises(JobNotFoundError, q.result, done.id)
            t.assertRaises(JobNotFoundError, q.get, cancelled.id)

    def test_a_result_acked_with_result_ttl_0_is_not_kept_even_for_a_keyed_job(self) -> None:
        # A keyed job's id outlives its ack for key_retention (so a second enqueue of the
        # key writes nothing); its result must not: result_ttl=0 keeps none to return.
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue(key_retention=100)
        keyed = q.enqueue("x", job_id="order-0")
        plain = q.enqueue("y")
        for job in (q.lease_one(), q.lease_one()):
            assert job is not None
            q.ack(job, result={"total": 3}, result_ttl=0)
        t.assertIsNone(q.result(keyed.id))  # done, remembered by its key, no result
        t.assertIs(q.get(keyed.id).state, JobState.DONE)
        t.assertIsNone(q.get(keyed.id).result)
        t.assertEqual(q.enqueue("x", job_id="order-0").state, JobState.DONE)  # remembered
        t.assertRaises(JobNotFoundError, q.result, plain.id)
        again = q.enqueue("z", job_id="order-1")
        leased = q.lease_one()
        assert leased is not None and leased.id == again.id
        t.assertIsNone(q.ack_and_lease(leased, result="r", result_ttl=0))
        t.assertIsNone(q.result(again.id))

    def test_a_keyed_job_s_result_goes_at_result_ttl_while_its_key_lasts_key_retention(
            self) -> None:
        # The id is kept for key_retention (a second enqueue of the key writes nothing);
        # the result only for its result_ttl, however long the id outlives it.
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(result_ttl=10.0, key_retention=100.0)
        keyed = q.enqueue("x", job_id="order-1")
        plain = q.enqueue("y")
        for job in (q.lease_one(), q.lease_one()):
            assert job is not None
            q.ack(job, result={"total": 3})
        clock.advance(9)
        t.assertEqual(q.result(keyed.id), {"total": 3})
        clock.advance(2)
        with self.assertWritesNothing(q):
            t.assertIsNone(q.get(keyed.id).result, "past its result_ttl, before any write")
        q.compact()
        got = q.get(keyed.id)
        t.assertEqual((got.state, got.result), (JobState.DONE, None))
        t.assertIsNone(q.result(keyed.id))
        t.assertRaises(JobNotFoundError, q.get, plain.id)
        t.assertEqual(q.enqueue("x", job_id="order-1").state, JobState.DONE, "remembered")
        clock.advance(80)
        t.assertEqual(q.enqueue("x", job_id="order-1").state, JobState.DONE)
        t.assertIsNone(q.get(keyed.id).result)
        clock.advance(10)
        q.enqueue("any write forgets what is due")
        t.assertIs(q.enqueue("x", job_id="order-1").state, JobState.PENDING, "forgotten")

    def test_a_keyed_job_whose_result_is_gone_is_not_counted_kept(self) -> None:
        # stats().kept: finished jobs kept with their outcome. A keyed job past its
        # result_ttl has none left to return (its id alone lasts key_retention, as a
        # keyed job's acked without a result, which was never counted).
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(result_ttl=10.0, key_retention=100.0)
        for n in range(3):
            q.enqueue("x", job_id=f"order-{n}")
        q.enqueue("plain")
        for n, job in enumerate(q.lease(4)):
            q.ack(job, result=n, result_ttl=30.0 if n >= 2 else None)
        t.assertEqual(q.stats().kept, 4)
        clock.advance(11)
        with self.assertWritesNothing(q):  # order-0's and order-1's results are gone
            t.assertEqual(q.stats().kept, 2)
        q.enqueue("any write")
        t.assertEqual(q.stats().kept, 2)
        q.compact()
        t.assertEqual(q.stats().kept, 2)
        clock.advance(20)
        q.enqueue("any write forgets the plain job")  # order-2's result is gone too
        t.assertEqual(q.stats().kept, 0)
        t.assertEqual(q.enqueue("x", job_id="order-0").state, JobState.DONE, "remembered")
        clock.advance(70)
        q.enqueue("any write forgets the keys")
        t.assertEqual((q.stats().kept, q.stats().done), (0, 4))
        t.assertIs(q.enqueue("x", job_id="order-0").state, JobState.PENDING, "forgotten")

    def test_result_waits_with_a_timeout_and_names_a_dead_job_s_error(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue(max_attempts=1)
        job = q.enqueue("x")
        t.assertRaises(TimeoutError, q.result, job.id, 0.05)
        leased = q.lease_one()
        assert leased is not None
        t.assertRaises(TimeoutError, q.result, job.id, 0)
        q.nack(leased, error="ValueError: boom")
        with t.assertRaises(TaskFailed) as caught:
            q.result(job.id, timeout=1)
        failed = caught.exception
        t.assertEqual((failed.job_id, failed.state, failed.last_error),
                      (job.id, "dead", "ValueError: boom"))
        got = q.get(job.id)
        t.assertEqual((got.state, got.attempts), (JobState.DEAD, 1))
        t.assertIsNotNone(got.finished_at)
        t.assertRaises(JobNotFoundError, q.result, "never-enqueued", 0)

    def test_aresult_waits_without_blocking_the_event_loop(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        job = q.enqueue("x")

        async def scenario() -> tuple[Any, int]:
            waiting = asyncio.ensure_future(q.aresult(job.id, timeout=30))
            ticks = 0
            while ticks < 5:  # the loop keeps running while aresult waits
                await asyncio.sleep(0.01)
                ticks += 1
            t.assertFalse(waiting.done())
            leased = q.lease_one()
            assert leased is not None
            q.ack(leased, result="async")
            return await waiting, ticks

        t.assertEqual(asyncio.run(scenario()), ("async", 5))

    def test_cancel_of_a_pending_job_removes_it_and_remembers_why(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        job = q.enqueue("x")
        t.assertTrue(q.cancel(job.id))
        t.assertEqual(q.lease(5), [])
        got = q.get(job.id)
        t.assertEqual((got.state, got.attempts, got.result), (JobState.CANCELLED, 0, None))
        with t.assertRaises(TaskFailed) as caught:
            q.result(job.id)
        t.assertEqual(caught.exception.state, "cancelled")
        t.assertFalse(q.cancel(job.id), "cancelling twice")
        stats = q.stats()
        t.assertEqual((stats.pending, stats.total, stats.kept), (0, 0, 1))

    def test_cancel_of_a_finished_dead_or_unknown_job_returns_false_and_writes_nothing(
            self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue(max_attempts=1)
        done, dead = q.enqueue_many(["done", "dead"])
        first, second = q.lease(2)
        q.ack(first, result=1)
        q.nack(second)
        for job_id in (done.id, dead.id, "unknown"):
            with self.assertWritesNothing(q):
                t.assertFalse(q.cancel(job_id))
        t.assertEqual(q.result(done.id), 1)

    def test_cancel_of_a_leased_job_revokes_the_lease_and_its_result_is_never_stored(
            self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(visibility_timeout=30)
        job = q.enqueue("x")
        leased = q.lease_one()
        assert leased is not None
        t.assertTrue(q.cancel(job.id))
        for late in (lambda: q.ack(leased, result="late"), lambda: q.ack(leased),
                     lambda: q.ack_and_lease(leased), lambda: q.nack(leased),
                     lambda: q.extend(leased, 10), lambda: q.ack_many([leased])):
            t.assertRaises(NotLeasedError, late)
        clock.advance(60)  # its old deadline passes: nothing expires, nothing is retried
        t.assertEqual(q.lease(5), [])
        got = q.get(job.id)
        t.assertEqual((got.state, got.result, got.attempts), (JobState.CANCELLED, None, 1))
        t.assertEqual(q.stats().leased, 0)

    def test_a_cancelled_job_s_key_may_be_enqueued_again_but_a_kept_result_s_may_not(
            self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue("first", job_id="order-1")
        t.assertTrue(q.cancel("order-1"))
        again = q.enqueue("second", job_id="order-1")
        t.assertEqual((again.state, again.payload), (JobState.PENDING, "second"))
        leased = q.lease_one()
        assert leased is not None
        q.ack(leased, result="shipped")
        with self.assertWritesNothing(q):
            kept = q.enqueue("third", job_id="order-1")
        t.assertEqual((kept.state, kept.result), (JobState.DONE, "shipped"))

    def test_a_cancelled_job_is_forgotten_after_result_ttl(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked(result_ttl=10.0)
        job = q.enqueue("x")
        q.cancel(job.id)
        clock.advance(11)
        q.enqueue("a write")
        t.assertRaises(JobNotFoundError, q.get, job.id)

    def test_a_paused_queue_leases_nothing_but_takes_jobs_until_resumed(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        q.enqueue("before")
        q.pause()
        t.assertTrue(q.stats().paused)
        with self.assertWritesNothing(q):
            q.pause()  # pausing a paused queue changes nothing
        q.enqueue("during")
        t.assertEqual(q.lease(5), [])
        t.assertIsNone(q.lease_one())
        t.assertFalse(q.wait(0.05), "a paused queue has nothing ready")
        q.compact()
        t.assertTrue(q.stats().paused, "pause survives compaction")
        q.resume()
        t.assertFalse(q.stats().paused)
        t.assertEqual([j.payload for j in q.lease(5)], ["before", "during"])

    def test_ack_while_paused_still_finishes_the_job(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        a, b = q.enqueue_many(["a", "b"])
        leased = q.lease_one()
        assert leased is not None
        q.pause()
        t.assertIsNone(q.ack_and_lease(leased, result="ok"))
        t.assertEqual(q.result(a.id), "ok")
        t.assertIs(q.get(b.id).state, JobState.PENDING)

    def test_delete_dead_removes_one_dead_job_or_all_of_them(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue(max_attempts=1)
        jobs = q.enqueue_many(["a", "b", "c", "pending"])
        for leased in q.lease(3):
            q.nack(leased, error="x")
        t.assertEqual(q.stats().dead, 3)
        t.assertEqual(q.delete_dead(jobs[1].id), 1)
        t.assertRaises(JobNotFoundError, q.get, jobs[1].id)
        t.assertRaises(JobNotFoundError, q.delete_dead, jobs[1].id)
        t.assertRaises(JobNotFoundError, q.delete_dead, jobs[3].id)  # pending, not dead
        t.assertEqual(q.delete_dead(), 2)
        t.assertEqual(q.delete_dead(), 0)
        stats = q.stats()
        t.assertEqual((stats.dead, stats.pending, stats.total), (0, 1, 1))

    def test_paging_counts_live_jobs_only_and_kept_ones_by_their_state(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        jobs = q.enqueue_many([f"j{n}" for n in range(6)])
        for leased in q.lease(3):  # j0, j1, j2
            if leased.payload != "j1":
                q.ack(leased, result=leased.payload)
        t.assertEqual([j.payload for j in q.list_jobs(offset=1)], ["j3", "j4", "j5"])
        t.assertEqual([j.payload for j in q.list_jobs(offset=2, limit=1)], ["j4"])
        t.assertEqual([j.result for j in q.list_jobs(JobState.DONE, offset=1)], ["j2"])
        t.assertEqual(len(q.list_jobs()), 4)
        t.assertEqual(q.list_jobs(JobState.DONE)[0].id, jobs[0].id)

    def test_list_jobs_lists_kept_finished_jobs_by_state(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        a, b, c = q.enqueue_many(["a", "b", "c"])
        leased = q.lease_one()
        assert leased is not None
        q.ack(leased, result="ra")
        q.cancel(b.id)
        t.assertEqual([(j.id, j.result) for j in q.list_jobs(JobState.DONE)], [(a.id, "ra")])
        t.assertEqual([j.id for j in q.list_jobs(JobState.CANCELLED)], [b.id])
        t.assertEqual([j.id for j in q.list_jobs()], [c.id], "live jobs only, by default")

    # -- named locks ----------------------------------------------------------

    def test_a_named_lock_is_held_by_one_run_at_a_time(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, other = self.queue(), self.queue()
        seen: list[str] = []

        def rival() -> None:  # another thread of this process is a rival too
            try:
                with q.lock("report"):
                    seen.append("taken")
            except TaskLockedError as exc:
                seen.append(f"refused {exc.key}")

        with q.lock("report"):
            for handle in (q, other):
                with t.assertRaises(TaskLockedError) as caught, handle.lock("report"):
                    pass
                t.assertIn("'report'", str(caught.exception))
            thread = threading.Thread(target=rival)
            thread.start()
            thread.join(10)
            with other.lock("another key"):
                pass
        t.assertEqual(seen, ["refused report"])
        with other.lock("report"):  # let go when the block ended
            pass

    def test_a_named_lock_is_let_go_when_its_block_raises(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        with t.assertRaises(KeyError), q.lock("k"):
            raise KeyError("boom")
        with q.lock("k"):
            pass

    def test_a_bad_lock_key_or_a_read_only_queue_is_refused(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        for key, needle in [("", "1 to"), ("a\nb", "control characters"), (7, "string")]:
            with t.subTest(key=key), t.assertRaises(ValueError) as caught:
                with q.lock(key):  # type: ignore[arg-type]
                    pass
            t.assertIn("lock key", str(caught.exception))
            t.assertIn(needle, str(caught.exception))
        q.enqueue("x")  # a read-only handle needs the queue to exist
        with self.make_queue(readonly=True) as reader:
            with t.assertRaises(NobrokerError) as refused, reader.lock("k"):
                pass
            t.assertIn("read-only", str(refused.exception))


class FileQueueContractTest(QueueContract, TempDirTestCase):
    """The contract on the file queue."""

    def make_queue(self, **kwargs: Any) -> Queue:
        return Queue(self.tmp / "q", **kwargs)


class MemoryQueueContractTest(QueueContract, unittest.TestCase):
    """The contract on the in-memory queue: a set of its own per test (memory://ID).
    "Reopening" opens another handle on the same queue, as a directory's would."""

    def make_queue(self, **kwargs: Any) -> Queue:
        return Queue(f"memory://{self.id()}", **kwargs)


if __name__ == "__main__":
    unittest.main()
