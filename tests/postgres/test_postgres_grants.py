"""Starts granted ahead on PostgreSQL (migrations/0016, nobroker/postgres/grants.py).

A rate-limited ack_and_lease that finds its window at most half used takes more
starts for its process, recorded at once at the latest time they may be used;
the process then leases with them, no lock taken and no window written. These
tests check what that must not change: a window never holds more than its count
of starts as they happened (the walk checks at now, not at a start recorded
ahead), a start granted and not used counts as made, and one is never used
after its time. And that it does what it is for: the window written once for
many starts.
"""

from __future__ import annotations

import importlib.util
import unittest
from pathlib import Path
from typing import Any

from harness.postgres import (
    drop_schema,
    fresh_schema_url,
    needs_postgres,
    open_queue,
    schema_sql,
)
from harness.support import FakeClock, spawn_python

from nobroker import Job, Queue

TESTS = str(Path(__file__).resolve().parent.parent)  # tests/: harness.postgres

# Leases twice (the second lease takes starts ahead), says so, and waits.
HOLDER = """
import sys, time
sys.path[:0] = [sys.argv[1]]
from harness.postgres import open_queue
q = open_queue(sys.argv[2], "q", visibility_timeout=3600)
q.task(name="rated", rate_limit=(8, 60.0))(lambda n: None)
q.ack_and_lease(q.lease_one())
print("leased", flush=True)
time.sleep(600)
"""


def _noop(*args: Any) -> None:
    return None


def _declare(q: Queue, count: int, period: float = 1.0) -> None:
    q.task(name="rated", rate_limit=(count, period))(_noop)


def _jobs(n: int) -> list[dict[str, Any]]:
    return [{"task": "rated", "args": [i], "kwargs": {}} for i in range(n)]


@needs_postgres
class PostgresGrantsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)
        self.clock = FakeClock()
        self.started: list[float] = []  # every lease's time, as it happened

    def open(self, count: int) -> Queue:
        q = open_queue(self.url, "q", clock=self.clock, visibility_timeout=3600)
        self.addCleanup(q.close)
        _declare(q, count)
        return q

    def lease_one(self, q: Queue) -> Job:
        job = q.lease_one()
        assert job is not None
        self.started.append(self.clock.now)
        return job

    def ack_and_lease(self, q: Queue, job: Job) -> Job:
        nxt = q.ack_and_lease(job)
        assert nxt is not None
        self.started.append(self.clock.now)
        return nxt

    def ring(self) -> list[float]:
        """The starts recorded in the rated task's ring, oldest first."""
        return [at for (at,) in self.sql(
            "SELECT at FROM {s}.limit_starts WHERE key = 'rated' ORDER BY at")]

    def sql(self, query: str) -> list[tuple[Any, ...]]:
        return schema_sql(self.url, query)

    def assert_within(self, count: int, period: float) -> None:
        """No window of `period` held more than `count` of the starts as they happened."""
        times = sorted(self.started)
        for first, last in zip(times, times[count:], strict=False):
            self.assertGreaterEqual(last - first, period - 1e-9, (first, last, times))

    def test_an_ack_and_lease_loop_writes_its_window_once_for_many_starts(self) -> None:
        q = self.open(1000)
        q.enqueue_many(_jobs(35))
        start = self.clock.now
        job = self.lease_one(q)  # the window's first start: written by the walk
        for _ in range(34):  # one lease granted 16 more, used by the next 16; again
            job = self.ack_and_lease(q, job)
        recorded_now = [at for at in self.ring() if at == start]
        # Each of the 35 starts was written at `start` before the grants: two now,
        # the 33 others recorded (in 2 writes) at the latest time the grants could
        # be used (the second grant's lease after the first grant's, in order).
        self.assertEqual(len(recorded_now), 2, self.ring())
        self.assertEqual(len(self.ring()), 35)
        self.assertEqual(max(self.ring()), start + 0.05)

    def test_a_start_granted_is_used_until_its_time_and_not_after(self) -> None:
        q = self.open(1000)
        q.enqueue_many(_jobs(5))
        job = self.ack_and_lease(q, self.lease_one(q))  # 16 granted, until +0.05
        written = len(self.ring())
        job = self.ack_and_lease(q, job)  # one of them: nothing written
        self.assertEqual(len(self.ring()), written)
        self.clock.advance(0.06)  # past their time: a start of its own, written
        job = self.ack_and_lease(q, job)
        self.assertIn(self.clock.now, self.ring())

    def test_starts_granted_and_not_used_count_as_made(self) -> None:
        a, b = self.open(8), self.open(8)  # 8 a second: 2 granted with a lease
        a.enqueue_many(_jobs(20))
        self.ack_and_lease(a, self.lease_one(a))  # 2 starts, 2 more granted to a
        a.close()  # a stops: its grants unused
        self.clock.advance(0.01)
        (use,) = b.limit_use()
        self.assertEqual((use.key, use.used, use.limit), ("rated", 4, 8))
        self.assertEqual(len(b.lease(20)), 4)  # 8 less the 4 made or granted
        # A second after a's two starts: only theirs are out of the window; a's grants
        # (recorded at +0.05) and b's starts (after them, in order) still count.
        self.clock.advance(1.0)
        self.assertEqual(len(b.lease(20)), 2)

    def test_a_process_killed_holding_starts_granted_leaves_them_counted(self) -> None:
        # A real process takes 2 starts ahead (8 a minute: 2 granted with a lease,
        # usable for 0.05 s) and is killed with SIGKILL before it uses them.
        q = open_queue(self.url, "q", visibility_timeout=3600)
        self.addCleanup(q.close)
        _declare(q, 8, 60.0)
        q.enqueue_many(_jobs(20))
        child = spawn_python(HOLDER, TESTS, self.url)
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        assert child.stdout is not None
        self.assertEqual(child.stdout.readline().strip(), b"leased", child.stderr)
        made, ahead = self.ring()[:2], self.ring()[2:]  # two granted: 0.05 s later
        self.assertEqual(len(ahead), 2, self.ring())
        self.assertAlmostEqual(min(ahead) - max(made), 0.05, delta=0.01)
        child.kill()
        child.wait()
        self.assertEqual(len(q.lease(20)), 4)  # 8 less the 2 made and the 2 granted

    def test_the_walk_counts_a_start_granted_ahead_at_now(self) -> None:
        # 16 a second: a lease that leaves at most 8 used takes 4 more starts,
        # recorded at +0.05. A walk checking at that later time, as the walk of
        # version 15 did, would miss the start at 0.23 and lease 10 at 1.21:
        # 17 starts from 0.23 to 1.21.
        a, b = self.open(16), self.open(16)
        a.enqueue_many(_jobs(40))
        base = self.clock.now
        self.clock.now = base + 0.23
        self.lease_one(b)
        self.clock.now = base + 1.2
        job = self.ack_and_lease(a, self.lease_one(a))  # 2 starts, 4 granted to a
        for _ in range(4):
            job = self.ack_and_lease(a, job)
        self.assertEqual(max(self.ring()), (base + 1.2) + 0.05)  # a's grant, ahead
        self.clock.now = base + 1.21
        leased = b.lease(20)  # the walk (more than one job asked for)
        self.started += [self.clock.now] * len(leased)
        self.assertEqual(len(leased), 9)
        self.assert_within(16, 1.0)

    def test_another_process_s_lease_records_its_start_after_a_grant_without_a_walk(
            self) -> None:
        a, b = self.open(1000), self.open(1000)
        a.enqueue_many(_jobs(5))
        self.ack_and_lease(a, self.lease_one(a))  # starts granted to a, until +0.05
        self.sql("ALTER FUNCTION {s}.nb_limited_lease(text, integer, float8, float8, text[],"
                 " text[], text[], integer[], float8[], text[], integer[])"
                 " RENAME TO nb_limited_lease_away")
        self.lease_one(b)  # the lean lease: its start after a's, the ring in order
        self.assertEqual(self.ring()[-1], self.clock.now + 0.05)
        self.assertEqual(self.ring(), sorted(self.ring()))


@unittest.skipUnless(importlib.util.find_spec("psycopg"), "psycopg is not installed "
                     "(nobroker.postgres imports it; run `python make.py test-postgres`)")
class GrantsTest(unittest.TestCase):
    """The process's side (grants.py), without a server: what it asks for."""

    def test_a_grant_is_claimed_once_each_and_replaced_by_the_next(self) -> None:
        from nobroker.postgres.grants import WANT, Grants

        grants = Grants()
        self.assertEqual(grants.claim(), {"gk": None, "gu": None, "gw": WANT})
        grants.told("2 408f440000000000 my key")  # 1000.5 (float8send, in hex)
        self.assertEqual(grants.claim(), {"gk": "my key", "gu": 1000.5, "gw": WANT})
        grants.told("0")
        self.assertEqual(grants.claim()["gk"], "my key")
        self.assertIsNone(grants.claim()["gk"])  # both claimed
        grants.told(None)
        grants.told("")
        self.assertIsNone(grants.claim()["gk"])

    def test_the_next_ask_follows_what_the_last_grant_saw_used(self) -> None:
        from nobroker.postgres.grants import COOL, WANT, Grants

        grants = Grants()
        grants.told("16 3ff0000000000000 k")
        for _ in range(3):
            grants.claim()
            grants.told("0")  # 3 of 16 used
        grants.told("6 4000000000000000 k")
        self.assertEqual(grants.claim()["gw"], 6)
        grants.told("6 4008000000000000 k")  # none of those used: ask for none a while
        asks = [grants.claim()["gw"] for _ in range(COOL + 1)]
        self.assertEqual(asks, [0] * COOL + [WANT])


if __name__ == "__main__":
    unittest.main()
