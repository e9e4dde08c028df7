"""The seam between the Queue facade and its backends (backend.py, queue.py).

What the facade promises whatever stores the jobs: a postgres URL never
silently falls back to files, the Queue's clock and rng decide every time
and random choice, and a hand-built backend (with its own options) can sit
under a Queue. open_backend (opener.py) imports only the backend a location
names, and every backend has every operation of the protocol, and the
protocol of every capability it claims.
"""

from __future__ import annotations

import importlib.util
import inspect
import random
import subprocess
import sys
import tempfile
import unittest

from harness.support import FakeClock, TempDirTestCase, child_env

from nobroker import BackoffPolicy, NobrokerError, Queue
from nobroker.backend import Backend, JobExport, JobImport, QueueListing, Settings
from nobroker.file.backend import FileBackend, FileOptions
from nobroker.memory import MemoryBackend


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


def operations(protocol: type) -> set[str]:
    return {name for name, member in inspect.getmembers(protocol)
            if inspect.isfunction(member) and not name.startswith("_")}


def backend_classes() -> list[type]:
    classes: list[type] = [FileBackend, MemoryBackend]
    if importlib.util.find_spec("psycopg") is not None:
        from nobroker.postgres import PostgresBackend
        classes.append(PostgresBackend)
    return classes


# The protocol of each capability that adds operations.
CAPABILITY_PROTOCOLS: dict[str, type] = {"listing": QueueListing, "imports": JobImport,
                                         "exports": JobExport}


class ProtocolTest(unittest.TestCase):

    def test_every_backend_has_every_operation_of_the_protocol(self) -> None:
        self.assertGreater(len(operations(Backend)), 10)
        for cls in backend_classes():
            with self.subTest(backend=cls.__name__):
                missing = {name for name in operations(Backend)
                           if not callable(getattr(cls, name, None))}
                self.assertEqual(missing, set())

    def test_a_backend_has_the_operations_of_each_capability_it_claims(self) -> None:
        for cls in backend_classes():
            claimed = cls.capabilities if hasattr(cls, "capabilities") else None
            if claimed is None:  # FileBackend sets it per instance: its module's
                claimed = importlib.import_module(cls.__module__).CAPABILITIES
            for flag, protocol in CAPABILITY_PROTOCOLS.items():
                with self.subTest(backend=cls.__name__, capability=flag):
                    has = all(callable(getattr(cls, name, None))
                              for name in operations(protocol))
                    if getattr(claimed, flag):
                        self.assertTrue(has, f"claims {flag} without its operations")


class LazyImportTest(unittest.TestCase):
    def imported_after(self, location: str) -> set[str]:
        """The backend packages a fresh interpreter has imported after opening `location`."""
        code = ("import sys, nobroker\n"
                f"nobroker.Queue({location!r}).close()\n"
                "print(' '.join(sorted(m for m in ('nobroker.file', 'nobroker.postgres', "
                "'nobroker.memory', 'psycopg') if m in sys.modules)))\n")
        done = subprocess.run([sys.executable, "-c", code], env=child_env(), check=True,
                              capture_output=True, text=True, timeout=60)
        return set(done.stdout.split())

    def test_open_backend_imports_only_the_backend_the_location_names(self) -> None:
        self.assertEqual(self.imported_after("memory://lazy"), {"nobroker.memory"})
        with tempfile.TemporaryDirectory() as directory:
            self.assertEqual(self.imported_after(directory), {"nobroker.file"})


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
