"""tools/suites/peer_suite.py: a peer's suite run passes only when every failure is one
already explained (and something passed, and the run was not cut short)."""

from __future__ import annotations

import contextlib
import io
import unittest

import harness.support  # noqa: F401  (puts the repo root, and so `tools`, on sys.path)

from tools.suites.dramatiq_suite import KNOWN_FAILURES
from tools.suites.peer_suite import judge

KNOWN = "test_actors.py::test_actors_can_be_sent_messages"


def run(results: dict[str, str], capped: bool = False) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = judge("Peer's suite", results, KNOWN_FAILURES.get, 1.0, capped, 60.0)
    return code, out.getvalue()


class JudgeTest(unittest.TestCase):
    def test_known_failures_pass_the_run_and_say_why(self) -> None:
        code, out = run({KNOWN: "failed", "test_x.py::test_ok": "passed"})
        self.assertEqual(code, 0)
        self.assertIn(f"known: {KNOWN}: {KNOWN_FAILURES[KNOWN]}", out)

    def test_an_unexplained_failure_or_error_fails_the_run(self) -> None:
        for kind in ("failed", "error"):
            code, out = run({"test_x.py::test_new": kind, "test_x.py::test_ok": "passed"})
            self.assertEqual(code, 1)
            self.assertIn(f"UNEXPLAINED {kind}: test_x.py::test_new", out)

    def test_a_capped_run_or_one_where_nothing_passed_fails(self) -> None:
        self.assertEqual(run({"test_x.py::test_ok": "passed"}, capped=True)[0], 1)
        self.assertEqual(run({"test_x.py::test_skip": "skipped"})[0], 1)

    def test_a_known_failure_that_now_passes_is_reported(self) -> None:
        code, out = run({KNOWN: "passed"})
        self.assertEqual(code, 0)
        self.assertIn(f"now passes (remove it from the known failures): {KNOWN}", out)
