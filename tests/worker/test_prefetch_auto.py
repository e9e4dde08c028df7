"""Worker(prefetch="auto"): K follows the recent job durations (worker/prefetch.py).

Short jobs get prefetched, long ones do not, so that a second worker is not
starved by the first one's prefetch; the control with a fixed K shows the
starvation the test would catch.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from nobroker import Job
from nobroker.worker import Worker
from nobroker.worker.prefetch import AUTO_CAP
from worker.test_worker import WorkerTestCase


class PrefetchAutoTest(WorkerTestCase):
    def test_short_jobs_raise_k_to_the_cap_and_long_ones_keep_it_at_zero(self) -> None:
        q = self.queue()
        q.enqueue_many([{"i": i} for i in range(300)])
        worker = Worker(q, lambda job: None, prefetch="auto", max_jobs=300,
                        handle_signals=False)
        self.assertEqual(worker.prefetch, 0)  # nothing measured yet: no prefetch
        self.assertIn("prefetch=auto", repr(worker))
        self.assertEqual(worker.run().succeeded, 300)
        self.assertEqual(worker.prefetch, AUTO_CAP)
        q.enqueue_many([{"i": i} for i in range(3)])
        slow = Worker(q, lambda job: time.sleep(0.15), prefetch="auto", concurrency=1,
                      max_jobs=3, handle_signals=False)
        self.assertEqual(slow.run().succeeded, 3)
        self.assertEqual(slow.prefetch, 0)  # 1 slot x 0.1 s / 0.15 s: under one job

    def shares(self, prefetch: int | str) -> Counter[str]:
        """Two one-slot workers on one queue of 6 long jobs, the second started once the
        first is at work: how many jobs each ran."""
        q = self.queue()
        q.enqueue_many([{"i": i} for i in range(6)])
        ran: Counter[str] = Counter()
        first_started = threading.Event()

        def handler(name: str) -> object:
            def run(job: Job) -> None:
                ran[name] += 1
                first_started.set()
                time.sleep(0.2)
            return run

        first = Worker(q, handler("first"), prefetch=prefetch, idle_timeout=0.5,
                       handle_signals=False)
        finish_first = self.start(first)
        self.assertTrue(first_started.wait(5))
        second = Worker(self.queue(), handler("second"), prefetch=prefetch,
                        idle_timeout=0.5, handle_signals=False)
        finish_second = self.start(second)
        finish_first(15)
        finish_second(15)
        self.assertEqual(sum(ran.values()), 6)
        return ran

    def test_two_workers_share_long_jobs_fairly(self) -> None:
        ran = self.shares("auto")
        self.assertGreaterEqual(ran["second"], 2, ran)
        self.assertGreaterEqual(ran["first"], 2, ran)

    def test_a_fixed_prefetch_starves_the_second_worker_so_the_check_can_fail(
            self) -> None:
        self.assertEqual(self.shares(16)["second"], 0)

    def test_auto_is_the_only_word_prefetch_takes(self) -> None:
        q = self.queue()
        with self.assertRaises((TypeError, ValueError)):
            Worker(q, print, prefetch="lots")
        Worker(q, print, prefetch="auto", ack_delay=0.01)  # ack_delay goes with auto
