"""Limits on PostgreSQL beyond the contract (migrations/0008 to 0014): a limited
ack-and-lease is one statement, and wakes nobody when its lease takes the slot its
ack freed; a key's holders are counted by reading them alone; a rate window's
ring keeps its latest starts when its count changes; a job stores the concurrency
cap its enqueuer declared, which a process that did not declare the key reports;
`nobroker migrate` carries a used-up rate window in and out of the rings;
a key met under two rate keys holds its cap; a lease of one job, tried alone
first, takes the job the walk would; a rate-limited one needs no walk within its
window (migration 0013) and leaves a full key's best job to it; its starts' ring
wraps exactly under two processes and a larger count; a lease beside many full
keys reads a bounded number of them (migration 0014), as one beside a full rate
key's many pairs does (0015); a parked key is unparked by whatever frees its slot;
an idle wait reads the pairs the walk does, and wakes when a full window opens;
every pending pair of a key with room stays where the walk meets it, and three
connections drain many keys of cap 1 with never two holders of one.

The rules themselves are the limits contract's (tests/contract/limits_contract.py),
which test_postgres runs here too, and the multi-process measures are
test_postgres_processes's.
"""

from __future__ import annotations

import time
import unittest
from typing import Any
from unittest import mock

from harness.postgres import (
    drop_schema,
    fresh_schema_url,
    jobs_read,
    needs_postgres,
    open_queue,
    schema_sql,
)
from harness.support import FakeClock

from nobroker import NotLeasedError, Queue
from nobroker.dependencies import GraphNode


def _noop(*args: Any) -> None:
    return None


@needs_postgres
class PostgresLimitsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)

    def open(self, **options: Any) -> Queue:
        q = open_queue(self.url, "q", **options)
        self.addCleanup(q.close)
        return q

    def test_a_limited_ack_and_lease_is_one_statement_without_a_transaction(self) -> None:
        import psycopg

        q = self.open()
        q.task(name="limited", rate_limit=(1000, 1.0), concurrency=1000,
               concurrency_key=lambda n: "k" + str(n % 3))(_noop)
        q.enqueue_many([{"task": "limited", "args": [n], "kwargs": {}} for n in range(30)])
        job = q.lease_one()
        assert job is not None
        executed: list[bytes] = []
        real_execute, real_transaction = psycopg.Connection.execute, psycopg.Connection.transaction

        def execute(conn: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            executed.append(query)
            return real_execute(conn, query, *args, **kwargs)

        with mock.patch.object(psycopg.Connection, "execute", execute), \
                mock.patch.object(psycopg.Connection, "transaction",
                                  side_effect=AssertionError("a transaction")):
            for _ in range(20):
                job = q.ack_and_lease(job)
                assert job is not None
        self.assertIs(psycopg.Connection.transaction, real_transaction)
        self.assertEqual(len(executed), 20, executed[:3])
        self.assertEqual({q.backend._sql.limited_ack_and_lease},  # type: ignore[attr-defined]
                         set(executed))

    def test_an_ack_whose_lease_takes_its_freed_slot_again_wakes_nobody(self) -> None:
        import psycopg

        from nobroker.postgres.schema import channels
        from nobroker.postgres.url import parse

        q = self.open()
        q.task(name="per", concurrency=1, concurrency_key=lambda who: who)(_noop)
        q.enqueue_many([{"task": "per", "args": [who], "kwargs": {}} for who in "aab"])
        job = q.lease_one()
        assert job is not None
        target = parse(self.url)
        listener = psycopg.connect(target.conninfo, autocommit=True)
        self.addCleanup(listener.close)
        listener.execute(f'LISTEN "{channels(target.schema, "q")[0]}"'.encode())

        def woken() -> int:
            return len(list(listener.notifies(timeout=0.5, stop_after=1)))

        job = q.ack_and_lease(job)  # a's slot freed and taken again by the second a
        assert job is not None and job.payload["args"] == ["a"]
        self.assertEqual(woken(), 0)
        job = q.ack_and_lease(job)  # a's slot freed, b leased: a's waiters are woken
        assert job is not None and job.payload["args"] == ["b"]
        self.assertEqual(woken(), 1)

    def test_a_key_s_holders_are_read_alone_not_every_leased_row(self) -> None:
        q = self.open(visibility_timeout=3600)
        q.task(name="busy", concurrency=10_000)(_noop)
        q.task(name="other", concurrency=2)(_noop)
        q.enqueue_many([{"task": "busy", "args": [n], "kwargs": {}} for n in range(2000)])
        self.assertEqual(len(q.lease(2000)), 2000)  # 2,000 holders of "busy", none pending
        q.enqueue_many([{"task": "other", "args": [n], "kwargs": {}} for n in range(3)])
        leased: list[Any] = []
        reads = jobs_read(q, lambda: leased.extend(q.lease(5)))
        self.assertEqual(len(leased), 2)  # other's cap
        # Version 6 read the 2,000 leased rows to count every key's holders.
        self.assertLess(reads, 50, reads)

    def test_a_concurrency_key_met_under_two_rate_keys_holds_its_cap(self) -> None:
        # The walk meets "shared" once per rate key, with another key between them:
        # with room, then full (migration 0010 keeps only keys with room, and counts
        # a full one's holders again).
        q = self.open(visibility_timeout=3600)
        for name, rate_key, key, cap in (("a", "r1", "shared", 2), ("x", "r1", "solo", 1),
                                         ("b", "r2", "shared", 2)):
            q.task(name=name, rate_limit=(100, 1.0), rate_limit_key=rate_key,
                   concurrency=cap, concurrency_key=key)(_noop)
        q.enqueue_many([{"task": task, "args": [], "kwargs": {}} for task in "bbbxaaa"])
        first = q.lease(10)
        self.assertEqual(sorted(j.payload["task"] for j in first), ["b", "b", "x"])
        self.assertEqual(q.lease(10), [])
        q.ack(first[0])
        self.assertEqual([j.payload["task"] for j in q.lease(10)], ["b"])
        self.assertEqual(q.lease(10), [])

    def test_a_lease_of_one_takes_the_job_the_walk_would(self) -> None:
        # A lease of one job tries the best due job alone first (migration 0010), and
        # walks the keys when it is not within its limits or a waiting job is due.
        q = self.open(visibility_timeout=3600)
        q.task(name="one", concurrency=1)(_noop)
        q.task(name="rated", rate_limit=(1, 3600.0))(_noop)
        q.enqueue({"task": "one", "args": [], "kwargs": {}}, priority=9)
        q.enqueue({"task": "one", "args": [], "kwargs": {}}, priority=8)
        q.enqueue({"task": "rated", "args": [], "kwargs": {}}, priority=7)
        q.enqueue({"task": "rated", "args": [], "kwargs": {}}, priority=6)
        q.enqueue({"task": "plain", "args": [], "kwargs": {}}, priority=1)
        leased = [q.lease_one() for _ in range(3)]
        self.assertEqual([job.priority if job else None for job in leased], [9, 7, 1])
        self.assertIsNone(q.lease_one())  # "one" full, "rated" started once this hour

    def test_a_lease_of_one_without_a_rate_limit_skips_a_full_key_s_best_job(self) -> None:
        # No rate limit declared: nb_limited_lease_unrated (migration 0012) tries the
        # best job alone, and walks the keys (nb_limited_lease) when its key is full.
        q = self.open(visibility_timeout=3600)
        q.task(name="per", concurrency=1, concurrency_key=lambda who: who)(_noop)
        for who, priority in (("a", 9), ("a", 8), ("b", 1)):
            q.enqueue({"task": "per", "args": [who], "kwargs": {}}, priority=priority)
        first, second = q.lease_one(), q.lease_one()
        assert first is not None and second is not None
        self.assertEqual((first.priority, second.priority), (9, 1))  # a's second waits
        self.assertIsNone(q.ack_and_lease(second))  # a is still held, by `first`
        last = q.ack_and_lease(first)  # its ack frees a's slot for its own lease
        self.assertEqual(last.priority if last else None, 8)

    def test_a_lease_of_one_takes_a_waiting_job_now_due_before_a_ready_one(self) -> None:
        q = self.open()
        q.task(name="one", concurrency=1)(_noop)  # declared: the limited lease
        waiting = q.enqueue({"task": "one", "args": [], "kwargs": {}}, priority=5, delay=0.2)
        q.enqueue({"task": "plain", "args": [], "kwargs": {}}, priority=4)
        time.sleep(0.3)  # waiting and due: the walk's, as the best due job
        self.assertEqual(q.lease_one().id, waiting.id)  # type: ignore[union-attr]

    def test_a_lease_of_one_counts_the_queue_s_own_rate_limit(self) -> None:
        q = self.open(rate_limit=(2, 3600.0))
        q.enqueue_many([{"task": "plain", "args": [n], "kwargs": {}} for n in range(4)])
        self.assertEqual([q.lease_one() is not None for _ in range(3)], [True, True, False])

    def test_a_lease_of_one_lays_a_window_out_again_when_its_count_grows(self) -> None:
        first = self.open()
        first.task(name="rated", rate_limit=(3, 3600.0))(_noop)
        first.enqueue_many([{"task": "rated", "args": [n], "kwargs": {}} for n in range(10)])
        self.assertEqual([first.lease_one() is not None for _ in range(4)],
                         [True, True, True, False])
        wider = self.open()  # 5 an hour: the ring of 3 laid out again, two more starts
        wider.task(name="rated", rate_limit=(5, 3600.0))(_noop)
        self.assertEqual([wider.lease_one() is not None for _ in range(3)], [True, True, False])
        self.assertIsNone(first.lease_one())

    def test_a_ring_wraps_exactly_under_two_processes_and_a_larger_count(self) -> None:
        # The one-statement lease writes a start into its ring slot by UPDATE once the
        # slot was written, by INSERT before (migration 0010): every lease here is
        # checked against a sliding window computed from the starts so far, over
        # laps of the ring, two processes taking turns, and a third declaring a larger
        # count (the ring laid out again at 5, then wrapped by processes of 3 and 5).
        clock = FakeClock()
        count, period = 3, 3.0
        queues = [self.open(clock=clock, visibility_timeout=3600) for _ in range(3)]
        for q, declared in zip(queues, (count, count, 5), strict=True):
            q.task(name="rated", rate_limit=(declared, period))(_noop)
        queues[0].enqueue_many([{"task": "rated", "args": [n], "kwargs": {}}
                                for n in range(200)])
        starts: list[float] = []
        held: dict[int, Any] = {}
        for step in range(60):
            turn = step % 2 if step < 40 else 2 * (step % 2)  # then the larger count too
            q, declared = queues[turn], (count, count, 5)[turn]
            room = sum(at > clock.now - period for at in starts) < declared
            job = q.ack_and_lease(held.pop(turn)) if turn in held else q.lease_one()
            self.assertEqual(job is not None, room, (step, clock.now, starts[-6:]))
            if job is not None:
                starts.append(clock.now)
                held[turn] = job
            clock.advance(0.4)
        self.assertGreaterEqual(len(starts), 25)  # several laps of a ring of 3, then 5

    def test_a_rated_lease_of_one_within_its_window_needs_no_walk(self) -> None:
        # nb_limited_lease_rated (migration 0013) leases the best job alone and writes
        # its start while its ring grows and once it wraps; with the walk
        # (nb_limited_lease) renamed away, those leases still succeed, and the starts
        # they wrote fill the window for the walk, put back.
        clock = FakeClock()
        q = self.open(clock=clock, visibility_timeout=3600)
        q.task(name="rated", rate_limit=(3, 1.0))(_noop)
        q.enqueue_many([{"task": "rated", "args": [n], "kwargs": {}} for n in range(20)])
        job = q.lease_one()  # the first start writes the window: the walk's
        assert job is not None
        self._rename_the_walk("nb_limited_lease", "nb_limited_lease_away")
        # Put back even when an assertion fails first (a no-op once put back).
        self.addCleanup(self._rename_the_walk, "nb_limited_lease_away", "nb_limited_lease")
        for _ in range(8):  # slots 1 and 2 inserted, then the ring of 3 wraps twice
            clock.advance(0.5)  # two starts in any second: never full
            job = q.ack_and_lease(job)
            assert job is not None
        self.assertIsNotNone(q.lease_one())  # a third start this second, still alone
        self._rename_the_walk("nb_limited_lease_away", "nb_limited_lease")
        self.assertIsNone(q.lease_one())  # three in the last second: full, as the walk sees

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """harness.postgres.schema_sql on this test's schema."""
        return schema_sql(self.url, query, params)

    def _rename_the_walk(self, name: str, to: str) -> None:
        """Rename this schema's function `name` (any signature) to `to`, if there."""
        for (signature,) in self.sql("SELECT p.oid::regprocedure::text FROM pg_proc AS p"
                                     " WHERE p.pronamespace = '{s}'::regnamespace"
                                     " AND p.proname = %s", (name,)):
            self.sql(f"ALTER FUNCTION {signature} RENAME TO {to}")

    def test_a_rated_lease_of_one_walks_past_a_full_key_s_best_job(self) -> None:
        # The lean rated lease leaves a job whose concurrency key is full, or whose
        # rate window is, to the walk, which takes the next job within its limits.
        q = self.open(visibility_timeout=3600)
        q.task(name="both", rate_limit=(100, 1.0), concurrency=1)(_noop)
        q.task(name="hourly", rate_limit=(1, 3600.0))(_noop)
        q.task(name="rated", rate_limit=(100, 1.0))(_noop)
        for task, priority in (("both", 9), ("both", 8), ("hourly", 7), ("hourly", 6),
                               ("rated", 1)):
            q.enqueue({"task": task, "args": [], "kwargs": {}}, priority=priority)
        leased = [q.lease_one() for _ in range(3)]
        self.assertEqual([job.priority if job else None for job in leased], [9, 7, 1])
        self.assertIsNone(q.lease_one())  # "both" held, "hourly" started this hour

    def test_a_lease_beside_many_full_keys_reads_a_bounded_number_of_them(self) -> None:
        """The file backend parks a full key's pairs (limit_parking.Parking); so does the
        walk here since migration 0014: it steps through limit_pairs (the pairs with
        pending jobs, kept by triggers on jobs), skipping the pairs of keys it found
        full, which a freed slot unparks. It probed every pair with pending jobs in
        index jobs_limited before (O(keys): about 9 buffers and one statement a pair,
        0.5 s a lease beside 10,000 full keys on a loaded 2-core machine)."""
        q = self.open(visibility_timeout=3600)
        q.task(name="per", concurrency=1, concurrency_key=lambda who: who)(_noop)
        q.task(name="other", concurrency=2)(_noop)
        q.enqueue_many([{"task": "per", "args": [f"c{n}"], "kwargs": {}}
                        for n in range(1000) for _ in range(2)])
        self.assertEqual(len(q.lease(2000)), 1000)  # each key full, a job still pending
        q.enqueue_many([{"task": "other", "args": [n], "kwargs": {}} for n in range(3)])
        q.lease(1)  # the first lease beside the full keys may meet each one (and park it)
        leased: list[Any] = []
        reads = jobs_read(q, lambda: leased.extend(q.lease(5)))
        self.assertEqual(len(leased), 1)  # other's cap, one already leased
        self.assertLess(reads, 100, reads)  # read the 1,000 keys' holders before 0014

    def test_a_lease_beside_a_full_rate_key_s_many_pairs_reads_a_bounded_number(self
                                                                                ) -> None:
        """A rate limit with a concurrency key per customer has a pair of keys per
        customer; once the rate window is full, the walk steps past all of them in one
        probe (migration 0015), where it read each one's pending jobs and holders."""
        q = self.open(visibility_timeout=3600)
        q.task(name="mail", rate_limit=(2, 3600.0), concurrency=1,
               concurrency_key=lambda who: who)(_noop)
        q.task(name="other", concurrency=2)(_noop)
        q.enqueue_many([{"task": "mail", "args": [f"c{n}"], "kwargs": {}}
                        for n in range(1000)])
        self.assertEqual(len(q.lease(10)), 2)  # the window full, 998 customers waiting
        q.enqueue_many([{"task": "other", "args": [n], "kwargs": {}} for n in range(3)])
        leased: list[Any] = []
        reads = jobs_read(q, lambda: leased.extend(q.lease(5)))
        self.assertEqual([job.payload["task"] for job in leased], ["other", "other"])
        self.assertLess(reads, 100, reads)  # 998 customers' jobs read before 0015
        pairs = self.pairs()  # every waiting customer's kept, none parked
        self.assertLessEqual({f"c{n}" for n in range(2, 1000)}, set(pairs))
        self.assertFalse(any(pairs.values()))

    def test_an_idle_wait_beside_full_rate_windows_wakes_when_they_open(self) -> None:
        # The wait takes a full window's opening for all its key's pairs, without
        # reading them, and reads no pair while the queue's own window is full.
        for options, task in (({}, {"rate_limit": (1, 60.0), "concurrency": 1,
                                     "concurrency_key": lambda who: who}),
                              ({"rate_limit": (1, 60.0)}, {})):
            with self.subTest(queue=options, task=task):
                clock, url = FakeClock(), fresh_schema_url()
                self.addCleanup(drop_schema, url)
                q = open_queue(url, "q", clock=clock, visibility_timeout=3600, **options)
                self.addCleanup(q.close)
                q.task(name="mail", **task)(_noop)
                q.enqueue_many([{"task": "mail", "args": [who], "kwargs": {}}
                                for who in "abc"])
                self.assertEqual(len(q.lease(10)), 1)
                self.assertFalse(q.wait(0))
                clock.advance(59.5)
                self.assertFalse(q.wait(0.1))
                clock.advance(0.6)  # the window opened
                self.assertTrue(q.wait(0))
                self.assertEqual(len(q.lease(10)), 1)

    def test_a_parked_key_is_unparked_by_whatever_frees_its_slot(self) -> None:
        # Each key is met full (parked), then its slot freed one way; a key left with
        # no pending job has its pair deleted by the next walk that meets it.
        clock = FakeClock()
        q = self.open(clock=clock, visibility_timeout=60)
        q.task(name="per", concurrency=1, concurrency_key=lambda who: who)(_noop)
        ways = ("ack", "cancel", "expiry", "nack", "snooze")
        q.enqueue_many([{"task": "per", "args": [w], "kwargs": {}} for w in ways for _ in "12"])
        held = {job.payload["args"][0]: job for job in q.lease(10)}
        self.assertEqual(sorted(held), list(ways))
        self.assertEqual(q.lease(10), [])  # each key met full
        self.assertEqual(self.pairs(), {w: True for w in ways})
        clock.advance(30)
        q.ack(held["ack"])
        q.cancel(held["cancel"].id)
        q.nack(held["nack"], delay=3600)
        q.snooze(held["snooze"], 3600)
        self.assertEqual({w for w, parked in self.pairs().items() if parked}, {"expiry"})
        self.assertEqual(sorted(j.payload["args"][0] for j in q.lease(10)),
                         ["ack", "cancel", "nack", "snooze"])
        clock.advance(31)  # expiry's lease expired: reclaimed, and its second job leased
        self.assertEqual([j.payload["args"][0] for j in q.lease(10)], ["expiry"])
        self.assertEqual(q.lease(10), [])
        # ack and cancel: no job pending, their pairs gone; the others wait, full.
        self.assertEqual(self.pairs(), {"expiry": True, "nack": True, "snooze": True})

    def test_an_idle_wait_looks_at_the_pairs_the_walk_does_not_the_parked_ones(self
                                                                                ) -> None:
        # An idle worker's wait asks when a job may next start (limited_candidates.sql):
        # it reads the unparked pairs, as the walk does, not every pair with pending
        # jobs (O(keys) a wait beside many full keys). A parked pair is a key found
        # full, whose freed slot unparks it and wakes the waiters; parked by hand here
        # with room, so that reading it would show: the wait and the lease agree.
        q = self.open(visibility_timeout=3600)
        q.task(name="per", concurrency=1, concurrency_key=lambda who: who)(_noop)
        q.enqueue_many([{"task": "per", "args": [who], "kwargs": {}} for who in "aab"])
        self.assertEqual(sorted(j.payload["args"][0] for j in q.lease(10)), ["a", "b"])
        self.assertEqual(q.lease(10), [])  # a met full: parked
        self.assertEqual(self.pairs(), {"a": True})
        self.assertFalse(q.wait(0))
        q.enqueue_many([{"task": "per", "args": ["c"], "kwargs": {}}])
        self.sql("UPDATE {s}.limit_pairs SET parked = true WHERE right(conc_key, 1) = 'c'")
        self.assertFalse(q.wait(0))  # c has room, but the walk would not meet it
        self.assertEqual(q.lease(10), [])
        self.sql("UPDATE {s}.limit_pairs SET parked = false WHERE right(conc_key, 1) = 'c'")
        self.assertTrue(q.wait(0))
        self.assertEqual([j.payload["args"][0] for j in q.lease(10)], ["c"])

    def test_every_pending_pair_of_a_key_with_room_is_met_by_the_walk(self) -> None:
        # Random steps through every path that makes a job pending or frees a slot;
        # after each, a pair with a pending job is in limit_pairs, unparked unless
        # its key is full (cap 1 here): else the walk would never lease it.
        import random

        clock = FakeClock()
        q = self.open(clock=clock, visibility_timeout=30, max_attempts=2)
        q.task(name="per", concurrency=1, concurrency_key=lambda who: who)(_noop)
        rng = random.Random(24)
        held: list[Any] = []
        for step in range(150):
            op = rng.choice(("enqueue", "enqueue", "lease", "lease", "ack", "nack", "snooze",
                             "cancel", "requeue", "time"))
            if op == "enqueue":
                q.enqueue_many([{"task": "per", "args": [f"c{rng.randrange(4)}"], "kwargs": {}}
                                for _ in range(rng.randrange(1, 4))])
            elif op == "lease":
                held.extend(q.lease(rng.randrange(1, 4)))
            elif op == "time":
                clock.advance(rng.choice((5.0, 40.0)))
            elif op == "requeue":
                q.requeue_dead()
            elif held:
                job = held.pop(rng.randrange(len(held)))
                try:
                    if op == "ack":
                        q.ack(job)
                    elif op == "nack":
                        q.nack(job, delay=rng.choice((0.0, 10.0)))
                    elif op == "snooze":
                        q.snooze(job, rng.choice((0.0, 10.0)))
                    else:
                        q.cancel(job.id)
                except NotLeasedError:
                    pass  # its lease expired and was taken back
            self.assertEqual(self.unmet_pairs(), [], (step, op))

    def test_three_handles_drain_many_keys_one_holder_each_parking_as_they_go(self
                                                                             ) -> None:
        # Three connections, each leasing two jobs at a time (the walk: a lease of one
        # tries the best due job first, whatever is parked) and acking them: keys are
        # parked and unparked all the while (one parked with a free slot would leave
        # its jobs pending for good), never two holders of a key.
        import threading

        keys, each = 30, 4
        handles = [self.open(visibility_timeout=60) for _ in range(3)]
        for q in handles:
            q.task(name="per", concurrency=1, concurrency_key=lambda who: who)(_noop)
        handles[0].enqueue_many([{"task": "per", "args": [f"c{n % keys}"], "kwargs": {}}
                                 for n in range(keys * each)])
        lock, holding, done, errors = threading.Lock(), dict[str, int](), [0], list[str]()

        def drain(q: Queue) -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                jobs = q.lease(2)
                with lock:
                    for job in jobs:
                        key = job.payload["args"][0]
                        holding[key] = holding.get(key, 0) + 1
                        if holding[key] > 1:
                            errors.append(key)
                    if not jobs and done[0] == keys * each:
                        return
                for job in jobs:
                    with lock:
                        holding[job.payload["args"][0]] -= 1
                        done[0] += 1
                    q.ack(job)
                if not jobs:
                    time.sleep(0.01)

        threads = [threading.Thread(target=drain, args=(q,)) for q in handles]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])
        self.assertEqual(done[0], keys * each, handles[0].stats())

    def unmet_pairs(self) -> list[tuple[str, str]]:
        """The pairs with a pending job that no walk would meet: not in limit_pairs, or
        parked though their key has no holder (every cap is 1 where this is used)."""
        return self.sql("""
                SELECT j.rate_key, j.conc_key FROM {s}.jobs AS j
                WHERE j.queue = 'q' AND j.state IN (-1, 0) AND j.conc_key <> ''
                GROUP BY j.rate_key, j.conc_key
                HAVING NOT EXISTS (
                    SELECT 1 FROM {s}.limit_pairs AS p
                    WHERE p.queue = 'q' AND p.rate_key = j.rate_key
                      AND p.conc_key = j.conc_key AND (NOT p.parked OR EXISTS (
                          SELECT 1 FROM {s}.jobs AS h WHERE h.queue = 'q' AND h.state = 1
                            AND h.conc_key = j.conc_key)))""")

    def pairs(self) -> dict[str, bool]:
        """Each pair's concurrency value in limit_pairs (migration 0014): parked or not."""
        rows = self.sql("SELECT conc_key, parked FROM {s}.limit_pairs WHERE queue = 'q'")
        return {key.split("\\0")[-1]: parked for key, parked in rows}

    def test_a_rate_window_keeps_its_latest_starts_when_its_count_changes(self) -> None:
        first = self.open()
        first.task(name="rated", rate_limit=(3, 3600.0))(_noop)
        first.enqueue_many([{"task": "rated", "args": [n], "kwargs": {}} for n in range(10)])
        self.assertEqual(len(first.lease(10)), 3)
        wider = self.open()  # the same key declared at 5 an hour: two more, then full
        wider.task(name="rated", rate_limit=(5, 3600.0))(_noop)
        self.assertEqual(len(wider.lease(10)), 2)
        self.assertEqual(len(wider.lease(10)), 0)
        self.assertEqual(len(first.lease(10)), 0)  # at 3 again: full with its latest 3
        use = {u.key: (u.used, u.limit) for u in wider.limit_use() if u.kind == "rate"}
        self.assertEqual(use["rated"], (5, 5))

    def test_a_window_written_at_version_7_counts_its_starts_after_the_migration(self
                                                                                ) -> None:
        import time

        import psycopg

        from nobroker.postgres import schema
        from nobroker.postgres.url import parse

        target = parse(self.url)
        name, now = target.schema, time.time()
        s = schema.quoted(name)
        with psycopg.connect(target.conninfo, autocommit=True) as conn:
            for step in schema.migrate_sql(name, 0, 7):
                conn.execute(step.encode())
            conn.execute(f"INSERT INTO {s}.schema_version VALUES (7)".encode())
            # Version 7's window of rate key "rated": 3 starts in the last hour.
            conn.execute(f"INSERT INTO {s}.limit_windows VALUES ('q', 'rated', %s)".encode(),
                         ([now - 30.0, now - 20.0, now - 10.0],))
        q = self.open()
        q.task(name="rated", rate_limit=(4, 3600.0))(_noop)
        q.enqueue_many([{"task": "rated", "args": [n], "kwargs": {}} for n in range(5)])
        self.assertEqual(len(q.lease(5)), 1)  # 4 an hour, 3 of them already started
        self.assertEqual(len(q.lease(5)), 0)
        self.assertEqual([(u.key, u.used) for u in q.limit_use() if u.kind == "rate"],
                         [("rated", 4)])

    def test_a_dormant_dependent_is_copied_with_its_cap(self) -> None:
        q = self.open()
        q.task(name="capped", concurrency=2)(_noop)
        member = q.enqueue("member", max_attempts=1)
        callback = q.enqueue({"task": "capped", "args": [], "kwargs": {}}, depends_on=[member])
        leased = q.lease_one()
        assert leased is not None and leased.id == member.id
        q.nack(leased, error="boom")  # dead: the callback cancelled, revivable
        (copy,) = q.backend.export_dormant()  # type: ignore[attr-defined]  # migrate's view
        self.assertEqual((copy.job.id, copy.cap), (callback.id, 2))
        target_url = fresh_schema_url()
        self.addCleanup(drop_schema, target_url)
        target = open_queue(target_url, "q")
        self.addCleanup(target.close)
        self.assertEqual(target.backend.import_dormant([copy]),  # type: ignore[attr-defined]
                         [callback.id])
        schema = target.backend.target.schema  # type: ignore[attr-defined]
        stored = target.backend._link.run(  # type: ignore[attr-defined]
            "test", lambda conn: conn.execute(
                f'SELECT conc_key, conc_cap FROM "{schema}".jobs WHERE id = %s',
                (callback.id,)).fetchone())
        self.assertEqual(stored, ("capped", 2))

    def test_a_process_that_did_not_declare_a_key_reports_the_cap_its_jobs_carry(self
                                                                                 ) -> None:
        declared = self.open(visibility_timeout=3600)
        per = declared.task(name="per", concurrency=3, concurrency_key=lambda who: who)(_noop)
        per.delay("acme")  # enqueue
        declared.enqueue_many([{"task": "per", "args": ["zeta"], "kwargs": {}}])
        declared.enqueue_graph([GraphNode({"task": "per", "args": ["omni"], "kwargs": {}})])
        self.assertEqual(len(declared.lease(10)), 3)
        undeclared = self.open()
        seen = {(u.key, u.value): (u.used, u.limit) for u in undeclared.limit_use()
                if u.kind == "concurrency"}
        self.assertEqual(seen, {("per", "acme"): (1, 3), ("per", "zeta"): (1, 3),
                                ("per", "omni"): (1, 3)})
        other = self.open()  # a process that declared the key: its own declaration
        other.task(name="per", concurrency=5, concurrency_key=lambda who: who)(_noop)
        self.assertEqual({u.limit for u in other.limit_use() if u.kind == "concurrency"}, {5})

    def test_migrate_carries_each_job_s_limit_keys_and_cap_from_files_to_memory(self
                                                                                ) -> None:
        import tempfile

        from harness.copies import check_limits_kept, limited_jobs_in, limited_task

        from nobroker.transfer import transfer

        directory = tempfile.mkdtemp()
        ids = limited_jobs_in(directory, "q")
        self.assertEqual(transfer(directory, self.url, "q").copied,
                         {"pending": 4, "dead": 1, "waiting": 1})
        memory = f"memory://{self.id()}"
        with Queue(memory, "q") as there:  # from PostgreSQL (its export_jobs)
            self.assertEqual(transfer(self.url, memory, "q").copied,
                             {"pending": 4, "dead": 1, "waiting": 1})
            q = self.open()
            for target in (q, there):
                limited_task(target)
                check_limits_kept(self, target, ids)

    def test_migrate_carries_a_used_up_rate_window_from_files_to_memory_and_files(self
                                                                                  ) -> None:
        import tempfile

        from harness.copies import an_hour_on, check_window_kept, used_up_window_in

        from nobroker.transfer import transfer

        directory, back = tempfile.mkdtemp(), tempfile.mkdtemp()
        left = used_up_window_in(directory, "q")
        memory = f"memory://{self.id()}"
        with Queue(memory, "q") as there:
            reports = [transfer(source, to, "q") for _ in range(2)  # the second: no change
                       for source, to in ((directory, self.url), (self.url, memory),
                                          (self.url, back))]
            check_window_kept(self, self.open(), self.open(clock=an_hour_on), left)
            with Queue(memory, "q", clock=an_hour_on) as later:
                check_window_kept(self, there, later, left)
        # A ring keeps no period: the directory's window has one the copy made up, and
        # a worker that declares the key leases by its own.
        with Queue(back, "q") as here, Queue(back, "q", clock=an_hour_on) as later:
            check_window_kept(self, here, later, left)
        self.assertEqual([r.windows for r in reports], [1] * 6)


if __name__ == "__main__":
    unittest.main()
