"""The dashboard over memory://: the queues of its own process (a Django site's
dashboard mounted over a memory:// backend, a test's in-process dashboard)."""

from __future__ import annotations

import unittest
import uuid

from nobroker import Queue
from nobroker.dashboard import api
from nobroker.dashboard.hub import Hub


class MemoryHubTest(unittest.TestCase):
    def setUp(self) -> None:
        self.url = f"memory://hub-{uuid.uuid4().hex[:8]}"
        self.emails = Queue(self.url, "emails")
        self.addCleanup(self.emails.close)
        self.emails.enqueue_many([{"to": "a"}, {"to": "b"}])
        self.hub = Hub(self.url, readonly=False, queues=["default"])
        self.addCleanup(self.hub.close)

    def test_the_hub_lists_and_counts_the_processs_memory_queues(self) -> None:
        self.assertEqual(self.hub.names(), ["default", "emails"])
        self.assertEqual(self.hub.directory, self.url)
        overview = {q["name"]: q for q in api.get_overview(self.hub)["queues"]}
        self.assertEqual(overview["emails"]["stats"]["pending"], 2)

    def test_a_queue_made_later_appears_and_a_change_reaches_the_queue(self) -> None:
        with Queue(self.url, "reports") as reports:
            job = reports.enqueue({"r": 1})
            self.assertIn("reports", self.hub.names())
            api.post_action(self.hub, "reports", "cancel", {"id": job.id})
            self.assertEqual(reports.stats().pending, 0)


if __name__ == "__main__":
    unittest.main()
