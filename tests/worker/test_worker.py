"""Tests for nobroker.worker: settling, retries, heartbeats, stopping, signals.

In-process tests run the Worker with small timeouts (a visibility timeout of
a fraction of a second) and wait for conditions with deadlines, never for a
fixed sleep. Signals and crashes are tested on real processes: a small
script runs a Worker, and the test sends it a real SIGTERM or SIGKILL.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import unittest
from collections.abc import Callable
from typing import Any

from harness.support import SRC, FakeClock, TempDirTestCase, wait_until

from nobroker import BackoffPolicy, Job, JobNotFoundError, JobState, Queue
from nobroker.worker import Worker, WorkerStats, describe_error

FAST_RETRY = BackoffPolicy(base=0.05, factor=2.0, jitter=0.0)
NO_BACKOFF = BackoffPolicy(base=0.0, jitter=0.0)


class WorkerTestCase(TempDirTestCase):
    def location(self) -> str:
        """Where the test's queue lives (MemoryWorkerTests: in memory)."""
        return str(self.tmp / "q")

    def queue(self, **options: Any) -> Queue:
        options.setdefault("backoff", FAST_RETRY)
        q = Queue(self.location(), **options)
        self.addCleanup(q.close)
        return q

    def start(self, worker: Worker) -> Callable[[], WorkerStats]:
        """Run `worker` in a thread; returns a function that joins it and gives its stats."""
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["stats"] = worker.run()
            except BaseException as exc:  # handed to the test thread below
                box["error"] = exc

        thread = threading.Thread(target=target, daemon=True)
        thread.start()

        def finish(timeout: float = 10.0) -> WorkerStats:
            thread.join(timeout)
            self.assertFalse(thread.is_alive(), "worker.run() did not return")
            if "error" in box:
                raise box["error"]
            stats: WorkerStats = box["stats"]
            return stats

        self.addCleanup(lambda: (worker.stop(immediate=True), thread.join(5)))
        return finish


class SettlingTest(WorkerTestCase):
    def test_a_returning_handler_acks_each_job_and_max_jobs_stops_cleanly(self) -> None:
        q = self.queue()
        jobs = q.enqueue_many([{"n": n} for n in range(3)])
        seen: list[Any] = []
        stats = Worker(q, lambda job: seen.append(job.payload), max_jobs=3,
                       handle_signals=False).run()
        self.assertEqual(seen, [{"n": 0}, {"n": 1}, {"n": 2}])
        self.assertEqual((stats.succeeded, stats.failed, stats.stopped_by), (3, 0, "max_jobs"))
        self.assertEqual((q.stats().done, q.stats().total), (3, 0))
        for job in jobs:
            with self.assertRaises(JobNotFoundError):
                q.get(job.id)

    def test_max_jobs_leaves_the_other_jobs_pending(self) -> None:
        for concurrency in (1, 3):
            with self.subTest(concurrency=concurrency):
                q = self.queue()
                q.purge()
                q.enqueue_many([{}] * 5)
                stats = Worker(q, lambda job: None, concurrency=concurrency, max_jobs=2,
                               handle_signals=False).run()
                self.assertEqual(stats.succeeded, 2)
                self.assertEqual((q.stats().pending, q.stats().leased), (3, 0))

    def test_a_raising_handler_is_retried_after_backoff_then_dead_lettered(self) -> None:
        q = self.queue(max_attempts=3, backoff=BackoffPolicy(base=0.2, factor=2, jitter=0))
        job = q.enqueue({"file": "a.jpg"})
        calls: list[tuple[int, float]] = []

        def handler(job: Job) -> None:
            calls.append((job.attempts, time.monotonic()))
            raise RuntimeError("disk full")

        with self.assertLogs("nobroker", logging.WARNING) as logs:
            stats = Worker(q, handler, max_jobs=3, handle_signals=False).run()
        self.assertEqual([attempt for attempt, _ in calls], [1, 2, 3])
        gaps = [later - earlier for (_, earlier), (_, later) in itertools.pairwise(calls)]
        self.assertGreaterEqual(gaps[0], 0.2 - 0.01)  # backoff: base, then base * factor
        self.assertGreaterEqual(gaps[1], 0.4 - 0.01)
        self.assertEqual((stats.retried, stats.dead_lettered, stats.succeeded), (2, 1, 0))
        dead = q.get(job.id)
        self.assertEqual(dead.state, JobState.DEAD)
        self.assertEqual(dead.last_error, "RuntimeError: disk full")
        self.assertEqual([j.id for j in q.dlq()], [job.id])
        failures = [r.getMessage() for r in logs.records if "failed" in r.getMessage()]
        self.assertEqual(len(failures), 3, failures)  # one line per failure
        for attempt, line in enumerate(failures, 1):
            self.assertIn(job.id, line)
            self.assertIn(f"attempt {attempt} of 3", line)
            self.assertIn("RuntimeError: disk full", line)
            self.assertNotIn("\n", line)
        self.assertIn("dead-letter", failures[-1])

    def test_the_error_recorded_is_the_exceptions_type_and_message(self) -> None:
        self.assertEqual(describe_error(KeyError("sku")), "KeyError: 'sku'")
        self.assertEqual(describe_error(TimeoutError()), "TimeoutError")

    def test_a_handler_calling_sys_exit_is_a_failed_job_not_a_dead_worker(self) -> None:
        q = self.queue(max_attempts=1)
        bad, good = q.enqueue({"exit": True}), q.enqueue({})

        def handler(job: Job) -> None:
            if job.payload.get("exit"):
                sys.exit(3)

        with self.assertLogs("nobroker", logging.ERROR):
            stats = Worker(q, handler, max_jobs=2, handle_signals=False).run()
        self.assertEqual((stats.dead_lettered, stats.succeeded), (1, 1))
        self.assertEqual(q.get(bad.id).last_error, "SystemExit: 3")
        with self.assertRaises(JobNotFoundError):
            q.get(good.id)

    def test_consecutive_jobs_are_acked_and_leased_in_one_write(self) -> None:
        calls: list[str] = []

        class CountingQueue(Queue):
            def lease(self, count: int = 1, **kw: Any) -> list[Job]:
                calls.append("lease")
                return super().lease(count, **kw)

            def ack(self, job: Job) -> None:
                calls.append("ack")
                super().ack(job)

            def ack_and_lease(self, job: Job, **kw: Any) -> Job | None:
                calls.append("ack_and_lease")
                return super().ack_and_lease(job, **kw)

        q = CountingQueue(self.location())
        self.addCleanup(q.close)
        q.enqueue_many([{}] * 5)
        Worker(q, lambda job: None, max_jobs=5, handle_signals=False).run()
        self.assertEqual(calls[0], "lease")
        self.assertEqual(calls.count("ack_and_lease"), 4)  # jobs 1-4 each hand over the next
        self.assertEqual(calls[-1], "ack")  # job 5: max_jobs reached, nothing more to lease
        self.assertEqual(calls.count("lease"), 1)

    def test_an_idle_worker_waits_on_the_queue_wake_up_channel_when_there_is_one(self) -> None:
        waits: list[float] = []

        class WakingQueue(Queue):
            def wait(self, timeout: float) -> bool:
                waits.append(timeout)
                return super().wait(timeout)

        q = WakingQueue(self.location())
        self.addCleanup(q.close)
        stats = Worker(q, lambda job: None, poll_interval=0.05, idle_timeout=0.3,
                       handle_signals=False).run()
        self.assertEqual(stats.stopped_by, "idle_timeout")
        self.assertGreaterEqual(len(waits), 1)
        self.assertLessEqual(max(waits), 0.3 + 1e-6)  # never past the idle deadline

    @unittest.skipUnless(hasattr(os, "mkfifo"), "the wake-up channel needs a named pipe")
    def test_an_enqueue_wakes_an_idle_worker_at_once(self) -> None:
        q = self.queue()
        if q.capabilities.in_process:
            self.skipTest("in_process: no named pipe to wait for (tests/memory shows the "
                          "in-memory queue's wake-up)")
        producer = Queue(self.location())
        self.addCleanup(producer.close)
        handled = threading.Event()
        worker = Worker(q, lambda job: handled.set(), poll_interval=5.0, max_jobs=1,
                        handle_signals=False)
        finish = self.start(worker)
        wait_until(lambda: (self.tmp / "q" / "default.wake").exists(),
                   what="the worker to start waiting")
        enqueued = time.monotonic()
        producer.enqueue({"wake": "up"})
        self.assertTrue(handled.wait(10))
        latency = time.monotonic() - enqueued
        self.assertLess(latency, 0.45, "woken by the poke, not by a 0.5 s wait or 5 s poll")
        self.assertEqual(finish().succeeded, 1)


class HeartbeatTest(WorkerTestCase):
    def test_heartbeats_keep_a_slow_job_longer_than_its_visibility_timeout(self) -> None:
        # A heartbeat every 0.3 s, so a lease lapses only if two in a row miss by
        # 0.6 s: a 0.3 s timeout lapsed under fsync load (an extend stalled 0.2 s).
        q = self.queue(visibility_timeout=0.9)
        job = q.enqueue({"slow": True})
        rival = Queue(self.location())  # another handle: would get the job if the lease lapsed
        self.addCleanup(rival.close)
        delivered: list[int] = []
        stolen: list[Job] = []

        def handler(job: Job) -> None:
            delivered.append(job.attempts)
            deadline = time.monotonic() + 2.8  # over three visibility timeouts
            while time.monotonic() < deadline:
                stolen.extend(rival.lease())
                time.sleep(0.02)

        stats = Worker(q, handler, max_jobs=1, handle_signals=False).run()
        self.assertEqual(delivered, [1])
        self.assertEqual(stolen, [])
        self.assertEqual(stats.succeeded, 1)
        self.assertGreaterEqual(stats.heartbeats, 3)
        with self.assertRaises(JobNotFoundError):
            q.get(job.id)

    def test_heartbeats_keep_each_chained_job_too(self) -> None:
        # A slot chains into its next job (ack_and_lease) without waking the other
        # threads, so the heartbeat must find each new flight by itself, even if it
        # last looked while the only flight was settling (and so not to be renewed).
        q = self.queue(visibility_timeout=0.9)  # a heartbeat every 0.3 s (0.45 lapsed under load)
        q.enqueue_many([{"n": n} for n in range(3)])
        observer = Queue(self.location(), readonly=True)
        self.addCleanup(observer.close)
        delivered: list[int] = []
        lapsed: list[str] = []

        class SlowSettle:
            """The queue, with an ack_and_lease longer than a heartbeat interval: the
            heartbeat surely looks while the flight settles."""

            def __init__(self, queue: Queue) -> None:
                self._queue = queue

            def __getattr__(self, name: str) -> Any:
                return getattr(self._queue, name)

            def ack_and_lease(self, *args: Any, **kwargs: Any) -> Job | None:
                time.sleep(0.35)
                return self._queue.ack_and_lease(*args, **kwargs)

        def handler(job: Job) -> None:
            delivered.append(job.attempts)
            deadline = time.monotonic() + 2.0  # over two visibility timeouts
            while time.monotonic() < deadline:
                seen = observer.get(job.id)  # a lapsed lease shows as a past deadline
                if seen.state is not JobState.LEASED or (seen.lease_expires_at or 0) < time.time():
                    lapsed.append(job.id)
                time.sleep(0.02)

        stats = Worker(SlowSettle(q), handler, max_jobs=3,  # type: ignore[arg-type]
                       handle_signals=False).run()
        self.assertEqual((delivered, lapsed), ([1, 1, 1], []))
        self.assertEqual((stats.succeeded, stats.lost), (3, 0))

    def count_wakes(self, **options: Any) -> int:
        """notify_all calls on the condition the dispatcher and the drain wait on, while
        a Worker(**options) runs 200 no-op jobs (the heartbeat and the acker wait on
        their own)."""
        q = self.queue()
        q.enqueue_many([{"n": n} for n in range(200)])
        notified = itertools.count()

        class CountingCondition(threading.Condition):
            def notify_all(self) -> None:
                next(notified)
                super().notify_all()

        worker = Worker(q, lambda job: None, max_jobs=200, handle_signals=False, **options)
        lock = threading.RLock()
        worker._cond = CountingCondition(lock)
        worker._arrivals, worker._beats, worker._acking = (
            threading.Condition(lock), threading.Condition(lock), threading.Condition(lock))
        self.assertEqual(worker.run().succeeded, 200)
        return next(notified)

    def test_a_slot_chaining_jobs_wakes_no_other_thread_per_job(self) -> None:
        # One wake per lease taken by the dispatcher and for the stop, not one per job
        # (each cost the dispatcher's and the heartbeat's threads a switch).
        self.assertLess(self.count_wakes(), 20)

    def test_the_prefetch_acker_wakes_the_dispatcher_only_when_it_would_lease(self) -> None:
        # A batch whose acks leave no room for K more (or whose write leased them)
        # gives the dispatcher nothing to do: beside a slot burning CPU, each such
        # wake-up cost a GIL hand-off. Waking it after every batch made about one
        # wake per batch, and a slot handing a job to an idle acker woke it too.
        self.assertLess(self.count_wakes(prefetch=16), 50)

    def test_a_heartbeat_that_finds_its_lease_fenced_gives_the_job_up(self) -> None:
        q = self.queue(visibility_timeout=0.3)
        job = q.enqueue({})
        # A rival whose clock runs 10 s ahead sees the lease as expired and takes the job.
        rival = Queue(self.location(), backoff=NO_BACKOFF, clock=lambda: time.time() + 10)
        self.addCleanup(rival.close)
        started, release = threading.Event(), threading.Event()

        def handler(job: Job) -> None:
            started.set()
            release.wait(10)

        worker = Worker(q, handler, idle_timeout=0.1, handle_signals=False)
        with self.assertLogs("nobroker", logging.WARNING) as logs:
            finish = self.start(worker)
            self.assertTrue(started.wait(10))
            taken = rival.lease_one() or rival.lease_one()  # the first call reclaims
            assert taken is not None
            self.assertEqual((taken.id, taken.attempts), (job.id, 2))
            wait_until(lambda: any("lease lost" in r.getMessage() for r in logs.records),
                       what="the heartbeat to notice the lost lease")
            release.set()
            stats = finish()
        self.assertEqual((stats.lost, stats.succeeded), (1, 0))
        line = next(r.getMessage() for r in logs.records if "lease lost" in r.getMessage())
        self.assertIn(job.id, line)
        now = q.get(job.id)  # the worker did not ack or nack the rival's delivery
        self.assertEqual((now.state, now.token), (JobState.LEASED, taken.token))
        rival.ack(taken)


class ConcurrencyTest(WorkerTestCase):
    def test_handlers_run_in_parallel_up_to_concurrency(self) -> None:
        q = self.queue()
        q.enqueue_many([{}] * 8)
        barrier = threading.Barrier(4, timeout=5)  # breaks unless 4 handlers meet
        running, peak = [0], [0]
        lock = threading.Lock()

        def handler(job: Job) -> None:
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            try:
                barrier.wait()
            finally:
                with lock:
                    running[0] -= 1

        stats = Worker(q, handler, concurrency=4, max_jobs=8, handle_signals=False).run()
        self.assertEqual((stats.succeeded, stats.failed), (8, 0))
        self.assertEqual(peak[0], 4)

    def test_concurrency_is_checked(self) -> None:
        q = self.queue()
        with self.assertRaises(ValueError):
            Worker(q, print, concurrency=0)
        with self.assertRaises(TypeError):
            Worker(q, print, concurrency=2.5)  # type: ignore[arg-type]


class StoppingTest(WorkerTestCase):
    def test_idle_timeout_stops_an_idle_worker(self) -> None:
        q = self.queue()
        started = time.monotonic()
        stats = Worker(q, lambda job: None, idle_timeout=0.2, handle_signals=False).run()
        self.assertEqual(stats.stopped_by, "idle_timeout")
        self.assertGreaterEqual(time.monotonic() - started, 0.2)
        self.assertLess(stats.seconds, 5)

    def test_stop_lets_the_in_flight_job_finish_and_leases_nothing_new(self) -> None:
        q = self.queue()
        first, second = q.enqueue({"n": 1}, priority=1), q.enqueue({"n": 2})
        started, release = threading.Event(), threading.Event()

        def handler(job: Job) -> None:
            started.set()
            release.wait(10)

        worker = Worker(q, handler, handle_signals=False)
        finish = self.start(worker)
        self.assertTrue(started.wait(10))
        worker.stop()
        release.set()
        stats = finish()
        self.assertEqual((stats.succeeded, stats.stopped_by, stats.forced), (1, "stop()", False))
        with self.assertRaises(JobNotFoundError):
            q.get(first.id)
        self.assertEqual(q.get(second.id).state, JobState.PENDING)
        self.assertEqual(q.get(second.id).attempts, 0)

    def test_a_handler_outliving_shutdown_timeout_is_abandoned_and_redelivered(self) -> None:
        q = self.queue(visibility_timeout=0.5)
        job = q.enqueue({})
        started, release, returned = threading.Event(), threading.Event(), threading.Event()

        def handler(job: Job) -> None:
            started.set()
            release.wait(30)  # "hangs" until the test lets go
            returned.set()

        worker = Worker(q, handler, shutdown_timeout=0.2, handle_signals=False)
        with self.assertLogs("nobroker", logging.WARNING) as logs:
            finish = self.start(worker)
            self.assertTrue(started.wait(10))
            worker.stop()
            stats = finish(5)
        self.assertEqual((stats.abandoned, stats.succeeded), (1, 0))
        self.assertTrue(any(job.id in r.getMessage() and "abandoned" in r.getMessage()
                            for r in logs.records))
        self.assertEqual(q.get(job.id).state, JobState.LEASED)
        again = wait_until(q.lease_one, what="the abandoned job's lease to run out")
        self.assertEqual((again.id, again.attempts), (job.id, 2))
        release.set()
        self.assertTrue(returned.wait(10))
        wait_until(lambda: not any(t.name.startswith("nobroker-slot") and t.is_alive()
                                   for t in threading.enumerate()), what="the slot to end")
        self.assertEqual(q.get(job.id).token, again.token)  # the late finish acked nothing
        q.ack(again)

    def test_stop_immediate_does_not_wait_for_the_handler(self) -> None:
        q = self.queue(visibility_timeout=5)
        q.enqueue({})
        started, release = threading.Event(), threading.Event()
        self.addCleanup(release.set)
        worker = Worker(q, lambda job: (started.set(), release.wait(30)),
                        handle_signals=False)
        finish = self.start(worker)
        self.assertTrue(started.wait(10))
        worker.stop(immediate=True)
        stats = finish(2)
        self.assertTrue(stats.forced)
        self.assertEqual(stats.abandoned, 1)

    def test_a_worker_runs_once(self) -> None:
        q = self.queue()
        worker = Worker(q, lambda job: None, idle_timeout=0, handle_signals=False)
        worker.run()
        with self.assertRaises(RuntimeError):
            worker.run()

    def test_read_only_queues_are_refused(self) -> None:
        # (async handlers were refused here until the Worker ran them: see test_tasks.py)
        self.queue()
        with self.assertRaises(ValueError):
            Worker(Queue(self.location(), readonly=True), print)


class NoWakeChannel:
    """A Queue without wait(): the worker polls it, idling through its `sleep`."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    def __getattr__(self, name: str) -> Any:
        if name == "wait":
            raise AttributeError(name)
        return getattr(self._queue, name)


class InjectedTimeTest(WorkerTestCase):
    def test_idle_timeout_and_stats_are_measured_on_the_clock_and_sleep_given(self) -> None:
        clock = FakeClock(0.0)
        naps: list[float] = []

        def sleep(seconds: float) -> None:
            naps.append(seconds)
            clock.advance(seconds)

        worker = Worker(NoWakeChannel(self.queue()), print, poll_interval=10.0,  # type: ignore[arg-type]
                        idle_timeout=30.0, handle_signals=False, clock=clock, sleep=sleep)
        started = time.monotonic()
        stats = worker.run()
        self.assertEqual(stats.stopped_by, "idle_timeout")
        self.assertEqual(naps, [10.0, 10.0, 10.0])
        self.assertEqual(stats.seconds, 30.0)
        self.assertLess(time.monotonic() - started, 10.0, "the worker slept for real")


class ReclaimTest(WorkerTestCase):
    def test_a_lease_that_reclaims_an_expired_job_can_lease_it_in_the_same_call(self) -> None:
        # The expiries a call finds are committed as their own batch before the call
        # plans, so with no backoff the reclaimed job is leasable in that same call.
        q = self.queue(backoff=NO_BACKOFF, visibility_timeout=0.05)
        q.enqueue({})
        first = q.lease_one()
        assert first is not None
        wait_until(lambda: time.time() > (first.lease_expires_at or 0) + 0.01,
                   what="the lease to expire")
        self.assertIsNotNone(q.lease_one())


class MemoryWorkerTests:
    """Mixed first into the in-process tests above: the same tests on a memory:// queue."""

    def location(self) -> str:
        return f"memory://{self.id()}"  # type: ignore[attr-defined]


class MemorySettlingTest(MemoryWorkerTests, SettlingTest):
    pass


class MemoryHeartbeatTest(MemoryWorkerTests, HeartbeatTest):
    pass


class MemoryConcurrencyTest(MemoryWorkerTests, ConcurrencyTest):
    pass


class MemoryStoppingTest(MemoryWorkerTests, StoppingTest):
    pass


class MemoryInjectedTimeTest(MemoryWorkerTests, InjectedTimeTest):
    pass


class MemoryReclaimTest(MemoryWorkerTests, ReclaimTest):
    pass


# -- real processes, real signals --------------------------------------------

WORKER_SCRIPT = """\
import json, logging, os, sys, time
sys.path.insert(0, {src!r})
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from nobroker import Queue
from nobroker.worker import Worker

directory, seconds, visibility = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])

def handler(job):
    with open(os.path.join(directory, "started-" + job.id), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)
    with open(os.path.join(directory, "finished-" + job.id), "w") as f:
        f.write("")

queue = Queue(os.path.join(directory, "q"), visibility_timeout=visibility)
stats = Worker(queue, handler, shutdown_timeout=10).run()
print(json.dumps({{"succeeded": stats.succeeded, "abandoned": stats.abandoned,
                  "stopped_by": stats.stopped_by, "forced": stats.forced}}))
sys.exit(3 if stats.forced else 0)
"""


@unittest.skipIf(sys.platform == "win32", "POSIX signals")
class WorkerProcessTest(WorkerTestCase):
    def spawn(self, seconds: float, visibility: float) -> subprocess.Popen[str]:
        script = self.tmp / "worker_script.py"
        script.write_text(textwrap.dedent(WORKER_SCRIPT.format(src=str(SRC))))
        self.log = self.tmp / "worker.log"  # a file, so the test can read it while it runs
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

    def test_sigterm_mid_job_finishes_and_acks_the_job_then_exits_0(self) -> None:
        q = self.queue()
        job = q.enqueue({}, priority=1)
        later = q.enqueue({})
        proc = self.spawn(seconds=1.0, visibility=30)
        self.started(job)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 0, self.log.read_text())
        self.assertTrue((self.tmp / f"finished-{job.id}").exists())
        self.assertEqual(json.loads(out), {"succeeded": 1, "abandoned": 0,
                                           "stopped_by": "SIGTERM", "forced": False})
        with self.assertRaises(JobNotFoundError):
            q.get(job.id)  # acked
        self.assertEqual(q.get(later.id).state, JobState.PENDING)  # never leased
        self.assertEqual(q.stats().leased, 0)

    def test_a_second_signal_exits_at_once_and_the_job_comes_back_later(self) -> None:
        q = self.queue()
        job = q.enqueue({})
        proc = self.spawn(seconds=60, visibility=0.6)
        self.started(job)
        proc.send_signal(signal.SIGTERM)
        # Two signals sent before the first is handled merge into one (POSIX does that).
        wait_until(lambda: "stopping (SIGTERM)" in self.log.read_text(),
                   what="the worker to act on the first signal")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)  # far sooner than the 60 s handler
        self.assertEqual(proc.returncode, 3, self.log.read_text())
        self.assertEqual(json.loads(out)["forced"], True)
        self.assertFalse((self.tmp / f"finished-{job.id}").exists())
        again = wait_until(q.lease_one, what="the job's lease to run out")
        self.assertEqual((again.id, again.attempts), (job.id, 2))

    def test_kill_9_mid_job_brings_the_job_back(self) -> None:
        q = self.queue()
        job = q.enqueue({"important": True})
        proc = self.spawn(seconds=60, visibility=0.6)
        self.started(job)
        proc.kill()
        proc.communicate(timeout=10)
        self.assertEqual(proc.returncode, -signal.SIGKILL)
        self.assertEqual(q.get(job.id).state, JobState.LEASED)
        again = wait_until(q.lease_one, what="the dead worker's lease to run out")
        self.assertEqual((again.id, again.payload, again.attempts), (job.id, job.payload, 2))
        self.assertIn("lease expired", again.last_error or "")


if __name__ == "__main__":
    unittest.main()
