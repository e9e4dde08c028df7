"""The task layer on PostgreSQL: @q.task, .delay, results, cancel, time limits, periodic ticks.

The process tests are tests/task_layer/test_task_processes.py's suite
(`TaskProcessContract`), run here through `Queue(url)` with real `nobroker
work MODULE` processes on a schema of the test's own; without a server the
module is skipped, and `make.py test` says so. What only PostgreSQL has is
below it: periodic ticks on the server's clock (the default: no clock is
injected), where the fast-clock test injects the same 120x clock into every
process (the tasks layer and the backend both follow an injected clock).
"""

from __future__ import annotations

import unittest

from harness.postgres import drop_schema, fresh_schema_url, needs_postgres
from harness.support import WorkerProcessCase
from task_layer.test_task_processes import TaskProcessContract


@needs_postgres
class PostgresTaskProcessTest(TaskProcessContract, WorkerProcessCase):
    def setUp(self) -> None:
        self.url = fresh_schema_url()  # before the suite's setUp, which reads target()
        self.addCleanup(drop_schema, self.url)  # runs last: after the workers are reaped
        super().setUp()

    def target(self) -> str:
        return self.url

    def test_two_workers_on_the_server_clock_run_each_periodic_tick_exactly_once(self
                                                                                ) -> None:
        self.module("beats", '''
            @q.periodic(every=0.25, name="beat")
            def beat():
                note(current_job().id, os.getpid(), current_job().attempts)
        ''')
        self.assert_each_tick_once("beats", ticks=20, every=0.25)


if __name__ == "__main__":
    unittest.main()
