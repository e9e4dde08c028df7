"""What leases promise a Dramatiq app on nobroker: a `dramatiq` worker killed with kill -9
mid-task loses no message (another worker runs it once the visibility timeout has
passed), and two workers never both complete one message, even when messages outlast
the visibility timeout (the consumer renews the lease while the message runs)."""

from __future__ import annotations

import time

from harness.dramatiq_support import DramatiqTestCase, needs_dramatiq

TIMEOUT_MS = 60_000


@needs_dramatiq
class KillNineTest(DramatiqTestCase):
    visibility_timeout = 2.0

    def test_a_worker_killed_mid_task_loses_no_message(self) -> None:
        mod = self.app()
        first = self.start_worker("first", "--processes", "2", "--threads", "2")
        message = mod.slow.send("k9", 600.0)
        self.wait_for_trace("started", "k9", 60)
        self.kill(first)
        self.assertEqual(self.traces("done"), [])
        killed_at = time.monotonic()
        self.start_worker("second", "--processes", "1", "--threads", "2")
        self.assertEqual(message.get_result(block=True, timeout=TIMEOUT_MS), "k9")
        self.assertEqual(self.traces("started"), ["k9", "k9"])  # run again, not lost
        self.assertEqual(self.traces("done"), ["k9"])
        self.assertGreaterEqual(time.monotonic() - killed_at, self.visibility_timeout * 0.9)
        self.assertEqual(mod.broker.queue("b.slow").stats().dead, 0)


@needs_dramatiq
class TwoWorkersTest(DramatiqTestCase):
    visibility_timeout = 1.5

    def test_two_workers_never_both_complete_one_message(self) -> None:
        mod = self.app()
        self.start_worker("one", "--processes", "2", "--threads", "3")
        self.start_worker("two", "--processes", "1", "--threads", "3")
        # Some messages run twice as long as the visibility timeout: only the lease
        # renewals keep another worker from taking them too.
        keys = [f"t{i}" for i in range(24)]
        messages = [mod.record.send(key, 3.0 if i % 6 == 0 else 0.05)
                    for i, key in enumerate(keys)]
        self.assertEqual([m.get_result(block=True, timeout=TIMEOUT_MS) for m in messages],
                         keys)
        time.sleep(self.visibility_timeout * 2)  # a second run would have finished by now
        self.assertEqual(sorted(self.traces("done")), sorted(keys))
        both = self.worker_log("one") + self.worker_log("two")
        self.assertNotIn("lease was lost", both)
        self.assertNotIn("lease ran out", both)
