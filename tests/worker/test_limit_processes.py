"""Limits across real worker processes (issue 24's measure), read back from the log.

Four `Worker` processes over one file queue, each declaring the same limited
task, work a backlog far above the limit. The starts are the LEASE records'
times in the log (what a window counts), so the check is the log's own word:
no window of the period holds more starts than the limit (sliding, checked at
every start), and over twenty periods the starts reach 95% of what the limit
allows. A concurrency-limited key never has more holders than its limit.
"""

from __future__ import annotations

import signal
import sys
import time
import unittest

from harness.support import TempDirTestCase, slow, spawn_python

from nobroker import Queue
from nobroker.file.inspection import current_log_path, read_records

COUNT, PERIOD, PERIODS = 5, 0.5, 20

WORKER = f"""\
import sys, time
from nobroker import Queue
from nobroker.worker import Worker

directory, mode = sys.argv[1], sys.argv[2]
queue = Queue(directory, auto_compact=None)

@queue.task(name="limited", rate_limit=({COUNT}, {PERIOD}))
def limited(n):
    return n

@queue.task(name="held", concurrency=2, concurrency_key=lambda n: "k" + str(n % 2))
def held(n):
    time.sleep(0.05)

Worker(queue, concurrency=2, shutdown_timeout=5).run()
"""


def declared(directory: str) -> Queue:
    """The queue, with the tasks declared as the workers declare them: a job's keys are
    computed by the process that enqueues it."""
    queue = Queue(directory, auto_compact=None)
    queue.task(name="limited", rate_limit=(COUNT, PERIOD))(lambda n: n)
    queue.task(name="held", concurrency=2, concurrency_key=lambda n: "k" + str(n % 2))(
        lambda n: None)
    return queue


def lease_times(directory: str) -> dict[str, float]:
    """Every LEASE record's job id -> time, in log order (a job's latest)."""
    return {f"{record.payload['id']}@{record.offset}": record.payload["t"]
            for record in read_records(current_log_path(directory))
            if record.type == "LEASE"}


@unittest.skipIf(sys.platform == "win32", "POSIX signals")
class RateLimitAcrossProcessesTest(TempDirTestCase):
    def run_workers(self, seconds: float) -> None:
        procs = [spawn_python(WORKER, str(self.tmp / "q"), "rate") for _ in range(4)]
        try:
            time.sleep(seconds)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                _, err = proc.communicate(timeout=30)
                self.assertIn(proc.returncode, (0, -signal.SIGTERM), err.decode()[-2000:])

    @slow
    def test_four_workers_never_exceed_the_window_and_use_95_percent_of_it(self) -> None:
        q = declared(str(self.tmp / "q"))
        q.enqueue_many([{"task": "limited", "args": [n], "kwargs": {}}
                        for n in range(COUNT * PERIODS * 4)])
        self.run_workers(PERIOD * PERIODS + 3.0)
        times = sorted(lease_times(str(self.tmp / "q")).values())
        self.assertGreater(len(times), COUNT * PERIODS)
        # Sliding: any COUNT + 1 consecutive starts span at least a period.
        for first, last in zip(times, times[COUNT:], strict=False):
            self.assertGreaterEqual(last - first, PERIOD, (first, last))
        start = times[0]
        within = [at for at in times if at < start + PERIOD * PERIODS]
        self.assertGreaterEqual(len(within), 0.95 * COUNT * PERIODS, len(within))
        q.close()

    @slow
    def test_a_concurrency_key_never_has_more_holders_than_its_limit(self) -> None:
        q = declared(str(self.tmp / "q"))
        q.enqueue_many([{"task": "held", "args": [n], "kwargs": {}} for n in range(60)])
        self.run_workers(4.0)
        holders: dict[str, int] = {}
        ids: dict[str, str] = {}
        for record in read_records(current_log_path(str(self.tmp / "q"))):
            payload = record.payload
            if record.type == "ENQUEUE":
                ids[payload["id"]] = payload["ck"]
            elif record.type == "LEASE":
                key = ids[payload["id"]]
                holders[key] = holders.get(key, 0) + 1
                self.assertLessEqual(holders[key], 2, key)
            elif record.type in ("ACK", "NACK", "EXPIRE", "SNOOZE", "CANCEL"):
                holders[ids[payload["id"]]] -= 1
        self.assertGreater(q.stats().done, 10)
        q.close()


if __name__ == "__main__":
    unittest.main()
