"""Tests for the examples and the make.py targets a newcomer runs first.

`python make.py demo` must complete and every claim in it must hold; the
video demo must run its scenes unpaced with --fast; `build` must produce a
bundle that works from any directory; `check-deps` must pass. The example
handlers are checked directly, since `work` is pointed at them.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import unittest
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from harness.support import REPO, TempDirTestCase

from nobroker import Job, JobState

EXAMPLES = REPO / "examples"
MAKE = REPO / "make.py"
sys.path.insert(0, str(EXAMPLES))

import demo  # noqa: E402
import handlers  # noqa: E402


def run(*args: str | Path, cwd: Path = REPO,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NOBROKER_DIR")}
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def job(payload: object, attempts: int = 1) -> Job:
    return Job(id="j1", payload=payload, priority=0, attempts=attempts, max_attempts=5,
               state=JobState.LEASED, available_at=0.0, enqueued_at=0.0, last_error=None)


class MakeTargetsTest(TempDirTestCase):
    def test_make_demo_completes_and_every_claim_holds(self) -> None:
        result = run(MAKE, "demo")
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr)
        out = result.stdout
        self.assertNotIn("DEMO FAILED", out + result.stderr)
        self.assertIn("All claims held: 8 scene(s)", out)
        for number, words in enumerate(["priorities and delays", "A worker",
                                        "retried with backoff", "dead-letter queue",
                                        "kill -9", "Compaction", "inspect", "Tasks"], 1):
            self.assertRegex(out, rf"== {number}\. .*{re.escape(words)}")
        self.assertGreaterEqual(out.count("[ok]"), 18)
        self.assertIn("$ kill -9 ", out)
        self.assertIn("ENQUEUE", out)
        match = re.search(r"working in (\S+)", out)
        assert match is not None
        self.assertFalse(Path(match.group(1)).exists(), "the demo left its directory behind")
        seconds = float(re.findall(r"scene\(s\) in ([\d.]+)s", out)[0])
        self.assertLess(seconds, 60)

    def test_the_tasks_example_runs_its_tour_and_cleans_up(self) -> None:
        result = run(EXAMPLES / "tasks.py")
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr)
        out = result.stdout
        self.assertIn("'task': 'tasks.send_email', 'args': ['ada@example.com']", out)
        self.assertIn("TimeoutError: exceeded 1 s", out)
        self.assertIn("heartbeat ran at worker start: periodic:tasks.heartbeat:", out)
        self.assertIn("sync_orders result: {'account': 'acme', 'attempt': 2}", out)
        match = re.search(r"queue: (\S+)", out)
        assert match is not None
        self.assertFalse(Path(match.group(1)).exists(), "the example left its queue behind")

    def test_the_workflow_example_fans_out_fans_in_and_reports_the_failed_member(
            self) -> None:
        result = run(EXAMPLES / "workflow.py")
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr)
        out = result.stdout
        self.assertIn("3 files: {'files': 3, 'words': 6}; per file: [3, 2, 1]", out)
        self.assertIn("4 files: workflow.count_words failed: FileNotFoundError", out)
        self.assertIn("the failed member is the lost file's: True", out)
        self.assertIn("the callback never ran: cancelled", out)
        self.assertIn("the other members finished: 3 of 4", out)
        handler = [line for line in out.splitlines() if line.startswith("on_error ran once")]
        self.assertEqual(len(handler), 1)
        self.assertEqual(handler[0].count("word count: job wf-"), 1, "exactly one report")

    def test_video_demo_runs_one_scene_unpaced(self) -> None:
        result = run(MAKE, "video-demo", "--fast", "--scenes", "4")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("scene 4", result.stdout)
        self.assertIn("All claims held: 1 scene(s)", result.stdout)
        self.assertNotIn("== 3.", result.stdout)
        bad = run(MAKE, "video-demo", "--fast", "--scenes", "99")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("no scene 99", bad.stderr)

    def test_build_makes_a_bundle_that_works_from_any_directory(self) -> None:
        pyz = self.tmp / "out" / "nobroker.pyz"
        built = run(MAKE, "build", "--output", pyz)
        self.assertEqual(built.returncode, 0, built.stdout + built.stderr)
        elsewhere = self.tmp / "elsewhere"
        elsewhere.mkdir()
        enqueued = run(pyz, "--dir", "./q", "enqueue", '{"a":1}', cwd=elsewhere)
        self.assertEqual(enqueued.returncode, 0, enqueued.stderr)
        self.assertRegex(enqueued.stdout, r"^[0-9a-f]{16}\n$")
        stats = run(pyz, "--dir", "./q", "stats", cwd=elsewhere)
        self.assertRegex(stats.stdout, r"pending\s+1\b")

    def test_check_deps_passes(self) -> None:
        result = run(MAKE, "check-deps")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("VERDICT: PASS", result.stdout)


class DemoSelfCheckTest(TempDirTestCase):
    def test_a_claim_that_does_not_hold_fails_the_demo_loudly(self) -> None:
        def broken_scene(tour: demo.Tour) -> None:
            tour.check(1 + 1 == 3, "arithmetic works")

        saved = demo.SCENES[0]
        demo.SCENES[0] = broken_scene
        try:
            out, err = io.StringIO(), io.StringIO()
            with redirect_stdout(out), redirect_stderr(err):
                code = demo.run_tour([1])
        finally:
            demo.SCENES[0] = saved
        self.assertEqual(code, 1)
        self.assertIn("DEMO FAILED: arithmetic works", err.getvalue())
        self.assertNotIn("[ok]", out.getvalue())


class HandlersTest(unittest.TestCase):
    def test_flaky_fails_until_its_attempt_comes(self) -> None:
        with self.assertRaises(ConnectionError):
            handlers.flaky(job({"succeed_on": 2}, attempts=1))
        with redirect_stdout(io.StringIO()) as out:
            handlers.flaky(job({"succeed_on": 2}, attempts=2))
        self.assertIn("worked on attempt 2", out.getvalue())

    def test_broken_always_raises_and_hello_always_succeeds(self) -> None:
        with self.assertRaises(ValueError):
            handlers.broken(job({"x": 1}))
        with redirect_stdout(io.StringIO()) as out:
            handlers.hello(job({"name": "Ada"}))
            handlers.hello(job(["not", "a", "dict"]))
            handlers.echo(job({"resize": "a.jpg"}))
        self.assertIn("hello, Ada", out.getvalue())
        self.assertIn('{"resize": "a.jpg"}', out.getvalue())

    def test_slow_announces_itself_before_working(self) -> None:
        marker = Path(self.id() + ".pid")
        self.addCleanup(lambda: marker.unlink(missing_ok=True))
        with redirect_stdout(io.StringIO()) as out:
            handlers.slow(job({"seconds": 0, "started": str(marker)}))
        self.assertEqual(marker.read_text(), str(os.getpid()))
        self.assertIn("done", out.getvalue())


if __name__ == "__main__":
    unittest.main()
