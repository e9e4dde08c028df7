"""One Worker over several queues of one PostgreSQL schema.

tests/worker/test_multiqueue.py's `MultiQueueContract` (priority, weights,
caps, idle latency and CPU, names, pause), run on a schema of the test's
own; without a server the module is skipped, and `make.py test` says so.
"""

from __future__ import annotations

import unittest

from harness.postgres import OnFreshSchema, needs_postgres
from harness.support import TempDirTestCase
from worker.test_multiqueue import MultiQueueContract


@needs_postgres
class PostgresMultiQueueTest(OnFreshSchema, MultiQueueContract, TempDirTestCase):
    PICKUP_BOUND = None  # the single-queue worker's, measured by the test
    # Measured on a loaded 2-core machine: 26-38 ms median against 19-28 ms over
    # one queue, a gap not explained yet (three listening server processes woken
    # per NOTIFY? the waiter thread's hand-off under a busy GIL?). Held to 1.5x
    # so that a regression shows; the gap is an open item, not the goal.
    PICKUP_FACTOR = 1.5


if __name__ == "__main__":
    unittest.main()
