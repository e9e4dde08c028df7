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
from harness.postgres import drop_schema, fresh_schema_url, needs_postgres


@needs_postgres
class PostgresMultiQueuePrefetchTest(prefetch.MultiQueuePrefetchTest):
    def setUp(self) -> None:
        super().setUp()
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)

    def location(self) -> str:
        return self.url


if __name__ == "__main__":
    unittest.main()
