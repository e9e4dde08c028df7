"""A Worker whose own thread raises stops loudly instead of hanging.

The failure is planted where a real one would come from: a backend that raises
what it should not (a RuntimeError, not a NobrokerError) inside a slot's ack.
The worker must log the traceback, stop its other threads, raise from
`Worker.run()` (exit 1 from `nobroker work`), and the job that slot held must
come back once its lease runs out. Without the guard the process never exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import unittest
from typing import Any

from harness.support import SRC, TempDirTestCase, wait_until

from nobroker import JobNotFoundError, JobState, Queue, WorkerCrashedError
from nobroker.worker import Worker

# A tasks module whose queue's ack raises on the second call, in any process.
TASKS = """\
import os
from nobroker import Queue

class FlakyQueue(Queue):
    acks = 0

    def _count(self):
        FlakyQueue.acks += 1
        if FlakyQueue.acks == 2:
            raise RuntimeError("planted: the backend broke on ack 2")

    def ack(self, job, *args, **kwargs):
        self._count()
        return super().ack(job, *args, **kwargs)

    def ack_and_lease(self, job, *args, **kwargs):
        self._count()
        return super().ack_and_lease(job, *args, **kwargs)

queue = FlakyQueue(os.environ["CRASH_QUEUE"], visibility_timeout=1.0)

@queue.task
def double(n):
    return 2 * n
"""


class FlakyQueue(Queue):
    """A queue whose second ack of any kind raises (in this process)."""

    acks = 0

    def _count(self) -> None:
        type(self).acks += 1
        if type(self).acks == 2:
            raise RuntimeError("planted: the backend broke on ack 2")

    def ack(self, job: Any, *args: Any, **kwargs: Any) -> None:
        self._count()
        super().ack(job, *args, **kwargs)

    def ack_and_lease(self, job: Any, *args: Any, **kwargs: Any) -> Any:
        self._count()
        return super().ack_and_lease(job, *args, **kwargs)

    def ack_many(self, jobs: Any) -> None:
        self._count()
        super().ack_many(jobs)

    def ack_many_and_lease(self, jobs: Any, *args: Any, **kwargs: Any) -> Any:
        self._count()
        return super().ack_many_and_lease(jobs, *args, **kwargs)


def still_leased(queue: Queue, ids: list[str]) -> list[str]:
    """Which of `ids` are leased (an acked job is forgotten)."""
    held = []
    for job_id in ids:
        try:
            if queue.get(job_id).state is JobState.LEASED:
                held.append(job_id)
        except JobNotFoundError:
            pass
    return held


def lease_again(queue: Queue, held: list[str]) -> dict[str, int]:
    """Lease until each of `held` came back (their leases ran out): their attempts."""
    back: dict[str, int] = {}

    def all_back() -> bool:
        job = queue.lease_one()
        if job is not None:
            back[job.id] = job.attempts
        return set(held) <= set(back)

    wait_until(all_back, what="the dropped jobs' leases to run out")
    return {job_id: back[job_id] for job_id in held}


class ThreadCrashTest(TempDirTestCase):
    def test_run_raises_when_a_slot_fails_and_the_other_slots_stop(self) -> None:
        self.check_run_raises(prefetch=0)

    def test_run_raises_when_the_acker_fails(self) -> None:
        self.check_run_raises(prefetch=2)

    def check_run_raises(self, prefetch: int) -> None:
        queue = FlakyQueue(str(self.tmp / "q"), visibility_timeout=0.5)
        self.addCleanup(queue.close)
        FlakyQueue.acks = 0
        ids = [queue.enqueue({"n": n}).id for n in range(6)]
        worker = Worker(queue, lambda job: None, concurrency=2, handle_signals=False,
                        prefetch=prefetch)
        box: dict[str, BaseException] = {}

        def run() -> None:
            try:
                worker.run()
            except BaseException as exc:  # handed to the test below
                box["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        with self.assertLogs("nobroker", "ERROR") as logs:
            thread.start()
            thread.join(15)
        self.assertFalse(thread.is_alive(), "Worker.run() hung after a thread failed")
        error = box.get("error")
        self.assertIsInstance(error, WorkerCrashedError)
        assert isinstance(error, WorkerCrashedError)
        self.assertIn("planted: the backend broke on ack 2", error.reason)
        self.assertIsInstance(error.__cause__, RuntimeError)
        self.assertTrue(any("Traceback" in line and "planted" in line
                            for line in logs.output), logs.output)
        self.assertEqual(worker.stats.stopped_by, "error")
        # Nothing of ours holds a lease any more: what the failed thread held comes back.
        held = still_leased(queue, ids)
        self.assertTrue(held, "the job the failed thread held is still leased")
        self.assertEqual(lease_again(queue, held), dict.fromkeys(held, 2))

# A tasks module whose job log raises on its first record (a logging filter's bug):
# after the slot's ack already leased its next job, with the leases long.
LOG_TASKS = """\
import logging
import os
from nobroker import Queue

class Broken(logging.Filter):
    def filter(self, record):
        raise RuntimeError("planted: the job log broke")

jobs = logging.getLogger("nobroker.jobs")
jobs.setLevel(logging.INFO)
jobs.addHandler(logging.NullHandler())
jobs.addFilter(Broken())

queue = Queue(os.environ["CRASH_QUEUE"], visibility_timeout=60.0)

@queue.task
def double(n):
    return 2 * n
"""


@unittest.skipIf(sys.platform == "win32", "POSIX processes")
class WorkCommandCrashTest(TempDirTestCase):
    def run_work(self, tasks: str, *options: str) -> tuple[Queue, list[str], Any]:
        """`nobroker work crashtasks OPTIONS` over four queued jobs, `tasks` its module:
        the queue, the jobs' ids and the finished process."""
        (self.tmp / "crashtasks.py").write_text(tasks)
        location = str(self.tmp / "q")
        queue = Queue(location)
        self.addCleanup(queue.close)
        ids = [queue.enqueue({"task": "crashtasks.double", "args": [n], "kwargs": {}}).id
               for n in range(4)]
        env = dict(os.environ, CRASH_QUEUE=location,
                   PYTHONPATH=os.pathsep.join([str(SRC), str(self.tmp)]))
        try:
            done = subprocess.run([sys.executable, "-m", "nobroker", "work", "crashtasks",
                                   *options], cwd=self.tmp, env=env,
                                  capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            self.fail("`nobroker work` hung after a slot thread failed")
        return queue, ids, done

    def test_a_job_leased_with_the_failed_slots_ack_goes_back_at_once(self) -> None:
        # The slot acks its job and leases the next in one write, then raises: no
        # slot will start that next job, so it goes back untried at once, not after
        # the shutdown timeout (25 s) and then its lease (60 s).
        began = time.monotonic()
        queue, ids, done = self.run_work(LOG_TASKS, "--concurrency", "1")
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("RuntimeError: planted: the job log broke", done.stderr)
        self.assertLess(time.monotonic() - began, 20.0, "waited out the shutdown timeout")
        self.assertEqual(still_leased(queue, ids), [])
        second = queue.get(ids[1])
        self.assertIs(second.state, JobState.PENDING)
        self.assertEqual(second.attempts, 0)

    def test_prefetched_jobs_go_back_at_once_when_the_acker_fails(self) -> None:
        began = time.monotonic()
        queue, ids, done = self.run_work(LOG_TASKS, "--concurrency", "1", "--prefetch", "2")
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("RuntimeError: planted: the job log broke", done.stderr)
        self.assertLess(time.monotonic() - began, 20.0, "waited out the shutdown timeout")
        self.assertEqual(still_leased(queue, ids), [])

    def test_nobroker_work_exits_1_and_the_job_comes_back_after_its_lease(self) -> None:
        queue, ids, done = self.run_work(TASKS, "--concurrency", "2")
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("Traceback", done.stderr)
        self.assertIn("RuntimeError: planted: the backend broke on ack 2", done.stderr)
        self.assertIn("the worker's thread nobroker-slot-", done.stderr)
        held = still_leased(queue, ids)
        self.assertEqual(len(held), 1, "the job whose ack raised is still leased")
        self.assertEqual(lease_again(queue, held), {held[0]: 2})


if __name__ == "__main__":
    unittest.main()
