"""`nobroker+postgresql://...` as Celery's broker and result backend: the same transport
and backend on nobroker's PostgreSQL backend, with a real `celery worker`. Runs under
`python make.py test-celery-postgres` (a throwaway cluster, tools/postgres/cluster.py);
skipped, saying so, without a server or psycopg."""

from __future__ import annotations

import socket
import unittest

from harness.celery_support import CeleryTestCase, needs_celery
from harness.postgres import ENABLED, URL, drop_schema, fresh_schema_url

from nobroker import Queue
from nobroker.celery import queue_name_for

TIMEOUT = 60.0
SKIP_REASON = ("Celery-on-PostgreSQL suite skipped: " +
               ("psycopg is not installed" if URL else "no server") +
               " (run `python make.py test-celery-postgres`)")


@unittest.skipUnless(ENABLED, SKIP_REASON)
@needs_celery
class CeleryOnPostgresTest(CeleryTestCase):
    def setUp(self) -> None:
        super().setUp()
        url = fresh_schema_url()
        self.addCleanup(drop_schema, url)
        self.pg_url = url
        self.env["NOBROKER_CELERY_URL"] = f"nobroker+{url}"  # the workers'
        self.set_env("NOBROKER_CELERY_URL", f"nobroker+{url}")  # this process's
        self.mod = self.app()
        self.addCleanup(self.mod.app.close)
        self.start_worker("w1", "-P", "threads", "-c", "2")

    def test_tasks_results_and_a_chord_go_through_postgresql(self) -> None:
        from celery import chord

        mod = self.mod
        self.assertEqual(mod.add.delay(2, 3).get(timeout=TIMEOUT), 5)
        self.assertEqual(mod.mul.delay(6, 7).get(timeout=TIMEOUT), 42)  # routed to b
        self.assertEqual(chord(mod.add.s(i, 1) for i in range(4))(mod.tsum.s())
                         .get(timeout=TIMEOUT), 10)
        queue = Queue(self.pg_url, queue_name_for("b"))
        self.addCleanup(queue.close)
        self.assertEqual(queue.stats().done, 1)  # the message was a job in PostgreSQL

    def test_a_broadcast_reaches_the_worker_and_its_reply_comes_back(self) -> None:
        name = f"w1@{socket.gethostname()}"
        replies: list[dict[str, object]] = []
        for _ in range(30):  # until the worker has bound its pidbox queue
            replies = self.mod.app.control.ping(timeout=1.0)
            if replies:
                break
        self.assertEqual([next(iter(reply)) for reply in replies], [name])
