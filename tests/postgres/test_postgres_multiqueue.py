"""One Worker over several queues of one PostgreSQL schema.

tests/worker/test_multiqueue.py's `MultiQueueContract` (priority, weights,
caps, idle latency and CPU, names, pause), run on a schema of the test's
own; without a server the module is skipped, and `make.py test` says so.
"""

from __future__ import annotations

import unittest

from pg_support import drop_schema, fresh_schema_url, needs_postgres
from support import TempDirTestCase
from worker.test_multiqueue import MultiQueueContract


@needs_postgres
class PostgresMultiQueueTest(MultiQueueContract, TempDirTestCase):
    PICKUP_BOUND = None  # the single-queue worker's, measured by the test
    def setUp(self) -> None:
        super().setUp()
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)

    def location(self) -> str:
        return self.url


if __name__ == "__main__":
    unittest.main()
