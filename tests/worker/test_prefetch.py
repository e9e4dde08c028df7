"""Worker(prefetch=K): K jobs leased beyond the running ones, acks in batches.

In-process tests run on a directory and on memory://; the stop tests run a
real worker process and send it a real SIGTERM or SIGKILL: a graceful stop
gives the prefetched jobs back untried, a killed worker's prefetched jobs
come back when their leases run out.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
import unittest
from typing import Any

from harness.support import SRC, wait_until

from nobroker import Job, JobNotFoundError, JobState, Queue
from nobroker.worker import Worker
from worker.test_worker import NO_BACKOFF, WorkerTestCase


class PrefetchTest(WorkerTestCase):
    def counting_acks(self, q: Queue) -> tuple[list[int], list[int]]:
        """Wrap q.ack_many and q.ack_many_and_lease: the size of every batch acked,
        and how many jobs each ack_many_and_lease leased."""
        sizes: list[int] = []
        leased: list[int] = []
        plain, coalesced = q.ack_many, q.ack_many_and_lease

        def ack_many(jobs: list[Job]) -> None:
            sizes.append(len(jobs))
            plain(jobs)

        def ack_many_and_lease(jobs: list[Job], count: int, **options: Any) -> list[Job]:
            sizes.append(len(jobs))
            following = coalesced(jobs, count, **options)
            leased.append(len(following))
            return following

        q.ack_many = ack_many  # type: ignore[method-assign]
        q.ack_many_and_lease = ack_many_and_lease  # type: ignore[method-assign]
        return sizes, leased

    def test_every_job_runs_once_and_is_acked_in_batches(self) -> None:
        q = self.queue()
        q.enqueue_many([{"i": i} for i in range(60)])
        sizes, leased = self.counting_acks(q)
        seen: list[int] = []
        lock = threading.Lock()

        def handler(job: Job) -> None:
            time.sleep(0.002)
            with lock:
                seen.append(job.payload["i"])

        stats = Worker(q, handler, concurrency=4, prefetch=8, idle_timeout=0.3,
                       handle_signals=False).run()
        self.assertEqual(sorted(seen), list(range(60)))
        self.assertEqual((stats.succeeded, stats.failed, stats.lost), (60, 0, 0))
        self.assertEqual(sum(sizes), 60)
        self.assertEqual(q.stats().pending + q.stats().leased, 0)
        self.assertLess(len(sizes), 60)  # at least one write acked several jobs
        # Some acks' writes leased the next jobs too (K at a time, as the dispatcher;
        # it leases the rest): an acker's batch sees the room its acks make first.
        self.assertGreater(sum(leased), 0)
        self.assertLessEqual(sum(leased), 60 - 12)  # 12 held before any ack

    def test_failures_and_task_results_settle_in_their_slot(self) -> None:
        q = self.queue(backoff=NO_BACKOFF, max_attempts=2)

        @q.task
        def double(x: int) -> int:
            if x < 0:
                raise ValueError("negative")
            return 2 * x

        good = double.delay(21)
        bad = double.delay(-1)
        stats = Worker(q, concurrency=2, prefetch=4, idle_timeout=0.3,
                       handle_signals=False).run()
        self.assertEqual(q.result(good.id, timeout=1), 42)
        self.assertEqual(q.get(bad.id).state, JobState.DEAD)
        self.assertEqual((stats.succeeded, stats.retried, stats.dead_lettered), (1, 1, 1))

    def test_prefetched_jobs_are_heartbeated_while_they_wait(self) -> None:
        # One slot, each job 0.4 s, leases of 0.6 s: the third job waits 0.8 s in the
        # inbox, longer than its lease, which only heartbeats keep.
        q = self.queue(visibility_timeout=0.6)
        jobs = q.enqueue_many([{"i": i} for i in range(3)])
        attempts: dict[str, int] = {}

        def handler(job: Job) -> None:
            attempts[job.id] = job.attempts
            time.sleep(0.4)

        stats = Worker(q, handler, prefetch=2, idle_timeout=0.3,
                       handle_signals=False).run()
        self.assertEqual(attempts, {job.id: 1 for job in jobs})
        self.assertEqual((stats.succeeded, stats.lost), (3, 0))
        self.assertGreater(stats.heartbeats, 0)

    def test_stop_gives_prefetched_jobs_back_untried(self) -> None:
        q = self.queue()
        first, *rest = q.enqueue_many([{"i": i} for i in range(4)])
        started, release = threading.Event(), threading.Event()

        def handler(job: Job) -> None:
            started.set()
            release.wait(5)

        worker = Worker(q, handler, prefetch=3, handle_signals=False)
        finish = self.start(worker)
        self.assertTrue(started.wait(5))
        wait_until(lambda: q.stats().leased == 4, what="the prefetch")
        worker.stop()
        wait_until(lambda: q.stats().leased == 1, what="the prefetched jobs given back")
        release.set()
        stats = finish()
        self.assertEqual((stats.succeeded, stats.abandoned), (1, 0))
        with self.assertRaises(JobNotFoundError):
            q.get(first.id)
        for job in rest:
            back = q.get(job.id)
            self.assertEqual((back.state, back.attempts), (JobState.PENDING, 0))

    def test_ack_delay_lets_more_acks_share_a_write(self) -> None:
        # One slot, 2 ms jobs: without a delay the acker writes every job or two; with
        # one it writes when the inbox runs dry (the write leases the next K), the
        # delay ends, or a batch holds concurrency + K jobs.
        q = self.queue()
        q.enqueue_many([{"i": i} for i in range(40)])
        sizes, _ = self.counting_acks(q)
        seen: list[int] = []

        def handler(job: Job) -> None:
            time.sleep(0.002)
            seen.append(job.payload["i"])

        stats = Worker(q, handler, prefetch=16, ack_delay=0.5, idle_timeout=0.3,
                       handle_signals=False).run()
        self.assertEqual(sorted(seen), list(range(40)))
        self.assertEqual((stats.succeeded, stats.lost), (40, 0))
        self.assertEqual(sum(sizes), 40)
        self.assertLessEqual(len(sizes), 6, sizes)
        self.assertEqual(q.stats().pending + q.stats().leased, 0)

    def test_a_stop_ends_the_ack_delay(self) -> None:
        q = self.queue()
        q.enqueue_many([{"i": i} for i in range(20)])
        sizes, _ = self.counting_acks(q)
        worker = Worker(q, lambda job: None, prefetch=16, ack_delay=3.0, max_jobs=20,
                        handle_signals=False)
        began = time.monotonic()
        stats = worker.run()
        # The last batch waited for the stop (max_jobs), not for 3 s.
        self.assertLess(time.monotonic() - began, 2.5)
        self.assertEqual((stats.succeeded, sum(sizes)), (20, 20))

    def test_prefetch_is_checked(self) -> None:
        q = self.queue()
        with self.assertRaises(ValueError):
            Worker(q, print, prefetch=-1)
        self.assertIn("prefetch=2", repr(Worker(q, print, prefetch=2)))
        self.assertNotIn("prefetch=", repr(Worker(q, print)))
        with self.assertRaisesRegex(ValueError, "needs prefetch"):
            Worker(q, print, ack_delay=0.01)
        with self.assertRaisesRegex(ValueError, "a tenth of the visibility timeout"):
            Worker(q, print, prefetch=2, ack_delay=1.0, visibility_timeout=5.0)
        with self.assertRaises(ValueError):
            Worker(q, print, prefetch=2, ack_delay=-1)
        self.assertIn("ack_delay=0.01", repr(Worker(q, print, prefetch=2, ack_delay=0.01)))


class MemoryPrefetchTest(PrefetchTest):
    def location(self) -> str:
        return f"memory://{self.id()}"


# -- real processes, real signals --------------------------------------------

WORKER_SCRIPT = """\
import logging, os, sys, time
sys.path.insert(0, {src!r})
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from nobroker import Queue
from nobroker.worker import Worker

directory, seconds, visibility = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])

def handler(job):
    with open(os.path.join(directory, "started-" + job.id), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)

queue = Queue(os.path.join(directory, "q"), visibility_timeout=visibility)
stats = Worker(queue, handler, prefetch=3, shutdown_timeout=10).run()
print(stats.succeeded, stats.abandoned, stats.stopped_by)
"""


@unittest.skipIf(sys.platform == "win32", "POSIX signals")
class PrefetchProcessTest(WorkerTestCase):
    def spawn(self, seconds: float, visibility: float) -> subprocess.Popen[str]:
        script = self.tmp / "prefetch_script.py"
        script.write_text(textwrap.dedent(WORKER_SCRIPT.format(src=str(SRC))))
        self.log = self.tmp / "worker.log"
        with open(self.log, "w") as stderr:
            proc = subprocess.Popen([sys.executable, str(script), str(self.tmp), str(seconds),
                                     str(visibility)], stdout=subprocess.PIPE, stderr=stderr,
                                    text=True)

        def reap() -> None:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=10)

        self.addCleanup(reap)
        return proc

    def started(self, job: Job) -> None:
        wait_until((self.tmp / f"started-{job.id}").exists, what="the handler to start")

    def test_sigterm_gives_the_prefetched_jobs_back_untried(self) -> None:
        q = self.queue()
        first, *rest = q.enqueue_many([{"i": i} for i in range(4)])
        proc = self.spawn(seconds=1.0, visibility=30)
        self.started(first)
        wait_until(lambda: q.stats().leased == 4, what="the prefetch")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 0, self.log.read_text())
        self.assertEqual(out.split(), ["1", "0", "SIGTERM"])
        with self.assertRaises(JobNotFoundError):
            q.get(first.id)  # the running one finished and was acked
        for job in rest:
            back = q.get(job.id)
            self.assertEqual((back.state, back.attempts), (JobState.PENDING, 0))
            self.assertFalse((self.tmp / f"started-{job.id}").exists())

    def test_kill_9_brings_the_prefetched_jobs_back_after_their_leases(self) -> None:
        q = self.queue()
        first, *rest = q.enqueue_many([{"i": i} for i in range(4)])
        proc = self.spawn(seconds=60, visibility=0.6)
        self.started(first)
        wait_until(lambda: q.stats().leased == 4, what="the prefetch")
        proc.kill()
        proc.communicate(timeout=10)
        self.assertEqual(proc.returncode, -signal.SIGKILL)
        back: dict[str, Any] = {}

        def lease_all() -> bool:
            for job in q.lease(4):
                back[job.id] = job
            return len(back) == 4

        wait_until(lease_all, what="the dead worker's leases to run out")
        self.assertEqual(set(back), {first.id, *(job.id for job in rest)})
        for job in rest:  # never started, but leased: the expiry counts the attempt
            self.assertEqual(back[job.id].attempts, 2)
            self.assertFalse((self.tmp / f"started-{job.id}").exists())

    def test_kill_9_while_an_ack_waits_out_its_delay_leaves_that_job_leased(self) -> None:
        # Job 0 returns at once, job 1 runs long: job 0's ack waits out ack_delay (2 s)
        # for company while jobs 2 and 3 wait in the inbox. Killed meanwhile, job 0
        # was never acked: it stays leased, to be delivered again (at-least-once).
        q = self.queue()
        first, second, *_ = q.enqueue_many([{"i": i} for i in range(4)])
        script = self.tmp / "delay_script.py"
        script.write_text(textwrap.dedent(WORKER_SCRIPT.format(src=str(SRC))).replace(
            "time.sleep(seconds)", "time.sleep(seconds if job.payload['i'] else 0)").replace(
            "prefetch=3,", "prefetch=3, ack_delay=2.0,"))
        with open(self.tmp / "worker.log", "w") as stderr:
            proc = subprocess.Popen([sys.executable, str(script), str(self.tmp), "60", "30"],
                                    stdout=subprocess.PIPE, stderr=stderr, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.started(second)
        proc.kill()
        proc.communicate(timeout=10)
        self.assertTrue((self.tmp / f"started-{first.id}").exists())
        held = q.get(first.id)  # it returned, but its ack was still waiting
        self.assertEqual((held.state, held.attempts), (JobState.LEASED, 1))
        self.assertEqual(q.stats().leased, 4)


if __name__ == "__main__":
    unittest.main()
