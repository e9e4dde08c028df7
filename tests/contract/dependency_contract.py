"""The dependency rules (depends_on=, docs/TASKS.md "Dependencies") as a contract every
backend with `capabilities.dependencies` passes; a backend without it refuses
depends_on= with a NobrokerError naming the capability. Mixed into QueueContract
(test_queue_contract.py), so it runs wherever that does.
"""

from __future__ import annotations

import unittest
from typing import Any

from harness.support import FakeClock

from nobroker import Dependency, Job, JobNotFoundError, JobState, NobrokerError, Queue


class DependencyContract:
    """Needs the QueueContract plumbing: clocked(), needs()."""

    def clocked(self, **kwargs: Any) -> tuple[Queue, FakeClock]:
        raise NotImplementedError

    def needs(self, q: Queue, capability: str) -> None:
        raise NotImplementedError

    def deps(self, **kwargs: Any) -> tuple[Queue, FakeClock]:
        q, clock = self.clocked(**kwargs)
        self.needs(q, "dependencies")
        return q, clock

    def finish(self, q: Queue, job: Job, *, fail: bool = False) -> None:
        """Lease `job` (it must be the next leasable) and ack it, or nack it to death."""
        t: unittest.TestCase = self  # type: ignore[assignment]
        leased = q.lease_one()
        assert leased is not None
        t.assertEqual(leased.id, job.id)
        if fail:
            q.nack(leased, error="boom")
        else:
            q.ack(leased)

    def test_a_backend_without_dependencies_refuses_depends_on(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.clocked()
        if q.capabilities.dependencies:
            t.skipTest("the backend has dependencies")
        a = q.enqueue("a")
        with t.assertRaisesRegex(NobrokerError, "dependencies"):
            q.enqueue("b", depends_on=[a])
        t.assertEqual(q.stats().total, 1, "nothing written")

    def test_a_dependent_waits_unleased_and_is_pending_right_after_the_last_ack(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        a, b = q.enqueue("a"), q.enqueue("b")
        c = q.enqueue("c", depends_on=[a, b.id])  # a Job and an id, mixed
        t.assertEqual((c.state, c.waiting_for), (JobState.WAITING, (a.id, b.id)))
        stats = q.stats()
        t.assertEqual((stats.pending, stats.waiting, stats.total), (2, 1, 3))
        t.assertEqual([j.id for j in q.list_jobs(JobState.WAITING)], [c.id])
        q.compact()  # a waiting job and what it waits for survive it
        self.finish(q, a)
        t.assertEqual(q.get(c.id).waiting_for, (b.id,))
        t.assertIsNone(q.lease_one() if q.stats().pending == 0 else None)
        self.finish(q, b)
        got = q.get(c.id)
        t.assertEqual((got.state, got.waiting_for, got.payload), (JobState.PENDING, (), "c"))
        t.assertEqual(q.stats().waiting, 0)
        self.finish(q, c)

    def test_a_dependents_own_delay_still_holds_after_release(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.deps()
        a = q.enqueue("a")
        c = q.enqueue("c", depends_on=a, delay=60)
        self.finish(q, a)
        t.assertEqual(q.get(c.id).state, JobState.PENDING)
        t.assertIsNone(q.lease_one(), "still delayed")
        clock.advance(60)
        self.finish(q, c)

    def test_a_dead_or_cancelled_prerequisite_cancels_dependents_recursively(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        a = q.enqueue("a", max_attempts=1)
        b = q.enqueue("b", depends_on=[a])
        c = q.enqueue("c", depends_on=[b])
        self.finish(q, a, fail=True)
        got_b, got_c = q.get(b.id), q.get(c.id)
        t.assertEqual((got_b.state, got_c.state), (JobState.CANCELLED, JobState.CANCELLED))
        t.assertIn(a.id, got_b.last_error or "")
        t.assertIn(b.id, got_c.last_error or "")
        stats = q.stats()
        t.assertEqual((stats.waiting, stats.dead, stats.total), (0, 1, 1))
        x = q.enqueue("x")
        y = q.enqueue("y", depends_on=x)
        t.assertTrue(q.cancel(x.id))
        t.assertEqual(q.get(y.id).state, JobState.CANCELLED)
        t.assertIn(x.id, q.get(y.id).last_error or "")

    def test_allow_failure_releases_dependents_of_a_failed_prerequisite(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        a = q.enqueue("a", max_attempts=1)
        b = q.enqueue("b")
        c = q.enqueue("c", depends_on=[a, b], allow_failure=True)
        d = q.enqueue("d", depends_on=Dependency(jobs=[a], allow_failure=True))
        self.finish(q, a, fail=True)
        t.assertEqual(q.get(c.id).state, JobState.WAITING, "b is not finished yet")
        t.assertEqual(q.get(d.id).state, JobState.PENDING)
        self.finish(q, b)
        t.assertEqual(q.get(c.id).state, JobState.PENDING)

    def test_retries_of_a_prerequisite_are_its_own_affair(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        a = q.enqueue("a", max_attempts=3)
        c = q.enqueue("c", depends_on=a)
        leased = q.lease_one()
        assert leased is not None
        q.nack(leased, error="flaky", delay=0)
        t.assertEqual(q.get(c.id).state, JobState.WAITING)
        self.finish(q, a)
        t.assertEqual(q.get(c.id).state, JobState.PENDING)

    def test_depends_on_a_finished_job_is_settled_at_once(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        a = q.enqueue("a")
        leased = q.lease_one()
        assert leased is not None
        q.ack(leased, result=1)  # kept with its result: still known
        b = q.enqueue("b", depends_on=[a])
        t.assertEqual(b.state, JobState.PENDING)
        self.finish(q, b)
        dead = q.enqueue("d", max_attempts=1)
        self.finish(q, dead, fail=True)
        late = q.enqueue("late", depends_on=[dead])
        t.assertEqual(late.state, JobState.CANCELLED)
        t.assertIn(dead.id, late.last_error or "")
        t.assertEqual(q.enqueue("ok", depends_on=[dead], allow_failure=True).state,
                      JobState.PENDING)

    def test_an_unknown_prerequisite_is_refused_before_anything_is_written(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        a = q.enqueue("a")
        before = q.stats()
        with t.assertRaises(JobNotFoundError):
            q.enqueue("b", depends_on=[a, "no-such-job"])
        with t.assertRaises(TypeError):
            q.enqueue("b", depends_on=[3])
        t.assertEqual(q.stats(), before)

    def test_a_waiting_job_can_be_cancelled_and_its_dependents_follow(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        a = q.enqueue("a")
        b = q.enqueue("b", depends_on=a)
        c = q.enqueue("c", depends_on=b)
        t.assertTrue(q.cancel(b.id))
        t.assertEqual(q.get(c.id).state, JobState.CANCELLED)
        self.finish(q, a)
        t.assertEqual((q.stats().waiting, q.stats().total), (0, 0))

    def test_purging_a_prerequisite_settles_its_dependents(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        a = q.enqueue("a")
        b = q.enqueue("b", depends_on=a)
        c = q.enqueue("c", depends_on=a, allow_failure=True)
        t.assertEqual(q.purge(), 1)
        t.assertEqual((q.get(b.id).state, q.get(c.id).state),
                      (JobState.CANCELLED, JobState.PENDING))

    def test_ack_many_releases_a_dependent_of_both_in_its_one_write(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        a, b = q.enqueue("a"), q.enqueue("b")
        c = q.enqueue("c", depends_on=[a, b])
        q.compact()
        q.ack_many(q.lease(2))
        t.assertEqual(q.get(c.id).state, JobState.PENDING)

    # -- a requeue of a dead prerequisite revives what its death cancelled -------

    def revive_chain(self, between: str) -> None:
        """Chain a|b|c: a dies, b and c are cancelled; then `between` ("compact",
        "reopen" or nothing); requeue a: b and c wait again, and run in order."""
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.deps()
        self.needs(q, "revival")
        a = q.enqueue("a", max_attempts=1)
        b = q.enqueue({"step": "b"}, depends_on=[a])
        c = q.enqueue("c", depends_on=[b])
        self.finish(q, a, fail=True)
        t.assertEqual(q.get(c.id).state, JobState.CANCELLED)
        if between == "compact":
            q.compact()
        elif between == "reopen":  # (memory://: the set lives while a handle is open)
            fresh = self.queue(clock=clock)
            q.close()
            q = fresh
        t.assertEqual(q.requeue_dead(a.id), 1)
        got_b, got_c = q.get(b.id), q.get(c.id)
        t.assertEqual((got_b.state, got_b.waiting_for, got_b.payload, got_b.last_error),
                      (JobState.WAITING, (a.id,), {"step": "b"}, None))
        t.assertEqual((got_c.state, got_c.waiting_for), (JobState.WAITING, (b.id,)))
        stats = q.stats()
        t.assertEqual((stats.waiting, stats.pending, stats.dead), (2, 1, 0))
        q.compact()  # revived, they survive compaction as any waiting job
        self.finish(q, a)
        t.assertEqual(q.get(b.id).state, JobState.PENDING)
        self.finish(q, b)
        self.finish(q, c)
        t.assertEqual(q.stats().total, 0)

    def test_a_requeue_revives_the_chain_its_death_cancelled(self) -> None:
        self.revive_chain("")

    def test_a_requeue_revives_the_chain_after_compaction(self) -> None:
        self.revive_chain("compact")

    def test_a_requeue_revives_the_chain_after_reopening(self) -> None:
        self.revive_chain("reopen")

    def test_a_revived_dependent_waits_for_what_is_left_and_no_failure(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        self.needs(q, "revival")
        a, x = q.enqueue("a", max_attempts=1), q.enqueue("x", max_attempts=1)
        y = q.enqueue("y")
        b = q.enqueue("b", depends_on=[a, x, y])
        self.finish(q, a, fail=True)
        self.finish(q, x, fail=True)  # after b was cancelled: it keeps b cancelled too
        self.finish(q, y)  # acked without a result, forgotten: it was done
        q.requeue_dead(a.id)
        t.assertEqual(q.get(b.id).state, JobState.CANCELLED, "x is still dead")
        q.requeue_dead(x.id)
        t.assertEqual((q.get(b.id).state, set(q.get(b.id).waiting_for)),
                      (JobState.WAITING, {a.id, x.id}))
        self.finish(q, a)
        self.finish(q, x)
        self.finish(q, b)
        # a prerequisite deleted from the dead-letter queue never succeeds
        d = q.enqueue("d", max_attempts=1)
        e = q.enqueue("e", depends_on=[d])
        self.finish(q, d, fail=True)
        q.delete_dead(d.id)
        t.assertEqual(q.requeue_dead(), 0)
        t.assertEqual(q.get(e.id).state, JobState.CANCELLED)

    def test_a_dependent_cancelled_by_hand_is_not_revived(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        self.needs(q, "revival")
        a = q.enqueue("a", max_attempts=1)
        b = q.enqueue("b", depends_on=[a])
        c = q.enqueue("c", depends_on=[a])
        t.assertTrue(q.cancel(b.id))
        self.finish(q, a, fail=True)
        q.requeue_dead()  # requeue every dead job
        t.assertEqual((q.get(b.id).state, q.get(c.id).state),
                      (JobState.CANCELLED, JobState.WAITING))
