"""The application's transaction on PostgreSQL: jobs that commit with the caller's data,
and `atomic=True` tasks whose writes commit with their ack (nobroker.transactions).

Each job's effect is a row in an `effects` table of the test's schema, written by
the task on `current_job().connection`; the row count per job and the job's state
must agree at every moment: one row iff the job is done. The kill -9 tests check
that with real worker processes killed while a task's transaction is open, and
right after its commit.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import tempfile
import threading
import time
import unittest
from pathlib import Path
from typing import Any

from harness.postgres import drop_schema, fresh_schema_url, needs_postgres, open_queue
from harness.support import TempDirTestCase, spawn_python, wait_until

from nobroker import JobNotFoundError, JobState, NobrokerError, NotLeasedError, Queue, Worker
from nobroker.tasks import current_job

TESTS = str(Path(__file__).resolve().parent.parent)

# A worker process running the atomic task `effect`: it writes the job's row and,
# with argument "hold", says "wrote ID" and sleeps before its commit; with "after",
# says "committed ID" once the ack committed (the "succeeded" hook) and sleeps.
WORKER = """
import sys, time
sys.path[:0] = [sys.argv[1]]
from harness.postgres import open_queue
from nobroker import Worker
from nobroker.tasks import current_job
url, schema, mode, pause = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
q = open_queue(url, "work", visibility_timeout=1.0)

@q.task(name="effect", atomic=True)
def effect():
    job = current_job()
    job.connection.execute(f'INSERT INTO "{schema}".effects VALUES (%s)', (job.id,))
    if mode == "hold":
        print("wrote", job.id, flush=True)
        time.sleep(60)
    time.sleep(pause)
    return job.id

if mode == "after":
    q.on("succeeded", lambda job: (print("committed", job.id, flush=True), time.sleep(60)))
print("ready", flush=True)
Worker(q, concurrency=1, poll_interval=0.05, handle_signals=False).run()
"""


class RefusedWithoutTransactionsTest(unittest.TestCase):
    """Files and memory:// cannot join a database transaction: each use says so."""

    def test_connection_transaction_and_atomic_are_refused_naming_the_capability(self
                                                                                ) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            for location in (tmp, "memory://refused"):
                with Queue(location) as q:
                    self.assertFalse(q.capabilities.transactions)
                    with self.assertRaisesRegex(NobrokerError, "capabilities.transactions"):
                        q.enqueue(1, connection=object())
                    with self.assertRaisesRegex(NobrokerError, "capabilities.transactions"):
                        with q.transaction(object()):
                            pass
                    with self.assertRaisesRegex(NobrokerError, r"atomic=True.*transactions"):
                        q.task(lambda: None, name="t", atomic=True)
                    self.assertEqual(q.stats().total, 0)


@needs_postgres
class TransactionTestCase(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        import psycopg

        from nobroker.postgres.url import parse

        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)
        self.queue = open_queue(self.url, "work")
        self.addCleanup(self.queue.close)
        target = parse(self.url)
        self.schema = target.schema
        self.conn = psycopg.connect(target.conninfo)  # not autocommit: the app's
        self.addCleanup(self.conn.close)
        with psycopg.connect(target.conninfo, autocommit=True) as setup:
            setup.execute(f'CREATE TABLE "{self.schema}".effects (job_id text)'.encode())

    def effects(self) -> dict[str, int]:
        import psycopg

        from nobroker.postgres.url import parse

        with psycopg.connect(parse(self.url).conninfo, autocommit=True) as conn:
            rows = conn.execute(f'SELECT job_id, count(*) FROM "{self.schema}".effects '
                                f'GROUP BY job_id'.encode()).fetchall()
        return {str(job_id): int(n) for job_id, n in rows}

    def waiter(self, timeout: float) -> tuple[threading.Thread, list[bool]]:
        """Another handle blocked in wait(): what it returned, once it did."""
        other = open_queue(self.url, "work")
        self.addCleanup(other.close)
        woke: list[bool] = []
        thread = threading.Thread(target=lambda: woke.append(other.wait(timeout)))
        thread.start()
        self.addCleanup(thread.join)
        time.sleep(0.3)  # let it block
        return thread, woke


class EnqueueInTransactionTest(TransactionTestCase):
    def test_rolled_back_enqueue_leaves_no_job_and_wakes_nobody(self) -> None:
        thread, woke = self.waiter(2.0)
        job = self.queue.enqueue({"n": 1}, connection=self.conn)
        self.assertEqual(self.queue.stats().total, 0, "visible before the commit")
        self.conn.rollback()
        thread.join()
        self.assertEqual(woke, [False])
        with self.assertRaises(JobNotFoundError):
            self.queue.get(job.id)
        self.assertEqual(self.queue.stats().total, 0)
        self.assertEqual(self.queue.lease(), [])

    def test_committed_enqueue_is_a_job_woken_at_the_commit_not_before(self) -> None:
        thread, woke = self.waiter(10.0)
        job = self.queue.enqueue({"n": 2}, connection=self.conn, job_id="order-2")
        self.assertEqual(self.queue.stats().total, 0, "visible before the commit")
        time.sleep(0.3)
        self.assertEqual(woke, [], "a waiter woke before the commit")
        self.conn.commit()
        thread.join(5)
        self.assertEqual(woke, [True])
        self.assertEqual(self.queue.get(job.id).state, JobState.PENDING)
        self.assertEqual(self.queue.stats().pending, 1)
        [leased] = self.queue.lease()
        self.assertEqual((leased.id, leased.payload), ("order-2", {"n": 2}))

    def test_tasks_delayed_in_a_transaction_block_commit_with_it(self) -> None:
        @self.queue.task(name="send")
        def send(to: str) -> None: ...

        with self.queue.transaction(self.conn):
            dropped = send.delay("a")
        self.conn.rollback()
        with self.queue.transaction(self.conn):
            kept = send.delay("b")
            self.queue.enqueue("plain")
            with self.assertRaisesRegex(NobrokerError, "enqueue_many cannot write in"):
                self.queue.enqueue_many([1, 2])  # not silently outside the transaction
        outside = send.delay("c")  # after the block: the queue's own connection, at once
        self.assertEqual(self.queue.stats().total, 1)
        self.conn.commit()
        self.assertEqual(self.queue.stats().total, 3)
        with self.assertRaises(JobNotFoundError):
            self.queue.get(dropped.id)
        self.assertEqual(self.queue.get(kept.id).payload["args"], ["b"])
        self.assertEqual(self.queue.get(outside.id).payload["args"], ["c"])

    def test_the_callers_commit_is_the_callers_own_data_too(self) -> None:
        self.conn.execute(f'INSERT INTO "{self.schema}".effects VALUES (%s)'.encode(), ("x",))
        self.queue.enqueue("with x", connection=self.conn)
        self.conn.rollback()
        self.assertEqual((self.effects(), self.queue.stats().total), ({}, 0))
        self.conn.execute(f'INSERT INTO "{self.schema}".effects VALUES (%s)'.encode(), ("x",))
        self.queue.enqueue("with x", connection=self.conn)
        self.conn.commit()
        self.assertEqual((self.effects(), self.queue.stats().total), ({"x": 1}, 1))

    def test_an_autocommit_connection_writes_the_job_at_once(self) -> None:
        import psycopg

        from nobroker.postgres.url import parse

        with psycopg.connect(parse(self.url).conninfo, autocommit=True) as conn:
            job = self.queue.enqueue(1, connection=conn)
        self.assertEqual(self.queue.get(job.id).state, JobState.PENDING)

    def test_the_enqueued_hook_never_fires_for_a_job_that_is_not_committed(self) -> None:
        import psycopg

        from nobroker.postgres.url import parse

        seen: list[str] = []
        self.queue.on("enqueued", lambda job: seen.append(job.id))
        self.queue.enqueue("rolled back", connection=self.conn)
        with self.queue.transaction(self.conn):
            self.queue.enqueue("rolled back too")
        self.conn.rollback()
        self.assertEqual(seen, [])
        # psycopg says nothing of the commit: a job in the caller's open transaction
        # is not announced at all (docs/POSTGRES.md), even once it commits.
        self.queue.enqueue("committed later", connection=self.conn)
        self.conn.commit()
        self.assertEqual(seen, [])
        with psycopg.connect(parse(self.url).conninfo, autocommit=True) as conn:
            mine = self.queue.enqueue("in a transaction of its own", connection=conn)
            with self.queue.transaction(conn):
                block = self.queue.enqueue("in the block's, of its own")
        own = self.queue.enqueue("on the queue's connection")
        self.assertEqual(seen, [mine.id, block.id, own.id])

    def test_a_connection_that_is_not_psycopg_is_refused(self) -> None:
        with self.assertRaisesRegex(NobrokerError, "psycopg 3"):
            self.queue.enqueue(1, connection=object())


class AtomicTaskTest(TransactionTestCase):
    def atomic_task(self, queue: Queue, fail: bool = False, hold: float = 0.0) -> Any:
        schema = self.schema
        self.ran: list[str] = []

        @queue.task(name="effect", atomic=True, max_attempts=1)
        def effect() -> str:
            job = current_job()
            assert job is not None
            job.connection.execute(f'INSERT INTO "{schema}".effects VALUES (%s)'.encode(),
                                   (job.id,))
            self.ran.append(job.id)
            time.sleep(hold)
            if fail:
                raise ValueError("after the write")
            return job.id

        return effect

    def run_one(self, queue: Queue) -> None:
        Worker(queue, max_jobs=1, idle_timeout=2.0, poll_interval=0.05,
               handle_signals=False).run()

    def test_the_tasks_write_and_its_ack_commit_together(self) -> None:
        result = self.atomic_task(self.queue).delay()
        self.run_one(self.queue)
        self.assertEqual(self.effects(), {result.id: 1})
        job = self.queue.get(result.id)
        self.assertEqual((job.state, job.result), (JobState.DONE, result.id))

    def test_a_failing_tasks_write_is_rolled_back_and_the_job_nacked(self) -> None:
        result = self.atomic_task(self.queue, fail=True).delay()
        self.run_one(self.queue)
        self.assertEqual(self.effects(), {})
        job = self.queue.get(result.id)
        self.assertEqual(job.state, JobState.DEAD)
        self.assertIn("ValueError: after the write", job.last_error or "")

    def test_a_stale_holders_atomic_run_rolls_back(self) -> None:
        other = open_queue(self.url, "work")
        self.addCleanup(other.close)
        result = self.atomic_task(self.queue, hold=1.0).delay()
        # While the task runs, its lease is revoked (cancel; an expiry taken over by
        # another worker is the same to the ack): the ack's fenced statement finds no row.
        revoke = threading.Timer(0.3, other.cancel, (result.id,))
        with self.assertLogs("nobroker", "WARNING") as logs:
            revoke.start()
            self.run_one(self.queue)
        self.assertIn("lease lost before its atomic ack", "\n".join(logs.output))
        self.assertEqual(self.ran, [result.id], "the task did not run")
        self.assertEqual(self.effects(), {}, "a stale holder's write committed")
        self.assertEqual(self.queue.get(result.id).state, JobState.CANCELLED)

    def test_a_fenced_ack_in_raises_not_leased_and_rolls_back(self) -> None:
        job = self.queue.enqueue("x")
        [stale] = self.queue.lease(visibility_timeout=0.1)
        time.sleep(0.2)
        wait_until(lambda: bool(self.queue.lease()), 10, "the job leased again")
        backend: Any = self.queue.backend
        with self.assertRaises(NotLeasedError):
            with backend.atomic() as conn:
                conn.execute(f'INSERT INTO "{self.schema}".effects VALUES (%s)'.encode(),
                             (job.id,))
                backend.ack_in(conn, stale, None, None)
        self.assertEqual(self.effects(), {})


class AtomicKillTest(TransactionTestCase):
    """kill -9 of real worker processes: the row count and the job's state agree."""

    def spawn(self, mode: str, pause: float = 0.0) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"stderr-{time.monotonic()}", "wb") as errors:
            proc = spawn_python(WORKER, TESTS, self.url, self.schema, mode, str(pause),
                                stderr=errors)
        self.addCleanup(self._reap, proc)
        assert proc.stdout is not None
        self.assertEqual(proc.stdout.readline().strip(), b"ready")
        return proc

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream:
                stream.close()

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def agree(self, ids: list[str]) -> None:
        effects = self.effects()
        for job_id in ids:
            done = self.queue.get(job_id).state is JobState.DONE
            self.assertEqual(effects.get(job_id, 0), int(done),
                             f"job {job_id}: {effects.get(job_id, 0)} rows, done={done}")

    def enqueue(self, count: int) -> list[str]:
        return [self.queue.enqueue({"task": "effect", "args": [], "kwargs": {}}).id
                for _ in range(count)]

    def test_killed_after_the_write_before_the_commit_leaves_neither(self) -> None:
        [job_id] = self.enqueue(1)
        proc = self.spawn("hold")
        assert proc.stdout is not None
        self.assertEqual(proc.stdout.readline().split(), [b"wrote", job_id.encode()])
        self.kill(proc)
        self.agree([job_id])
        self.assertEqual(self.queue.get(job_id).state, JobState.LEASED)
        self.spawn("run")  # the lease runs out; the next worker runs it once
        wait_until(lambda: self.queue.get(job_id).state is JobState.DONE, 30, "the rerun")
        self.agree([job_id])
        self.assertEqual(self.effects(), {job_id: 1})

    def test_killed_after_the_commit_leaves_both_and_never_runs_again(self) -> None:
        [job_id] = self.enqueue(1)
        proc = self.spawn("after")
        assert proc.stdout is not None
        self.assertEqual(proc.stdout.readline().split(), [b"committed", job_id.encode()])
        self.kill(proc)
        self.agree([job_id])
        self.assertEqual(self.queue.get(job_id).state, JobState.DONE)
        self.spawn("run")
        time.sleep(1.5)  # past the dead worker's lease: nothing to run again
        self.assertEqual(self.effects(), {job_id: 1})

    def test_killed_at_random_moments_every_job_writes_exactly_once(self) -> None:
        ids = self.enqueue(40)
        rng = random.Random(os.environ.get("NOBROKER_TEST_SEED", "23"))
        for _ in range(60):
            if all(self.queue.get(i).state is JobState.DONE for i in ids):
                break
            proc = self.spawn("run", pause=rng.uniform(0, 0.03))
            time.sleep(rng.uniform(0.05, 0.4))
            self.kill(proc)
            self.agree(ids)
        else:
            self.spawn("run")
            wait_until(lambda: all(self.queue.get(i).state is JobState.DONE for i in ids),
                       60, "every job done")
        self.agree(ids)
        self.assertEqual(self.effects(), dict.fromkeys(ids, 1))
