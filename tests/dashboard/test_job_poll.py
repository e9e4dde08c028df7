"""The job page's poll: an unfinished job's workflow part is not scanned for again
every second when nothing changed (dashboard/places.py), and is when something did."""

from __future__ import annotations

from unittest import mock

from harness.support import TempDirTestCase

from nobroker import Queue
from nobroker.dashboard import api
from nobroker.dashboard.hub import Hub
from nobroker.tasks import lineage

# The scan itself (a read of up to SCAN_LIMIT jobs), counted wherever it is called from.
SCAN = "nobroker.tasks.lineage._children"


class JobPollTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        Queue(self.tmp / "q").close()  # the hub shows the queues it finds
        self.hub = Hub(str(self.tmp / "q"), readonly=False)
        self.addCleanup(self.hub.close)
        self.queue = self.hub.queue("default")

    def poll(self, job_id: str, times: int = 1) -> dict[str, object]:
        for _ in range(times):
            answer = api.get_job(self.hub, "default", job_id)
        return answer

    def test_polling_an_unchanged_job_scans_for_its_children_once(self) -> None:
        parent = self.queue.enqueue("parent")
        with mock.patch(SCAN, wraps=lineage._children) as scans:
            self.assertIsNone(self.poll(parent.id, times=5)["workflow"])
            self.assertEqual(scans.call_count, 1)
            self.queue.compact()  # rewrites the log, changes no job
            self.poll(parent.id, times=3)
            self.assertEqual(scans.call_count, 1)

    def test_a_new_child_or_a_state_change_is_scanned_for_at_the_next_poll(self) -> None:
        parent = self.queue.enqueue("parent")
        with mock.patch(SCAN, wraps=lineage._children) as scans:
            self.poll(parent.id)
            child = self.queue.enqueue("child", depends_on=[parent.id])
            workflow = self.poll(parent.id, times=3)["workflow"]
            self.assertEqual(scans.call_count, 2)
            self.assertEqual(workflow, {"parents": [], "children": [child.id],
                                        "children_complete": True})
            leased = self.queue.lease_one()
            self.assertEqual(leased.id if leased else None, parent.id)
            self.assertEqual(self.poll(parent.id, times=2)["job"]["state"],  # type: ignore[index]
                             "leased")
            self.assertEqual(scans.call_count, 3)

    def test_the_kept_lineages_are_bounded(self) -> None:
        jobs = self.queue.enqueue_many(range(5))
        self.hub.places = type(self.hub.places)(max_kept=2)
        with mock.patch(SCAN, wraps=lineage._children) as scans:
            for job in jobs:
                self.poll(job.id)
            self.poll(jobs[-1].id)  # still kept
            self.assertEqual(scans.call_count, 5)
            self.poll(jobs[0].id)  # dropped: scanned again
            self.assertEqual(scans.call_count, 6)
