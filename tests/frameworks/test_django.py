"""nobroker.django end to end: the example site (examples/django_site), its tasks run
by real `manage.py nobroker_work` processes on a queue directory.

Needs Django 6 (Python 3.12+): `python make.py test-django` installs it into
.dev/django-venv and runs this module; the plain suite skips it, loudly.
"""

from __future__ import annotations

import importlib.util
import math
import os
import signal
import subprocess
import sys
import tempfile
import unittest
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness.support import REPO, SRC

SITE = REPO / "examples" / "django_site"
HAVE_DJANGO = (sys.version_info >= (3, 12)
               and importlib.util.find_spec("django") is not None
               and importlib.util.find_spec("django.tasks") is not None)
SKIP_REASON = ("Django suite skipped: Django 6 is not installed here "
               "(run `python make.py test-django`)")
_TMP: tempfile.TemporaryDirectory[str] | None = None


def set_up_site(**env: str) -> None:
    """Django set up in this process with the example's settings, read with `env`
    (also given to the workers this module starts), and its tables migrated."""
    os.environ.update(env, DJANGO_SETTINGS_MODULE="config.settings")
    sys.path.insert(0, str(SITE))
    import django
    from django.core.management import call_command
    django.setup()
    call_command("migrate", verbosity=0)


def setUpModule() -> None:
    global _TMP
    if not HAVE_DJANGO:
        return
    _TMP = tempfile.TemporaryDirectory(prefix="nobroker-django-")
    set_up_site(NOBROKER_EXAMPLE_JOBS=str(Path(_TMP.name) / "jobs"),
                NOBROKER_EXAMPLE_DB=str(Path(_TMP.name) / "db.sqlite3"))


def tearDownModule() -> None:
    if _TMP is not None:
        from django.tasks import task_backends
        task_backends["default"].close()
        _TMP.cleanup()


def work(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `manage.py nobroker_work ARGS` to its end (use --max-jobs or --idle-timeout)."""
    return subprocess.run([sys.executable, str(SITE / "manage.py"), "nobroker_work", *args],
                          cwd=SITE, env=dict(os.environ, PYTHONPATH=str(SRC)),
                          capture_output=True, text=True, timeout=timeout)


def module_level_task() -> None:
    """For the tests of what @task refuses (Django wants a module-level function)."""


async def module_level_coroutine() -> None:
    """The same, async."""


@unittest.skipUnless(HAVE_DJANGO, SKIP_REASON)
class DjangoBackendTest(unittest.TestCase):
    def setUp(self) -> None:
        from django.tasks import task_backends
        self.backend = task_backends["default"]
        for name in self.backend.queue_names:
            self.backend.queue(name).purge()

    def order(self, item: str = "book") -> Any:
        from shop.models import Order
        return Order.objects.create(item=item)

    def test_a_view_enqueues_on_commit_and_a_worker_pays_the_order(self) -> None:
        from django.tasks import TaskResultStatus
        from django.test import Client
        from shop.models import Order
        from shop.tasks import pay

        reply = Client().post("/orders/", data='{"item": "lamp"}',
                              content_type="application/json").json()
        waiting = pay.get_result(reply["task"])
        self.assertEqual(waiting.status, TaskResultStatus.READY)
        self.assertIsNotNone(waiting.enqueued_at)
        self.assertEqual(waiting.args, [reply["order"]])

        done = work("--queue", "default", "--max-jobs", "1")
        self.assertEqual(done.returncode, 0, done.stderr)

        result = pay.get_result(reply["task"])
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, "paid lamp")
        self.assertEqual(result.args, [reply["order"]])
        self.assertEqual(result.attempts, 1)
        self.assertEqual(result.errors, [])
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.finished_at)
        assert result.started_at and result.finished_at and result.enqueued_at
        self.assertLessEqual(result.enqueued_at, result.started_at)
        self.assertLessEqual(result.started_at, result.finished_at)
        self.assertTrue(Order.objects.get(pk=reply["order"]).paid)

    def test_a_rolled_back_transaction_enqueues_nothing(self) -> None:
        from django.db import transaction
        from django.tasks.exceptions import TaskResultDoesNotExist
        from shop.tasks import pay

        class Rollback(Exception):
            pass

        before = self.backend.queue("default").stats().total
        with self.assertRaises(Rollback), transaction.atomic():
            result = pay.enqueue(self.order().id)
            raise Rollback
        with self.assertRaises(TaskResultDoesNotExist):
            pay.get_result(result.id)
        self.assertEqual(self.backend.queue("default").stats().total, before)

    def test_inside_a_transaction_the_job_is_written_at_the_commit(self) -> None:
        from django.db import transaction
        from django.tasks.exceptions import TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued
        from shop.tasks import pay

        seen: list[str] = []

        def record(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append(task_result.id)

        task_enqueued.connect(record)
        self.addCleanup(task_enqueued.disconnect, record)
        with transaction.atomic():
            result = pay.enqueue(self.order().id)
            with self.assertRaises(TaskResultDoesNotExist):
                pay.get_result(result.id)
            self.assertEqual(seen, [])
        self.assertEqual(seen, [result.id])
        self.assertEqual(pay.get_result(result.id).status, "READY")

    def test_a_failing_task_is_retried_then_failed_with_one_error_per_attempt(self) -> None:
        from shop.models import Order
        from shop.tasks import flaky

        order = self.order()
        result = flaky.enqueue(order.id)
        self.assertEqual(work("--queue", "default", "--max-jobs", "1").returncode, 0)
        between = flaky.get_result(result.id)
        self.assertEqual(between.status, "READY")  # an attempt is left
        self.assertEqual(len(between.errors), 1)

        self.assertEqual(work("--queue", "default", "--max-jobs", "1").returncode, 0)
        failed = flaky.get_result(result.id)
        self.assertEqual(failed.status, "FAILED")
        self.assertEqual(failed.attempts, 2)
        self.assertEqual([e.exception_class for e in failed.errors],
                         [ConnectionError, ConnectionError])
        self.assertIn(f"payment provider down for order {order.id}", failed.errors[1].traceback)
        self.assertIn("Traceback (most recent call last)", failed.errors[0].traceback)
        with self.assertRaises(ValueError):
            failed.return_value  # noqa: B018  (Django raises for a failed task)
        self.assertEqual(Order.objects.get(pk=order.id).attempts, 2)

    def test_arguments_that_are_not_json_are_refused_before_anything_is_written(self) -> None:
        from shop.tasks import pay

        from nobroker.errors import SerializationError

        before = self.backend.queue("default").stats().total
        with self.assertRaises(TypeError):
            pay.enqueue(object())
        with self.assertRaises(SerializationError):
            pay.enqueue(math.nan)
        self.assertEqual(self.backend.queue("default").stats().total, before)

    def test_context_priority_queues_and_async_tasks_on_one_worker(self) -> None:
        from shop.tasks import receipt, total

        mail = receipt.enqueue(7)
        summed = total.enqueue([1, 2, 3])
        job = self.backend.queue("emails").get(mail.id)
        self.assertEqual(job.priority, 10)
        self.assertTrue(mail.id.startswith("emails."))
        done = work("--max-jobs", "2")  # both queues, by one worker
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(receipt.get_result(mail.id).return_value,
                         {"order": 7, "attempt": 1, "id": mail.id})
        self.assertEqual(total.get_result(summed.id).return_value, 6)

    def test_one_worker_takes_the_queues_in_their_listed_order(self) -> None:
        from shop.tasks import pay, receipt

        # QUEUES is ["default", "emails"]: a job of default goes first, even one enqueued
        # after a job of emails with a higher priority of its own.
        mail = receipt.enqueue(8)
        paid = pay.enqueue(self.order("first").id)
        done = work("--max-jobs", "1")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("serving default, emails", done.stdout)
        self.assertEqual(pay.get_result(paid.id).status, "SUCCESSFUL")
        self.assertEqual(receipt.get_result(mail.id).status, "READY")

    def test_run_after_delays_the_job(self) -> None:
        from shop.tasks import pay

        later = datetime.now(UTC) + timedelta(hours=1)
        result = pay.using(run_after=later).enqueue(self.order().id)
        job = self.backend.queue("default").get(result.id)
        self.assertAlmostEqual(job.available_at, later.timestamp(), delta=5)
        done = work("--queue", "default", "--idle-timeout", "0.5")
        self.assertEqual(done.returncode, 0)
        self.assertEqual(pay.get_result(result.id).status, "READY")

    def test_a_job_waiting_for_a_prerequisite_reads_as_ready(self) -> None:
        from shop.tasks import pay

        queue = self.backend.queue("default")
        blocker = queue.enqueue({"task": "shop.tasks.pay", "args": [0], "kwargs": {}})
        # A job of the task, enqueued through nobroker's API behind another job.
        waiting = queue.enqueue({"task": "shop.tasks.pay", "args": [self.order().id],
                                 "kwargs": {}}, depends_on=[blocker.id],
                                job_id="default.waiting0001")
        self.assertEqual(waiting.state, "waiting")
        self.assertEqual(pay.get_result(waiting.id).status, "READY")

    def test_a_job_naming_something_outside_the_installed_apps_is_not_run(self) -> None:
        from nobroker.django.backend import load_task

        self.assertIsNone(load_task("os.system", "default"))
        self.assertIsNone(load_task("shop.models.Order", "default"))
        self.assertIsNotNone(load_task("shop.tasks.pay", "default"))
        queue = self.backend.queue("default")
        job = queue.enqueue({"task": "os.system", "args": ["touch /tmp/x"], "kwargs": {}},
                            max_attempts=1)
        self.assertEqual(work("--queue", "default", "--max-jobs", "1").returncode, 0)
        dead = queue.get(job.id)
        self.assertEqual(dead.state, "dead")
        self.assertIn("unknown task 'os.system'", dead.last_error or "")

    def test_sigterm_stops_a_worker_over_several_queues_gracefully(self) -> None:
        proc = subprocess.Popen([sys.executable, str(SITE / "manage.py"), "nobroker_work"],
                                cwd=SITE, env=dict(os.environ, PYTHONPATH=str(SRC)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(proc.kill)
        assert proc.stdout is not None
        self.assertIn("serving default, emails", proc.stdout.readline())
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=30), 0)

    # -- nobroker's own API under Django -------------------------------------

    def site_queue(self) -> Any:
        from shop.tasks import site
        site.purge()
        return site

    def test_each_apps_tasks_module_is_autodiscovered_and_served_by_registered(self) -> None:
        code = ("import sys, django; django.setup(); "
                "print('shop.tasks' in sys.modules)")
        seen = subprocess.run([sys.executable, "-c", code], cwd=SITE, text=True,
                              env=dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{SITE}"),
                              capture_output=True, timeout=60)
        self.assertEqual(seen.stdout.strip(), "True", seen.stderr)
        from shop.tasks import restock
        site = self.site_queue()
        result = restock.delay(self.order("vase").id)
        # The worker imports no task module itself: only the app's autodiscovery does.
        done = work("--registered", "--max-jobs", "1")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("serving site (registered tasks)", done.stdout)
        self.assertEqual(site.get(result.id).result, "restocked vase")

    def test_the_periodic_task_ticks_once_under_registered_workers(self) -> None:
        from nobroker.models import JobState

        site = self.site_queue()
        self.order("unpaid lamp")

        def ticks() -> list[Any]:
            return [job for state in JobState for job in site.list_jobs(state)
                    if job.id.startswith("periodic:shop.tasks.unpaid_report:")]

        # Two workers one after the other: each one's scheduler enqueues last night's
        # tick (started within a day of it); its key makes the second one a no-op.
        for _ in range(2):
            done = work("--registered", "--idle-timeout", "1")
            self.assertEqual(done.returncode, 0, done.stderr)
        found = ticks()
        self.assertEqual(len(found), 1, found)
        tick = found[0]
        self.assertIs(tick.state, JobState.DONE)
        self.assertGreaterEqual(tick.result["unpaid"], 1)
        self.assertTrue(tick.id.endswith("T03:00:00Z"), tick.id)

    def test_delay_on_commit_enqueues_at_the_commit_never_on_rollback(self) -> None:
        from django.db import transaction
        from django.test import Client
        from shop.tasks import restock

        from nobroker.errors import SerializationError

        site = self.site_queue()

        class Rollback(Exception):
            pass

        with self.assertRaises(Rollback), transaction.atomic():
            restock.delay_on_commit(self.order().id)
            raise Rollback
        self.assertEqual(site.stats().total, 0)
        with transaction.atomic():
            self.assertIsNone(restock.delay_on_commit(self.order().id))
            self.assertEqual(site.stats().total, 0, "enqueued before the commit")
        self.assertEqual(site.stats().total, 1)
        restock.delay_on_commit(self.order().id)  # outside atomic(): at once
        self.assertEqual(site.stats().total, 2)
        with self.assertRaises(SerializationError):  # checked now, not at the commit
            restock.delay_on_commit(math.nan)
        reply = Client().post(f"/orders/{self.order('jar').id}/restock/")
        self.assertEqual(reply.status_code, 200)
        self.assertEqual(site.stats().total, 3)

    # -- the dashboard in the site's URLconf ---------------------------------

    def user(self, staff: bool) -> Any:
        from django.contrib.auth.models import User
        return User.objects.create_user(f"u{uuid.uuid4().hex[:10]}", password="x",
                                        is_staff=staff)

    def test_the_dashboard_is_for_staff_only(self) -> None:
        from django.test import Client

        anonymous = Client().get("/jobs/")
        self.assertEqual(anonymous.status_code, 302)
        self.assertIn("login", anonymous["Location"])
        self.assertEqual(Client().get("/jobs/api/overview").status_code, 302)
        visitor = Client()
        visitor.force_login(self.user(staff=False))
        for path in ("/jobs/", "/jobs/api/overview", "/jobs/static/app.js",
                     "/jobs/api/queues/default/jobs"):
            self.assertEqual(visitor.get(path).status_code, 403, path)
        staff = Client()
        staff.force_login(self.user(staff=True))
        page = staff.get("/jobs/q/default")
        self.assertEqual(page.status_code, 200)
        html = page.content.decode()
        self.assertIn('<meta name="nobroker-base" content="/jobs/">', html)
        self.assertIn('"/jobs/static/app.js?v=', html)
        self.assertIn("script-src 'self'", page["Content-Security-Policy"])
        overview = staff.get("/jobs/api/overview").json()
        self.assertEqual(sorted(q["name"] for q in overview["queues"])[:2],
                         ["default", "emails"])
        self.assertIn(b"app.js", staff.get("/jobs/").content)
        stream = staff.get("/jobs/api/events?queue=default")
        self.assertTrue(stream.content.startswith(
            b"retry: 2000\n\nevent: poll\ndata: {}\n\nevent: update\ndata: "))
        self.assertEqual(staff.get("/jobs/api/events?queue=nope").status_code, 404)
        self.assertEqual(staff.get("/jobs/api/queues/nope").status_code, 404)

    def test_a_dashboard_change_needs_staff_and_the_csrf_token(self) -> None:
        from django.test import Client
        from shop.tasks import pay

        job_id = pay.enqueue(self.order().id).id
        path = "/jobs/api/queues/default/cancel"
        body = f'{{"id": "{job_id}"}}'

        def post(client: Any, token: str | None) -> Any:
            headers = {"X-CSRFToken": token} if token else {}
            return client.post(path, data=body, content_type="application/json",
                               headers=headers)

        secret = "s3cret" * 5 + "ok"  # a CSRF cookie's secret: 32 letters and digits

        def signed_in(staff: bool) -> Any:
            client = Client(enforce_csrf_checks=True)
            client.force_login(self.user(staff=staff))
            client.cookies["csrftoken"] = secret
            return client

        staff = signed_in(staff=True)
        html = staff.get("/jobs/").content.decode()
        token = html.split('name="nobroker-csrf" content="')[1].split('"')[0]
        for refused in (post(staff, None), post(staff, "0" * 32)):  # none, or forged
            self.assertEqual(refused.status_code, 403)
            self.assertIn(b"CSRF verification failed", refused.content)
        self.assertEqual(staff.get(path).status_code, 405)
        visitor = signed_in(staff=False)
        refused = post(visitor, secret)  # a valid CSRF pair, but not staff
        self.assertEqual(refused.status_code, 403)
        self.assertEqual(refused.json(), {"error": "the jobs dashboard is for staff users"})
        self.assertEqual(self.backend.queue("default").get(job_id).state, "pending")
        done = post(staff, token)
        self.assertEqual(done.status_code, 200, done.content)
        self.assertEqual(done.json(), {"cancelled": True})
        self.assertEqual(self.backend.queue("default").get(job_id).state, "cancelled")

    def test_atomic_needs_the_database_option_and_a_plain_function(self) -> None:
        from django.tasks import task
        from django.tasks.exceptions import InvalidTask

        if self.backend.database is None:
            with self.assertRaisesRegex(InvalidTask, r"atomic=True needs the backend's "
                                                     r"OPTIONS\['database'\]"):
                task(atomic=True)(module_level_task)
        else:
            with self.assertRaisesRegex(InvalidTask, "atomic=True takes a plain function"):
                task(atomic=True)(module_level_coroutine)

    def test_a_database_that_is_not_postgresql_is_refused_clearly(self) -> None:
        from django.core import checks
        from django.core.exceptions import ImproperlyConfigured
        from django.db import connection
        from django.tasks import task_backends
        from django.test import override_settings
        from shop.tasks import pay

        from nobroker.django import NobrokerBackend

        if connection.vendor == "postgresql":
            self.skipTest("the site's database is PostgreSQL here")
        backend = NobrokerBackend("sqlite", {"OPTIONS": {"database": "default"}})
        with self.assertRaisesRegex(ImproperlyConfigured,
                                    r"'default', a sqlite database: .*PostgreSQL only"):
            backend.enqueue(pay, [1], {})
        with self.assertRaisesRegex(ImproperlyConfigured, "'nowhere', which is not in DATABASES"):
            NobrokerBackend("x", {"OPTIONS": {"database": "nowhere"}}).queue("default")
        tasks = {"default": {"BACKEND": "nobroker.django.NobrokerBackend",
                             "OPTIONS": {"database": "default"}}}
        with override_settings(TASKS=tasks):
            found = [m for m in checks.run_checks() if m.id.startswith("nobroker.")]
            self.assertEqual([m.id for m in found], ["nobroker.E003"])
            self.assertIn("a sqlite database", found[0].msg)
        task_backends["default"]  # settings restored: the real backend again

    def test_the_system_check_names_a_queue_nobroker_cannot_hold(self) -> None:
        from django.core import checks
        from django.tasks import task_backends
        from django.test import override_settings

        tasks = {"default": {"BACKEND": "nobroker.django.NobrokerBackend",
                             "QUEUES": ["default", "two words"], "OPTIONS": {}}}
        with override_settings(TASKS=tasks):
            ids = [m.id for m in checks.run_checks() if m.id.startswith("nobroker.")]
            self.assertEqual(sorted(ids), ["nobroker.E001", "nobroker.E002"])
        task_backends["default"]  # settings restored: the real backend again


if __name__ == "__main__":
    unittest.main()
