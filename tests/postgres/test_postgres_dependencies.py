"""Dependencies on PostgreSQL beyond the contract: the SQL's wording and counting, the
cost of a finish, and the release decided once under real concurrency.

The rules themselves are the dependency contract's (tests/contract/), which
test_postgres runs here too. These tests show what only the PostgreSQL design has
to show: nb_settle (sql/migrations/0004_dependencies.sql) words a cancel as
nobroker.dependencies does; finishing one of 10,000 prerequisites reads its own
rows only; two processes acking the last two prerequisites of many chord-shaped
jobs at once release each exactly once; Worker processes run chords across an
immediate server restart, no callback before its members.
"""

from __future__ import annotations

import json
import os
import unittest
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.postgres import (
    PG_CTL_ENV,
    drop_schema,
    fresh_schema_url,
    needs_postgres,
    open_queue,
    restart_server,
)
from harness.support import FakeClock, TempDirTestCase, slow, wait_until
from workflows import test_lineage

from nobroker import JobNotFoundError, JobState, NobrokerError, NotLeasedError, Queue
from nobroker.dependencies import GraphNode as Node
from nobroker.dependencies import failure_error
from postgres import test_postgres_processes as processes

TESTS = str(Path(__file__).resolve().parent.parent)


def graph(q: Queue, nodes: list[Node]) -> list[Any]:
    return q.enqueue_graph(nodes)


def _reads(q: Queue, sql: bytes, params: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Run `sql` and return, per table of the queue set, the (sequential scans, rows
    fetched by index) it made: the difference of this server process's not yet
    reported counts (pg_stat_xact_user_tables) before and after, in one transaction."""
    schema = q.backend.target.schema  # type: ignore[attr-defined]
    counts = ("SELECT relname, seq_scan, coalesce(idx_tup_fetch, 0) "
              "FROM pg_stat_xact_user_tables WHERE schemaname = %s")

    def run(conn: Any) -> dict[str, tuple[int, int]]:
        with conn.transaction():
            before = {r[0]: r[1:] for r in conn.execute(counts, (schema,)).fetchall()}
            conn.execute(sql, params).fetchall()
            after = {r[0]: r[1:] for r in conn.execute(counts, (schema,)).fetchall()}
        return {name: (int(scans - before.get(name, (0, 0))[0]),
                       int(fetched - before.get(name, (0, 0))[1]))
                for name, (scans, fetched) in after.items()}

    return q.backend._link.run("test", run)  # type: ignore[attr-defined, no-any-return]


@needs_postgres
class PostgresDependenciesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)

    def open(self, **options: Any) -> Queue:
        q = open_queue(self.url, "q", **options)
        self.addCleanup(q.close)
        return q

    def test_a_cancel_by_the_server_is_worded_as_nobroker_words_it(self) -> None:
        q = self.open()
        dies = q.enqueue("dies", max_attempts=1)
        cancelled = q.enqueue("cancelled")
        b = q.enqueue("b", depends_on=dies)
        c = q.enqueue("c", depends_on=cancelled)
        d = q.enqueue("d", depends_on=b)
        leased = q.lease_one()
        assert leased is not None
        q.nack(leased, error="boom")
        q.cancel(cancelled.id)
        self.assertEqual(q.get(b.id).last_error, failure_error(dies.id, "dead"))
        self.assertEqual(q.get(c.id).last_error, failure_error(cancelled.id, "cancelled"))
        self.assertEqual(q.get(d.id).last_error, failure_error(b.id, "cancelled"))
        stats = q.stats()
        self.assertEqual((stats.waiting, stats.pending, stats.kept, stats.total),
                         (0, 0, 4, 1))

    def test_a_lease_that_expires_on_its_last_attempt_cancels_dependents(self) -> None:
        clock = FakeClock()
        q = self.open(clock=clock, visibility_timeout=5)
        a = q.enqueue("a", max_attempts=1)
        b = q.enqueue("b", depends_on=a)
        c = q.enqueue("c", depends_on=a, allow_failure=True)
        self.assertIsNotNone(q.lease_one())
        clock.advance(6)
        self.assertEqual([j.id for j in q.lease()], [], "reclaimed now, leasable next call")
        self.assertEqual(q.get(a.id).state, JobState.DEAD)
        self.assertEqual(q.get(b.id).last_error, failure_error(a.id, "dead"))
        self.assertEqual(q.get(c.id).state, JobState.PENDING)

    def test_a_workers_ack_and_lease_releases_and_leases_the_dependent(self) -> None:
        q = self.open()
        a = q.enqueue("a")
        c = q.enqueue("c", depends_on=a)
        leased = q.lease_one()
        assert leased is not None
        following = q.backend.ack_and_lease(leased, 30.0)
        assert following is not None, "released and leased in the ack's statement"
        self.assertEqual((following.id, following.state), (c.id, JobState.LEASED))
        self.assertEqual(q.get(c.id).state, JobState.LEASED)

    def test_the_release_is_in_the_acks_transaction_and_rolls_back_with_it(self) -> None:
        q = self.open()
        a, b = q.enqueue("a"), q.enqueue("b")
        c = q.enqueue("c", depends_on=a)
        d = q.enqueue("d", depends_on=[a, b])
        held = q.lease(2)
        backend: Any = q.backend
        with self.assertRaises(RuntimeError), backend.atomic() as conn:
            backend.ack_in(conn, held[0], None, None)
            raise RuntimeError("the task's transaction fails after its ack")
        self.assertEqual((q.get(a.id).state, q.get(c.id).state),
                         (JobState.LEASED, JobState.WAITING))
        stale = replace(held[1], token=(held[1].token or 0) + 1000)
        with self.assertRaises(NotLeasedError):
            q.ack_many([held[0], stale])  # one stale lease: nothing acked, nothing released
        self.assertEqual((q.get(c.id).state, q.get(d.id).waiting_for),
                         (JobState.WAITING, (a.id, b.id)))
        with backend.atomic() as conn:
            backend.ack_in(conn, held[0], None, None)
        self.assertEqual(q.get(c.id).state, JobState.PENDING)

    def test_a_keyed_dependent_enqueued_twice_is_the_same_job(self) -> None:
        q = self.open()
        a = q.enqueue("a")
        first = q.enqueue("k", job_id="report", depends_on=a)
        again = q.enqueue("other", job_id="report", depends_on=a)
        self.assertEqual((again.id, again.payload, again.state, again.waiting_for),
                         ("report", "k", JobState.WAITING, (a.id,)))
        self.assertEqual(q.stats().total, 2)
        self.assertTrue(q.cancel(first.id))  # a cancelled key is free at once
        anew = q.enqueue("anew", job_id="report", depends_on=a)
        self.assertEqual((anew.payload, anew.state), ("anew", JobState.WAITING))

    def test_a_graph_is_one_transaction_with_its_three_modes(self) -> None:
        q = self.open()
        old = q.enqueue("old")
        jobs = graph(q, [Node("a"), Node("b", (0, old.id)), Node("any", (1,), "any"),
                         Node("on_error", (0, 1), "failure"), Node("late", (1,), delay=60)])
        self.assertEqual([j.state for j in jobs],
                         [JobState.PENDING] + [JobState.WAITING] * 4)
        self.assertEqual(jobs[1].waiting_for, (jobs[0].id, old.id))
        self.assertEqual(q.stats().waiting, 4)
        first = q.lease(2)
        self.assertEqual({j.payload for j in first}, {"old", "a"})
        q.ack(next(j for j in first if j.payload == "old"))
        q.nack(next(j for j in first if j.payload == "a"), error="x", delay=0)  # not its last
        self.assertEqual(q.get(jobs[3].id).state, JobState.WAITING)
        a = q.lease_one()
        assert a is not None
        q.ack(a)
        b = q.lease_one()
        assert b is not None and b.payload == "b"
        q.ack(b)
        self.assertEqual(q.get(jobs[2].id).state, JobState.PENDING)
        self.assertEqual(q.get(jobs[4].id).state, JobState.PENDING, "delayed still")
        on_error = q.get(jobs[3].id)
        self.assertEqual((on_error.state, on_error.last_error),
                         (JobState.CANCELLED, "prerequisites finished without a failure"))

    def test_a_failure_node_is_released_by_a_death_and_a_bad_graph_writes_nothing(self
                                                                                  ) -> None:
        q = self.open()
        jobs = graph(q, [Node("a", max_attempts=1), Node("b"), Node("h", (0, 1), "failure")])
        leased = q.lease_one()
        assert leased is not None and leased.id == jobs[0].id
        q.nack(leased, error="boom")
        self.assertEqual((q.get(jobs[2].id).state, q.get(jobs[2].id).waiting_for),
                         (JobState.PENDING, ()))
        before = q.stats()
        with self.assertRaises(JobNotFoundError):
            graph(q, [Node("x"), Node("y", (0, "no-such-job"))])
        with self.assertRaisesRegex(NobrokerError, "already in the queue"):
            graph(q, [Node("x", job_id=jobs[1].id)])
        self.assertEqual(q.stats(), before)

    def test_finishing_one_of_10000_prerequisites_reads_its_own_rows_only(self) -> None:
        q = self.open()
        members = q.enqueue_many(list(range(10_000)))
        chord = q.enqueue("callback", depends_on=members)
        self.assertEqual(len(q.get(chord.id).waiting_for), 10_000)
        leased = q.lease_one()
        assert leased is not None
        backend: Any = q.backend
        params = backend._params(id=leased.id, tok=leased.token, r=None, kr=0.0, ur=0.0, rt=None)
        reads = _reads(q, backend._sql.ack, params)
        for table in ("prerequisites", "waits"):
            scans, fetched = reads.get(table, (0, 0))
            self.assertEqual(scans, 0, f"a sequential scan of {table}")
            self.assertLessEqual(fetched, 3, f"{table}: {fetched} rows read for one finish")
        self.assertEqual(len(q.get(chord.id).waiting_for), 9_999)


@needs_postgres
class PostgresLineageTest(test_lineage.LineageTest):
    """tasks/lineage.py's tests (parents, children, chord progress) on PostgreSQL, whose
    get() shows a finished job without its payload, as the others do."""

    def locations(self) -> list[str]:
        url = fresh_schema_url()
        self.addCleanup(drop_schema, url)
        return [url]


# A process holding leases it is told about: at "go" it acks them, one after another
# (or all in one ack_many).
ACKER = """
import sys
sys.path[:0] = [sys.argv[1]]
from harness.postgres import open_queue
q = open_queue(sys.argv[2], "q")
ids = sys.argv[3].split(",")
jobs = [q.get(job_id) for job_id in ids]  # leased: the current token with them
print("ready", flush=True)
sys.stdin.read()
if sys.argv[4:] == ["many"]:
    q.ack_many(jobs)
else:
    for job in jobs:
        q.ack(job)
print("done", flush=True)
"""

# A Worker process: each handled payload written with the time, after the handler ran.
WORKER = """
import json, sys, time
sys.path[:0] = [sys.argv[1]]
from harness.postgres import open_queue
from nobroker import Worker
q = open_queue(sys.argv[2], "q", visibility_timeout=2.0)
f = open(sys.argv[3], "a")
def handle(job):
    f.write(json.dumps([time.time(), job.payload]) + "\\n"); f.flush()
print("ready", flush=True)
Worker(q, handle, concurrency=2, poll_interval=0.05).run()
"""


class ProcessesCase(TempDirTestCase):
    """A fresh queue set with queue "q" open, and child processes (no tests of its own:
    test_postgres_revivals's process tests use it too)."""

    def setUp(self) -> None:
        super().setUp()
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)
        self.queue = open_queue(self.url, "q")
        self.addCleanup(self.queue.close)

    # The process tests' helpers: spawn (a child that printed "ready"), go, reaping.
    spawn = processes.PostgresProcessesTest.spawn
    go = staticmethod(processes.PostgresProcessesTest.go)
    _reap = staticmethod(processes.PostgresProcessesTest._reap)


@needs_postgres
class PostgresDependencyProcessesTest(ProcessesCase):

    def ack_at_once(self, parts: list[list[Any]], *how: str) -> None:
        """One ACKER per part of the leased jobs, all started together; each must exit 0."""
        procs = [self.spawn(ACKER, ",".join(j.id for j in part), *how) for part in parts]
        self.go(procs)
        for proc in procs:
            self.assertEqual(proc.wait(120), 0, "an ack failed (a deadlock?)")

    def test_two_processes_acking_the_last_two_prerequisites_release_each_chord_once(self
                                                                                     ) -> None:
        q = self.queue
        chords = 100
        firsts = q.enqueue_many([f"a{i}" for i in range(chords)])
        seconds = q.enqueue_many([f"b{i}" for i in range(chords)])
        callbacks = [q.enqueue(f"c{i}", depends_on=[a, b])
                     for i, (a, b) in enumerate(zip(firsts, seconds, strict=True))]
        self.assertEqual(len(q.lease(2 * chords)), 2 * chords)
        self.ack_at_once([firsts, seconds])  # each chord's two acks race
        stats = q.stats()
        self.assertEqual((stats.waiting, stats.pending, stats.done), (0, chords, 2 * chords))
        self.assertEqual({q.get(c.id).state for c in callbacks}, {JobState.PENDING})
        leased = q.lease(3 * chords)
        self.assertEqual(sorted(j.id for j in leased), sorted(c.id for c in callbacks),
                         "every callback leased once")
        q.ack_many(leased)
        self.assertEqual(q.stats().total, 0)

    def test_two_ack_many_calls_with_dependents_in_opposite_orders_do_not_deadlock(self
                                                                                   ) -> None:
        q = self.queue
        n = 50
        xs = q.enqueue_many([f"x{i}" for i in range(n)])
        ys = q.enqueue_many([f"y{i}" for i in range(n)])
        dependents = [q.enqueue(f"d{i}", depends_on=[xs[i], ys[n - 1 - i]]) for i in range(n)]
        self.assertEqual(len(q.lease(2 * n)), 2 * n)
        self.ack_at_once([xs, ys], "many")
        self.assertEqual({q.get(d.id).state for d in dependents}, {JobState.PENDING})

    @slow
    @unittest.skipUnless(os.environ.get(PG_CTL_ENV), "needs the test cluster's pg_ctl")
    def test_worker_processes_run_chords_across_a_server_restart(self) -> None:
        outs = [self.tmp / f"handled-{n}" for n in range(2)]
        for out in outs:
            self.spawn(WORKER, str(out))
        callbacks: dict[str, list[str]] = {}

        def chord(n: int) -> bool:
            members = self.queue.enqueue_many([[n, m] for m in range(5)])
            self.queue.enqueue(n, depends_on=members)
            callbacks[json.dumps(n)] = [json.dumps([n, m]) for m in range(5)]
            return True

        def handled() -> dict[str, list[float]]:
            seen: dict[str, list[float]] = {}
            for out in outs:
                if out.exists():
                    for line in out.read_text().splitlines():
                        at, payload = json.loads(line)
                        seen.setdefault(json.dumps(payload), []).append(at)
            return seen

        for n in range(10):
            chord(n)
        wait_until(lambda: len(handled()) >= 20, 60, "the workers to handle jobs")
        restart_server()
        wait_until(lambda: _try(self.queue.stats), 60, "the server to come back")
        for n in range(10, 20):
            wait_until(lambda n=n: _try(lambda: chord(n)), 30, "an enqueue to work")
        wait_until(lambda: set(callbacks) <= set(handled()), 120,
                   "every chord's callback to run")
        seen = handled()
        for callback, members in callbacks.items():
            self.assertGreater(min(seen[callback]), max(min(seen[m]) for m in members),
                               f"callback {callback} ran before a member")
        wait_until(lambda: self.queue.stats().total == 0, 60, "the queue to drain")
        self.assertEqual(self.queue.stats().waiting, 0)


def _try(fn: Any) -> bool:
    try:
        fn()
    except Exception:
        return False
    return True
