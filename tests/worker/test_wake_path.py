"""The Worker's path from a wake-up to a lease: no extra queue call on it, and no spin.

An idle Worker blocks in `Queue.wait`; a producer's enqueue wakes it and it
leases. Whether the queue is paused is asked only after a wake that leased
nothing (a paused queue's ready jobs end every wait at once), so on
PostgreSQL an enqueue's pickup is not a round trip later than it need be,
and a paused queue with ready jobs is not leased in a tight loop.
"""

from __future__ import annotations

import threading
import unittest
from typing import Any

from harness.support import TempDirTestCase, wait_until

from nobroker import Job, Queue
from nobroker.worker import Worker


class CountingQueue:
    """The Queue, counting the calls the Worker makes to some of its methods."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self.calls: dict[str, int] = {"stats": 0, "lease": 0, "wait": 0}
        self.wait_ends_at_once = False  # as PostgreSQL's does for a paused queue's ready jobs

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._queue, name)
        if name not in self.calls:
            return target

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name == "wait" and self.wait_ends_at_once:
                return True
            return target(*args, **kwargs)

        return counted


class WakePathTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.q = Queue(self.tmp / "q")
        self.addCleanup(self.q.close)
        self.counting = CountingQueue(self.q)

    def run_worker(self, handler: Any, **options: Any) -> Worker:
        worker = Worker(self.counting, handler, handle_signals=False,  # type: ignore[arg-type]
                        **options)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        self.addCleanup(thread.join, 10)
        self.addCleanup(worker.stop, immediate=True)
        return worker

    def test_a_woken_worker_leases_without_asking_whether_the_queue_is_paused(self) -> None:
        handled = threading.Semaphore(0)

        def handle(job: Job) -> None:
            handled.release()

        self.run_worker(handle, poll_interval=5.0)
        for n in range(5):
            wait_until(lambda n=n: self.counting.calls["wait"] > n, timeout=10.0,
                       what="the worker to be idle in wait()")
            self.q.enqueue(n)
            self.assertTrue(handled.acquire(timeout=10))
        # Asking after every wake would be one stats() per pickup (5 here). A wake
        # may still lease nothing now and then: an enqueue whose poke lands after
        # the wait saw its job ready leaves that poke for the next wait (the file
        # backend's wait keeps pokes from before it looks: a spurious wake, which
        # the contract allows), and that wake does ask.
        self.assertLess(self.counting.calls["stats"], 5)

    def test_a_paused_queue_with_ready_jobs_is_not_leased_in_a_tight_loop(self) -> None:
        self.q.enqueue("ready")
        self.q.pause()
        self.counting.wait_ends_at_once = True
        self.run_worker(lambda job: None, poll_interval=0.2)
        wait_until(lambda: self.counting.calls["stats"] >= 3, timeout=10.0,
                   what="three pause checks")
        calls = dict(self.counting.calls)
        # Each pause check waits poll_interval: a lease and a wait at most per check
        # (a spinning worker would have leased thousands of times by now).
        self.assertLessEqual(calls["lease"], calls["stats"] + 2, calls)
        self.assertEqual(self.q.stats().pending, 1)
        self.counting.wait_ends_at_once = False
        self.q.resume()
        wait_until(lambda: self.q.stats().pending == 0, timeout=10.0, what="the job after resume")


if __name__ == "__main__":
    unittest.main()
