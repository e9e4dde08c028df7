"""`nobroker work --log-format json` and `--queues`, as real processes.

A handler module in the test's directory decides each job's fate from its
payload: succeed, fail (retried, then dead), cancel itself while running,
or sleep until the worker is stopped at once (lost). The worker's stderr
must be JSON, one object a line, with a line per job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import unittest
from typing import Any

from harness.support import SRC, TempDirTestCase, wait_until

from nobroker import Queue

HANDLER = '''
import os, pathlib, time
from nobroker import Queue

def handle(job):
    kind = job.payload["kind"]
    if kind == "fail":
        raise RuntimeError("failing on purpose")
    if kind == "cancel":
        q = Queue(os.environ["NB_DIR"], job.payload["queue"])
        q.cancel(job.id)
        q.close()
    if kind == "sleep":
        pathlib.Path(os.environ["NB_DIR"], "sleeping").touch()
        time.sleep(60)
    return None
'''


class WorkJsonLogTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        (self.tmp / "handlers.py").write_text(textwrap.dedent(HANDLER))
        self.dir = self.tmp / "jobs"
        self.env = dict(os.environ, NB_DIR=str(self.dir),
                        PYTHONPATH=os.pathsep.join([str(SRC), str(self.tmp)]))

    def queue(self, name: str = "default") -> Queue:
        q = Queue(self.dir, name)
        self.addCleanup(q.close)
        return q

    def work(self, *args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-m", "nobroker", "work", "handlers:handle",
                                 "--dir", str(self.dir), "--log-format", "json", *args],
                                cwd=self.tmp, env=self.env, stdout=subprocess.DEVNULL,
                                stderr=open(self.tmp / "err.txt", "wb"))
        self.addCleanup(lambda: proc.poll() is not None or proc.kill())
        return proc

    def lines(self) -> list[dict[str, Any]]:
        text = (self.tmp / "err.txt").read_text()
        return [json.loads(line) for line in text.splitlines()]  # each line is JSON

    def job_lines(self) -> list[dict[str, Any]]:
        return [line for line in self.lines() if "outcome" in line]

    def test_each_job_is_one_json_line_with_its_outcome(self) -> None:
        q = self.queue()
        ok = q.enqueue({"kind": "ok"})
        failing = q.enqueue({"kind": "fail"}, max_attempts=2)
        cancelled = q.enqueue({"kind": "cancel", "queue": "default"})
        proc = self.work("--idle-timeout", "1")
        self.assertEqual(proc.wait(60), 0, (self.tmp / "err.txt").read_text())
        seen = {(line["job_id"], line["attempt"]): line for line in self.job_lines()}
        self.assertEqual({key: line["outcome"] for key, line in seen.items()}, {
            (ok.id, 1): "succeeded", (failing.id, 1): "retried", (failing.id, 2): "dead",
            (cancelled.id, 1): "cancelled"})
        for line in seen.values():
            self.assertEqual(line["task"], "handle")
            self.assertEqual(line["queue"], "default")
            self.assertIsInstance(line["duration_ms"], float)
            self.assertGreaterEqual(line["duration_ms"], 0.0)
        started = [line for line in self.lines() if "worker started" in line["message"]]
        self.assertEqual([line["level"] for line in started], ["info"])

    def test_a_job_the_worker_gives_up_on_is_logged_as_lost(self) -> None:
        job = self.queue().enqueue({"kind": "sleep"})
        proc = self.work("--shutdown-timeout", "0")
        wait_until(lambda: (self.dir / "sleeping").exists(), 30, "the job to start")
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        lost = [line for line in self.job_lines() if line["job_id"] == job.id]
        self.assertEqual([line["outcome"] for line in lost], ["lost"])

    def test_queues_are_worked_by_priority_and_logged_with_their_names(self) -> None:
        high, low = self.queue("high"), self.queue("low")
        low.enqueue({"kind": "ok"})
        high.enqueue({"kind": "ok"})
        time.sleep(0.01)
        proc = self.work("--queues", "high,low:1", "--idle-timeout", "0.5")
        self.assertEqual(proc.wait(60), 0, (self.tmp / "err.txt").read_text())
        self.assertEqual([line["queue"] for line in self.job_lines()], ["high", "low"])

    def test_a_tasks_module_works_the_queues_it_registered_tasks_on(self) -> None:
        (self.tmp / "mytasks.py").write_text(textwrap.dedent('''
            import os
            from nobroker import Queue
            high = Queue(os.environ["NB_DIR"], "high")
            low = Queue(os.environ["NB_DIR"], "low")

            @high.task
            def urgent(n):
                return n

            @low.task
            def later(n):
                return n
        '''))
        (self.tmp / "producer.py").write_text("import mytasks\n"
                                               "mytasks.later.delay(1)\n"
                                               "mytasks.urgent.delay(2)\n")
        subprocess.run([sys.executable, "producer.py"], cwd=self.tmp, env=self.env,
                       check=True, timeout=60)
        proc = subprocess.Popen([sys.executable, "-m", "nobroker", "work", "mytasks",
                                 "--queues", "high,low", "--idle-timeout", "0.5",
                                 "--log-format", "json"], cwd=self.tmp, env=self.env,
                                stderr=open(self.tmp / "err.txt", "wb"))
        self.assertEqual(proc.wait(60), 0, (self.tmp / "err.txt").read_text())
        self.assertEqual([(line["queue"], line["task"], line["outcome"])
                          for line in self.job_lines()],
                         [("high", "mytasks.urgent", "succeeded"),
                          ("low", "mytasks.later", "succeeded")])
        refused = subprocess.run([sys.executable, "-m", "nobroker", "work", "mytasks",
                                  "--queues", "high,other"], cwd=self.tmp, env=self.env,
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(refused.returncode, 2)
        self.assertIn("registered no tasks on queue(s) 'other'", refused.stderr)

    def test_text_logs_have_no_line_per_successful_job(self) -> None:
        self.queue().enqueue({"kind": "ok"})
        proc = subprocess.run([sys.executable, "-m", "nobroker", "work", "handlers:handle",
                               "--dir", str(self.dir), "--idle-timeout", "0.5"],
                              cwd=self.tmp, env=self.env, capture_output=True, timeout=60)
        text = proc.stderr.decode()
        self.assertEqual(len(text.splitlines()), 2, text)  # started, stopped
        self.assertNotIn("{", text)


if __name__ == "__main__":
    unittest.main()
