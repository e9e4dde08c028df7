"""What late acks promise on nobroker: a worker killed with kill -9 mid-task loses no
message (another worker runs it once the visibility timeout has passed), and two
workers never both complete one message, even when tasks outlast the visibility
timeout (the lease is extended while the task runs); a chord's callback runs once
although its members finish in four processes at once."""

from __future__ import annotations

import time

from harness.celery_support import CeleryTestCase, needs_celery

TIMEOUT = 60.0


@needs_celery
class KillNineTest(CeleryTestCase):
    visibility_timeout = 2.0

    def _killed_mid_task(self, *pool: str) -> None:
        mod = self.app()
        first = self.start_worker("first", *pool)
        result = mod.slow.delay("k9", 600.0)
        self.wait_for_trace("started", "k9", TIMEOUT)
        self.kill(first)
        self.assertEqual(self.traces("done"), [])
        killed_at = time.monotonic()
        self.start_worker("second", *pool)
        self.assertEqual(result.get(timeout=TIMEOUT), "k9")
        self.assertEqual(self.traces("started"), ["k9", "k9"])  # run again, not lost
        self.assertEqual(self.traces("done"), ["k9"])
        self.assertGreaterEqual(time.monotonic() - killed_at, self.visibility_timeout * 0.9)

    def test_threads_pool_killed_mid_task_loses_no_message(self) -> None:
        self._killed_mid_task("-P", "threads", "-c", "2")

    def test_prefork_pool_killed_mid_task_loses_no_message(self) -> None:
        self._killed_mid_task("-P", "prefork", "-c", "1")


@needs_celery
class TwoWorkersTest(CeleryTestCase):
    visibility_timeout = 1.5

    def test_two_workers_never_both_complete_one_message(self) -> None:
        mod = self.app()
        self.start_worker("one", "-P", "threads", "-c", "3")
        self.start_worker("two", "-P", "threads", "-c", "3")
        # Some tasks run twice as long as the visibility timeout: only the lease
        # extensions keep the other worker from taking them too.
        keys = [f"t{i}" for i in range(24)]
        results = [mod.record.delay(key, 3.0 if i % 6 == 0 else 0.05)
                   for i, key in enumerate(keys)]
        self.assertEqual([r.get(timeout=TIMEOUT) for r in results], keys)
        time.sleep(self.visibility_timeout * 2)  # a double run would have finished by now
        self.assertEqual(self.traces("done"), sorted(keys))
        both = self.worker_log("one") + self.worker_log("two")
        self.assertNotIn("lease ran out", both)

    def test_a_chord_callback_runs_once_across_worker_processes(self) -> None:
        from celery import chord

        mod = self.app()
        self.start_worker("one", "-P", "prefork", "-c", "2")
        self.start_worker("two", "-P", "prefork", "-c", "2")
        members = [mod.record.s(f"m{i}", 0.01 * (i % 3)) for i in range(16)]
        result = chord(members)(mod.collect.s())
        self.assertEqual(result.get(timeout=TIMEOUT), 16)
        time.sleep(1.0)  # a second callback would be on its way by now
        self.assertEqual(self.traces("callback"), ["chord"])
        self.assertEqual(len(self.traces("done")), 16)
