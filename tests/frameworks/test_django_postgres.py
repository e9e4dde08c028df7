"""nobroker.django on PostgreSQL with OPTIONS "database": the jobs in Django's database,
written on Django's connection, so a job commits with the application's data; and
`atomic=True` tasks whose ORM writes commit with their ack, under kill -9.

Every test of test_django runs again here on this configuration (PostgresSiteTest),
then the tests only this one can pass. Needs Django 6, psycopg in its venv and a
server: `python make.py test-django` starts one (tools/postgres/cluster.py) and
runs this module; without them it is skipped, loudly.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid
from typing import Any

from frameworks import test_django as shared
from harness.postgres import ENABLED, URL
from harness.support import SRC, wait_until

RUNNABLE = shared.HAVE_DJANGO and ENABLED
SKIP_REASON = shared.SKIP_REASON if not shared.HAVE_DJANGO else (
    "Django on PostgreSQL suite skipped: no server or no psycopg "
    "(run `python make.py test-django`)")
SCHEMA = "t_" + uuid.uuid4().hex[:12]

# A worker process (`manage.py nobroker_work` as a command) that, with "hold", says
# "wrote ID" once the task's row is written and sleeps before the commit; with
# "after", says "committed ID" once the ack committed (the "succeeded" hook) and
# sleeps; with "signals", says what each task_finished's receiver sees; with "run",
# works on.
WORKER = """
import sys, time
import django
django.setup()
from django.core.management import call_command
from django.db.models.signals import post_save
from django.tasks import task_backends
from shop.models import Shipment
mode = sys.argv[1]

if mode == "signals":  # what task_finished's receivers see: the transaction ended?
    from django.db import connection
    from django.tasks.signals import task_finished
    jobs = task_backends["default"].queue("default")

    def finished(sender, task_result, **kwargs):
        print("finished", task_result.id, str(task_result.status).rpartition(".")[2],
              connection.in_atomic_block, jobs.get(task_result.id).state,
              Shipment.objects.filter(job_id=task_result.id).count(), flush=True)

    task_finished.connect(finished)

def wrote(sender, instance, **kwargs):
    print("wrote", instance.job_id, flush=True)
    time.sleep(60)

if mode == "hold":
    post_save.connect(wrote, sender=Shipment)
if mode == "after":
    task_backends["default"].queue("default").on(
        "succeeded", lambda job: (print("committed", job.id, flush=True), time.sleep(60)))
call_command("nobroker_work", "--queue", "default")
"""

# Enqueues inside transaction.atomic() and dies (os._exit) before the commit.
CRASH = """
import os, sys
import django
django.setup()
from django.db import transaction
from shop.models import Order
from shop.tasks import pay
with transaction.atomic():
    order = Order.objects.create(item="crash")
    result = pay.enqueue(order.id)
    print(order.id, result.id, flush=True)
    os._exit(3)
"""


def setUpModule() -> None:
    if RUNNABLE:
        shared.set_up_site(NOBROKER_EXAMPLE_POSTGRES=URL, NOBROKER_EXAMPLE_SCHEMA=SCHEMA,
                           NOBROKER_EXAMPLE_VISIBILITY="1.0")


def tearDownModule() -> None:
    if RUNNABLE:
        from django.db import connection
        from django.tasks import task_backends
        task_backends["default"].close()
        with connection.cursor() as cursor:
            cursor.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')


def python(script: str, *args: str, stderr: Any = subprocess.DEVNULL
           ) -> subprocess.Popen[str]:
    """`script` run with the site's settings (those of this process's environment)."""
    return subprocess.Popen([sys.executable, "-c", script, *args], cwd=shared.SITE,
                            env=dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{shared.SITE}"),
                            stdout=subprocess.PIPE, stderr=stderr, text=True)


def new_order(item: str = "book") -> Any:
    from shop.models import Order
    return Order.objects.create(item=item)


@unittest.skipUnless(RUNNABLE, SKIP_REASON)
class PostgresSiteTest(shared.DjangoBackendTest):
    """test_django's tests, with the jobs in Django's PostgreSQL database."""


@unittest.skipUnless(RUNNABLE, SKIP_REASON)
class InTheTransactionTest(unittest.TestCase):
    """The job is a row of Django's own transaction: it commits or rolls back with it."""

    def setUp(self) -> None:
        from django.tasks import task_backends
        self.backend = task_backends["default"]
        self.queue = self.backend.queue("default")
        self.queue.purge()
        self.before = self.queue.stats().total  # leased or finished jobs of other tests
        self.hooked: list[str] = []
        self.signalled: list[str] = []
        from django.tasks.signals import task_enqueued

        def record(sender: Any, task_result: Any, **kwargs: Any) -> None:
            self.signalled.append(task_result.id)

        task_enqueued.connect(record)
        self.addCleanup(task_enqueued.disconnect, record)
        self.queue.on("enqueued", lambda job: self.hooked.append(job.id))

    def rows(self, job_id: str) -> int:
        """The job's rows as Django's connection sees them (its open transaction too)."""
        from django.db import connection
        with connection.cursor() as cursor:
            cursor.execute(f'SELECT count(*) FROM "{SCHEMA}".jobs WHERE id = %s', [job_id])
            return int(cursor.fetchone()[0])

    def test_rolled_back_no_job_no_signal_no_hook(self) -> None:
        from django.db import transaction
        from shop.models import Order
        from shop.tasks import pay

        class Rollback(Exception):
            pass

        with self.assertRaises(Rollback), transaction.atomic():
            order = Order.objects.create(item="undone")
            result = pay.enqueue(order.id)
            self.assertEqual(self.rows(result.id), 1, "not written in the transaction")
            raise Rollback
        self.assertEqual(self.rows(result.id), 0)
        self.assertEqual(self.queue.stats().total, self.before)
        self.assertFalse(Order.objects.filter(pk=order.id).exists())
        self.assertEqual((self.signalled, self.hooked), ([], []))

    def test_committed_the_job_exists_with_the_data_and_is_announced_at_the_commit(
            self) -> None:
        from django.db import transaction
        from django.tasks.exceptions import TaskResultDoesNotExist
        from shop.tasks import pay

        with transaction.atomic():
            result = pay.enqueue(new_order().id)
            self.assertEqual(self.rows(result.id), 1)
            with self.assertRaises(TaskResultDoesNotExist):  # others cannot see it yet
                pay.get_result(result.id)
            self.assertEqual((self.signalled, self.hooked), ([], []))
        self.assertEqual(pay.get_result(result.id).status, "READY")
        self.assertEqual((self.signalled, self.hooked), ([result.id], [result.id]))

    def test_a_transaction_block_on_djangos_connection_announces_at_the_commit(self) -> None:
        from django.db import connection, transaction

        class Rollback(Exception):
            pass

        with self.assertRaises(Rollback), transaction.atomic():
            with self.queue.transaction(connection):
                dropped = self.queue.enqueue("dropped")
            raise Rollback
        with transaction.atomic():
            with self.queue.transaction(connection):
                kept = self.queue.enqueue("kept")
            self.assertEqual(self.hooked, [])
        self.assertEqual(self.hooked, [kept.id])
        self.assertEqual(self.rows(dropped.id), 0)
        self.assertEqual(self.queue.get(kept.id).payload, "kept")

    def test_outside_atomic_the_job_autocommits(self) -> None:
        from shop.tasks import pay

        result = pay.enqueue(new_order().id)
        self.assertEqual(pay.get_result(result.id).status, "READY")
        self.assertEqual(self.hooked, [result.id])

    def test_a_crash_between_the_write_and_the_commit_leaves_no_job(self) -> None:
        from django.tasks.exceptions import TaskResultDoesNotExist
        from shop.models import Order
        from shop.tasks import pay

        proc = python(CRASH)
        out, _ = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 3, out)
        order_id, job_id = out.split()
        with self.assertRaises(TaskResultDoesNotExist):
            pay.get_result(job_id)
        self.assertFalse(Order.objects.filter(pk=int(order_id)).exists())
        self.assertEqual(self.queue.stats().total, self.before)


@unittest.skipUnless(RUNNABLE, SKIP_REASON)
class AtomicTaskKillTest(unittest.TestCase):
    """`@task(atomic=True)` under nobroker_work: the task's Shipment row and the job's
    completion are one commit on Django's connection; kill -9 never splits them."""

    def setUp(self) -> None:
        from django.tasks import task_backends
        self.queue = task_backends["default"].queue("default")
        self.queue.purge()
        self.procs: list[subprocess.Popen[str]] = []
        self.addCleanup(self.reap)

    def reap(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        if not self.procs:
            return

        # A killed worker's lease runs out after the visibility timeout (1 s); until
        # then purge cannot drop its job, and the next test's worker would lease it
        # (its own `--max-jobs 1` spent on another test's job). Purge until none is left.
        def drained() -> bool:
            self.queue.purge()
            stats = self.queue.stats()
            return stats.pending + stats.leased == 0

        wait_until(drained, 30, "the killed workers' jobs purged")

    def spawn(self, mode: str) -> subprocess.Popen[str]:
        self.stderr = tempfile.TemporaryFile("w+")  # the last worker's, for a failure
        self.addCleanup(self.stderr.close)
        proc = python(WORKER, mode, stderr=self.stderr)
        self.procs.append(proc)
        assert proc.stdout is not None
        self.assertIn("serving default", proc.stdout.readline())
        return proc

    @staticmethod
    def kill(proc: subprocess.Popen[str]) -> None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def ship(self, count: int) -> list[str]:
        from shop.atomic_tasks import ship
        from shop.models import Order
        return [ship.enqueue(Order.objects.create(item="parcel").id).id for _ in range(count)]

    def agree(self, ids: list[str]) -> None:
        from shop.models import Shipment
        for job_id in ids:
            rows = Shipment.objects.filter(job_id=job_id).count()
            done = self.queue.get(job_id).state == "done"
            self.assertEqual(rows, int(done), f"job {job_id}: {rows} rows, done={done}")

    def test_the_write_and_the_ack_commit_together(self) -> None:
        from shop.atomic_tasks import ship

        [job_id] = self.ship(1)
        done = shared.work("--queue", "default", "--max-jobs", "1")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(ship.get_result(job_id).return_value,
                         f"shipped order {ship.get_result(job_id).args[0]}")
        self.agree([job_id])

    def test_a_failing_attempts_write_is_rolled_back_and_retried(self) -> None:
        from shop.atomic_tasks import ship
        from shop.models import Order, Shipment

        result = ship.enqueue(Order.objects.create(item="lost parcel").id)
        done = shared.work("--queue", "default", "--max-jobs", "3")  # 3 attempts
        self.assertEqual(done.returncode, 0, done.stderr)
        failed = ship.get_result(result.id)
        self.assertEqual(failed.status, "FAILED")
        self.assertEqual([e.exception_class for e in failed.errors], [LookupError] * 3)
        self.assertEqual(Shipment.objects.filter(job_id=result.id).count(), 0)

    def test_task_finished_is_sent_after_the_commit_or_after_the_rollback(self) -> None:
        from shop.atomic_tasks import ship
        from shop.models import Order

        [shipped] = self.ship(1)
        lost = ship.enqueue(Order.objects.create(item="lost parcel").id).id
        proc = self.spawn("signals")
        assert proc.stdout is not None
        seen: dict[str, list[str]] = {}
        while not (shipped in seen and lost in seen):
            words = proc.stdout.readline().split()
            self.assertEqual(words[:1], ["finished"], "the worker ended early")
            seen.setdefault(words[1], words[2:])
        # (status, in an atomic block, the job's state, its shipment rows) at the signal:
        # the success's ack committed; the failure's row rolled back, its nack to come.
        self.assertEqual(seen[shipped], ["SUCCESSFUL", "False", "done", "1"])
        self.assertEqual(seen[lost], ["READY", "False", "leased", "0"])

    def test_killed_after_the_write_before_the_commit_leaves_neither(self) -> None:
        [job_id] = self.ship(1)
        proc = self.spawn("hold")
        assert proc.stdout is not None
        self.assertEqual(proc.stdout.readline().split(), ["wrote", job_id])
        self.kill(proc)
        self.agree([job_id])
        self.assertEqual(self.queue.get(job_id).state, "leased")
        self.spawn("run")  # the lease runs out; the next worker ships it once
        wait_until(lambda: self.queue.get(job_id).state == "done", 30, "the rerun")
        self.agree([job_id])

    def test_killed_after_the_commit_leaves_both_and_never_runs_again(self) -> None:
        from shop.models import Shipment

        [job_id] = self.ship(1)
        proc = self.spawn("after")
        assert proc.stdout is not None
        self.assertEqual(proc.stdout.readline().split(), ["committed", job_id])
        self.kill(proc)
        self.agree([job_id])
        self.assertEqual(self.queue.get(job_id).state, "done")
        self.spawn("run")
        time.sleep(1.5)  # past the dead worker's lease: nothing to run again
        self.assertEqual(Shipment.objects.filter(job_id=job_id).count(), 1)

    def test_killed_at_random_moments_a_job_ships_once_iff_it_is_done(self) -> None:
        ids = self.ship(12)
        rng = random.Random(os.environ.get("NOBROKER_TEST_SEED", "23"))
        for _ in range(6):
            proc = self.spawn("run")
            time.sleep(rng.uniform(0.0, 0.3))
            self.kill(proc)
            self.agree(ids)
        self.spawn("run")

        def finished() -> list[Any]:
            jobs = [self.queue.get(i) for i in ids]
            return jobs if all(job.state in ("done", "dead") for job in jobs) else []

        try:
            jobs = wait_until(finished, 120, "every job finished")
        except AssertionError:
            self.stderr.seek(0)
            states = [str(self.queue.get(i).state) for i in ids]
            self.fail(f"not every job finished: {states}; the worker's stderr:\n"
                      f"{self.stderr.read()[-3000:]}")
        self.agree(ids)
        # A job whose every attempt (3) was killed is dead, with no shipment (the
        # oldest job is leased first again, so the same one can be hit each time).
        for job in jobs:
            if job.state == "dead":
                self.assertEqual(job.attempts, job.max_attempts)
        self.assertGreater(sum(job.state == "done" for job in jobs), 6)


def noop(n: int) -> int:
    """A task of DelayOnCommitTest (a module-level function, as tasks are)."""
    return n


@unittest.skipUnless(RUNNABLE, SKIP_REASON)
class DelayOnCommitTest(unittest.TestCase):
    """`delay_on_commit` on a queue of a backend with OPTIONS "database": at the commit
    of that alias's transaction, not the default database's."""

    def setUp(self) -> None:
        from django.db import connections

        from nobroker.django import NobrokerBackend
        connections.settings["jobs"] = dict(connections.settings["default"])
        self.addCleanup(connections.settings.pop, "jobs")
        self.addCleanup(connections.__delitem__, "jobs")
        self.addCleanup(lambda: connections["jobs"].close())
        backend = NobrokerBackend("on_jobs", {"QUEUES": ["on_jobs"], "OPTIONS": {
            "database": "jobs", "schema": SCHEMA}})
        self.addCleanup(backend.close)
        self.queue = backend.queue("on_jobs")
        self.task = self.queue.task(noop, name="test.noop")

    def test_delay_on_commit_waits_for_the_commit_of_the_queues_database(self) -> None:
        from django.db import transaction

        class Rollback(Exception):
            pass

        with transaction.atomic(using="jobs"):
            self.task.delay_on_commit(1)
            self.assertEqual(self.queue.stats().pending, 0, "enqueued before the commit")
        self.assertEqual(self.queue.stats().pending, 1)
        with self.assertRaises(Rollback), transaction.atomic(using="jobs"):
            self.task.delay_on_commit(2)
            raise Rollback
        self.assertEqual(self.queue.stats().pending, 1)


if __name__ == "__main__":
    unittest.main()
