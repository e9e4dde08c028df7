"""nobroker.testing: eager mode, drain() and enqueued(), for users' own test suites.

Time is the subject of most of these tests, and the helpers must jump it,
never sleep it: each test that crosses a delay or a backoff measures the
wall time it took (small) and the queue's time (moved by the whole wait).
The backoff policies below wait minutes, so a helper that slept would be
seen at once, long before the test's own timeout.
"""

from __future__ import annotations

import ast
import asyncio
import threading
import time
import unittest
from typing import Any

from harness.support import SRC, TempDirTestCase

from nobroker import BackoffPolicy, JobState, Queue, Retry, Snooze, TaskFailed
from nobroker.testing import FakeClock, drain, eager, enqueued

START = 1_000_000.0
SLOW = BackoffPolicy(base=60.0, factor=2.0, max_delay=3600.0, jitter=0.0)  # 60, 120, 240 s
QUICK = 2.0  # wall seconds a helper may take here: nothing in this file sleeps


class MemoryCase(unittest.TestCase):
    def open(self, suffix: str = "", **options: Any) -> Queue:
        q = Queue(f"memory://{self.id()}{suffix}", **options)
        self.addCleanup(q.close)
        return q

    def timed(self) -> float:
        """A wall-time mark; `quick(mark)` checks that little wall time went by since."""
        return time.monotonic()

    def assert_quick(self, mark: float) -> None:
        self.assertLess(time.monotonic() - mark, QUICK, "a helper slept instead of jumping")


class EagerTest(MemoryCase):
    def test_delay_runs_the_task_and_returns_a_finished_result(self) -> None:
        q = self.open(clock=FakeClock(START), eager=True)
        ran: list[int] = []

        @q.task
        def add(a: int, b: int) -> int:
            ran.append(a + b)
            return a + b

        result = add.delay(2, 3)
        self.assertEqual(ran, [5], "ran before delay() returned")
        self.assertTrue(result.ready())
        self.assertEqual(result.get(timeout=0), 5)
        job = q.get(result.id)  # a real job of the queue, as a worker leaves it
        self.assertEqual((job.state, job.result, job.attempts), (JobState.DONE, 5, 1))
        stats = q.stats()
        self.assertEqual((stats.enqueued, stats.done, stats.pending), (1, 1, 0))
        self.assertEqual(add.apply_async((1, 1), priority=3).get(timeout=0), 2)

    def test_a_failure_runs_every_attempt_with_the_clock_jumped_then_raises(self) -> None:
        clock = FakeClock(START)
        q = self.open(clock=clock, eager=True, backoff=SLOW)
        attempts_at: list[float] = []

        @q.task(max_attempts=3)
        def flaky() -> None:
            attempts_at.append(clock())
            raise ValueError("the API is down")

        mark = self.timed()
        result = flaky.delay()
        self.assert_quick(mark)
        self.assertEqual(attempts_at, [START, START + 60, START + 60 + 120])
        self.assertEqual(clock(), START + 180, "the queue's clock moved by the backoffs")
        self.assertTrue(result.ready())
        with self.assertRaises(TaskFailed) as failed:
            result.get(timeout=0)
        self.assertIn("ValueError: the API is down", str(failed.exception))
        job = q.get(result.id)
        self.assertEqual((job.state, job.attempts), (JobState.DEAD, 3))
        self.assertEqual([dead.id for dead in q.dlq()], [result.id])

    def test_retry_runs_again_after_its_delay(self) -> None:
        clock = FakeClock(START)
        q = self.open(clock=clock, eager=True)
        attempts_at: list[float] = []

        @q.task
        def rate_limited() -> str:
            attempts_at.append(clock())
            if len(attempts_at) == 1:
                raise Retry("429", delay=90)
            return "sent"

        mark = self.timed()
        self.assertEqual(rate_limited.delay().get(timeout=0), "sent")
        self.assert_quick(mark)
        self.assertEqual(attempts_at, [START, START + 90])
        self.assertEqual(q.stats().retried, 1)

    def test_snooze_runs_again_later_without_spending_an_attempt(self) -> None:
        clock = FakeClock(START)
        q = self.open(clock=clock, eager=True)
        runs: list[float] = []

        @q.task(max_attempts=1)
        def not_yet() -> str:
            runs.append(clock())
            if len(runs) < 3:
                raise Snooze(delay=30)
            return "ready"

        result = not_yet.delay()
        self.assertEqual(result.get(timeout=0), "ready")
        self.assertEqual(runs, [START, START + 30, START + 60])
        self.assertEqual(q.get(result.id).attempts, 1)

    def test_a_delay_or_an_eta_is_jumped_to(self) -> None:
        clock = FakeClock(START)
        q = self.open(clock=clock, eager=True)

        @q.task
        def stamp() -> float:
            return clock()

        self.assertEqual(stamp.apply_async(delay=3600).get(timeout=0), START + 3600)
        self.assertEqual(stamp.apply_async(eta=START + 7200).get(timeout=0), START + 7200)

    def test_on_real_time_the_queue_clock_is_jumped_by_an_offset(self) -> None:
        q = self.open(eager=True, backoff=SLOW)  # no clock: real time

        @q.task(max_attempts=2)
        def failing() -> None:
            raise RuntimeError("no")

        mark, before = self.timed(), time.time()
        result = failing.delay()
        self.assert_quick(mark)
        self.assertEqual(result.state, JobState.DEAD)
        self.assertGreaterEqual(q.clock() - time.time(), 59.0,
                                "the queue's time is a minute ahead of real time")
        self.assertGreaterEqual(q.get(result.id).finished_at or 0.0, before + 60)

    def test_time_limits_hold_as_under_a_worker(self) -> None:
        q = self.open(eager=True)
        release = threading.Event()
        self.addCleanup(release.set)  # the abandoned thread ends with the test

        @q.task(timeout=0.2, max_attempts=1)
        def stuck() -> None:
            release.wait(30)

        result = stuck.delay()
        with self.assertRaises(TaskFailed) as failed:
            result.get(timeout=0)
        self.assertIn("TimeoutError", str(failed.exception))

    def test_async_tasks_run_too(self) -> None:
        q = self.open(eager=True)

        @q.task
        async def double(n: int) -> int:
            await asyncio.sleep(0)
            return 2 * n

        self.assertEqual(double.delay(21).get(timeout=0), 42)

    def test_other_jobs_are_left_as_they_were(self) -> None:
        q = self.open(clock=FakeClock(START))

        @q.task
        def echo(n: int) -> int:
            return n

        before = echo.delay(1)  # enqueued while the queue is not eager
        with eager(q):
            self.assertEqual(echo.delay(2).get(timeout=0), 2)
        job = q.get(before.id)
        self.assertEqual((job.state, job.attempts, job.last_error),
                         (JobState.PENDING, 0, None))
        self.assertEqual(drain(q)[0].result, 1, "and still leasable")

    def test_a_with_block_restores_the_mode_before_it(self) -> None:
        q = self.open(clock=FakeClock(START))

        @q.task
        def echo(n: int) -> int:
            return n

        self.assertFalse(q.eager)
        with eager(q) as same:
            self.assertIs(same, q)
            self.assertTrue(q.eager)
            self.assertTrue(echo.delay(1).ready())
            with eager(q, enabled=False):
                self.assertFalse(echo.delay(2).ready())
            self.assertTrue(q.eager, "the inner block gave the outer one's mode back")
        self.assertFalse(q.eager)
        self.assertFalse(echo.delay(3).ready(), "only enqueued after the block")
        with self.assertRaises(KeyError), eager(q):
            raise KeyError("a failing test")
        self.assertFalse(q.eager, "restored when the block raised too")
        self.assertEqual([job.payload["args"] for job in enqueued(q, echo)], [[2], [3]])

    def test_an_eager_queue_from_its_constructor(self) -> None:
        q = self.open(eager=True)
        self.assertTrue(q.eager)
        with eager(q, enabled=False):
            self.assertFalse(q.eager)
        self.assertTrue(q.eager)


class DrainTest(MemoryCase):
    def test_drain_runs_delayed_jobs_and_retries_jumping_time(self) -> None:
        clock = FakeClock(START)
        q = self.open(clock=clock, backoff=SLOW)
        runs: list[tuple[str, float]] = []

        @q.task
        def later(tag: str) -> str:
            runs.append((tag, clock()))
            return tag

        @q.task(max_attempts=2)
        def broken() -> None:
            runs.append(("broken", clock()))
            raise ValueError("no")

        late = later.apply_async(("late",), delay=3600)
        now = later.delay("now")
        dead = broken.delay()
        self.assertEqual(runs, [], "not eager: only enqueued")
        mark = self.timed()
        finished = drain(q)
        self.assert_quick(mark)
        self.assertEqual(runs, [("now", START), ("broken", START), ("broken", START + 60),
                                ("late", START + 3600)])
        self.assertEqual([(job.id, job.state) for job in finished],
                         [(now.id, JobState.DONE), (dead.id, JobState.DEAD),
                          (late.id, JobState.DONE)])
        self.assertEqual(finished[0].result, "now")
        self.assertEqual(clock(), START + 3600)
        self.assertEqual(enqueued(q), [])
        self.assertEqual(drain(q), [], "nothing left to run")

    def test_drain_on_real_time_jumps_an_offset(self) -> None:
        q = self.open()

        @q.task
        def tomorrow() -> str:
            return "done"

        result = tomorrow.apply_async(delay=86400)
        mark = self.timed()
        self.assertEqual([job.id for job in drain(q)], [result.id])
        self.assert_quick(mark)
        self.assertGreater(q.clock() - time.time(), 86000)

    def test_drain_with_a_handler_runs_plain_jobs(self) -> None:
        q = self.open(clock=FakeClock(START))
        q.enqueue({"n": 1})
        q.enqueue({"n": 2}, delay=10)
        seen: list[Any] = []
        finished = drain(q, lambda job: seen.append(job.payload))
        self.assertEqual(seen, [{"n": 1}, {"n": 2}])
        self.assertEqual([job.state for job in finished], [JobState.DONE, JobState.DONE])

    def test_drain_jumps_past_a_full_rate_window_to_when_it_lets_the_next_start(
            self) -> None:
        clock = FakeClock(START)
        q = self.open(clock=clock, rate_limit=(10, 1.0))  # the queue's own: 10 a second
        runs: list[tuple[int, float]] = []

        @q.task(rate_limit="2/m")
        def ping(n: int) -> None:
            runs.append((n, clock()))

        results = [ping.delay(n) for n in range(5)]
        mark = self.timed()
        finished = drain(q)
        self.assert_quick(mark)
        self.assertEqual(runs, [(0, START), (1, START), (2, START + 60), (3, START + 60),
                                (4, START + 120)])
        self.assertEqual([job.id for job in finished], [r.id for r in results])
        self.assertEqual(enqueued(q), [])

    def test_drain_stops_at_a_concurrency_key_held_elsewhere(self) -> None:
        q = self.open(clock=FakeClock(START))

        @q.task(concurrency=1)
        def one() -> None:
            return None

        one.delay()
        waiting = one.delay()
        self.assertEqual(len(q.lease(1)), 1)  # its holder is another worker
        self.assertEqual(drain(q), [], "no time frees it: only the holder's ack")
        self.assertEqual([job.id for job in enqueued(q)], [waiting.id])

    def test_a_paused_queue_runs_nothing(self) -> None:
        q = self.open(clock=FakeClock(START))
        q.enqueue("x")
        q.pause()
        self.assertEqual(drain(q, lambda job: None), [])
        self.assertEqual(q.stats().pending, 1)


class EnqueuedTest(MemoryCase):
    def test_enqueued_lists_pending_delayed_and_waiting_jobs_of_one_task(self) -> None:
        q = self.open(clock=FakeClock(START))

        @q.task
        def email(to: str) -> None:
            pass

        @q.task(name="reports.build")
        def report() -> None:
            pass

        first = email.delay("ada@example.com")
        later = email.apply_async(("bob@example.com",), delay=600)
        built = report.delay()
        q.enqueue({"not": "a task"})
        after = email.apply_async(("cy@example.com",), depends_on=[built])  # waiting
        self.assertEqual([job.id for job in enqueued(q, email)],
                         [first.id, later.id, after.id])
        self.assertEqual([job.id for job in enqueued(q, email.name)],
                         [first.id, later.id, after.id])
        self.assertEqual([job.id for job in enqueued(q, "reports.build")], [built.id])
        self.assertEqual(len(enqueued(q)), 5)
        self.assertEqual(enqueued(q, "unknown.task"), [])
        with self.assertRaises(TypeError):
            enqueued(q, 42)  # type: ignore[arg-type]
        drain(q, lambda job: None)
        self.assertEqual(enqueued(q), [], "finished jobs are not listed")


class FilesTest(TempDirTestCase):
    def test_eager_and_drain_on_files_with_a_fake_clock(self) -> None:
        clock = FakeClock(START)
        q = Queue(self.tmp, clock=clock, backoff=SLOW, fsync=False)
        self.addCleanup(q.close)

        @q.task(max_attempts=2)
        def flaky(n: int) -> int:
            if clock() == START:
                raise ValueError("first try")
            return n

        with eager(q):
            self.assertEqual(flaky.delay(7).get(timeout=0), 7)
        self.assertEqual(clock(), START + 60)
        flaky.apply_async((8,), delay=30)
        self.assertEqual([job.result for job in drain(q)], [8])

    def test_a_jump_on_files_on_real_time_says_what_to_do(self) -> None:
        q = Queue(self.tmp, fsync=False)
        self.addCleanup(q.close)
        q.enqueue("x", delay=3600)
        with self.assertRaisesRegex(ValueError, "clock=nobroker.testing.FakeClock()"):
            drain(q, lambda job: None)


class NoTestFrameworkTest(unittest.TestCase):
    def test_the_library_imports_no_test_framework(self) -> None:
        tree = ast.parse((SRC / "nobroker" / "testing.py").read_text(encoding="utf-8"))
        names = {alias.name.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.Import) for alias in node.names}
        names |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom)}
        self.assertEqual(names & {"pytest", "unittest", "django"}, set())


if __name__ == "__main__":
    unittest.main()
