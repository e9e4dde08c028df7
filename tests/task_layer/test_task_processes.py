"""The task layer through real `nobroker work MODULE` processes, one suite for every backend.

`TaskProcessContract` is a mixin (as tests/contract's QueueContract is): each
test writes a tasks module, starts worker processes on it and waits, with
deadlines, for what they did. A backend supplies one thing, `target()`: the
directory or URL that the workers' module and the test's own Queue open
(queue "tasks" on both). This module runs it on files; tests/postgres/
test_postgres_tasks.py runs it on PostgreSQL (skipped without a server).

The workers' module reads NB_TARGET; with NB_SPEED set it runs on a fast
clock of its own (the same in every process), otherwise on the backend's
default clock (the wall clock for files, the server's for PostgreSQL).
"""

from __future__ import annotations

import calendar
import itertools
import signal
import time
import unittest
from pathlib import Path
from typing import TYPE_CHECKING

from harness.support import WorkerProcessCase, wait_until

from nobroker import BackoffPolicy, JobState, Queue, TaskFailed, TaskLockedError
from nobroker.tasks import TaskResult

FAST_RETRY = BackoffPolicy(base=0.05, factor=1.0, jitter=0.0)
TIMEOUT = 60.0  # seconds to wait for a worker process to do something

MODULE_HEADER = '''
import json, os, time
from nobroker import BackoffPolicy, Queue
from nobroker.tasks import current_job

if os.environ.get("NB_SPEED"):
    SPEED, T0 = float(os.environ["NB_SPEED"]), float(os.environ["NB_T0"])
    def clock():
        return T0 + (time.time() - T0) * SPEED
else:
    clock = None

q = Queue(os.environ["NB_TARGET"], "tasks", clock=clock,
          backoff=BackoffPolicy(base=0.05, factor=1.0, jitter=0.0))

def note(*fields):
    with open(os.environ["NB_LOG"], "a") as f:  # one write per line, O_APPEND
        f.write(json.dumps(list(fields)) + "\\n")
'''


if TYPE_CHECKING:
    _Mixin = WorkerProcessCase  # what the mixin is mixed into, for the type checker
else:
    _Mixin = object  # a plain class, so that unittest never runs the mixin by itself


class TaskProcessContract(_Mixin):
    """Task-layer claims checked through worker processes. Mix into a
    WorkerProcessCase that defines target()."""

    MODULE_HEADER = MODULE_HEADER

    def target(self) -> str:
        """The directory or URL of the test's queue set (the same on every call)."""
        raise NotImplementedError

    def setUp(self) -> None:
        super().setUp()
        self.env["NB_TARGET"] = self.target()
        self.env.pop("NOBROKER_URL", None)

    def queue(self) -> Queue:
        q = Queue(self.target(), "tasks", backoff=FAST_RETRY)
        self.addCleanup(q.close)
        return q

    def go(self) -> None:
        """Let the tasks that wait for the test's signal finish."""
        Path(str(self.log) + ".go").touch()

    def test_delay_runs_in_a_worker_process_and_get_returns_the_result(self) -> None:
        self.module("results", '''
            @q.task(name="square")
            def square(n):
                return n * n

            @q.task(name="fail")
            def fail():
                raise RuntimeError("nope")
        ''')
        q = self.queue()  # the caller's side: the same task names on a Queue of its own

        @q.task(name="square")
        def square(n: int) -> int:
            raise AssertionError("delay must not run the function here")

        @q.task(name="fail")
        def fail() -> None:
            raise AssertionError("delay must not run the function here")

        self.work("results")
        handles = [square.delay(n) for n in range(5)]
        self.assertEqual([r.get(timeout=TIMEOUT) for r in handles], [0, 1, 4, 9, 16],
                         self.errors())
        self.assertTrue(all(r.ready() for r in handles))
        bad = fail.apply_async(max_attempts=1)
        with self.assertRaises(TaskFailed) as caught:
            bad.get(timeout=TIMEOUT)
        self.assertEqual(caught.exception.last_error, "RuntimeError: nope")
        self.assertEqual(caught.exception.state, JobState.DEAD)
        self.assertTrue(bad.ready())

    def test_a_retry_or_snooze_raised_in_a_child_process_keeps_its_delay(self) -> None:
        # The child sends the delay back over the pipe with its error text.
        self.module("retries", '''
            from nobroker import Retry, Snooze

            @q.task(name="flaky")
            def flaky():
                if current_job().attempts == 1:
                    raise Retry("not yet", delay=0.2)
                return current_job().attempts

            @q.task(name="later")
            def later():
                raise Retry("much later", delay=3600)

            @q.task(name="unready")
            def unready():
                raise Snooze("not ready", delay=3600)
        ''')
        q = self.queue()
        later = q.enqueue({"task": "later"})
        before = q.get(later.id).enqueued_at
        flaky = TaskResult(q, q.enqueue({"task": "flaky"}).id)
        self.work("retries", "--pool", "process")
        self.assertEqual(flaky.get(timeout=TIMEOUT), 2, self.errors())
        job = wait_until(lambda: (j := q.get(later.id)).attempts == 1
                         and j.state is JobState.PENDING and j, timeout=TIMEOUT,
                         what="the later task to be given back")
        self.assertEqual(job.last_error, "Retry: much later")
        self.assertGreaterEqual(job.available_at, before + 3600)
        unready = q.enqueue({"task": "unready"}, max_attempts=1)
        snoozed = wait_until(lambda: (j := q.get(unready.id)).last_error and j,
                             timeout=TIMEOUT, what="the unready task to be snoozed")
        self.assertEqual((snoozed.state, snoozed.attempts, snoozed.last_error),
                         (JobState.PENDING, 0, "Snooze: not ready"))
        self.assertGreaterEqual(snoozed.available_at, before + 3600)

    def test_a_result_is_waited_for_from_another_process(self) -> None:
        self.module("adder", '''
            @q.task(name="add")
            def add(a, b):
                return {"sum": a + b}
        ''')
        self.work("adder")
        q = self.queue()
        ok = TaskResult(q, q.enqueue({"task": "add", "args": [2, 3]}).id)
        self.assertEqual(ok.get(timeout=TIMEOUT), {"sum": 5}, self.errors())
        self.assertTrue(ok.ready())
        self.assertEqual(q.get(ok.id).result, {"sum": 5})

    def test_a_task_over_its_time_limit_is_nacked_then_dead_and_the_worker_goes_on(self
                                                                                   ) -> None:
        self.module("limited", '''
            @q.task(name="stuck", timeout=0.3)
            def stuck():
                note("stuck")
                while not os.path.exists(os.environ["NB_LOG"] + ".go"):
                    time.sleep(0.01)  # abandoned at the limit; the test ends it

            @q.task(name="quick")
            def quick():
                return "ok"
        ''')
        q = self.queue()
        stuck = q.enqueue({"task": "stuck"}, max_attempts=2)
        self.addCleanup(self.go)
        self.work("limited", "--concurrency", "2")
        wait_until(lambda: bool(q.dlq()), TIMEOUT, "the stuck task to be dead-lettered")
        (job,) = q.dlq()
        self.assertEqual((job.id, job.attempts, job.last_error),
                         (stuck.id, 2, "TimeoutError: exceeded 0.3 s"))
        self.assertEqual(self.notes(), [["stuck"], ["stuck"]])
        quick = TaskResult(q, q.enqueue({"task": "quick"}).id)
        self.assertEqual(quick.get(timeout=TIMEOUT), "ok", self.errors())

    def test_a_locked_task_runs_one_call_at_a_time_across_worker_processes(self) -> None:
        # The pings come first (priority) and return only once both workers run
        # one: then both workers are up, and both lease a "solo" at once.
        self.module("solo", '''
            @q.task(name="ping", priority=10)
            def ping():
                note("ping", os.getpid())
                while sum('"ping"' in line for line in open(os.environ["NB_LOG"])) < 2:
                    time.sleep(0.01)

            @q.task(name="solo", lock=True)
            def solo(n):
                note("start", n, time.time())
                time.sleep(0.5)  # long beside a stall of the other worker's: they meet
                note("end", n, time.time())
        ''')
        q = self.queue()
        q.enqueue_many([{"task": "ping"}] * 2, priority=10)
        # max_attempts=1: a run that finds the lock held is snoozed, not an attempt.
        solos = [TaskResult(q, job.id) for job in q.enqueue_many(
            [{"task": "solo", "args": [n]} for n in range(4)], max_attempts=1)]
        for _ in range(2):
            self.work("solo")
        for result in solos:
            result.get(timeout=TIMEOUT)
        runs = sorted((at, what) for what, n, at in
                      (note for note in self.notes() if note[0] != "ping"))
        self.assertEqual([what for _, what in runs], ["start", "end"] * 4,
                         f"two calls overlapped: {runs}")
        self.assertEqual(len({note[1] for note in self.notes() if note[0] == "ping"}), 2)
        finished = [q.get(r.id) for r in solos]
        self.assertEqual([job.attempts for job in finished], [1, 1, 1, 1])
        self.assertIn("TaskLockedError: the lock 'solo' is held by another run",
                      [job.last_error for job in finished],
                      "no run was ever refused: the workers never met at the lock")

    def test_a_worker_killed_holding_a_lock_leaves_it_free(self) -> None:
        self.module("hog", '''
            @q.task(name="hog", lock=True)
            def hog():
                note("in", os.getpid())
                time.sleep(3600)
        ''')
        q = self.queue()
        q.enqueue({"task": "hog"})
        proc = self.work("hog")
        wait_until(self.notes, TIMEOUT, "the task to start")
        with self.assertRaises(TaskLockedError), q.lock("hog"):
            pass
        proc.kill()  # SIGKILL: nothing of the worker's gets to let the lock go
        proc.wait(30)

        def free() -> bool:
            try:
                with q.lock("hog"):
                    return True
            except TaskLockedError:
                return False

        wait_until(free, TIMEOUT, "the killed worker's lock to be free")

    def test_cancelling_a_running_task_refuses_its_late_ack(self) -> None:
        self.module("cancel", '''
            @q.task(name="slow")
            def slow():
                note("started")
                while not os.path.exists(os.environ["NB_LOG"] + ".go"):
                    time.sleep(0.01)
                return "late"

            @q.task(name="next")
            def next_():
                return "next"
        ''')
        q = self.queue()
        job = q.enqueue({"task": "slow"})
        self.work("cancel")  # concurrency 1: "next" runs after slow's ack was tried
        wait_until(lambda: self.notes() == [["started"]], TIMEOUT, "the task to start")
        self.assertTrue(q.cancel(job.id))
        wait_until(lambda: q.get(job.id).state is JobState.CANCELLED, TIMEOUT, "cancelled")
        self.go()
        after = TaskResult(q, q.enqueue({"task": "next"}).id)
        self.assertEqual(after.get(timeout=TIMEOUT), "next", self.errors())
        with self.assertRaises(TaskFailed) as caught:
            TaskResult(q, job.id).get(timeout=TIMEOUT)
        self.assertEqual(caught.exception.state, JobState.CANCELLED)
        cancelled = q.get(job.id)
        self.assertIs(cancelled.state, JobState.CANCELLED, "the late ack was refused")
        self.assertIsNone(cancelled.result, "the late ack stored no result")

    def test_two_workers_with_a_fast_clock_run_each_periodic_tick_exactly_once(self) -> None:
        # 120x: a tick every 60 clock seconds is one every 0.5 real seconds.
        self.env.update(NB_SPEED="120", NB_T0=repr(time.time()))
        self.module("ticks", '''
            @q.periodic(every=60, name="tick")
            def tick():
                note(current_job().id, os.getpid(), current_job().attempts)
        ''')
        self.assert_each_tick_once("ticks", ticks=20, every=60.0)

    def assert_each_tick_once(self, module: str, *, ticks: int, every: float) -> None:
        # The claim is one job per tick. A lease that runs out is redelivered
        # (at least once), and at 120x the default 30 s lease is 0.25 real
        # seconds, which a loaded machine's scheduling can exceed: the leases
        # here outlast the test. The notes carry each run's attempt number, so a
        # failure shows a redelivery (attempt 2) apart from a tick enqueued twice.
        workers = [self.work(module, "--concurrency", "2", "--visibility-timeout", "3600")
                   for _ in range(2)]
        wait_until(lambda: len(self.notes()) >= ticks, 2 * TIMEOUT, f"{ticks} ticks")
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            self.assertEqual(proc.wait(30), 0, self.errors())
        ids = [job_id for job_id, *_ in self.notes()]
        self.assertGreaterEqual(len(ids), ticks)
        self.assertEqual(len(ids), len(set(ids)), f"a tick ran twice: {sorted(self.notes())}")
        stamps = sorted(tick_time(i) for i in ids)
        gaps = {round(b - a, 6) for a, b in itertools.pairwise(stamps)}
        self.assertEqual(gaps, {every}, "every tick between the first and last ran")


def tick_time(job_id: str) -> float:
    """The scheduled time in a tick's key, `periodic:NAME:2026-01-01T00:00:00[.ffffff]Z`."""
    stamp = job_id.split(":", 2)[2].rstrip("Z")
    whole, _, fraction = stamp.partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds + (int(fraction) / 1e6 if fraction else 0.0)


class FileTaskProcessTest(TaskProcessContract, WorkerProcessCase):
    """The suite on the file backend: a directory in the test's temp dir."""

    def target(self) -> str:
        return str(self.tmp / "jobs")


if __name__ == "__main__":
    unittest.main()
