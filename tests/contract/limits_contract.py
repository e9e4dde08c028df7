"""Rate limits and concurrency limits (nobroker.limits, docs/TASKS.md "Limits") as a
contract every backend with `capabilities.limits` passes; a backend without it
refuses them with a NobrokerError naming the capability. Mixed into QueueContract
(test_queue_contract.py), so it runs wherever that does. Time is a FakeClock.
"""

from __future__ import annotations

import unittest
from typing import Any

from harness.support import FakeClock

from nobroker import BackoffPolicy, JobState, NobrokerError, Queue, group


def noop(*args: Any, **kwargs: Any) -> None:
    return None


class LimitsContract:
    """Needs the QueueContract plumbing: clocked(), needs()."""

    def clocked(self, **kwargs: Any) -> tuple[Queue, FakeClock]:
        raise NotImplementedError

    def needs(self, q: Queue, capability: str) -> None:
        raise NotImplementedError

    def limited(self, **kwargs: Any) -> tuple[Queue, FakeClock]:
        q, clock = self.clocked(**kwargs)
        self.needs(q, "limits")
        return q, clock

    @property
    def t(self) -> unittest.TestCase:
        return self  # type: ignore[return-value]

    def test_a_backend_without_limits_refuses_them_when_declared(self) -> None:
        q, _ = self.clocked()
        if q.capabilities.limits:
            self.t.skipTest("the backend has limits")
        with self.t.assertRaises(NobrokerError) as refused:
            q.task(name="t", rate_limit="1/s")(noop)
        self.t.assertIn("'limits' capability", str(refused.exception))
        with self.t.assertRaises(NobrokerError) as refused:
            self.clocked(rate_limit="1/s")
        self.t.assertIn("'limits' capability", str(refused.exception))

    def test_a_rate_limit_lets_the_first_jobs_through_at_once_and_no_more(self) -> None:
        q, clock = self.limited()
        task = q.task(name="t", rate_limit="2/s")(noop)
        for n in range(5):
            task.delay(n)
        self.t.assertEqual([j.payload["args"] for j in q.lease(10)], [[0], [1]])
        self.t.assertEqual(q.lease(10), [])
        clock.advance(0.999)
        self.t.assertEqual(q.lease(10), [])
        clock.advance(0.002)
        self.t.assertEqual(len(q.lease(10)), 2)

    def test_a_window_slides_rather_than_following_the_calendar(self) -> None:
        q, clock = self.limited()
        task = q.task(name="t", rate_limit="2/m")(noop)
        for n in range(6):
            task.delay(n)
        self.t.assertEqual(len(q.lease(1)), 1)  # at 0
        clock.advance(50)
        self.t.assertEqual(len(q.lease(5)), 1)  # at 50: two in (-10, 50]
        clock.advance(11)  # 61: the first left the window, the one at 50 did not
        self.t.assertEqual(len(q.lease(5)), 1)
        self.t.assertEqual(q.lease(5), [])
        clock.advance(50)  # 111: the start at 50 left
        self.t.assertEqual(len(q.lease(5)), 1)

    def test_a_held_back_job_stays_pending_and_costs_no_attempt(self) -> None:
        q, clock = self.limited(max_attempts=1)
        task = q.task(name="t", rate_limit=(1, 10.0))(noop)
        first, second = task.delay(1), task.delay(2)
        q.ack(q.lease(5)[0])
        for _ in range(20):
            self.t.assertEqual(q.lease(5), [])
            clock.advance(0.4)
        job = q.get(second.id)
        self.t.assertEqual((job.state, job.attempts), (JobState.PENDING, 0))
        self.t.assertEqual(q.stats().dead, 0)
        clock.advance(2.0)
        self.t.assertEqual([j.id for j in q.lease(5)], [second.id])
        self.t.assertNotEqual(first.id, second.id)

    def test_a_redelivery_after_lease_expiry_counts_as_a_start(self) -> None:
        quick = BackoffPolicy(base=0.1, factor=1.0, max_delay=0.1, jitter=0.0)
        q, clock = self.limited(visibility_timeout=1.0, backoff=quick)
        task = q.task(name="t", rate_limit=(2, 10.0))(noop)
        lost = task.delay(1)
        self.t.assertEqual([j.id for j in q.lease(1)], [lost.id])
        clock.advance(1.5)  # its lease ran out: this lease takes it back (a retry delay)
        self.t.assertEqual(q.lease(5), [])
        later = task.delay(2)
        clock.advance(0.2)  # past its retry delay: the redelivery is the second start
        self.t.assertEqual([j.id for j in q.lease(5)], [lost.id])
        self.t.assertEqual(q.lease(5), [])
        clock.advance(10.0)
        self.t.assertEqual([j.id for j in q.lease(5)], [later.id])

    def test_tasks_sharing_a_rate_limit_key_share_its_window(self) -> None:
        q, _ = self.limited()
        one = q.task(name="one", rate_limit="3/s", rate_limit_key="api")(noop)
        two = q.task(name="two", rate_limit="3/s", rate_limit_key="api")(noop)
        for n in range(3):
            one.delay(n)
            two.delay(n)
        self.t.assertEqual(len(q.lease(10)), 3)
        self.t.assertEqual(q.lease(10), [])
        with self.t.assertRaises(ValueError) as refused:
            q.task(name="three", rate_limit="5/s", rate_limit_key="api")(noop)
        self.t.assertIn("'api'", str(refused.exception))

    def test_a_queue_rate_limit_counts_every_lease_and_a_task_limit_applies_too(self) -> None:
        self.limited()  # skipped where the backend has no limits
        q, clock = self.limited(rate_limit=(3, 1.0))
        task = q.task(name="t", rate_limit=(1, 1.0))(noop)
        for n in range(3):
            task.delay(n)
            q.enqueue({"plain": n})
        leased = q.lease(10)
        self.t.assertEqual(len(leased), 3)  # the queue's limit
        self.t.assertEqual(sum(isinstance(j.payload, dict) and "task" in j.payload
                               for j in leased), 1)  # the task's
        clock.advance(1.0)  # two task jobs and a plain one left: one of each
        self.t.assertEqual(len(q.lease(10)), 2)

    def test_a_rate_limit_spec_is_checked(self) -> None:
        q, _ = self.limited()
        for bad in ("10/d", "ten/s", (0, 1.0), (1, 0), "0/s", 5):
            with self.t.subTest(bad=bad), self.t.assertRaises(ValueError):
                q.task(name=f"bad{bad!r}", rate_limit=bad)(noop)

    def test_concurrency_caps_the_jobs_of_a_key_leased_at_once(self) -> None:
        q, _ = self.limited()
        task = q.task(name="t", concurrency=2)(noop)
        for n in range(5):
            task.delay(n)
        held = q.lease(10)
        self.t.assertEqual(len(held), 2)
        self.t.assertEqual(q.lease(10), [])
        q.ack(held[0])
        self.t.assertEqual(len(q.lease(10)), 1)
        q.nack(held[1], delay=0)
        self.t.assertEqual(len(q.lease(10)), 1)

    def test_a_concurrency_key_function_of_the_arguments_limits_each_value(self) -> None:
        q, _ = self.limited()
        task = q.task(name="t", concurrency=1,
                      concurrency_key=lambda customer, n: customer)(noop)
        for n in range(3):
            task.delay("a", n)
            task.delay("b", n)
        held = q.lease(10)
        self.t.assertEqual(sorted(j.payload["args"][0] for j in held), ["a", "b"])
        self.t.assertEqual(q.lease(10), [])

    def test_a_saturated_key_does_not_hold_back_another_keys_job(self) -> None:
        q, _ = self.limited()
        task = q.task(name="t", concurrency=1, concurrency_key=lambda key: key)(noop)
        busy = {"task": "t", "args": ["busy"], "kwargs": {}}
        q.enqueue_many([busy] * 10_000)  # the backlog
        self.t.assertEqual(len(q.lease(1)), 1)
        other = task.delay("free")
        plain = q.enqueue("plain")
        self.t.assertEqual({j.id for j in q.lease(5)}, {other.id, plain.id})

    def test_a_killed_holder_frees_its_slot_when_its_lease_expires(self) -> None:
        q, clock = self.limited(visibility_timeout=5.0)
        task = q.task(name="t", concurrency=1)(noop)
        task.delay(1)
        task.delay(2)
        q.lease(1)  # its holder dies: no ack
        self.t.assertEqual(q.lease(5), [])
        clock.advance(5.0)
        self.t.assertEqual(len(q.lease(5)), 1)  # one holder again

    def test_wait_sleeps_until_the_window_opens(self) -> None:
        q, clock = self.limited()
        task = q.task(name="t", rate_limit=(1, 10.0))(noop)
        task.delay(1)
        task.delay(2)
        q.lease(1)
        self.t.assertFalse(q.wait(0))
        clock.advance(10.0)
        self.t.assertTrue(q.wait(0))
        self.t.assertEqual(len(q.lease(5)), 1)

    def test_wait_sleeps_while_every_holder_of_a_key_is_busy(self) -> None:
        q, _ = self.limited()
        task = q.task(name="t", concurrency=1)(noop)
        task.delay(1)
        task.delay(2)
        held = q.lease(1)[0]
        self.t.assertFalse(q.wait(0))
        q.ack(held)
        self.t.assertTrue(q.wait(0))

    def test_a_process_that_declared_no_limit_leases_limited_jobs_freely(self) -> None:
        q, _ = self.limited()
        task = q.task(name="t", concurrency=1)(noop)
        task.delay(1)
        task.delay(2)
        other, _ = self.clocked()  # another Queue object: no task declared on it
        self.t.assertEqual(len(other.lease(5)), 2)

    # -- jobs with prerequisites keep their limit keys while they wait ---------

    def test_a_dependent_of_a_limited_task_waits_unleased_and_is_limited_once_released(
            self) -> None:
        q, _ = self.limited()
        self.needs(q, "dependencies")
        task = q.task(name="t", concurrency=1)(noop)
        a = q.enqueue("a")
        dependent = task.apply_async([2], depends_on=[a.id], priority=9)
        first = task.delay(1)
        q.compact()  # files: the waiting job's keys go into the snapshot with it
        leased = q.lease(5)
        self.t.assertEqual({j.id for j in leased}, {a.id, first.id},
                           "a waiting job is never a candidate, whatever its priority")
        q.ack(next(j for j in leased if j.id == a.id))
        self.t.assertEqual(q.get(dependent.id).state, JobState.PENDING)
        self.t.assertEqual(q.lease(5), [], "first holds its key: the dependent has it too")
        q.ack(next(j for j in leased if j.id == first.id))
        self.t.assertEqual([j.id for j in q.lease(5)], [dependent.id])

    def test_a_group_of_a_limited_task_is_limited(self) -> None:
        q, _ = self.limited()
        self.needs(q, "dependencies")
        task = q.task(name="t", concurrency=1)(noop)
        group(task.s(n) for n in range(3)).delay()
        self.t.assertEqual(len(q.lease(10)), 1)
    def test_limit_use_shows_each_keys_current_use_and_limit(self) -> None:
        q, clock = self.limited(rate_limit="10/m")
        rated = q.task(name="rated", rate_limit=(2, 10.0))(noop)
        capped = q.task(name="capped", concurrency=2,
                        concurrency_key=lambda customer: customer)(noop)
        q.task(name="idle", concurrency=3)(noop)
        start = clock.now
        self.t.assertEqual(
            [(u.kind, u.key, u.value, u.used, u.limit, u.period, u.opens_at)
             for u in q.limit_use()],
            [("rate", "", None, 0, 10, 60.0, None), ("rate", "rated", None, 0, 2, 10.0, None),
             ("concurrency", "capped", None, 0, 2, None, None),
             ("concurrency", "idle", None, 0, 3, None, None)])
        for n in range(3):
            rated.delay(n)
        capped.delay("acme")
        capped.delay("acme")
        capped.delay("zeta")
        self.t.assertEqual(len(q.lease(10)), 5)  # rated: 2 of 3; capped: all three
        clock.advance(1.0)
        self.t.assertEqual(
            [(u.kind, u.key, u.value, u.used, u.limit, u.period, u.opens_at)
             for u in q.limit_use()],
            [("rate", "", None, 5, 10, 60.0, None),
             ("rate", "rated", None, 2, 2, 10.0, start + 10.0),
             ("concurrency", "capped", "acme", 2, 2, None, None),
             ("concurrency", "capped", "zeta", 1, 2, None, None),
             ("concurrency", "idle", None, 0, 3, None, None)])
        clock.advance(10.0)  # the window slid past both starts
        use = {(u.kind, u.key, u.value): u for u in q.limit_use()}
        self.t.assertEqual((use["rate", "rated", None].used, use["rate", "rated", None].opens_at),
                           (0, None))
        other, _ = self.clocked()  # declares nothing: sees the stored windows and holders
        seen = {(u.kind, u.key, u.value): (u.used, u.limit) for u in other.limit_use()}
        self.t.assertEqual(seen.get(("concurrency", "capped", "acme")), (2, 2))  # stored cap
        if other.capabilities.local or other.capabilities.in_process:  # not PostgreSQL's
            self.t.assertEqual(seen.get(("rate", "", None)), (5, 10), "the recorded limit")

    def test_an_undeclared_concurrency_key_shows_the_cap_its_latest_unfinished_job_carries(
            self) -> None:
        """The process that enqueues a job of a concurrency key stores the cap it declared
        with it; one that did not declare the key shows the cap of the key's most recently
        enqueued job still pending, waiting or leased. Display only: leases follow the
        declaring worker's cap."""
        q, _ = self.limited()
        capped = q.task(name="capped", concurrency=2, concurrency_key=lambda who: who)(noop)
        one = q.task(name="one", concurrency=3)(noop)
        capped.delay("acme")
        capped.delay("acme")
        one.delay()
        self.t.assertEqual(len(q.lease(10)), 3)
        other, _ = self.clocked()  # declares nothing

        def seen(queue: Queue) -> dict[tuple[str, str | None], tuple[int, int | None]]:
            return {(u.key, u.value): (u.used, u.limit) for u in queue.limit_use()
                    if u.kind == "concurrency"}

        self.t.assertEqual(seen(other), {("capped", "acme"): (2, 2), ("one", None): (1, 3)})
        third, _ = self.clocked()  # declares the key otherwise, and enqueues
        later = third.task(name="capped", concurrency=5,
                           concurrency_key=lambda who: who)(noop).delay("acme")
        self.t.assertEqual(seen(other)["capped", "acme"], (2, 5), "the latest job's cap")
        self.t.assertEqual(seen(q)["capped", "acme"], (2, 2), "a declaring process: its own")
        self.t.assertEqual(q.lease(5), [], "leases keep to the declaring worker's cap")
        leased = other.lease(5)  # declares nothing: leases freely
        self.t.assertEqual([job.id for job in leased], [later.id])
        self.t.assertEqual(seen(other)["capped", "acme"], (3, 5), "leased: still unfinished")
        other.ack(leased[0])
        self.t.assertEqual(seen(other)["capped", "acme"], (2, 2), "back to the one before")
        if q.capabilities.compaction:  # files: kept in the snapshot's records and checkpoint
            q.compact()
        reopened, _ = self.clocked()
        self.t.assertEqual(seen(reopened), {("capped", "acme"): (2, 2), ("one", None): (1, 3)})

    def test_a_lease_past_10000_full_concurrency_keys_reads_a_bounded_number(self) -> None:
        """Many per-customer keys, each at its limit: once a lease has found them full,
        the next ones ask about a bounded number of keys (a count of Budget.room_for,
        not a time), until a holder of a key lets go. Files and memory:// (PostgreSQL
        passes the full keys to its candidates query)."""
        q, _ = self.limited(visibility_timeout=600)
        if not (q.capabilities.local or q.capabilities.in_process):
            self.t.skipTest("PostgreSQL's limited lease sends the full keys to the server")
        task = q.task(name="t", concurrency=1, concurrency_key=lambda customer: customer)(noop)
        customers = 10_000
        q.enqueue_many([{"task": "t", "args": [f"c{n}"], "kwargs": {}}
                        for n in range(customers) for _ in range(2)])
        held = q.lease(customers)
        self.t.assertEqual(len({job.payload["args"][0] for job in held}), customers)
        self.t.assertEqual(q.lease(5), [])  # finds every key full: sets them aside
        asked = _counting_room_checks()
        with asked:
            self.t.assertEqual(q.lease(5), [])
            self.t.assertEqual(q.wait(0), False)
            fresh = task.delay("new customer")
            self.t.assertEqual([job.id for job in q.lease(5)], [fresh.id])
            q.ack(held[0])  # a holder lets go: its key's next job comes back
            again = q.lease(5)
            self.t.assertEqual([job.payload["args"][0] for job in again],
                               [held[0].payload["args"][0]])
        self.t.assertLess(asked.calls, 100, "a lease read the full keys one by one")


class _counting_room_checks:
    """Counts Budget.room_for calls while entered (every backend's lease asks it, or
    Budget.allows, which asks it, once per group of keys it considers)."""

    def __init__(self) -> None:
        self.calls = 0

    def __enter__(self) -> None:
        from nobroker.limits import Budget

        original = Budget.room_for

        def counted(budget: Budget, keys: Any) -> int:
            self.calls += 1
            return original(budget, keys)

        self._original = original
        Budget.room_for = counted  # type: ignore[method-assign]

    def __exit__(self, *exc: object) -> None:
        from nobroker.limits import Budget

        Budget.room_for = self._original  # type: ignore[method-assign]
