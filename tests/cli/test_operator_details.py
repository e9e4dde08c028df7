"""Small things an operator meets first (issue 13's "smaller" list).

A non-callable handler is named with the right article; `work -v` shows the
traceback of a handler module that fails to import (and plain `work` keeps
it to one line); `compact` says why a small log grew; a retry is logged with
the backoff it waits; `help(Queue)` shows no private parameter, and the
methods people call first have docstrings.
"""

from __future__ import annotations

import inspect
import logging
import re
import subprocess
import sys
import unittest

from harness.support import TempDirTestCase, child_env

from nobroker import BackoffPolicy, Job, Queue, Worker
from nobroker.cli import UsageError, load_handler


class HandlerErrorsTest(TempDirTestCase):
    def nb(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "nobroker", "--dir", "q", *args],
                              cwd=self.tmp, capture_output=True, text=True, env=child_env(),
                              timeout=60)

    def test_a_handler_that_is_no_function_is_named_with_the_right_article(self) -> None:
        (self.tmp / "notes.py").write_text("count = 3\nitems = []\n")
        sys.path.insert(0, str(self.tmp))
        self.addCleanup(sys.path.remove, str(self.tmp))
        self.addCleanup(sys.modules.pop, "notes", None)
        for spec, expected in (("notes:count", "is an int"), ("notes:items", "is a list")):
            with self.assertRaises(UsageError) as caught:
                load_handler(spec)
            self.assertIn(f"{spec} {expected}, not a function", str(caught.exception))

    def test_work_verbose_shows_why_the_handler_module_failed_to_import(self) -> None:
        (self.tmp / "broken.py").write_text("def handle(job):\n    pass\n\n1 / 0\n")
        quiet = self.nb("work", "broken:handle")
        self.assertEqual(quiet.returncode, 2)
        self.assertEqual(quiet.stderr.strip().splitlines(),
                         ["nobroker: importing 'broken' failed: ZeroDivisionError: "
                          "division by zero"])
        loud = self.nb("work", "broken:handle", "-v")
        self.assertEqual(loud.returncode, 2)
        self.assertIn("Traceback (most recent call last)", loud.stderr)
        self.assertIn('broken.py", line 4', loud.stderr)

    def test_compact_says_why_a_small_log_grew(self) -> None:
        for i in range(4):
            self.assertEqual(self.nb("enqueue", f'{{"i": {i}}}').returncode, 0)
        done = self.nb("compact")
        self.assertEqual(done.returncode, 0, done.stderr)
        sizes = re.search(r"([\d,]+) -> ([\d,]+) bytes", done.stdout)
        assert sizes is not None, done.stdout
        before, after = (int(size.replace(",", "")) for size in sizes.groups())
        self.assertEqual(after > before, "the log grew" in done.stdout, done.stdout)
        self.assertGreater(after, before, "four live jobs should no longer shrink the log")


class WorkerLogTest(TempDirTestCase):
    def test_a_retry_is_logged_with_the_backoff_it_waits(self) -> None:
        q = Queue(str(self.tmp / "q"), backoff=BackoffPolicy(base=0.25, jitter=0.0))
        self.addCleanup(q.close)
        q.enqueue({"n": 1}, max_attempts=2)

        def fail(job: Job) -> None:
            raise RuntimeError("down")

        with self.assertLogs("nobroker", logging.WARNING) as logs:
            Worker(q, fail, max_jobs=1, handle_signals=False).run()
        self.assertTrue(any("retrying in 0.25s" in line for line in logs.output), logs.output)


class QueueHelpTest(unittest.TestCase):
    def test_help_shows_no_private_parameter_and_the_first_methods_are_documented(self) -> None:
        parameters = inspect.signature(Queue).parameters
        self.assertFalse([name for name in parameters if name.startswith("_")])
        for method in ("get", "lease_one", "close", "enqueue", "lease", "ack", "nack"):
            self.assertTrue(inspect.getdoc(getattr(Queue, method)), f"Queue.{method}")


if __name__ == "__main__":
    unittest.main()
