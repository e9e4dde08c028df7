"""Tests for the task layer: @q.task, .delay(), periodic ticks, and the Worker running tasks.

In-process tests use a FakeClock where time is the subject. Anything about
workers -- killed children, overlapping coroutines, unknown tasks -- runs
real `nobroker work MODULE` processes on a tasks module the test writes, and
waits for conditions with deadlines. The process tests that every backend
must pass (delay/get, time limits, cancel, periodic ticks with two workers)
are test_task_processes.py's suite, run there on files and in
tests/postgres/test_postgres_tasks.py on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from harness.support import FakeClock, TempDirTestCase, WorkerProcessCase, wait_until

from nobroker import (
    BackoffPolicy,
    Job,
    JobNotFoundError,
    JobState,
    Queue,
    Retry,
    SerializationError,
    Snooze,
    TaskLockedError,
    Worker,
)
from nobroker.tasks import Scheduler, TaskResult, current_job, registry_of, tick_job_id

FAST_RETRY = BackoffPolicy(base=0.05, factor=1.0, jitter=0.0)


# -- the API, in process ----------------------------------------------------

class InProcessCase(TempDirTestCase):
    def location(self, name: str) -> str:
        """Where the test's queue `name` lives (MemoryTaskTests: in memory)."""
        return str(self.tmp / name)


class TaskApiTest(InProcessCase):
    def setUp(self) -> None:
        super().setUp()
        self.clock = FakeClock()
        self.q = Queue(self.location("q"), clock=self.clock)
        self.addCleanup(self.q.close)

    def test_delay_enqueues_the_documented_payload_and_returns_a_result_handle(self) -> None:
        @self.q.task
        def send(to: str, subject: str = "") -> None:
            raise AssertionError("delay must not run the function")

        r = send.delay("ada@example.com", subject="hi")
        self.assertIsInstance(r, TaskResult)
        job = self.q.get(r.id)
        self.assertEqual(job.payload, {"task": send.name, "args": ["ada@example.com"],
                                       "kwargs": {"subject": "hi"}})
        self.assertEqual(send.name, f"{__name__}.TaskApiTest.test_delay_enqueues_the_"
                                    f"documented_payload_and_returns_a_result_handle."
                                    f"<locals>.send")
        self.assertIs(r.state, JobState.PENDING)
        self.assertFalse(r.ready())

    def test_a_plain_call_runs_the_function_in_process_and_enqueues_nothing(self) -> None:
        calls: list[tuple[int, int]] = []

        @self.q.task(name="add")
        def add(a: int, b: int) -> int:
            calls.append((a, b))
            return a + b

        self.assertEqual(add(2, 3), 5)
        self.assertEqual(calls, [(2, 3)])
        self.assertEqual(self.q.stats().total, 0)

    def test_apply_async_passes_the_queue_options(self) -> None:
        @self.q.task(name="t", priority=3, max_attempts=2)
        def t() -> None:
            pass

        now = self.clock()
        plain = self.q.get(t.delay().id)
        self.assertEqual((plain.priority, plain.max_attempts), (3, 2))
        later = self.q.get(t.apply_async(delay=60, priority=9, job_id="k1").id)
        self.assertEqual((later.id, later.priority, later.available_at), ("k1", 9, now + 60))
        at_eta = self.q.get(t.apply_async(eta=now + 120).id)
        self.assertEqual(at_eta.available_at, now + 120)
        again = t.apply_async(job_id="k1")  # an idempotency key: nothing new is written
        self.assertEqual(again.id, "k1")
        self.assertEqual(self.q.stats().total, 3)
        with self.assertRaises(ValueError):
            t.apply_async(delay=1, eta=now)

    def test_apply_async_depends_on_task_results_and_the_worker_runs_them_in_order(self
                                                                                  ) -> None:
        ran: list[str] = []

        @self.q.task(name="step")
        def step(name: str) -> str:
            ran.append(name)
            return name

        first, second = step.delay("first"), step.delay("second")
        last = step.apply_async(("last",), depends_on=[first, second.id])
        self.assertIs(last.state, JobState.WAITING)
        worker = Worker(self.q, max_jobs=3, handle_signals=False, poll_interval=0.01)
        worker.run()
        self.assertEqual(ran[-1], "last")
        self.assertEqual(last.get(timeout=0), "last")
        with self.assertRaises(JobNotFoundError):
            step.apply_async(("never",), depends_on=["no-such-job"])

    def test_non_json_arguments_raise_serialization_error_from_delay_and_write_nothing(
            self) -> None:
        @self.q.task(name="t")
        def t(x: object) -> None:
            pass

        for bad in (object(), {1, 2}, float("nan"), b"bytes"):
            with self.subTest(bad=bad):
                with self.assertRaises(SerializationError) as caught:
                    t.delay(bad)
                self.assertIn("task 't': arguments are not JSON", str(caught.exception))
        with self.assertRaises(SerializationError):
            t.delay(x=object())
        self.assertEqual(self.q.stats().total, 0)

    def test_adelay_enqueues_from_a_coroutine(self) -> None:
        @self.q.task(name="t")
        def t(n: int) -> None:
            pass

        async def main() -> TaskResult:
            return await t.adelay(7)

        r = asyncio.run(main())
        self.assertEqual(self.q.get(r.id).payload["args"], [7])

    def test_task_names_are_unique_per_queue(self) -> None:
        @self.q.task(name="same")
        def one() -> None:
            pass

        with self.assertRaises(ValueError):
            @self.q.task(name="same")
            def two() -> None:
                pass

        other = Queue(self.location("other"))
        self.addCleanup(other.close)

        @other.task(name="same")  # another queue has its own registry
        def three() -> None:
            pass

        self.assertEqual([t.name for t in registry_of(self.q)], ["same"])

    def test_a_worker_needs_a_handler_or_registered_tasks(self) -> None:
        with self.assertRaises(ValueError) as caught:
            Worker(self.q)
        self.assertIn("no tasks registered", str(caught.exception))
        with self.assertRaises(ValueError):
            Worker(self.q, print, pool="fork")

    def test_a_registry_resolver_names_tasks_the_worker_was_not_given(self) -> None:
        asked: list[str] = []

        def resolve(name: str) -> Any:
            asked.append(name)
            return self.q.task(lambda x: x * 2, name=name) if name == "late.double" else None

        registry_of(self.q).resolver = resolve
        worker = Worker(self.q, max_jobs=2, handle_signals=False)  # no task registered yet
        known = self.q.enqueue({"task": "late.double", "args": [21], "kwargs": {}})
        unknown = self.q.enqueue({"task": "late.nothing", "args": [], "kwargs": {}},
                                 max_attempts=1)
        worker.run()
        self.assertEqual(self.q.get(known.id).result, 42)
        self.assertIn("unknown task 'late.nothing'", self.q.get(unknown.id).last_error or "")
        self.assertEqual(sorted(asked), ["late.double", "late.nothing"])

    def test_the_process_pool_refuses_a_handler_it_cannot_import(self) -> None:
        with self.assertRaises(ValueError) as caught:
            Worker(self.q, lambda job: None, pool="process")
        self.assertIn("cannot be imported", str(caught.exception))

    def test_periodic_needs_exactly_one_of_cron_and_every(self) -> None:
        with self.assertRaises(ValueError):
            self.q.periodic()
        with self.assertRaises(ValueError):
            self.q.periodic(cron="* * * * *", every=60)
        with self.assertRaises(ValueError):
            self.q.periodic(cron="61 * * * *")

    def test_delay_on_commit_waits_for_a_frameworks_commit_or_says_why_not(self) -> None:
        from nobroker import NobrokerError, transactions

        @self.q.task(name="later")
        def later(n: int) -> int:
            return n

        with self.assertRaisesRegex(NobrokerError, "'nobroker.django' to INSTALLED_APPS"):
            later.delay_on_commit(1)  # no framework says when a transaction commits
        deferred: list[Callable[[], object]] = []
        transactions.use_on_commit(deferred.append)  # what the Django app does
        self.addCleanup(transactions.use_on_commit, None)
        with self.assertRaisesRegex(SerializationError, "arguments are not JSON"):
            later.delay_on_commit(float("nan"))
        later.delay_on_commit(2)
        self.assertEqual((self.q.stats().total, len(deferred)), (0, 1))
        deferred[0]()  # the commit
        [job] = self.q.list_jobs()
        self.assertEqual(job.payload["args"], [2])


# -- the scheduler, in process with a fake clock ----------------------------

class SchedulerTest(InProcessCase):
    def setUp(self) -> None:
        super().setUp()
        self.clock = FakeClock(start=1_800_000_030.0)  # 30 s past a whole minute
        self.q = Queue(self.location("q"), clock=self.clock)
        self.addCleanup(self.q.close)

        @self.q.periodic(every=60, name="beat")
        def beat() -> None:
            pass

        self.beat = beat

    def scheduler(self) -> Scheduler:
        return Scheduler(self.q, registry_of(self.q).periodic(), self.clock)

    def ids(self) -> list[str]:
        return sorted(job.id for job in self.q.list_jobs())

    def test_start_enqueues_only_the_latest_missed_tick(self) -> None:
        self.scheduler().start()
        self.assertEqual(self.ids(), [tick_job_id("beat", 1_800_000_000.0)])

    def test_a_tick_older_than_the_key_retention_is_not_caught_up(self) -> None:
        q = Queue(self.location("short"), clock=self.clock, key_retention=20.0)
        self.addCleanup(q.close)
        q.periodic(every=60, name="beat")(lambda: None)
        Scheduler(q, registry_of(q).periodic(), self.clock).start()
        self.assertEqual(q.stats().total, 0)  # the last tick was 30 s ago: unknowable

    def test_each_due_tick_is_enqueued_once_and_a_late_wake_skips_to_the_latest(self) -> None:
        scheduler = self.scheduler()
        scheduler.start()
        first = 1_800_000_000.0
        self.assertEqual(scheduler.run_due(), first + 60)  # nothing due yet: says when
        self.clock.advance(30)  # exactly on the next tick
        self.assertEqual(scheduler.run_due(), first + 120)
        self.assertEqual(scheduler.run_due(), first + 120)  # twice: still one job
        self.clock.advance(60 * 5)  # asleep over five ticks: only the latest runs
        scheduler.run_due()
        self.assertEqual(self.ids(), sorted(tick_job_id("beat", first + n)
                                            for n in (0, 60, 360)))

    def test_two_schedulers_on_one_queue_enqueue_each_tick_once(self) -> None:
        other = Queue(self.location("q"), clock=self.clock)
        self.addCleanup(other.close)
        a, b = self.scheduler(), Scheduler(other, registry_of(self.q).periodic(), self.clock)
        a.start()
        b.start()
        for _ in range(10):
            self.clock.advance(60)
            a.run_due()
            b.run_due()
        self.assertEqual(len(self.ids()), 11)
        self.assertEqual(a.enqueued + b.enqueued, 22)  # each saw each tick; one job each


@unittest.skipUnless(zoneinfo.available_timezones(), "no time zone database on this system")
class ZonedSchedulerTest(InProcessCase):
    """Cron in Europe/Paris through the night the clocks go back (25 October 2026,
    03:00 CEST -> 02:00 CET at 01:00 UTC), two schedulers on one queue file."""

    def test_two_schedulers_through_the_fall_back_night_enqueue_each_tick_once(self) -> None:
        start = datetime(2026, 10, 24, 23, 0, tzinfo=UTC).timestamp()
        clock = FakeClock(start=start)
        q = Queue(self.location("q"), clock=clock)
        self.addCleanup(q.close)
        q.periodic(cron="30 2 * * *", tz="Europe/Paris", name="daily")(lambda: None)
        q.periodic(cron="0 * * * *", tz="Europe/Paris", name="hourly")(lambda: None)
        other = Queue(self.location("q"), clock=clock)
        self.addCleanup(other.close)
        tasks = registry_of(q).periodic()
        schedulers = [Scheduler(q, tasks, clock), Scheduler(other, tasks, clock)]
        for scheduler in schedulers:
            scheduler.start()
        while clock.now < start + 4 * 3600:
            clock.advance(60)
            for scheduler in schedulers:
                scheduler.run_due()
        self.assertEqual(sorted(job.id for job in q.list_jobs()), [
            "periodic:daily:2026-10-24T00:30:00Z",  # the latest missed at start
            "periodic:daily:2026-10-25T00:30:00Z",  # 02:30 CEST; not again at 02:30 CET
            "periodic:hourly:2026-10-24T23:00:00Z",
            "periodic:hourly:2026-10-25T00:00:00Z",  # 02:00 CEST
            "periodic:hourly:2026-10-25T01:00:00Z",  # 02:00 CET
            "periodic:hourly:2026-10-25T02:00:00Z",
            "periodic:hourly:2026-10-25T03:00:00Z"])

    def test_a_bad_zone_is_refused_when_the_task_is_declared(self) -> None:
        q = Queue(self.location("q"))
        self.addCleanup(q.close)
        with self.assertRaises(ValueError) as caught:
            q.periodic(cron="0 9 * * *", tz="Mars/Olympus_Mons")
        self.assertIn("'Mars/Olympus_Mons' is not a zone of the tz database",
                      str(caught.exception))
        self.assertEqual(list(registry_of(q)), [])


# -- the Worker running tasks, in process -----------------------------------

class WorkerTaskTest(InProcessCase):
    def setUp(self) -> None:
        super().setUp()
        self.q = Queue(self.location("q"), backoff=FAST_RETRY)
        self.addCleanup(self.q.close)

    def run_worker(self, worker: Worker) -> Callable[[], Any]:
        box: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: box.update(stats=worker.run()), daemon=True)
        thread.start()
        self.addCleanup(lambda: (worker.stop(immediate=True), thread.join(10)))

        def finish() -> Any:
            thread.join(20)
            self.assertFalse(thread.is_alive(), "worker.run() did not return")
            return box["stats"]

        return finish

    def test_a_thread_pool_time_limit_nacks_the_job_and_abandons_the_thread(self) -> None:
        release = threading.Event()
        self.addCleanup(release.set)
        entered = threading.Event()

        @self.q.task(name="stuck", timeout=0.3)
        def stuck() -> None:
            entered.set()
            release.wait()

        @self.q.task(name="quick")
        def quick() -> str:
            return "ok"

        stuck.apply_async(max_attempts=1)
        quick.delay()
        finish = self.run_worker(Worker(self.q, max_jobs=2, handle_signals=False))
        stats = finish()
        self.assertTrue(entered.is_set())
        self.assertFalse(release.is_set())  # the thread is still blocked: abandoned, not ended
        (dead,) = self.q.dlq()
        self.assertEqual(dead.last_error, "TimeoutError: exceeded 0.3 s")
        self.assertEqual((stats.succeeded, stats.dead_lettered, stats.timed_out), (1, 1, 1))

    def test_a_worker_timeout_limits_plain_handlers_too(self) -> None:
        release = threading.Event()
        self.addCleanup(release.set)
        self.q.enqueue({"n": 1}, max_attempts=1)
        finish = self.run_worker(Worker(self.q, lambda job: release.wait(), timeout=0.2,
                                        max_jobs=1, handle_signals=False))
        finish()
        self.assertEqual(self.q.dlq()[0].last_error, "TimeoutError: exceeded 0.2 s")

    def test_an_async_plain_handler_runs_on_the_worker_loop(self) -> None:
        seen: list[tuple[Any, bool]] = []

        async def handle(job: Job) -> None:
            await asyncio.sleep(0)
            seen.append((job.payload, asyncio.get_running_loop().is_running()))

        self.q.enqueue({"n": 1})
        self.run_worker(Worker(self.q, handle, max_jobs=1, handle_signals=False))()
        self.assertEqual(seen, [({"n": 1}, True)])
        self.assertEqual(self.q.stats().done, 1)

    def test_an_async_task_over_its_limit_is_cancelled_and_nacked(self) -> None:
        cancelled = threading.Event()

        @self.q.task(name="slow", timeout=0.2)
        async def slow() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        slow.apply_async(max_attempts=1)
        self.run_worker(Worker(self.q, max_jobs=1, handle_signals=False))()
        self.assertEqual(self.q.dlq()[0].last_error, "TimeoutError: exceeded 0.2 s")
        wait_until(cancelled.is_set, timeout=30.0,
                   what="the coroutine to see its cancellation")

    def test_current_job_is_the_job_being_run_in_threads_and_coroutines(self) -> None:
        seen: list[str | None] = []

        @self.q.task(name="sync")
        def sync() -> None:
            job = current_job()
            seen.append(job.id if job else None)

        @self.q.task(name="async")
        async def async_() -> None:
            await asyncio.sleep(0)
            job = current_job()
            seen.append(job.id if job else None)

        ids = [sync.delay().id, async_.delay().id]
        self.run_worker(Worker(self.q, max_jobs=2, handle_signals=False))()
        self.assertEqual(seen, ids)
        self.assertIsNone(current_job())

    def test_progress_is_visible_while_the_task_runs_and_the_last_report_is_kept(self
                                                                                ) -> None:
        seen = threading.Event()
        self.addCleanup(seen.set)

        @self.q.task(name="resize")
        def resize(pages: int) -> int:
            job = current_job()
            assert job is not None
            job.set_meta({"pages": pages})
            job.progress(0.5, "half way")
            seen.wait(20)  # until another handle has seen it
            for page in range(pages):  # many reports within a second: coalesced
                job.progress((page + 1) / pages, f"page {page + 1}")
            job.set_meta({"last": "page"})
            return pages

        result = resize.delay(40)
        finish = self.run_worker(Worker(self.q, max_jobs=1, handle_signals=False))
        with Queue(self.location("q")) as other:  # another handle: as another process
            wait_until(lambda: other.get(result.id).progress == (0.5, "half way"),
                       what="the running task's progress on another handle")
            self.assertEqual(other.get(result.id).meta, {"pages": 40})
            seen.set()
            finish()
            done = other.get(result.id)
        self.assertEqual((done.state, done.result), (JobState.DONE, 40))
        self.assertEqual(done.progress, (1.0, "page 40"), "the worker writes the last")
        self.assertEqual(result.info.meta, {"pages": 40, "last": "page"})
        self.assertIsNone(current_job())

    def test_raising_retry_nacks_the_job_after_the_delay_it_names(self) -> None:
        # Inline, in a thread under a time limit, and on the event loop: each way a
        # call can fail must carry the delay to the nack (the backoff is 0.05 s).
        @self.q.task(name="inline")
        def inline() -> None:
            raise Retry("rate limited", delay=3600)

        @self.q.task(name="limited", timeout=30)
        def limited() -> None:
            raise Retry("rate limited", delay=timedelta(hours=1))

        @self.q.task(name="coroutine")
        async def coroutine() -> None:
            await asyncio.sleep(0)
            raise Retry("rate limited", delay=3600)

        ids = [inline.delay().id, limited.delay().id, coroutine.delay().id]
        before = time.time()
        stats = self.run_worker(Worker(self.q, max_jobs=3, handle_signals=False))()
        self.assertEqual(stats.retried, 3)
        for job_id in ids:
            job = self.q.get(job_id)
            self.assertEqual((job.state, job.attempts, job.last_error),
                             (JobState.PENDING, 1, "Retry: rate limited"))
            self.assertGreaterEqual(job.available_at, before + 3600)
            self.assertLess(job.available_at, time.time() + 3600)

    def test_retry_without_a_delay_waits_the_backoff_and_the_last_attempt_is_dead(
            self) -> None:
        runs: list[int] = []

        @self.q.task(name="again")
        def again() -> None:
            job = current_job()
            assert job is not None
            runs.append(job.attempts)
            raise Retry()

        result = again.apply_async(max_attempts=3)
        stats = self.run_worker(Worker(self.q, max_jobs=3, handle_signals=False))()
        self.assertEqual(runs, [1, 2, 3])  # 0.05 s apart: the backoff, not a fixed wait
        self.assertEqual((stats.retried, stats.dead_lettered), (2, 1))
        (dead,) = self.q.dlq()
        self.assertEqual((dead.id, dead.last_error), (result.id, "Retry"))

    def test_a_retry_or_snooze_delay_that_is_not_a_duration_is_refused_naming_it(
            self) -> None:
        for kind in (Retry, Snooze):
            for bad, needle in [(-1, ">= 0"), (True, "not bool"), (float("inf"), "finite"),
                                ("60", "not str")]:
                with self.subTest(kind=kind, delay=bad), \
                        self.assertRaises(ValueError) as caught:
                    kind(delay=bad)  # type: ignore[arg-type]
                self.assertIn(f"{kind.__name__} delay", str(caught.exception))
                self.assertIn(needle, str(caught.exception))

    def test_raising_snooze_gives_the_job_back_untried(self) -> None:
        @self.q.task(name="inline")
        def inline() -> None:
            raise Snooze("not ready", delay=3600)

        @self.q.task(name="coroutine", timeout=30)
        async def coroutine() -> None:
            raise Snooze("not ready", delay=timedelta(hours=1))

        ids = [inline.apply_async(max_attempts=1).id, coroutine.apply_async(max_attempts=1).id]
        before = time.time()
        stats = self.run_worker(Worker(self.q, max_jobs=2, handle_signals=False))()
        self.assertEqual((stats.snoozed, stats.retried, stats.dead_lettered), (2, 0, 0))
        for job_id in ids:  # max_attempts=1: a nack would have dead-lettered them
            job = self.q.get(job_id)
            self.assertEqual((job.state, job.attempts, job.last_error),
                             (JobState.PENDING, 0, "Snooze: not ready"))
            self.assertGreaterEqual(job.available_at, before + 3600)

    def test_a_locked_task_refused_the_lock_is_snoozed_and_a_timed_out_run_keeps_it(
            self) -> None:
        # A thread over its time limit runs on, detached: the lock stays with it
        # until it really ends, or a second run could overlap the first.
        release, entered = threading.Event(), threading.Event()
        self.addCleanup(release.set)

        @self.q.task(name="locked", lock=True, timeout=0.2)
        def locked() -> None:
            entered.set()
            release.wait()

        job = locked.apply_async(max_attempts=2)
        stats = self.run_worker(Worker(self.q, max_jobs=2, handle_signals=False))()
        self.assertTrue(entered.is_set())
        # The second run found the lock held: snoozed, so its lease is not an attempt.
        self.assertEqual((stats.timed_out, stats.retried, stats.snoozed), (1, 1, 1))
        after = self.q.get(job.id)
        self.assertEqual((after.state, after.attempts, after.last_error),
                         (JobState.PENDING, 1,
                          "TaskLockedError: the lock 'locked' is held by another run"))
        with self.assertRaises(TaskLockedError), self.q.lock("locked"):
            pass  # the detached thread still holds it
        release.set()
        wait_until(lambda: self._lock_free("locked"), timeout=30.0,
                   what="the detached thread to let the lock go")

    def test_a_cancelled_coroutine_that_runs_on_keeps_its_lock_until_it_ends(self) -> None:
        release, cancelled = threading.Event(), threading.Event()
        self.addCleanup(release.set)

        @self.q.task(name="stubborn", lock=True, timeout=0.2)
        async def stubborn() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:  # swallowed: it runs on, as long as its loop
                cancelled.set()
                while not release.is_set():
                    await asyncio.sleep(0.01)

        job = stubborn.apply_async(max_attempts=2)
        stats = self.run_worker(Worker(self.q, max_jobs=2, handle_signals=False))()
        self.assertTrue(cancelled.is_set())
        self.assertEqual((stats.timed_out, stats.snoozed), (1, 1))
        self.assertEqual(self.q.get(job.id).last_error,
                         "TaskLockedError: the lock 'stubborn' is held by another run")
        # The worker stopped its loop: the coroutine will never run again, and let go.
        self.assertTrue(self._lock_free("stubborn"))

    def _lock_free(self, key: str) -> bool:
        try:
            with self.q.lock(key):
                return True
        except TaskLockedError:
            return False

    def test_a_lock_shared_by_two_tasks_and_bad_lock_options(self) -> None:
        @self.q.task(name="a", lock="shared")
        def a() -> None: ...

        @self.q.task(name="b", lock=True)
        def b() -> None: ...

        @self.q.task(name="c")
        def c() -> None: ...

        @self.q.periodic(every=60, name="p", lock=True)
        def p() -> None: ...

        self.assertEqual((a.lock, b.lock, c.lock, p.lock), ("shared", "b", None, "p"))
        for lock, error in [(1, TypeError), ("", ValueError), ("x\ty", ValueError)]:
            with self.subTest(lock=lock), self.assertRaises(error):
                self.q.task(name="bad", lock=lock)(lambda: None)

    def test_a_task_returning_a_value_that_is_not_json_fails_the_job(self) -> None:
        @self.q.task(name="bad")
        def bad() -> object:
            return object()

        bad.apply_async(max_attempts=1)
        self.run_worker(Worker(self.q, max_jobs=1, handle_signals=False))()
        self.assertIn("SerializationError", self.q.dlq()[0].last_error or "")


# -- real worker processes --------------------------------------------------

MODULE_HEADER = '''
import asyncio, json, os, signal, sys, time
from nobroker import BackoffPolicy, Queue
from nobroker.tasks import current_job

SPEED = float(os.environ.get("NB_SPEED", "1"))
T0 = float(os.environ.get("NB_T0", "0"))

def clock():
    return T0 + (time.time() - T0) * SPEED

q = Queue(os.environ["NB_DIR"], clock=clock, backoff=BackoffPolicy(base=0.05, factor=1.0,
          jitter=0.0))

def note(*fields):
    with open(os.environ["NB_LOG"], "a") as f:  # one write per line, O_APPEND
        f.write(json.dumps(list(fields)) + "\\n")
'''


class WorkerProcessTest(WorkerProcessCase):
    MODULE_HEADER = MODULE_HEADER

    def setUp(self) -> None:
        super().setUp()
        self.dir = self.tmp / "jobs"
        self.env["NB_DIR"] = str(self.dir)

    def queue(self) -> Queue:
        q = Queue(self.dir, backoff=FAST_RETRY)
        self.addCleanup(q.close)
        return q

    def test_unknown_task_is_dead_lettered_and_the_worker_keeps_running(self) -> None:
        self.module("known", '''
            @q.task(name="known")
            def known():
                note("ran")
        ''')
        q = self.queue()
        q.enqueue({"task": "nope", "args": [], "kwargs": {}}, max_attempts=2)
        q.enqueue({"not": "a task"}, max_attempts=1)
        proc = self.work("known")
        dead = wait_until(lambda: len(q.dlq()) == 2 and q.dlq(), timeout=30.0,
                          what="two dead jobs")
        self.assertEqual(sorted((d.last_error or "") for d in dead), [
            'not a task payload: expected {"task": NAME, "args": [...], "kwargs": {...}}',
            "unknown task 'nope'"])
        self.assertEqual({d.attempts for d in dead if d.payload.get("task") == "nope"}, {2})
        q.enqueue({"task": "known"})  # args and kwargs may be left out
        wait_until(lambda: self.notes() == [["ran"]], timeout=30.0, what="the known task to run")
        self.assertIsNone(proc.poll(), "the worker exited")

    def test_work_module_mistakes_exit_2_with_one_line(self) -> None:
        self.module("empty", "x = 1\n")
        self.module("known", 'q.task(name="known")(lambda: None)\n')
        cases = [(["empty"], "module 'empty' registered no tasks on a queue"),
                 (["--pool", "process", "empty:nope"], "has no attribute 'nope'"),
                 (["known", "--pool", "fork"], "invalid choice: 'fork'")]
        for args, needle in cases:
            with self.subTest(args=args):
                done = self.cli("work", *args)
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertIn(needle, done.stderr)
                self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
        other = self.tmp / "elsewhere"
        done = self.cli("--dir", str(other), "work", "known")
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("matching --dir/--queue", done.stderr)
        self.assertFalse(other.exists(), "a refused command created a queue")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "nobroker", *args], cwd=self.tmp,
                              env=self.env, capture_output=True, text=True, timeout=60,
                              check=False)

    def test_a_task_that_sleeps_forever_in_the_process_pool_is_killed_retried_then_dead(
            self) -> None:
        self.module("sleepy", '''
            @q.task(name="sleepy", max_attempts=2)
            def sleepy():
                note("start", os.getpid())
                time.sleep(3600)
        ''')
        q = self.queue()
        q.enqueue({"task": "sleepy"}, max_attempts=2)
        proc = self.work("sleepy", "--pool", "process", "--timeout", "0.5")
        (dead,) = wait_until(q.dlq, timeout=30.0, what="the job to be dead-lettered")
        self.assertEqual((dead.attempts, dead.last_error), (2, "TimeoutError: exceeded 0.5 s"))
        pids = [pid for what, pid in self.notes()]
        self.assertEqual(len(pids), 2)
        self.assertNotEqual(pids[0], pids[1], "the killed child was replaced")
        self.assertNotIn(proc.pid, pids, "the task ran in a child, not in the worker")
        for pid in pids:  # both children were killed at the limit, not left sleeping
            wait_until(lambda p=pid: not _alive(p), timeout=30.0,
                       what=f"child {pid} to be gone")
        self.assertIsNone(proc.poll())

    def test_stopping_a_process_pool_worker_kills_the_child_it_gave_up_on(self) -> None:
        self.module("forever", '''
            @q.task(name="forever")
            def forever():
                note(os.getpid())
                time.sleep(3600)
        ''')
        q = self.queue()
        q.enqueue({"task": "forever"})
        proc = self.work("forever", "--pool", "process", "--shutdown-timeout", "0.5")
        ((pid,),) = wait_until(self.notes, timeout=30.0, what="the task to start")
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(30), 0, "the worker did not exit after its shutdown timeout")
        wait_until(lambda: not _alive(pid), timeout=30.0, what=f"child {pid} to be gone")
        self.assertIs(q.get(q.list_jobs()[0].id).state, JobState.LEASED)  # comes back later

    def test_a_child_killed_by_a_signal_nacks_its_job_naming_it_and_is_replaced(self) -> None:
        self.module("crashy", '''
            @q.task(name="crash")
            def crash():
                os.kill(os.getpid(), signal.SIGKILL)

            @q.task(name="fine")
            def fine(n):
                note("fine", n, os.getpid())
        ''')
        q = self.queue()
        q.enqueue({"task": "crash"}, max_attempts=1)
        q.enqueue({"task": "fine", "args": [1]}, priority=-1)
        proc = self.work("crashy", "--pool", "process")
        (dead,) = wait_until(q.dlq, timeout=30.0, what="the crashed job to be dead-lettered")
        self.assertEqual(dead.last_error, "WorkerLostError: the child process running the job "
                                          "was killed by SIGKILL")
        wait_until(lambda: len(self.notes()) == 1, timeout=30.0,
                   what="the next job, in a new child")
        self.assertIsNone(proc.poll())

    def test_a_plain_handler_in_the_process_pool_gets_the_job(self) -> None:
        self.module("plain", '''
            def handle(job):
                note(job.id, job.payload, job.attempts, os.getpid())
        ''')
        q = self.queue()
        job = q.enqueue({"x": [1, 2]})
        proc = self.work("plain:handle", "--pool", "process", "--max-jobs", "1")
        self.assertEqual(proc.wait(30), 0)
        ((job_id, payload, attempts, pid),) = self.notes()
        self.assertEqual((job_id, payload, attempts), (job.id, {"x": [1, 2]}, 1))
        self.assertNotEqual(pid, proc.pid)
        self.assertEqual(q.stats().done, 1)

    def test_progress_and_metadata_from_the_process_pool_reach_the_queue(self) -> None:
        self.module("reporting", '''
            from nobroker import NobrokerError

            @q.task(name="report")
            def report():
                job = current_job()
                note("started", job.meta, job.queue_name, os.getpid())
                job.set_meta({"step": 1})
                job.progress(0.5, "half")  # held: within a second of the first write
                job.set_meta({"step": 2})
                try:
                    job.set_meta({1: "not a string key"})
                except TypeError:
                    note("refused in the child")
                return "done"
        ''')
        q = self.queue()
        job = q.enqueue({"task": "report"}, meta={"given": True})
        proc = self.work("reporting", "--pool", "process", "--max-jobs", "1")
        self.assertEqual(proc.wait(30), 0)
        started, refused = self.notes()
        self.assertEqual(started[:3], ["started", {"given": True}, "default"])
        self.assertNotEqual(started[3], proc.pid, "it ran in a child")
        self.assertEqual(refused, ["refused in the child"])
        done = q.get(job.id)
        self.assertEqual((done.progress, done.meta),
                         ((0.5, "half"), {"given": True, "step": 2}),
                         "written by the worker, the last report flushed before the ack")

    def test_async_tasks_overlap_up_to_the_concurrency_limit(self) -> None:
        # Each call waits at a barrier for a second call to arrive: run one at a time,
        # the first would time out (and fail). With concurrency 2 they meet; a third
        # never starts while two are in flight, which the counter records.
        self.module("overlap", '''
            state = {"active": 0, "peak": 0, "arrived": 0}
            pairs = {}

            @q.task(name="meet")
            async def meet(n):
                pair = pairs.setdefault(state["arrived"] // 2, asyncio.Event())
                state["arrived"] += 1
                state["active"] += 1
                state["peak"] = max(state["peak"], state["active"])
                note("start", n, state["active"])
                if state["arrived"] % 2 == 0:
                    pair.set()  # the second of a pair lets both go on
                await asyncio.wait_for(pair.wait(), 20)
                state["active"] -= 1
                note("end", n, state["peak"])
        ''')
        q = self.queue()
        for n in range(4):
            q.enqueue({"task": "meet", "args": [n]}, max_attempts=1)
        proc = self.work("overlap", "--concurrency", "2", "--max-jobs", "4")
        self.assertEqual(proc.wait(60), 0)
        notes = self.notes()
        self.assertEqual(q.stats().done, 4, notes)
        self.assertEqual(q.dlq(), [])
        self.assertEqual(max(n[2] for n in notes if n[0] == "start"), 2, notes)
        self.assertEqual({n[2] for n in notes if n[0] == "end"}, {2}, "peak is exactly 2")

    def test_a_paused_queue_is_not_leased_until_resumed(self) -> None:
        self.module("paused", '''
            @q.task(name="t")
            def t(n):
                note(n)
        ''')
        q = self.queue()
        q.pause()
        q.enqueue({"task": "t", "args": [1]})
        self.work("paused")
        time.sleep(0.5)  # a negative: nothing may happen while paused
        self.assertEqual(self.notes(), [])
        began = time.monotonic()
        q.resume()
        wait_until(lambda: self.notes() == [[1]], timeout=30.0, what="the job after resume")
        self.assertLess(time.monotonic() - began, 2.0)

    def test_cancelling_a_task_in_the_process_pool_kills_its_child(self) -> None:
        self.module("endless", '''
            @q.task(name="endless")
            def endless():
                note("endless", os.getpid())
                time.sleep(3600)

            @q.task(name="after")
            def after():
                note("after", os.getpid())
        ''')
        q = self.queue()
        job = q.enqueue({"task": "endless"})
        q.enqueue({"task": "after"}, priority=-1)
        proc = self.work("endless", "--pool", "process", "--visibility-timeout", "0.6")
        ((_, pid),) = wait_until(self.notes, timeout=30.0, what="the task to start")
        self.assertTrue(q.cancel(job.id))
        wait_until(lambda: not _alive(pid), timeout=30.0, what=f"child {pid} to be killed")
        wait_until(lambda: len(self.notes()) == 2, timeout=30.0, what="the next job to run")
        self.assertEqual(self.notes()[1][0], "after")
        self.assertIs(q.get(job.id).state, JobState.CANCELLED)
        self.assertIsNone(proc.poll())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class MemoryTaskTests:
    """Mixed first into the in-process tests: the same tests on memory:// queues."""

    def location(self, name: str) -> str:
        return f"memory://{self.id()}/{name}"  # type: ignore[attr-defined]


class MemoryTaskApiTest(MemoryTaskTests, TaskApiTest):
    pass


class MemorySchedulerTest(MemoryTaskTests, SchedulerTest):
    pass


class MemoryZonedSchedulerTest(MemoryTaskTests, ZonedSchedulerTest):
    pass


class MemoryWorkerTaskTest(MemoryTaskTests, WorkerTaskTest):
    pass


class RunWrappersTest(unittest.TestCase):
    """call_as enters the registered run wrappers around a plain call, and around the
    await of a coroutine function's (it skips the ExitStack only when none is)."""

    def test_wrappers_enter_around_plain_and_async_calls_and_stop_when_removed(self) -> None:
        import contextlib

        from nobroker.tasks.registry import call_as
        from nobroker.tasks.running import RunningJob, unwrap_runs, wrap_runs

        seen: list[str] = []

        @contextlib.contextmanager
        def wrapper(job: RunningJob) -> Any:
            seen.append("enter")
            yield
            seen.append("exit")

        def plain() -> str:
            seen.append("call")
            return "done"

        async def deferred() -> str:
            seen.append("await")
            return "later"

        class Fake:
            progress = None
            meta: ClassVar[dict[str, Any]] = {}
            id = "x"

        job = RunningJob(Fake(), None)  # type: ignore[arg-type]
        wrap_runs(wrapper)
        try:
            self.assertEqual(call_as(job, plain, (), {}), "done")
            self.assertEqual(seen, ["enter", "call", "exit"])
            seen.clear()
            self.assertEqual(asyncio.run(call_as(job, deferred, (), {})), "later")
            self.assertEqual(seen, ["enter", "await", "exit"])
        finally:
            unwrap_runs(wrapper)
        seen.clear()
        self.assertEqual(call_as(job, plain, (), {}), "done")
        self.assertEqual(seen, ["call"])


if __name__ == "__main__":
    unittest.main()
