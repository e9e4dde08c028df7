"""The queue contract on PostgreSQL, and what only the PostgreSQL backend has to show.

Every test gets a schema of its own on the test server (`make.py
test-postgres` starts one); without a server the whole module is skipped.
After each contract test the queue is opened again on a new connection and
its jobs and counters must equal what the test's handle sees.
"""

from __future__ import annotations

import math
import os
import threading
import time
import unittest
from typing import Any

from contract.test_queue_contract import QueueContract
from harness.postgres import (
    HAVE_DRIVER,
    URL,
    drop_schema,
    fresh_schema_url,
    jobs_read,
    needs_job_control,
    needs_postgres,
    open_queue,
)
from harness.support import FakeClock, wait_until

from nobroker import JobNotFoundError, JobState, NotLeasedError, TaskLockedError
from nobroker.errors import ConnectionLostError, NobrokerError


class _Schema(unittest.TestCase):
    def setUp(self) -> None:
        super().setUp()
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)

    def open(self, name: str = "q", **options: Any) -> Any:
        q = open_queue(self.url, name, **options)
        self.addCleanup(q.close)
        return q


def _rows(queue: Any) -> object:
    """Every row of the queue set's tables: equal values mean nothing was written."""
    schema = queue.backend.target.schema

    def read(conn: Any) -> object:
        return [conn.execute(f'SELECT * FROM "{schema}".{table} ORDER BY 1, 2'.encode()
                             ).fetchall() for table in ("jobs", "counters", "queues")]

    return queue.backend._link.run("test", read)


def _counted(queue: Any) -> tuple[int, int, int, int]:
    """(pending, leased, dead, kept) as the counter rows have them."""
    stats = queue.stats()
    return stats.pending, stats.leased, stats.dead, stats.kept


def _truth(queue: Any) -> tuple[int, int, int, int]:
    """(pending, leased, dead, kept) counted over the job rows themselves (pending:
    delayed or ready, not waiting for prerequisites; kept: the finished rows kept with
    an outcome that have not expired)."""
    s = queue.backend.target.schema
    now = queue.backend.session.now()
    row = queue.backend._link.run("test", lambda conn: conn.execute(
        f"""SELECT count(*) FILTER (WHERE state IN (-1, 0)), count(*) FILTER (WHERE state = 1),
                   count(*) FILTER (WHERE state = 2),
                   count(*) FILTER (WHERE "{s}".nb_kept(state, result)
                                    AND expires_at > "{s}".nb_now(%s))
            FROM "{s}".jobs WHERE queue = 'q'""".encode(), (now,)).fetchone())
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def _states(queue: Any) -> dict[str, int]:
    """Each job's state code in the jobs table, by id."""
    s = queue.backend.target.schema
    rows = queue.backend._link.run("test", lambda conn: conn.execute(
        f'SELECT id, state FROM "{s}".jobs'.encode()).fetchall())
    return {row[0]: int(row[1]) for row in rows}


def _rows_of(queue: Any, table: str) -> int:
    return int(queue.backend._link.run("test", lambda conn: conn.execute(
        f"SELECT count(*) FROM {table}".encode()).fetchone()[0]))


@needs_postgres
class PostgresQueueContractTest(QueueContract, _Schema):
    """The contract suite, run on PostgreSQL."""

    def make_queue(self, **kwargs: Any) -> Any:
        return open_queue(self.url, "q", **kwargs)

    def check_reopened(self, queue: Any) -> None:
        try:
            mine = (queue.list_jobs(), queue.stats())
        except NobrokerError:
            return  # the test closed it: nothing to compare
        self.assertEqual(_counted(queue), _truth(queue),
                         "the counters differ from the rows (sql/parts/counted.sql)")
        floor = queue.backend.session.floor  # the handle's latest injected time
        with open_queue(self.url, "q",
                        clock=FakeClock(floor if floor > 0 else time.time())) as fresh:
            self.assertEqual((fresh.list_jobs(), fresh.stats()), mine,
                             "a new connection does not see what this handle saw")

    def storage_marker(self, queue: Any) -> object:
        return _rows(queue)


@needs_postgres
class PostgresBackendTest(_Schema):
    """What the contract cannot say: the server's clock, wake-ups, results, the URL."""

    def test_a_named_lock_is_a_session_lock_of_its_queue_and_schema(self) -> None:
        a, b = self.open("a"), self.open("b")
        elsewhere = self.open_elsewhere("a")
        with a.lock("k"), b.lock("k"), elsewhere.lock("k"):
            with self.assertRaises(TaskLockedError), self.open("a").lock("k"):
                pass
            self.assertEqual(self.key_locks(a, b, elsewhere), 3, "a session lock per queue")
        self.assertEqual(self.key_locks(a, b, elsewhere), 0,
                         "let go, not left to the session's end")

    def open_elsewhere(self, name: str) -> Any:
        """A queue of that name in another queue set (schema) of the same database."""
        url = fresh_schema_url()
        self.addCleanup(drop_schema, url)
        q = open_queue(url, name)
        self.addCleanup(q.close)
        return q

    def test_a_named_lock_keeps_its_connection_for_the_next_and_replaces_a_broken_one(
            self) -> None:
        q = self.open("a")
        with q.lock("k"):
            (first,) = self.key_lock_holders(q)
        with q.lock("k"):
            self.assertEqual(self.key_lock_holders(q), [first], "the connection was kept")
        q.backend._link.run("test", lambda conn: conn.execute(
            "SELECT pg_terminate_backend(%s)", (first,)))
        wait_until(lambda: not self.session_alive(q, first), what="the session to end")
        with q.lock("k"):  # the kept connection broke: a new one takes the lock
            (second,) = self.key_lock_holders(q)
        self.assertNotEqual(second, first)

    @staticmethod
    def session_alive(queue: Any, pid: int) -> bool:
        return bool(queue.backend._link.run("test", lambda conn: conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]))

    @staticmethod
    def key_lock_holders(*queues: Any) -> list[int]:
        """The sessions (pids) holding the queues' locks of key "k" now (other tests'
        worker processes may hold named locks of their own meanwhile)."""
        from nobroker.postgres.namedlocks import lock_number  # psycopg: only with a server

        # pg_locks shows a 64-bit advisory key as classid (high half), objid (low).
        halves = [divmod(lock_number(q.backend.target.schema, q.name, "k") % 2**64, 2**32)
                  for q in queues]
        return [int(row[0]) for row in queues[0].backend._link.run("test", lambda conn: (
            conn.execute(
                b"SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 "
                b"AND granted AND (classid::bigint, objid::bigint) IN "
                b"(SELECT * FROM unnest(%s::bigint[], %s::bigint[])) ORDER BY pid",
                ([h for h, _ in halves], [lo for _, lo in halves])).fetchall()))]

    def key_locks(self, *queues: Any) -> int:
        return len(self.key_lock_holders(*queues))

    def test_the_server_clock_sets_deadlines_when_no_clock_is_given(self) -> None:
        q = self.open(visibility_timeout=0.3, backoff=_no_backoff())
        before = time.time()
        job = q.enqueue("x", delay=0.2)
        self.assertLess(abs(job.enqueued_at - before), 5.0, "server and test clocks agree")
        self.assertEqual(q.lease(), [])
        self.assertTrue(q.wait(5.0), "wait ends when the delay is over")
        leased = q.lease_one() or q.lease_one()
        assert leased is not None
        self.assertAlmostEqual(leased.lease_expires_at or 0, time.time() + 0.3, delta=0.25)
        self.assertTrue(q.wait(5.0), "wait ends at the lease deadline")
        again = q.lease_one() or q.lease_one()
        assert again is not None
        self.assertEqual((again.id, again.attempts), (job.id, 2))
        self.assertRaises(NotLeasedError, q.ack, leased)
        q.ack(again)

    def test_an_idle_wait_is_woken_by_an_enqueue_from_another_connection(self) -> None:
        consumer, producer = self.open(), self.open()
        woke: list[float] = []
        started = threading.Event()

        def idle() -> None:
            started.set()
            if consumer.wait(30.0):
                woke.append(time.monotonic())

        thread = threading.Thread(target=idle)
        thread.start()
        started.wait()
        time.sleep(0.2)  # let the waiter block on its socket
        sent = time.monotonic()
        producer.enqueue("wake up")
        thread.join(10)
        self.assertTrue(woke, "the waiter never woke")
        self.assertLess(woke[0] - sent, 5.0)
        self.assertEqual(len(consumer.lease()), 1)

    def test_a_lease_after_a_wake_runs_on_the_connection_the_wake_came_on(self) -> None:
        consumer, producer = self.open(), self.open()
        waiter = consumer.backend._wakeups._waiter
        woke = threading.Event()
        thread = threading.Thread(target=lambda: consumer.wait(30.0) and woke.set())
        thread.start()
        wait_until(lambda: waiter.connected, what="the waiter's connection")
        producer.enqueue("wake up")
        thread.join(10)
        self.assertTrue(woke.is_set(), "the waiter never woke")
        self.assertEqual(len(consumer.lease()), 1)
        pid = waiter._conn.info.backend_pid
        last = producer.backend._link.run("test", lambda conn: conn.execute(
            "SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0])
        self.assertIn("leased AS", last, "the lease ran on the operation connection instead")

    def test_a_lease_takes_the_short_statement_unless_a_lease_expired_or_a_job_is_due(
            self) -> None:
        clock = FakeClock(1000.0)
        q = self.open(clock=clock, visibility_timeout=10)
        pid = q.backend._link.run("test", lambda conn: conn.info.backend_pid)
        q.backend._sweeper._last = math.inf  # no sweep after a lease: the lease stays last
        other = self.open()

        def last_lease() -> str:
            return str(other.backend._link.run("test", lambda conn: conn.execute(
                "SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]))

        def lease() -> list[Any]:  # on the operation connection: no wait opened another
            return list(q.lease(5))

        q.enqueue("first")
        self.assertEqual(len(lease()), 1)
        self.assertIn("clear AS", last_lease(), "a plain lease ran the long statement")
        clock.advance(11)  # that lease expired
        q.enqueue("second")
        self.assertEqual([j.payload for j in lease()], ["second"])
        self.assertIn("expired AS", last_lease(), "an expired lease was not taken back")
        self.assertEqual(q.stats().pending, 1, "the expired lease is pending again")
        q.enqueue("later", delay=5)
        clock.advance(600)  # the reclaimed job and the delayed one are due, both waiting
        self.assertEqual(sorted(j.payload for j in lease()), ["first", "later"])
        self.assertIn("expired AS", last_lease())

    def test_compact_deletes_expired_finished_rows_and_says_what_is_left(self) -> None:
        """Compaction on PostgreSQL (sweeping.py): every finished row past its
        retention deleted; no generations, no bytes."""
        clock = FakeClock(1_000_000.0)
        q = self.open(clock=clock, key_retention=60)
        q.enqueue("keyed", job_id="key")
        q.enqueue_many(["a", "b"])
        q.enqueue("live")
        for job in q.lease(3):  # the keyed one, a and b: acked, a and b expire at once
            q.ack(job)
        jobs = f'"{q.backend.target.schema}".jobs'
        self.assertEqual(_rows_of(q, jobs), 4, "the acked rows were swept before compact()")
        result = q.backend.compact()
        self.assertEqual((result.old_generation, result.new_generation, result.bytes_before,
                          result.bytes_after, result.live_jobs, result.remembered_keys),
                         (0, 0, 0, 0, 1, 1))
        self.assertGreaterEqual(result.seconds, 0.0)
        self.assertEqual(_rows_of(q, jobs), 2, "the expired rows are still there")
        self.assertEqual(q.enqueue("again", job_id="key").state, JobState.DONE,
                         "a key still retained was forgotten")
        clock.advance(61)
        self.assertEqual(q.backend.compact().remembered_keys, 0)
        self.assertEqual(_rows_of(q, jobs), 1)
        self.assertEqual(q.backend.compact().live_jobs, 1, "a second compaction changed rows")
        self.assertEqual(_counted(q), _truth(q))

    def test_an_expired_lease_waits_the_backoff_the_policy_gives(self) -> None:
        """The reclaim computes BackoffPolicy.delay in SQL, the policy's numbers
        bound (statements.backoff_params): the same delays, the cap included."""
        from dataclasses import replace

        from nobroker import BackoffPolicy

        for policy in (BackoffPolicy(base=2, factor=3, max_delay=50, jitter=0),
                       BackoffPolicy(base=1, factor=10, max_delay=1e300, jitter=0.5)):
            clock = FakeClock(1_000_000.0)
            q = self.open(f"q{policy.factor:g}", clock=clock, backoff=policy,
                          visibility_timeout=1)  # a queue each: the other's job is waiting
            job = q.enqueue("x", max_attempts=10)
            for attempts in range(1, 6):
                (leased,) = q.lease()
                self.assertEqual(leased.attempts, attempts)
                clock.advance(2)  # the lease expired
                self.assertEqual(q.lease(), [], "a reclaimed job was leased at once")
                waited = q.get(job.id).available_at - clock()
                full = replace(policy, jitter=0).delay(attempts)  # before the jitter
                self.assertLessEqual(waited, full * (1 + 1e-12), f"attempt {attempts}")
                self.assertGreaterEqual(waited, full * (1 - policy.jitter) * (1 - 1e-12))
                clock.advance(waited)

    def test_compact_on_a_read_only_handle_refuses_and_deletes_nothing(self) -> None:
        q = self.open(key_retention=0)
        q.enqueue("x")
        q.ack(q.lease()[0])  # an unkeyed job without a result: expired at once
        reader = self.open(readonly=True)
        with self.assertRaisesRegex(NobrokerError, "read-only"):
            reader.backend.compact()
        self.assertEqual(_rows_of(q, f'"{q.backend.target.schema}".jobs'), 1)

    def test_an_ack_that_waited_for_a_new_watch_notifies_it(self) -> None:
        """A waiter watches a leased job under a share lock on its row (wakeups._watch);
        an ack blocked on that lock runs on once the watch committed, and must see
        it, though the watch is newer than the ack's snapshot."""
        import psycopg

        from nobroker.postgres.schema import channels
        from nobroker.postgres.url import parse

        q = self.open()
        target = parse(self.url)
        s = f'"{target.schema}"'
        job = q.enqueue("waited for", job_id="w")
        leased = q.lease_one()
        assert leased is not None
        listener = psycopg.connect(target.conninfo, autocommit=True)
        self.addCleanup(listener.close)
        listener.execute(f'LISTEN "{channels(target.schema, "q")[1]}"'.encode())
        watcher = psycopg.connect(target.conninfo)
        self.addCleanup(watcher.close)
        watcher.execute(f"SELECT 1 FROM {s}.jobs WHERE queue = 'q' AND id = 'w' "
                        "FOR SHARE".encode())
        watcher.execute(f"INSERT INTO {s}.watches VALUES ('q', 'w')".encode())
        acker = threading.Thread(target=q.ack, args=(leased,))
        acker.start()
        self.addCleanup(acker.join, 30)
        pid = q.backend._link._conn.info.backend_pid
        wait_until(lambda: listener.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone() == ("Lock",), 30, "the ack to wait for the watcher's lock")
        watcher.commit()
        acker.join(30)
        notes = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
        self.assertEqual(notes, [job.id], "the ack did not notify the watch it waited for")

    def test_a_lease_does_not_wait_for_another_thread_s_idle_wait(self) -> None:
        q = self.open()
        waiter = q.backend._wakeups._waiter
        waiting = threading.Thread(target=q.wait, args=(30.0,))
        waiting.start()
        self.addCleanup(waiting.join, 10)
        self.addCleanup(q.enqueue, "end the wait")

        def in_the_wait() -> bool:
            if not waiter.connected or not waiter._lock.acquire(blocking=False):
                return waiter.connected
            waiter._lock.release()  # not blocked yet
            return False

        wait_until(in_the_wait, what="the wait to hold its connection")
        leased: list[object] = []
        leasing = threading.Thread(target=lambda: leased.append(q.lease()))
        leasing.start()
        leasing.join(5)
        self.assertEqual(leased, [[]], "the lease waited for the idle wait to end")
        self.assertTrue(waiting.is_alive(), "the wait ended early")

    def test_a_lease_reads_the_expired_leases_only_not_every_leased_row(self) -> None:
        import psycopg

        q = self.open(visibility_timeout=600)
        q.enqueue_many(["x"] * 300)
        self.assertEqual(len(q.lease(200)), 200)
        backend = q.backend
        params = backend._params(n=1, vt=30.0, **_backoff_of(backend))
        plans: list[Any] = []

        def explain(conn: Any) -> None:
            with conn.transaction():
                conn.execute(b"SET LOCAL enable_seqscan = off")  # the index, even on few rows
                plans.append(conn.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " +
                                          backend._sql.lease, params).fetchone()[0])
                raise psycopg.Rollback  # EXPLAIN ANALYZE leased a job: undo it

        backend._link.run("test", explain)

        def scans(node: dict[str, Any]) -> list[dict[str, Any]]:
            found = [node] if node.get("Index Name") == "jobs_leases" else []
            return found + [s for child in node.get("Plans", []) for s in scans(child)]

        leases = scans(plans[0][0]["Plan"])
        self.assertTrue(leases, "the lease did not look for expired leases in jobs_leases")
        self.assertEqual([scan["Actual Rows"] for scan in leases], [0] * len(leases),
                         "the lease read leases that have not expired")

    def test_a_lease_reads_no_delayed_job_that_is_not_due(self) -> None:
        import psycopg

        q = self.open()
        q.enqueue_many(["later"] * 2000, delay=3600, priority=9)  # first in the ready order
        ready = q.enqueue("now")
        backend = q.backend
        plans: list[Any] = []

        def explain(conn: Any) -> None:
            with conn.transaction():
                plans.append(conn.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " +
                                          backend._sql.lease,
                                          backend._params(n=1, vt=30.0, **_backoff_of(backend))
                                          ).fetchone()[0])
                raise psycopg.Rollback

        backend._link.run("test", explain)

        def rows_read(node: dict[str, Any]) -> int:
            own = node.get("Actual Rows", 0) if node.get("Relation Name") == "jobs" else 0
            own += node.get("Rows Removed by Filter", 0)
            return int(own) + sum(rows_read(child) for child in node.get("Plans", []))

        self.assertLess(rows_read(plans[0][0]["Plan"]), 10,
                        "the lease read the delayed jobs that are not due")
        self.assertEqual([job.id for job in q.lease()], [ready.id])

    def test_a_change_to_a_leased_job_finds_it_by_its_key_not_among_the_leases(self) -> None:
        q = self.open(visibility_timeout=3600)
        q.enqueue_many(["x"] * 2020)
        jobs = iter(q.lease(2020))  # 2,000 leased beside the one each change finds
        nacked = q.nack(next(jobs), delay=0)

        def stale_ack() -> None:
            with self.assertRaises(NotLeasedError):
                q.ack(nacked)

        changes: dict[str, Any] = {
            "ack": lambda: q.ack(next(jobs)),
            "ack with a result": lambda: q.ack(next(jobs), result=[1]),
            "ack_and_lease": lambda: q.ack_and_lease(next(jobs)),
            "ack_many": lambda: q.ack_many([next(jobs), next(jobs)]),
            "nack": lambda: q.nack(next(jobs)),
            "snooze": lambda: q.snooze(next(jobs), 60),
            "extend": lambda: q.extend(next(jobs), 60),
            "notes": lambda: q.backend.write_notes(next(jobs), (0.5, None), {}),
            "stale ack": stale_ack,
            "cancel": lambda: q.cancel(next(jobs).id),
        }
        # parts/acked.sql and its kin found the row through index jobs_leases
        # (by queue, every leased job read) while the planner thought few were leased.
        reads = {name: jobs_read(q, change) for name, change in changes.items()}
        self.assertEqual({name: n for name, n in reads.items() if n > 10}, {}, reads)

    def test_delayed_jobs_wait_apart_and_are_leased_by_priority_once_due(self) -> None:
        clock = FakeClock(1_000_000.0)
        q = self.open(clock=clock)
        low = q.enqueue("low", priority=1, delay=10)
        high = q.enqueue("high", priority=5, delay=20)
        plain = q.enqueue("plain", priority=3)
        states = _states(q)
        self.assertEqual((states[low.id], states[high.id], states[plain.id]), (-1, -1, 0))
        self.assertEqual(q.get(low.id).state, JobState.PENDING)
        self.assertEqual(q.stats().pending, 3)
        self.assertEqual({j.id for j in q.list_jobs(JobState.PENDING)}, {low.id, high.id,
                                                                         plain.id})
        clock.advance(30)  # both due: the best of ready and due, in priority order
        self.assertEqual([j.id for j in q.lease()], [high.id])
        self.assertEqual(_states(q)[low.id], 0, "a due job this lease passed is not ready")
        self.assertEqual([j.id for j in q.lease(2)], [plain.id, low.id])
        self.assertEqual(_counted(q), _truth(q))

    def test_a_backlog_of_due_jobs_is_made_ready_a_batch_per_lease(self) -> None:
        from nobroker.postgres.statements import Statements

        clock = FakeClock(1_000_000.0)
        q = self.open(clock=clock)
        _DUE_BATCH = 100  # the LIMIT of `due` in sql/parts/candidates.sql
        self.assertIn(b"ORDER BY j.available_at LIMIT 100 ",
                      Statements.load(q.backend.target.schema).lease)
        jobs = [q.enqueue(i, priority=i % 7, delay=10 + i) for i in range(_DUE_BATCH + 50)]
        clock.advance(10 + len(jobs))  # every one due
        first = q.lease()[0]
        batch = jobs[:_DUE_BATCH]  # the first due, by due time
        self.assertEqual(first.priority, max(j.priority for j in batch))
        states = _states(q)
        self.assertEqual(sorted(states[j.id] for j in batch if j.id != first.id),
                         [0] * (_DUE_BATCH - 1), "the batch's other jobs were not made ready")
        self.assertEqual({states[j.id] for j in jobs[_DUE_BATCH:]}, {-1})
        self.assertEqual(_counted(q), _truth(q))
        rest = q.lease(len(jobs))
        self.assertEqual(len(rest), len(jobs) - 1)
        self.assertEqual(sorted(j.id for j in [first, *rest]), sorted(j.id for j in jobs))
        self.assertEqual(_counted(q), _truth(q))

    def test_a_retry_with_a_delay_waits_and_a_waiting_job_can_be_cancelled(self) -> None:
        clock = FakeClock(1_000_000.0)
        q = self.open(clock=clock)
        job = q.enqueue("x", max_attempts=3)
        retried = q.nack(q.lease()[0], error="boom", delay=5)
        self.assertEqual(_states(q)[job.id], -1)
        self.assertEqual(q.lease(), [])
        clock.advance(6)
        again = q.lease()[0]
        self.assertEqual((again.id, again.attempts), (retried.id, 2))
        q.nack(again, error="boom", delay=0)  # no delay: ready at once
        self.assertEqual(_states(q)[job.id], 0)
        q.nack(q.lease()[0], error="boom", delay=60)  # the last attempt: dead
        self.assertEqual(q.get(job.id).state, JobState.DEAD)
        later = q.enqueue("later", delay=60)
        self.assertTrue(q.cancel(later.id))
        self.assertEqual(_counted(q), _truth(q))

    def test_a_schema_at_version_1_is_migrated_with_its_delayed_jobs_made_waiting(self
                                                                                  ) -> None:
        import psycopg

        from nobroker.postgres import schema
        from nobroker.postgres.url import parse

        target = parse(self.url)
        name = target.schema
        s = schema.quoted(name)
        with psycopg.connect(target.conninfo, autocommit=True) as conn:
            for step in schema.migrate_sql(name, 0, 1):
                conn.execute(step.encode())
            conn.execute(f"INSERT INTO {s}.schema_version VALUES (1)".encode())
            conn.execute(f"""INSERT INTO {s}.jobs (queue, id, seq, state, priority,
                                 available_at, enqueued_at, max_attempts, payload)
                             VALUES ('q', 'due', 1, 0, 0, 1.0, 1.0, 3, '"a"'),
                                    ('q', 'later', 2, 0, 9, 4e9, 1.0, 3, '"b"')""".encode())
        q = self.open()
        self.assertEqual(_states(q), {"due": 0, "later": -1})
        self.assertEqual(q.stats().pending, 2)
        self.assertEqual([j.id for j in q.lease(2)], ["due"])
        self.assertEqual(_counted(q), _truth(q))

    def test_a_plain_ack_forgets_an_unkeyed_job_at_once_and_keeps_a_key(self) -> None:
        q = self.open()
        plain, keyed = q.enqueue("plain"), q.enqueue("keyed", job_id="k")
        for job in q.lease(2):
            q.ack(job)
        self.assertRaises(JobNotFoundError, q.get, plain.id)
        self.assertEqual(q.get(keyed.id).state, JobState.DONE)
        self.assertEqual(q.enqueue("again", job_id="k").state, JobState.DONE)

    def test_only_the_finish_of_a_watched_job_is_notified(self) -> None:
        import psycopg

        from nobroker.postgres.schema import channels
        from nobroker.postgres.url import parse

        q = self.open()
        target = parse(self.url)
        unwatched, watched = q.enqueue("nobody waits"), q.enqueue("waited for", job_id="w")
        listener = psycopg.connect(target.conninfo, autocommit=True)
        self.addCleanup(listener.close)
        listener.execute(f'LISTEN "{channels(target.schema, "q")[1]}"'.encode())
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(
            q.backend.wait_finished(watched.id, 30.0)))  # type: ignore[attr-defined]
        waiter.start()
        watches = f'SELECT count(*) FROM "{target.schema}".watches'.encode()
        wait_until(lambda: listener.execute(watches).fetchone() == (1,), 30,
                 "the waiter to watch its job")
        for job in q.lease(2):  # both acked; only one is waited for
            q.ack(job)
        notes = [n.payload for n in listener.notifies(timeout=30, stop_after=1)]
        waiter.join(30)
        self.assertEqual(notes, [watched.id], "the first NOTIFY is the watched job's")
        self.assertEqual([j.state for j in got], [JobState.DONE])
        self.assertEqual(listener.execute(watches).fetchone(), (0,), "the watch is gone")
        self.assertRaises(JobNotFoundError, q.get, unwatched.id)

    def test_threads_of_one_handle_wait_for_results_side_by_side(self) -> None:
        q, other = self.open(), self.open()
        first, second = q.enqueue("first", job_id="a"), q.enqueue("second", job_id="b")
        got: dict[str, Any] = {}
        waiters = {job.id: threading.Thread(target=lambda i=job.id: got.update(
            {i: q.wait_finished(i, 60.0)})) for job in (first, second)}
        for waiter in waiters.values():
            waiter.start()
        schema = q.backend.target.schema
        wait_until(lambda: _rows_of(other, f'"{schema}".watches') == 2, 30,
                 "both waiters to watch their jobs")
        leased = {job.id: job for job in other.lease(2)}
        other.ack(leased[second.id])  # the second finishes while the first still runs
        waiters[second.id].join(30)
        self.assertFalse(waiters[second.id].is_alive(),
                         "the second waiter waited behind the first")
        self.assertEqual(got[second.id].state, JobState.DONE)
        self.assertTrue(waiters[first.id].is_alive())
        other.ack(leased[first.id])
        waiters[first.id].join(30)
        self.assertEqual(got[first.id].state, JobState.DONE)

    def test_the_watch_of_a_waiter_that_timed_out_is_swept_once_its_job_finished(self
                                                                                 ) -> None:
        q, worker = self.open(), self.open()
        job = q.enqueue("slow")
        self.assertIsNone(q.wait_finished(job.id, 0.05))
        schema = q.backend.target.schema
        self.assertEqual(_rows_of(worker, f'"{schema}".watches'), 1, "a live job's watch stays")
        worker.ack(worker.lease_one())
        self.assertEqual(_rows_of(worker, f'"{schema}".watches'), 1)
        sweeper = self.open()  # a handle's first lease sweeps (then once a second)
        self.assertEqual(sweeper.lease(), [])
        self.assertEqual(_rows_of(worker, f'"{schema}".watches'), 0, "the watch was swept")

    def test_a_waiter_learns_that_its_pending_job_was_purged(self) -> None:
        q, other = self.open(), self.open()
        job = q.enqueue("doomed")
        errors: list[Exception] = []

        def wait() -> None:
            try:
                q.backend.wait_finished(job.id, 30.0)  # type: ignore[attr-defined]
            except JobNotFoundError as exc:
                errors.append(exc)

        waiter = threading.Thread(target=wait)
        waiter.start()
        schema = q.backend.target.schema
        wait_until(lambda: _rows_of(other, f'"{schema}".watches') == 1, 30,
                 "the waiter to watch its job")
        self.assertEqual(other.purge(), 1)
        waiter.join(30)
        self.assertFalse(waiter.is_alive(), "the waiter was not woken by the purge")
        self.assertEqual(len(errors), 1)

    def test_queues_in_one_schema_are_separate_and_schemas_are_separate(self) -> None:
        a, b = self.open("a"), self.open("b")
        a.enqueue("for a")
        self.assertEqual(b.lease(), [])
        self.assertEqual((a.stats().pending, b.stats().pending), (1, 0))
        other = fresh_schema_url()
        self.addCleanup(drop_schema, other)
        elsewhere = open_queue(other, "a")
        self.addCleanup(elsewhere.close)
        self.assertEqual(elsewhere.stats().pending, 0)

    def test_the_password_appears_in_no_error_and_no_repr(self) -> None:
        from nobroker.postgres.url import parse

        secret = parse(URL).secrets[0]
        q = self.open()
        self.assertNotIn(secret, repr(q))
        self.assertNotIn(secret, repr(q.backend))
        wrong = URL.replace(secret, secret + "-wrong")
        with self.assertRaises(ConnectionLostError) as caught:
            open_queue(wrong, "q")
        self.assertNotIn(secret, str(caught.exception))
        self.assertIn("***", str(caught.exception))
        port = URL.rsplit(":", 1)[1].split("/")[0]
        closed = URL.replace(f":{port}/", ":1/")
        with self.assertRaises(ConnectionLostError) as refused:
            open_queue(closed, "q")
        self.assertNotIn(secret, str(refused.exception))

    def test_a_bad_schema_name_is_refused_in_one_line(self) -> None:
        with self.assertRaises(ValueError) as caught:
            open_queue(URL + "?schema=Robert'); DROP", "q")
        self.assertIn("schema", str(caught.exception))

    def test_a_schema_newer_than_this_nobroker_is_refused(self) -> None:
        q = self.open()
        schema = q.backend.target.schema
        q.backend._link.run("test", lambda conn: conn.execute(
            f'UPDATE "{schema}".schema_version SET version = 999'.encode()))
        with self.assertRaises(NobrokerError) as caught:
            open_queue(self.url, "other")
        self.assertIn("newer than this nobroker", str(caught.exception))

    def test_enqueue_many_of_ten_thousand_is_one_transaction_in_order(self) -> None:
        q = self.open()
        jobs = q.enqueue_many(list(range(10_000)))
        self.assertEqual(q.stats().pending, 10_000)
        self.assertEqual([j.payload for j in q.list_jobs(limit=5)], [0, 1, 2, 3, 4])
        self.assertEqual(len({j.id for j in jobs}), 10_000)

    def test_a_generated_id_taken_by_a_key_is_skipped(self) -> None:
        q = self.open()
        first = q.enqueue("a")
        following = f"{int(first.id, 16) + 1:016x}"
        q.enqueue("keyed", job_id=following)
        q.enqueue("keyed2", job_id=f"{int(first.id, 16) + 3:016x}")
        jobs = [q.enqueue("b"), *q.enqueue_many(["c", "d"])]
        self.assertEqual(len({j.id for j in jobs} | {following, first.id}), 5)
        self.assertEqual(q.stats().pending, 6)


@needs_postgres
@needs_job_control
class PostgresJobControlTest(_Schema):
    """Results, cancel, pause and delete_dead across connections."""

    def test_a_result_waiter_on_another_connection_gets_the_result_of_the_ack(self) -> None:
        worker, waiter = self.open(), self.open()
        job = worker.enqueue({"n": 2})
        got: list[Any] = []
        thread = threading.Thread(target=lambda: got.append(waiter.result(job.id, 30.0)))
        thread.start()
        leased = worker.lease_one()
        assert leased is not None
        worker.ack(leased, result={"square": 4})
        thread.join(10)
        self.assertEqual(got, [{"square": 4}])
        self.assertEqual(waiter.get(job.id).state, JobState.DONE)
        self.assertEqual(waiter.result(job.id, 0), {"square": 4}, "a finished job answers")
        self.assertRaises(TimeoutError, waiter.result, worker.enqueue("later").id, 0.05)
        self.assertRaises(JobNotFoundError, waiter.result, "never-enqueued", 0.05)

    def test_a_result_is_kept_for_its_ttl_then_forgotten(self) -> None:
        q, clock = self.clocked()
        q.enqueue("x", job_id="k1")
        q.ack(q.lease_one(), result=[1, 2], result_ttl=100)
        clock.advance(99)
        self.assertEqual(q.get("k1").result, [1, 2])
        clock.advance(1)
        self.assertRaises(JobNotFoundError, q.get, "k1")

    def clocked(self, **options: Any) -> tuple[Any, FakeClock]:
        clock = FakeClock()
        return self.open(clock=clock, key_retention=0, **options), clock

    def test_cancel_removes_a_pending_job_and_revokes_a_leased_one(self) -> None:
        q, _ = self.clocked()
        pending, leased_job = q.enqueue("p"), q.enqueue("l")
        self.assertTrue(q.cancel(pending.id))
        (leased,) = q.lease(5)
        self.assertEqual(leased.id, leased_job.id)
        self.assertTrue(q.cancel(leased.id))
        self.assertRaises(NotLeasedError, q.ack, leased)
        self.assertRaises(NotLeasedError, q.extend, leased, 5)
        self.assertEqual(q.get(leased.id).state, JobState.CANCELLED)
        self.assertFalse(q.cancel(leased.id), "cancelling a finished job")
        self.assertFalse(q.cancel("unknown"))
        stats = q.stats()
        self.assertEqual((stats.pending, stats.leased, stats.total), (0, 0, 0))

    def test_a_paused_queue_leases_nothing_until_resumed_and_enqueue_still_works(self
                                                                                ) -> None:
        q, other = self.open(), self.open()
        q.pause()
        other.enqueue("x")
        self.assertTrue(other.stats().paused)
        self.assertEqual(other.lease(), [])
        self.assertFalse(other.wait(0.2), "a paused queue has nothing to wake for")
        q.resume()
        self.assertFalse(other.stats().paused)
        self.assertEqual(len(other.lease()), 1)

    def test_delete_dead_of_a_job_that_is_not_dead_raises_job_not_found(self) -> None:
        q = self.open()
        pending, leased = q.enqueue("p"), q.enqueue("l")
        q.lease_one()
        for job_id in (pending.id, leased.id, "unknown"):
            self.assertRaises(JobNotFoundError, q.delete_dead, job_id)
        self.assertEqual((q.stats().pending, q.stats().leased), (1, 1))

    def test_a_cancelled_job_s_key_may_be_enqueued_again(self) -> None:
        q = self.open()
        q.enqueue("first", job_id="order-1")
        self.assertTrue(q.cancel("order-1"))
        again = q.enqueue("second", job_id="order-1")
        self.assertEqual((again.state, again.payload), (JobState.PENDING, "second"))

    def test_a_result_waiter_is_woken_by_a_cancel_and_by_a_dead_letter(self) -> None:
        q, other = self.open(max_attempts=1), self.open(max_attempts=1)
        cancelled, dead = q.enqueue("c"), q.enqueue("d")
        got: list[Any] = []
        waiters = [threading.Thread(target=lambda i=i: got.append(q.wait_finished(i, 30.0)))
                   for i in (cancelled.id, dead.id)]
        leased = other.lease(2)
        for waiter in waiters:
            waiter.start()
        schema = q.backend.target.schema
        wait_until(lambda: _rows_of(other, f'"{schema}".watches') >= 1, 30, "a watch")
        other.cancel(cancelled.id)
        other.nack(next(j for j in leased if j.id == dead.id), error="boom")
        for waiter in waiters:
            waiter.join(30)
        self.assertEqual(sorted(str(j.state) for j in got), ["cancelled", "dead"])

    def test_delete_dead_removes_dead_jobs_only(self) -> None:
        q, _ = self.clocked(max_attempts=1)
        dead = q.enqueue_many(["a", "b"])
        for job in q.lease(2):
            q.nack(job, error="boom")
        keep = q.enqueue("c")
        self.assertEqual(q.delete_dead(dead[0].id), 1)
        self.assertRaises(JobNotFoundError, q.delete_dead, dead[0].id)
        self.assertEqual(q.delete_dead(), 1)
        self.assertEqual([j.id for j in q.list_jobs()], [keep.id])
        self.assertEqual(q.stats().dead, 0)


@needs_postgres
class PostgresMigrateTest(_Schema):
    """`nobroker db migrate` and `nobroker migrate --from DIR --to URL` (and back)."""

    def test_db_migrate_creates_the_schema_once_and_reports_the_version(self) -> None:
        from nobroker.cli import main  # noqa: I001
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(main(["db", "migrate", "--url", self.url]), 0)
            self.assertEqual(main(["db", "migrate", "--url", self.url]), 0)
        first, second = out.getvalue().splitlines()
        from nobroker.postgres import schema

        self.assertIn(f"from version 0 to {schema.LATEST}", first)
        self.assertIn(f"at version {schema.LATEST}", second)
        self.assertNotIn(URL.split(":")[2].split("@")[0], out.getvalue(), "password shown")

    def test_db_recount_counts_rows_changed_by_hand_and_keeps_done(self) -> None:
        from nobroker.cli import main  # noqa: I001
        import contextlib
        import io

        q, other = self.open(), self.open("other")
        q.enqueue_many(["a", "b", "c", "d"])
        first, second = q.lease(2)
        q.ack(first, result="kept")
        other.enqueue("x")
        s = f'"{q.backend.target.schema}"'
        q.backend._link.run("test", lambda conn: conn.execute(  # by hand: nobroker never knows
            f"DELETE FROM {s}.jobs WHERE queue = 'q' AND state <= 1 AND id <> %s".encode(),
            (second.id,)))
        self.assertNotEqual(_counted(q), _truth(q), "the DELETE by hand was counted")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(main(["db", "recount", "--url", self.url]), 0)
            self.assertEqual(main(["db", "recount", "--url", self.url]), 0)
        self.assertEqual(_counted(q), _truth(q))
        self.assertEqual((q.stats().pending, q.stats().leased, q.stats().done), (0, 1, 1))
        self.assertEqual(other.stats().pending, 1)
        text = out.getvalue()
        self.assertIn("q: pending + leased 1 (counted 3), dead 0, kept 1", text)
        self.assertIn("other: pending + leased 1, dead 0, kept 0 (already right)", text)
        self.assertEqual(text.count("already right"), 3, text)  # the second run: both right
        q.ack(second)  # counting goes on from the new rows
        self.assertEqual((_counted(q), q.stats().done), (_truth(q), 2))

    def test_migrate_copies_pending_leased_and_dead_jobs_once_with_their_history(self
                                                                                ) -> None:
        import tempfile

        from nobroker import Queue
        from nobroker.transfer import transfer

        directory = tempfile.mkdtemp()
        with Queue(directory, "q", max_attempts=2) as source:
            source.enqueue({"n": 1}, priority=5, job_id="order-1")
            failed = source.enqueue({"n": 2})
            source.enqueue({"n": 3})
            leased = source.lease(2)  # order-1 (priority 5), then failed
            source.nack(leased[1], error="boom", delay=0)
            again = source.lease(5)
            dead = next(j for j in again if j.id == failed.id)
            source.nack(dead, error="boom twice")
            expected = {j.id: j for j in source.list_jobs()}
        first = transfer(directory, self.url, "q")
        self.assertEqual(first.copied, {"pending": 2, "dead": 1})
        second = transfer(directory, self.url, "q")
        self.assertEqual((second.copied, second.skipped), ({}, 3))
        q = self.open("q")
        for job_id, job in expected.items():
            got = q.get(job_id)
            wanted_state = JobState.DEAD if job.state is JobState.DEAD else JobState.PENDING
            self.assertEqual((got.payload, got.priority, got.attempts, got.last_error,
                              got.state), (job.payload, job.priority, job.attempts,
                                           job.last_error, wanted_state))
        self.assertEqual((q.stats().pending, q.stats().dead), (2, 1))
        self.assertEqual(_counted(q), _truth(q))
        fresh = q.enqueue("new")
        self.assertNotIn(fresh.id, expected, "a copied generated id is not generated again")
        back = tempfile.mkdtemp()
        there = transfer(self.url, back, "q")
        self.assertEqual((there.copied, there.not_copied), ({"pending": 3}, {"dead": 1}))
        self.assertEqual(transfer(self.url, back, "q").skipped, 3)

    def test_migrate_carries_a_half_done_chord_with_its_modes_both_ways(self) -> None:
        import tempfile

        from harness.copies import finish_chord, half_done_chord_in

        from nobroker import Queue
        from nobroker.transfer import transfer

        directory = tempfile.mkdtemp()
        jobs = half_done_chord_in(directory, "q")
        self.assertEqual(transfer(directory, self.url, "q").copied,
                         {"pending": 2, "waiting": 2})
        memory = f"memory://{self.id()}"
        with Queue(memory, "q") as there:  # from PostgreSQL (no export: list_jobs)
            self.assertEqual(transfer(self.url, memory, "q").copied,
                             {"pending": 2, "waiting": 2})
            for q in (self.open("q"), there):
                finish_chord(self, q, jobs)

    def test_migrate_carries_revivable_cancelled_dependents_that_a_requeue_revives(self
                                                                                  ) -> None:
        import tempfile

        from harness.copies import copy_and_revive

        q = self.open("q")
        copy_and_revive(self, tempfile.mkdtemp(), q, self.url)
        self.assertEqual((q.stats().total, _counted(q)), (0, _truth(q)))

# A released migration ran on databases as written: a change is a new file.
RELEASED_MIGRATIONS = {
    "0001_tables": "d39c43d9ad3d6bc43d71d1292512b388df123ae292a205d9fea18856d0f91989",
    "0002_waiting_state": "61b2d19d73cde847279ca7cc26acb54542ab613cdd623827e2ec8117b51d1918",
    "0003_counting_in_statements":
        "d322762572b7c3bdb20b8d8a8582c4ef6a50ca50f276e257ca6d8aa851f8af7b",
    "0004_dependencies": "f6f8a309d26a63c165f18a979b3a584f1266e1e628e1937d72fc4ac50372be6f",
    "0005_job_notes": "9362544a05fc4702365d4ee9107261b5fb8263cf93fd7c0ef4796fae288dcdba",
    "0006_limit_keys": "05b13c6b1b5ce8946d13530484796c922e036579902c8ac74d7496af25f2b704",
    "0007_revivals": "de63c016497ffa327eb993080f87ca806e3a2cf6db1424568f89abb96bd0b8ee",
    "0008_limits_in_one_call":
        "1f1b7e8f186f24b96162387441c9bb225d302363de882921ea4e356dcc9b92ed",
    "0009_fewer_limited_statements":
        "ad9d9075607e2278b77474f546854fc7c1ccbb8420f06e3fd4670e513e333830",
    "0010_linear_limited_walk":
        "9f24cbc4b23cfee73371371dc1eb325479b91f60aa7717d2fb514feeb1d08540",
    "0011_result_until": "e4b670f8f6aafd4a81c12323e9a7e8831b7c9aaf836db9c40643e658d9b672a6",
    "0012_lean_limited_lease":
        "cafa6c62f4654ea2477d0d138dc3ff53b6b50d99c7aa1fa220cd8005d27d3923",
    "0013_lean_rated_lease":
        "7071aecdd20ce5ac4e3cc59f1bccaaa0f4b38f7f3734a2084d9db9b465864c3c",
    "0014_parked_keys": "72f4e3f3e54c0a8905d20b06edf495f83ed155b414d551f98696bdaf560b4ce4",
    "0015_fewer_pairs_read":
        "101ddabc65fb937c16c065c5ef63dd9e70700815317fa60390a24e5a8e1a6270",
}


@unittest.skipUnless(HAVE_DRIVER, "PostgreSQL SQL-file tests skipped: psycopg is not "
                     "installed (nobroker.postgres imports it; run `python make.py test-postgres`)")
class PostgresSqlFilesTest(unittest.TestCase):
    """The SQL in sql/ (queries, parts, migrations): loaded, substituted, shipped.
    No server needed."""

    def test_every_query_is_short_enough_for_psycopg_to_cache(self) -> None:
        from nobroker.postgres import sql
        from nobroker.postgres.statements import Statements

        # A schema name of 20 characters at most (the default is 8, the tests' 14); a
        # longer one makes ack_and_lease longer than psycopg caches: slower, not wrong.
        longest = "s" * 20
        lengths = {name: len(sql.query(name, longest)) for name in sql.query_names()}
        self.assertGreater(len(lengths), 30)
        self.assertEqual({name: n for name, n in lengths.items() if n > sql.MAX_STATEMENT}, {},
                         "psycopg would convert these anew on every call")
        Statements.load(longest)  # every statement the backend names has its file

    def test_only_the_known_placeholders_are_substituted(self) -> None:
        from nobroker.postgres import sql

        text = "SELECT {job_columns} -- {not_a_placeholder}\n  FROM {schema}.jobs AS j\n" \
               "WHERE j.id ~ '^[0-9a-f]{12}$'"
        rendered = sql.render(text, "my_set")
        self.assertTrue(rendered.startswith(b"SELECT j.id, j.seq,"), rendered)
        self.assertTrue(rendered.endswith(
            b"""FROM "my_set".jobs AS j WHERE j.id ~ '^[0-9a-f]{12}$'"""), rendered)
        self.assertNotIn(b"--", rendered)
        for planted in ("SELECT {schemas}", "SELECT 1 FROM {schema}.x WHERE {nope}",
                        "SELECT {job_column}"):
            with self.subTest(planted=planted), self.assertRaisesRegex(ValueError,
                                                                       "unknown placeholder"):
                sql.render(planted, "my_set", "planted")

    def test_a_schema_name_that_could_leave_its_quotes_is_refused(self) -> None:
        from nobroker.postgres import sql

        self.assertEqual(sql.quoted("queue_set_2"), '"queue_set_2"')
        for bad in ('a"b', "A", "", "a;b", "a b", "s" * 64, "x'y"):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                sql.query("get", bad)

    def test_a_released_migration_is_never_edited(self) -> None:
        import hashlib
        from importlib import resources

        from nobroker.postgres import schema

        folder = resources.files("nobroker.postgres.sql").joinpath("migrations")
        found = {name: hashlib.sha256(folder.joinpath(f"{name}.sql").read_bytes()).hexdigest()
                 for name in schema.MIGRATIONS}
        for name, digest in RELEASED_MIGRATIONS.items():
            self.assertEqual(found.get(name), digest, f"migrations/{name}.sql was edited")
        self.assertEqual(schema.LATEST, len(schema.MIGRATIONS))
        self.assertIn('nb_channel(kind text', schema.migrate_sql("a_set", 0, 1)[1])

    def test_the_pyz_reads_every_query_and_migration_from_inside_the_archive(self) -> None:
        import subprocess
        import sys
        import tempfile
        from pathlib import Path

        from nobroker.postgres import schema, sql

        repo = Path(__file__).resolve().parents[2]
        with tempfile.TemporaryDirectory() as tmp:
            pyz = Path(tmp) / "nobroker.pyz"
            built = subprocess.run([sys.executable, "-m", "tools.build.pyz", "--output",
                                    str(pyz)], cwd=repo, capture_output=True, text=True,
                                   timeout=120, check=False)
            self.assertEqual(built.returncode, 0, built.stderr)
            script = (
                "import sys\n"
                f"sys.path.insert(0, {str(pyz)!r})\n"
                "from nobroker.postgres import schema, sql\n"
                f"assert sql.__file__.startswith({str(pyz)!r}), sql.__file__\n"
                "queries = {n: sql.query(n, 's') for n in sql.query_names()}\n"
                "steps = schema.migrate_sql('s', 0)\n"
                "print(len(queries), len(steps), sum(map(len, queries.values())))\n")
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            ran = subprocess.run([sys.executable, "-c", script], capture_output=True,
                                 text=True, timeout=120, check=False, cwd=tmp, env=env)
        self.assertEqual(ran.returncode, 0, ran.stderr)
        here = {n: sql.query(n, "s") for n in sql.query_names()}
        self.assertEqual(ran.stdout.split(),
                         [str(len(here)), str(len(schema.migrate_sql("s", 0))),
                          str(sum(map(len, here.values())))])


def _backoff_of(backend: Any) -> dict[str, Any]:
    """The backoff values a leasing statement binds (it reclaims expired leases)."""
    from nobroker.postgres.statements import backoff_params

    return backoff_params(backend.settings.backoff)


def _no_backoff() -> Any:
    from nobroker import BackoffPolicy

    return BackoffPolicy(base=0, jitter=0)


if __name__ == "__main__":
    unittest.main()
