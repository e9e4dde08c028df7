"""Worker(prefetch=K) over several queues of one PostgreSQL schema.

tests/worker/test_multiqueue_prefetch.py's `MultiQueuePrefetchTest` (strict
priority and the weights' shares with prefetch, a write per queue a round with
the acks in it, caps counting prefetched jobs, hooks, a graceful stop giving the
prefetched jobs back to their own queues), run on a schema of the test's own;
without a server the module is skipped, and `make.py test` says so.
"""

from __future__ import annotations

import unittest

import worker.test_multiqueue_prefetch as prefetch
from harness.postgres import OnFreshSchema, needs_postgres


@needs_postgres
class PostgresMultiQueuePrefetchTest(OnFreshSchema, prefetch.MultiQueuePrefetchTest):
    pass


if __name__ == "__main__":
    unittest.main()
