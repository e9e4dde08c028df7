"""Revival on PostgreSQL beyond the contract: the `dormant` rows (sql/migrations/
0007_revivals.sql), what a finish reads of them, their end, and a revival racing the
finish of a revived job's other prerequisite in another process.

The rules themselves are the dependency contract's (tests/contract/), which
test_postgres runs here too.
"""

from __future__ import annotations

import unittest
from typing import Any

from harness.postgres import needs_postgres
from harness.support import FakeClock

from nobroker import Job, JobState, Queue
from postgres import test_postgres_dependencies as dependencies
from postgres.test_postgres_dependencies import ACKER, _reads


def dormant_rows(q: Queue) -> list[tuple[str, str, bool]]:
    """(prerequisite, dependent, failed) of every `dormant` row of the queue set."""
    schema = q.backend.target.schema  # type: ignore[attr-defined]
    rows = q.backend._link.run("test", lambda conn: conn.execute(  # type: ignore[attr-defined]
        f'SELECT prerequisite, dependent, failed FROM "{schema}".dormant '
        "ORDER BY dependent, pos".encode()).fetchall())
    return [(str(p), str(d), bool(f)) for p, d, f in rows]


def kill(q: Queue, job: Job) -> None:
    """Lease `job` (the next leasable, on its last attempt) and nack it to death."""
    leased = q.lease_one()
    assert leased is not None and leased.id == job.id, (leased, job)
    q.nack(leased, error="boom")


@needs_postgres
class PostgresRevivalsTest(unittest.TestCase):
    setUp = dependencies.PostgresDependenciesTest.setUp  # a fresh queue set each
    open = dependencies.PostgresDependenciesTest.open

    def test_a_chord_whose_member_died_runs_after_the_requeue_and_the_rest(self) -> None:
        q = self.open()
        members = q.enqueue_many([{"m": i} for i in range(1, 6)], max_attempts=1)
        callback = q.enqueue("callback", depends_on=members)
        kill(q, members[0])
        self.assertEqual(q.get(callback.id).state, JobState.CANCELLED)
        self.assertEqual(dormant_rows(q), [(members[0].id, callback.id, True)]
                         + [(m.id, callback.id, False) for m in members[1:]])
        q.ack(q.lease_one())  # type: ignore[arg-type]  # member 2 succeeds: struck off
        kill(q, members[2])  # member 3 dies too: failed
        (copy,) = q.backend.export_dormant()  # type: ignore[attr-defined]  # migrate's view
        self.assertEqual((copy.job.id, copy.job.payload, copy.unmet, copy.failed),
                         (callback.id, "callback", (members[3].id, members[4].id),
                          (members[0].id, members[2].id)))
        self.assertEqual(q.requeue_dead(members[0].id), 1)
        self.assertEqual(q.get(callback.id).state, JobState.CANCELLED, "member 3 is dead")
        self.assertEqual(q.requeue_dead(), 1)
        got = q.get(callback.id)
        self.assertEqual((got.state, got.waiting_for, got.last_error),
                         (JobState.WAITING, (members[0].id, members[2].id, members[3].id,
                                             members[4].id), None))
        self.assertEqual(dormant_rows(q), [], "moved back to prerequisites")
        q.ack_many(q.lease(10))
        self.assertEqual(q.lease_one().id, callback.id)  # type: ignore[union-attr]

    def test_a_finish_reads_only_its_own_dormant_rows(self) -> None:
        q = self.open()
        members = q.enqueue_many(list(range(2_000)), max_attempts=1)
        q.enqueue("callback", depends_on=members)
        kill(q, members[0])
        self.assertEqual(len(dormant_rows(q)), 2_000)
        leased = q.lease_one()
        assert leased is not None
        backend: Any = q.backend
        params = backend._params(id=leased.id, tok=leased.token, r=None, kr=0.0, ur=0.0, rt=None)
        scans, fetched = _reads(q, backend._sql.ack, params).get("dormant", (0, 0))
        self.assertEqual(scans, 0, "a sequential scan of dormant")
        self.assertLessEqual(fetched, 3, f"{fetched} dormant rows read for one finish")
        self.assertEqual(len(dormant_rows(q)), 1_999)

    def test_a_dormant_job_swept_takes_its_rows_and_is_never_revived(self) -> None:
        clock = FakeClock(1_000_000.0)
        q = self.open(clock=clock, result_ttl=60)
        a = q.enqueue("a", max_attempts=1)
        b = q.enqueue("b", depends_on=a)
        kill(q, a)
        self.assertEqual(len(dormant_rows(q)), 1)
        clock.advance(61)  # b is past its retention: invisible, not revived
        self.assertEqual(q.requeue_dead(a.id), 1)
        self.assertEqual(dormant_rows(q), [])
        self.assertEqual(q.stats().waiting, 0)
        q.ack(q.lease_one())  # type: ignore[arg-type]  # a
        x = q.enqueue("x", max_attempts=1)
        y = q.enqueue("y", depends_on=x)
        kill(q, x)
        self.assertEqual(len(dormant_rows(q)), 1)
        clock.advance(61)
        q.compact()  # the sweep deletes y's row, and its dormant rows with it
        self.assertEqual(dormant_rows(q), [])
        self.assertEqual(q.requeue_dead(), 1)
        self.assertEqual(q.stats().waiting, 0)
        self.assertEqual({j.id for j in q.list_jobs()} & {b.id, y.id}, set())


# A process told ids: at "go" it requeues each dead one, one statement each.
REQUEUER = """
import sys
sys.path[:0] = [sys.argv[1]]
from harness.postgres import open_queue
q = open_queue(sys.argv[2], "q")
print("ready", flush=True)
sys.stdin.read()
for job_id in sys.argv[3].split(","):
    q.requeue_dead(job_id)
print("done", flush=True)
"""


@needs_postgres
class PostgresRevivalProcessesTest(dependencies.ProcessesCase):
    def test_a_revival_racing_the_ack_of_the_other_prerequisite_waits_for_what_is_left(
            self) -> None:
        q = self.queue
        n = 100
        deads = q.enqueue_many([f"a{i}" for i in range(n)], max_attempts=1)
        others = q.enqueue_many([f"b{i}" for i in range(n)])
        sleepers = [q.enqueue(f"c{i}", depends_on=[a, b])
                    for i, (a, b) in enumerate(zip(deads, others, strict=True))]
        for leased in q.lease(n):
            q.nack(leased, error="boom")
        self.assertEqual({q.get(c.id).state for c in sleepers}, {JobState.CANCELLED})
        leased = q.lease(n)
        self.assertEqual(sorted(j.id for j in leased), sorted(b.id for b in others))
        procs = [self.spawn(ACKER, ",".join(b.id for b in others)),
                 self.spawn(REQUEUER, ",".join(a.id for a in deads))]
        self.go(procs)
        for proc in procs:
            self.assertEqual(proc.wait(120), 0, "a statement failed (a deadlock?)")
        for a, c in zip(deads, sleepers, strict=True):
            got = q.get(c.id)
            self.assertEqual((got.state, got.waiting_for), (JobState.WAITING, (a.id,)),
                             "waits for its requeued prerequisite only")
        self.assertEqual(dormant_rows(q), [])
        q.ack_many(q.lease(n))  # the requeued ones succeed: every sleeper released once
        self.assertEqual(sorted(j.id for j in q.lease(2 * n)), sorted(c.id for c in sleepers))


if __name__ == "__main__":
    unittest.main()
