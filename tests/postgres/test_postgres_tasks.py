"""The task layer on PostgreSQL: @q.task, .delay, results, cancel, time limits, periodic ticks.

The same claims as tests/task_layer/test_tasks.py's process tests, through
`Queue(url)` with real `nobroker work MODULE` processes on the URL (the
module's Queue is opened on NB_URL). The queue of the tests and of the
workers uses the server's clock, except in the fast-clock periodic test,
which injects the same 120x clock into every process (the tasks layer and
the backend both follow an injected clock, so the server's is not used).
"""

from __future__ import annotations

import calendar
import itertools
import signal
import time
import unittest
from pathlib import Path

from pg_support import drop_schema, fresh_schema_url, needs_postgres
from support import WorkerProcessCase, wait_until

from nobroker import BackoffPolicy, JobState, Queue, TaskFailed
from nobroker.tasks import TaskResult

FAST_RETRY = BackoffPolicy(base=0.05, factor=1.0, jitter=0.0)

# The header of each tasks module the workers import. NB_SPEED set: a fast
# clock of the workers' own; unset: the server's clock (the default).
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

q = Queue(os.environ["NB_URL"], "tasks", clock=clock,
          backoff=BackoffPolicy(base=0.05, factor=1.0, jitter=0.0))

def note(*fields):
    with open(os.environ["NB_LOG"], "a") as f:  # one write per line, O_APPEND
        f.write(json.dumps(list(fields)) + "\\n")
'''


@needs_postgres
class PostgresTaskProcessTest(WorkerProcessCase):
    MODULE_HEADER = MODULE_HEADER

    def setUp(self) -> None:
        super().setUp()
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)
        self.env["NB_URL"] = self.url
        self.env.pop("NOBROKER_URL", None)

    def queue(self) -> Queue:
        q = Queue(self.url, "tasks", backoff=FAST_RETRY)
        self.addCleanup(q.close)
        return q

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
        self.assertEqual([r.get(timeout=60) for r in handles], [0, 1, 4, 9, 16], self.errors())
        self.assertTrue(all(r.ready() for r in handles))
        bad = fail.apply_async(max_attempts=1)
        with self.assertRaises(TaskFailed) as caught:
            bad.get(timeout=60)
        self.assertEqual(caught.exception.last_error, "RuntimeError: nope")
        self.assertEqual(caught.exception.state, JobState.DEAD)

    def test_a_result_is_waited_for_from_another_process(self) -> None:
        self.module("adder", '''
            @q.task(name="add")
            def add(a, b):
                return {"sum": a + b}
        ''')
        self.work("adder")
        q = self.queue()
        ok = TaskResult(q, q.enqueue({"task": "add", "args": [2, 3]}).id)
        self.assertEqual(ok.get(timeout=60), {"sum": 5}, self.errors())
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
        self.addCleanup(Path(str(self.log) + ".go").touch)
        self.work("limited", "--concurrency", "2")
        wait_until(lambda: bool(q.dlq()), 60, "the stuck task to be dead-lettered")
        (job,) = q.dlq()
        self.assertEqual((job.id, job.attempts, job.last_error),
                         (stuck.id, 2, "TimeoutError: exceeded 0.3 s"))
        self.assertEqual(self.notes(), [["stuck"], ["stuck"]])
        quick = TaskResult(q, q.enqueue({"task": "quick"}).id)
        self.assertEqual(quick.get(timeout=60), "ok", self.errors())

    def test_cancelling_a_running_task_refuses_its_late_ack(self) -> None:
        self.module("cancel", '''
            @q.task(name="slow")
            def slow():
                note("started")
                while not os.path.exists(os.environ["NB_LOG"] + ".go"):
                    time.sleep(0.01)
                return "late"
        ''')
        q = self.queue()
        job = q.enqueue({"task": "slow"})
        self.work("cancel")
        wait_until(lambda: self.notes() == [["started"]], 60, "the task to start")
        self.assertTrue(q.cancel(job.id))
        Path(str(self.log) + ".go").touch()
        result = TaskResult(q, job.id)
        with self.assertRaises(TaskFailed) as caught:
            result.get(timeout=60)
        self.assertEqual(caught.exception.state, JobState.CANCELLED)
        self.assertIsNone(q.get(job.id).result, "the late ack was refused")

    def test_two_workers_with_a_fast_clock_run_each_periodic_tick_exactly_once(self) -> None:
        # 120x: a tick every 60 clock seconds is one every 0.5 real seconds.
        self.env.update(NB_SPEED="120", NB_T0=repr(time.time()))
        self.module("ticks", '''
            @q.periodic(every=60, name="tick")
            def tick():
                note(current_job().id, os.getpid())
        ''')
        self.assert_each_tick_once("ticks", ticks=20, every=60.0)

    def test_two_workers_on_the_server_clock_run_each_periodic_tick_exactly_once(self
                                                                                ) -> None:
        self.module("beats", '''
            @q.periodic(every=0.25, name="beat")
            def beat():
                note(current_job().id, os.getpid())
        ''')
        self.assert_each_tick_once("beats", ticks=20, every=0.25)

    def assert_each_tick_once(self, module: str, *, ticks: int, every: float) -> None:
        workers = [self.work(module, "--concurrency", "2") for _ in range(2)]
        wait_until(lambda: len(self.notes()) >= ticks, 120, f"{ticks} ticks")
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            self.assertEqual(proc.wait(30), 0, self.errors())
        ids = [job_id for job_id, _ in self.notes()]
        self.assertGreaterEqual(len(ids), ticks)
        self.assertEqual(len(ids), len(set(ids)), f"a tick ran twice: {sorted(ids)}")
        stamps = sorted(_tick_time(i) for i in ids)
        gaps = {round(b - a, 6) for a, b in itertools.pairwise(stamps)}
        self.assertEqual(gaps, {every}, "every tick between the first and last ran")


def _tick_time(job_id: str) -> float:
    """The scheduled time in a tick's key, `periodic:NAME:2026-01-01T00:00:00[.ffffff]Z`."""
    stamp = job_id.split(":", 2)[2].rstrip("Z")
    whole, _, fraction = stamp.partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds + (int(fraction) / 1e6 if fraction else 0.0)


if __name__ == "__main__":
    unittest.main()
