"""The seam between the Queue facade and its backends (backend.py, queue.py).

What the facade promises whatever stores the jobs: a postgres URL never
silently falls back to files, the Queue's clock and rng decide every time
and random choice, and a hand-built backend (with its own options) can sit
under a Queue. The file backend is the one at hand.
"""

from __future__ import annotations

import importlib.util
import inspect
import random
import unittest

from harness.support import FakeClock, TempDirTestCase

from nobroker import BackoffPolicy, NobrokerError, Queue
from nobroker.backend import Backend, Settings
from nobroker.file.backend import FileBackend, FileOptions


class PostgresUrlTest(TempDirTestCase):
    @unittest.skipIf(importlib.util.find_spec("nobroker.postgres") is not None,
                     "the PostgreSQL backend is installed")
    def test_a_postgres_url_without_the_backend_names_the_pip_extra(self) -> None:
        for url in ("postgresql://localhost/jobs", "postgres://u@db:5432/jobs"):
            with self.subTest(url=url), self.assertRaises(NobrokerError) as caught:
                Queue(url)
            self.assertIn('pip install "nobroker[postgres]"', str(caught.exception))


class FromBackendTest(TempDirTestCase):
    def test_from_backend_puts_a_queue_over_a_file_backend_with_its_options(self) -> None:
        backend = FileBackend(self.tmp / "q", "jobs", Settings(visibility_timeout=7.0),
                              FileOptions(checkpoints=False, checkpoint_after_bytes=0))
        with Queue.from_backend(backend) as q:
            self.assertIs(q.backend, backend)
            self.assertEqual((q.name, q.visibility_timeout), ("jobs", 7.0))
            job = q.enqueue({"n": 1})
            self.assertEqual(q.get(job.id).payload, {"n": 1})
        # checkpoint_after_bytes=0 would save one at close; checkpoints=False wins.
        self.assertEqual(list(self.tmp.glob("q/*.ckpt")), [])
        with Queue(self.tmp / "q", "jobs") as again:
            self.assertEqual(again.stats().pending, 1)

    def test_the_file_backend_has_every_operation_of_the_protocol(self) -> None:
        wanted = {name for name, member in inspect.getmembers(Backend)
                  if inspect.isfunction(member) and not name.startswith("_")}
        self.assertGreater(len(wanted), 10)
        missing = {name for name in wanted if not callable(getattr(FileBackend, name, None))}
        self.assertEqual(missing, set())


class InjectedRandomnessTest(TempDirTestCase):
    def nacked_at(self, directory: str, seed: int) -> float:
        clock = FakeClock()
        with Queue(self.tmp / directory, clock=clock, rng=random.Random(seed),
                   backoff=BackoffPolicy(base=100.0, jitter=1.0)) as q:
            q.enqueue("x")
            return q.nack(q.lease()[0]).available_at - clock.now

    def test_retry_jitter_comes_from_the_queues_rng_not_the_random_module(self) -> None:
        random.seed(1)
        first = self.nacked_at("a", seed=42)
        random.seed(2)  # a decision drawn from the random module would change here
        self.assertEqual(self.nacked_at("b", seed=42), first)
        self.assertNotEqual(self.nacked_at("c", seed=43), first)


class QueueTimeTest(TempDirTestCase):
    def test_wait_uses_the_recorded_time_when_the_clock_steps_back(self) -> None:
        clock = FakeClock()
        with Queue(self.tmp / "q", clock=clock) as q:
            q.enqueue("due at +10", delay=10)
            clock.advance(20)
            q.enqueue("due at +120", delay=100)  # records +20 as the queue's time
            clock.advance(-15)  # the system clock is stepped back to +5
            # The queue's time never goes backwards: at +20 the first job is due.
            self.assertTrue(q.wait(0))
            self.assertEqual(len(q.lease(5)), 1)


if __name__ == "__main__":
    unittest.main()
