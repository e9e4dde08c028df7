"""Workflows through real processes, and the ways of running them in one.

- A Celery tasks module (chain, group, chord, .s/.si, `|`) runs on nobroker
  with only its imports changed: a `nobroker work` process runs it, another
  process calls it.
- kill -9: a chord whose members two worker processes run, one of them killed
  while it runs a member; the member is delivered again after its lease, and
  the callback runs exactly once, with every member's result.
- Eager mode (nobroker.testing) runs a whole workflow inside `.delay()`.
- A step whose parent's result is no longer kept fails with that reason.

The semantics on every backend are tests/contract/workflow_contract.py's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import unittest

from harness.support import TempDirTestCase, WorkerProcessCase, wait_until

from nobroker import JobState, Queue, TaskFailed, Worker, chain, chord, group
from nobroker.testing import eager

TIMEOUT = 60.0

# Written as Celery's documentation writes it; only the imports and `app` differ:
#   from celery import Celery, chain, chord, group
#   app = Celery("celery_style", broker=...)
CELERY_STYLE = '''
import os
from nobroker import Queue, chain, chord, group

app = Queue(os.environ["NB_TARGET"], "tasks")

@app.task
def add(x, y):
    return x + y

@app.task
def mul(x, y):
    return x * y

@app.task
def xsum(numbers):
    return sum(numbers)

def run():
    return {
        "chain": chain(add.s(2, 2), add.s(4), add.s(8))().get(timeout=60),
        "pipe": (add.s(2, 2) | mul.s(8)).delay().get(timeout=60),
        "si": (add.s(1, 1) | add.si(5, 5)).apply_async().get(timeout=60),
        "group": group(add.s(i, i) for i in range(10))().get(timeout=60),
        "chord": chord(add.s(i, i) for i in range(10))(xsum.s()).get(timeout=60),
        "chord2": chord((add.s(i, i) for i in range(4)), xsum.s()).delay().get(timeout=60),
        "parent": (add.s(1, 1) | add.s(1)).delay().parent.get(timeout=60),
    }
'''

CHORD_MODULE = '''
import json, os, time
from nobroker import Queue
from nobroker.tasks import current_job

q = Queue(os.environ["NB_TARGET"], "tasks")

def note(*fields):
    with open(os.environ["NB_LOG"], "a") as f:  # one write per line, O_APPEND
        f.write(json.dumps(list(fields)) + "\\n")

@q.task(name="member")
def member(i):
    note("start", i, os.getpid(), current_job().attempts)
    if i == 0 and current_job().attempts == 1:
        time.sleep(120)  # the test kills this worker here
    time.sleep(0.02)
    return i

@q.task(name="callback")
def callback(results):
    note("callback", results, os.getpid())
    return sum(results)
'''


class CeleryStyleModuleTest(WorkerProcessCase):
    def test_a_celery_tasks_module_runs_after_changing_its_imports(self) -> None:
        self.env["NB_TARGET"] = str(self.tmp / "jobs")
        self.module("celery_style", CELERY_STYLE)
        self.work("celery_style", "--concurrency", "2")
        caller = subprocess.run(
            [sys.executable, "-c", "import json, celery_style; "
             "print(json.dumps(celery_style.run()))"],
            cwd=self.tmp, env=self.env, capture_output=True, text=True, timeout=TIMEOUT * 2)
        self.assertEqual(caller.returncode, 0, caller.stderr + self.errors())
        self.assertEqual(json.loads(caller.stdout), {
            "chain": 16, "pipe": 32, "si": 10, "group": [i * 2 for i in range(10)],
            "chord": 90, "chord2": 12, "parent": 2})


class KilledWorkerChordTest(WorkerProcessCase):
    def test_a_chord_callback_runs_exactly_once_after_a_member_worker_is_killed(
            self) -> None:
        target = str(self.tmp / "jobs")
        self.env["NB_TARGET"] = target
        self.module("chords", CHORD_MODULE)
        q = Queue(target, "tasks")
        self.addCleanup(q.close)
        member = q.task(name="member")(lambda i: i)
        callback = q.task(name="callback")(lambda results: sum(results))
        result = chord([member.s(i) for i in range(12)], callback.s()).delay()
        workers = [self.work("chords", "--visibility-timeout", "1") for _ in range(2)]

        def holder() -> int | None:
            starts = [n for n in self.notes() if n[0] == "start" and n[1] == 0]
            return starts[0][2] if starts else None

        pid = wait_until(holder, TIMEOUT, "a worker to start member 0")
        victim = next(w for w in workers if w.pid == pid)
        victim.kill()  # SIGKILL, mid-run: member 0's lease is left to expire
        victim.wait()
        self.assertEqual(result.get(timeout=TIMEOUT), sum(range(12)), self.errors())
        callbacks = [n for n in self.notes() if n[0] == "callback"]
        self.assertEqual(len(callbacks), 1, callbacks)
        self.assertEqual(callbacks[0][1], list(range(12)), "member order kept")
        self.assertNotEqual(callbacks[0][2], pid)
        again = [n for n in self.notes() if n[0] == "start" and n[1] == 0]
        self.assertEqual([n[3] for n in again], [1, 2], "member 0 delivered again once")


class InProcessWorkflowTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.q = Queue(self.tmp / "q")
        self.addCleanup(self.q.close)

    def test_an_eager_queue_runs_the_whole_workflow_inside_delay(self) -> None:
        add = self.q.task(name="add")(lambda x, y=0: x + y)
        tsum = self.q.task(name="tsum")(lambda numbers: sum(numbers))
        boom = self.q.task(name="boom", max_attempts=1)(lambda *a: 1 / 0)
        seen: list[str] = []
        notify = self.q.task(name="notify")(
            lambda job_id, error: seen.append(error))
        with eager(self.q):
            result = chord([add.s(1, 1), add.s(2, 2)], tsum.s() | add.s(10)).delay()
            members = group(add.s(i, i) for i in range(3)).delay()
            failing = chain(add.s(1, 1), boom.s(), add.s(1)).on_error(notify.s()).delay()
        self.assertEqual((result.get(timeout=0), members.get(timeout=0)), (16, [0, 2, 4]))
        with self.assertRaises(TaskFailed) as caught:
            failing.get(timeout=0)
        self.assertEqual(caught.exception.task, "boom")
        self.assertEqual(len(seen), 1)
        self.assertIn("ZeroDivisionError", seen[0])

    def test_a_step_whose_parents_result_is_gone_fails_saying_why(self) -> None:
        self.q.task(name="add", max_attempts=1)(lambda x, y: x + y)
        # what the compiler writes for a step after "gone", whose result is not kept
        job = self.q.enqueue({"task": "add", "args": [1], "kwargs": {}, "parents": "gone"},
                             max_attempts=1)
        Worker(self.q, handle_signals=False, idle_timeout=0.3, poll_interval=0.01).run()
        after = self.q.get(job.id)
        self.assertIs(after.state, JobState.DEAD)
        self.assertIn("prerequisite gone is no longer known", after.last_error or "")

if __name__ == "__main__":
    unittest.main()
