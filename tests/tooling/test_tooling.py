"""Tests for the development tooling: make.py, the runner, the proof, the bundle.

These run the tools the way a developer does, as separate processes with
``sys.executable``, against the real checkout or against small trees built in
a temp dir. They must stay fast (a few seconds in all).
"""

from __future__ import annotations

import difflib
import os
import platform
import re
import subprocess
import sys
import textwrap
import unittest
from pathlib import Path
from unittest import mock

from harness.support import REPO, SRC, TempDirTestCase, slow

CHECK_DEPS = REPO / "tools" / "build" / "check_deps.py"  # stdlib only: runs by path too
BUILD_PYZ = REPO / "tools" / "build" / "pyz.py"
RUNNER = REPO / "tests" / "run.py"
MAKE = REPO / "make.py"


def run_python(*args: str | Path, cwd: Path = REPO,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run this interpreter with ``args``; capture text output, never raise."""
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def clean_env() -> dict[str, str]:
    """The environment without PYTHONPATH or the quick-run switch."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NOBROKER_QUICK")}


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


class DependencyProofTest(TempDirTestCase):
    def check(self, root: Path) -> subprocess.CompletedProcess[str]:
        return run_python(CHECK_DEPS, "--root", root)

    def test_committed_proof_matches_a_fresh_run(self) -> None:
        proof = REPO / "deps-proof.txt"
        self.assertTrue(proof.is_file(), "deps-proof.txt is missing: python make.py deps-proof")
        fresh = run_python(CHECK_DEPS)
        self.assertEqual(fresh.returncode, 0, fresh.stdout + fresh.stderr)
        committed = proof.read_text(encoding="utf-8")
        if fresh.stdout != committed:
            diff = "".join(difflib.unified_diff(
                committed.splitlines(keepends=True), fresh.stdout.splitlines(keepends=True),
                "deps-proof.txt (committed)", "check_deps.py (now)"))
            self.fail("deps-proof.txt is stale; regenerate it with "
                      f"`python make.py deps-proof`:\n{diff}")

    def test_report_has_no_machine_specific_details(self) -> None:
        result = run_python(CHECK_DEPS)
        self.assertNotIn(str(REPO), result.stdout)
        self.assertNotIn(platform.python_version(), result.stdout)
        major_minor = f"{sys.version_info.major}.{sys.version_info.minor}"
        self.assertIn(f"python:   {major_minor}\n", result.stdout)

    def test_planted_third_party_import_in_the_core_fails(self) -> None:
        write(self.tmp, "src/nobroker/__init__.py", "import json\nfrom . import core\n")
        write(self.tmp, "src/nobroker/core.py", """\
            import os.path
            def fetch():
                import requests
                return requests
            """)
        result = self.check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("src/nobroker/core.py:3: 'requests'", result.stdout)
        self.assertIn("VERDICT: FAIL", result.stdout)

    def test_lazy_optional_backend_import_is_reported_as_an_extra(self) -> None:
        write(self.tmp, "src/nobroker/__init__.py", "from .queue import Queue\n")
        write(self.tmp, "src/nobroker/postgres.py", """\
            def connect(dsn: str) -> object:
                import psycopg
                return psycopg.connect(dsn)
            """)
        result = self.check(self.tmp)
        self.assertEqual(result.returncode, 0, result.stdout)
        self.assertIn("imported lazily in src/nobroker/postgres.py", result.stdout)
        self.assertIn("third-party modules imported by the core library (src/nobroker): 0",
                      result.stdout)
        self.assertIn("VERDICT: PASS", result.stdout)

    def test_top_level_third_party_import_fails_even_in_allowed_places(self) -> None:
        write(self.tmp, "src/nobroker/postgres.py", "import psycopg\n")
        write(self.tmp, "tools/bench/peers/run.py", "import huey\n")
        result = self.check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("src/nobroker/postgres.py:1: 'psycopg' (module level)", result.stdout)
        self.assertIn("tools/bench/peers/run.py:1: 'huey' (module level)", result.stdout)

    def test_the_celery_integration_may_import_kombu_but_the_core_may_not_import_it(
            self) -> None:
        write(self.tmp, "src/nobroker/celery/transport.py",
              "from kombu.transport import virtual\nimport requests\n")
        write(self.tmp, "src/nobroker/celery/backend.py", "import celery\n")
        write(self.tmp, "src/nobroker/queue.py", """\
            def later():
                from .celery import transport
                from nobroker import celery
                return transport, celery
            """)
        result = self.check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("kombu            imported in src/nobroker/celery/transport.py\n",
                      result.stdout)
        self.assertIn("src/nobroker/celery/transport.py:2: 'requests'", result.stdout)
        self.assertNotIn("backend.py:1: 'celery'", result.stdout)
        self.assertIn("src/nobroker/queue.py:2: 'nobroker.celery': the library must not import "
                      "a framework integration", result.stdout)
        self.assertIn("src/nobroker/queue.py:3: 'nobroker.celery'", result.stdout)

    def test_dramatiq_may_be_imported_by_its_integration_and_its_suite_plugin_only(
            self) -> None:
        write(self.tmp, "src/nobroker/dramatiq/broker.py",
              "from dramatiq.broker import Broker\nimport kombu\n")
        write(self.tmp, "tools/suites/dramatiq_fixtures.py", "import dramatiq\nimport pytest\n")
        write(self.tmp, "tools/suites/other.py", "import pytest\n")
        write(self.tmp, "src/nobroker/worker.py", """\
            def later():
                from .dramatiq import broker
                return broker
            """)
        result = self.check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("dramatiq         imported in src/nobroker/dramatiq/broker.py\n",
                      result.stdout)
        self.assertIn("src/nobroker/dramatiq/broker.py:2: 'kombu'", result.stdout)
        self.assertNotIn("dramatiq_fixtures.py:1", result.stdout)
        self.assertNotIn("dramatiq_fixtures.py:2", result.stdout)
        self.assertIn("tools/suites/other.py:1: 'pytest' (module level)", result.stdout)
        self.assertIn("src/nobroker/worker.py:2: 'nobroker.dramatiq': the library must not "
                      "import a framework integration", result.stdout)

    def test_lazy_import_in_a_dev_tool_is_listed_under_development_tools(self) -> None:
        write(self.tmp, "tools/bench/peers/run.py", """\
            import importlib
            def peers():
                import huey
                return huey, importlib.import_module("rq")
            """)
        write(self.tmp, "tests/test_x.py", "import support\nfrom . import helpers\n")
        write(self.tmp, "tests/support.py", "")
        result = self.check(self.tmp)
        self.assertEqual(result.returncode, 0, result.stdout)
        self.assertIn("huey             imported lazily in tools/bench/peers/run.py", result.stdout)
        self.assertIn("rq               imported lazily in tools/bench/peers/run.py", result.stdout)
        self.assertIn("  support\n", result.stdout)

    def test_browser_tools_are_allowed_lazily_in_tests_and_docsite_is_scanned(self) -> None:
        write(self.tmp, "tests/test_page.py", """\
            def browse():
                import playwright
                import requests
                return playwright, requests
            """)
        write(self.tmp, "docsite/hooks.py", "import mkdocs\n")
        write(self.tmp, "docsite/playground/driver.py", "import playground\n")
        result = self.check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("playwright       imported lazily in tests/test_page.py", result.stdout)
        self.assertIn("tests/test_page.py:3: 'requests' (inside a function)", result.stdout)
        self.assertIn("docsite/hooks.py:1: 'mkdocs' (module level)", result.stdout)
        self.assertNotIn("'playground'", result.stdout)  # docsite/'s own folders are first-party

    def test_a_framework_integration_imports_its_framework_and_the_core_never_imports_it(
            self) -> None:
        write(self.tmp, "src/nobroker/__init__.py", "from .queue import Queue\n")
        write(self.tmp, "src/nobroker/django/backend.py", "import django\nimport celery\n")
        write(self.tmp, "examples/django_site/shop/tasks.py", "from django.tasks import task\n")
        result = self.check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("django           imported in examples/django_site/shop/tasks.py, "
                      "src/nobroker/django/backend.py", result.stdout)
        self.assertIn("src/nobroker/django/backend.py:2: 'celery' (module level): only asgiref, "
                      "django may be imported here", result.stdout)
        write(self.tmp, "src/nobroker/django/backend.py", "import django\n")
        write(self.tmp, "src/nobroker/queue.py", "def f():\n    from .django import backend\n")
        result = self.check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("src/nobroker/queue.py:2: 'nobroker.django': the library must not import "
                      "a framework integration", result.stdout)

    def test_examples_may_not_import_third_party_even_lazily(self) -> None:
        write(self.tmp, "examples/demo.py", "def main():\n    import rich\n")
        result = self.check(self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("examples/demo.py:2: 'rich'", result.stdout)


class MakeTest(TempDirTestCase):
    def test_no_arguments_lists_every_task(self) -> None:
        result = run_python(MAKE, env=clean_env())
        self.assertEqual(result.returncode, 0, result.stderr)
        for name in ("test", "test-quick", "demo", "video-demo", "build", "check-deps",
                     "deps-proof", "bench", "bench-md", "bench-peers", "profile",
                     "profile-commit", "profile-worker", "torture", "lint", "cli", "clean"):
            self.assertRegex(result.stdout, rf"(?m)^  {name} +\S")

    def test_profile_splits_a_call_into_layers(self) -> None:
        result = run_python(MAKE, "profile", "--calls", "300", "--only", "enqueue,read_forward",
                            env=clean_env())
        self.assertEqual(result.returncode, 0, result.stderr)
        for name in ("enqueue", "read_forward"):
            self.assertRegex(result.stdout, rf"(?m)^{name}: ")
        self.assertRegex(result.stdout, r"(?m)^ +\d+\.\d+  nobroker\.state$")
        self.assertRegex(result.stdout, r"us with fsync, +\d+\.\d us with fsync=False")

    def test_profile_commit_prints_the_floor_and_the_threads_table(self) -> None:
        result = run_python(MAKE, "profile-commit", "--calls", "40", "--rounds", "1",
                            "--only", "ack_and_lease,threads", env=clean_env())
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"(?m)^ack_and_lease: one thread")
        self.assertRegex(result.stdout, r"raw pwrite\+fdatasync \(floor\) +\d+\.\d")
        self.assertRegex(result.stdout, r"(?m)^ +4 +[\d,]+ +\d+\.\d\d ")  # 4 threads' row

    def test_profile_worker_splits_a_job_into_phases(self) -> None:
        result = run_python(MAKE, "profile-worker", "--jobs", "60", "--processes", "2",
                            "--prefetch", "4", env=clean_env())
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("noop, 2 process(es) x 1 thread(s), prefetch 4, 60 jobs", result.stdout)
        for phase in ("queue CPU (all but the job)", "replay CPU", "fsync wait (wall)",
                      "worker Python (the rest)"):
            self.assertRegex(result.stdout, rf"(?m)^  {re.escape(phase)} +[\d,]+\.\d us/job$")

    def test_the_benchmark_scripts_start(self) -> None:
        # They are split into modules (tools/bench/*.py) that import each other as
        # tools.bench.*: a broken import there would only show in a long benchmark run.
        listed = run_python("-m", "tools.bench.run", "--list", env=clean_env())
        self.assertEqual(listed.returncode, 0, listed.stderr)
        for name in ("enqueue", "workers", "compaction", "task_roundtrip"):
            self.assertRegex(listed.stdout, rf"(?m)^ *{name}\b")
        for module in ("tools.bench.peers.run", "tools.bench.postgres.run"):
            helped = run_python("-m", module, "--help", env=clean_env())
            self.assertEqual(helped.returncode, 0, helped.stderr)
            self.assertIn("--only", helped.stdout)
        # tools/bench/postgres/'s modules, each on its own and without the peers installed
        # (they import procrastinate, PgQueuer and psycopg inside functions only).
        for module in ("measure", "nobroker_system", "procrastinate_system", "pgqueuer_system"):
            imported = run_python("-c", f"import tools.bench.postgres.{module}", env=clean_env())
            self.assertEqual(imported.returncode, 0, imported.stderr)

    def test_unknown_task_exits_2(self) -> None:
        result = run_python(MAKE, "no-such-task", env=clean_env())
        self.assertEqual(result.returncode, 2)

    @unittest.skipUnless((SRC / "nobroker" / "cli" / "__init__.py").is_file(),
                         "src/nobroker/cli/ does not exist yet: nothing to bundle")
    def test_build_makes_a_pyz_that_prints_help_from_another_directory(self) -> None:
        pyz = self.tmp / "out" / "nobroker.pyz"
        built = run_python(MAKE, "build", "--output", pyz, env=clean_env())
        self.assertEqual(built.returncode, 0, built.stdout + built.stderr)
        elsewhere = self.tmp / "elsewhere"
        elsewhere.mkdir()
        result = run_python(pyz, "--help", cwd=elsewhere, env=clean_env())
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("usage", result.stdout.lower())


class BundleTest(TempDirTestCase):
    """The generated entry point, checked with a stand-in package (no real CLI needed)."""

    def test_pyz_imports_handlers_from_cwd_but_nobroker_from_itself(self) -> None:
        write(self.tmp, "fake/__init__.py", "")
        write(self.tmp, "fake/cli.py", """\
            import nobroker
            def main():
                import my_handlers
                print("bundled" if ".pyz" in nobroker.__file__ else "shadowed")
                print(my_handlers.GREETING)
                return 3
            """)
        pyz = self.tmp / "dist" / "nobroker.pyz"
        built = run_python(BUILD_PYZ, "--source", self.tmp / "fake", "--output", pyz)
        self.assertEqual(built.returncode, 0, built.stderr)
        self.assertIn("nobroker.pyz", built.stdout)

        caller = self.tmp / "caller"
        write(caller, "my_handlers.py", "GREETING = 'handler found'\n")
        write(caller, "nobroker/__init__.py", "raise SystemExit('decoy package imported')\n")
        result = run_python(pyz, cwd=caller, env=clean_env())
        self.assertEqual(result.returncode, 3, result.stderr)  # main's return code
        self.assertEqual(result.stdout.split(), ["bundled", "handler", "found"])
        self.assertTrue(os.access(pyz, os.X_OK), "the bundle should be executable")
        self.assertEqual(pyz.read_bytes()[:23], b"#!/usr/bin/env python3\n")

    def test_missing_cli_is_a_clear_error(self) -> None:
        write(self.tmp, "empty/__init__.py", "")
        result = run_python(BUILD_PYZ, "--source", self.tmp / "empty",
                            "--output", self.tmp / "x.pyz")
        self.assertEqual(result.returncode, 1)
        self.assertIn("(or cli.py) not found", result.stderr)


class RunnerTest(TempDirTestCase):
    def run_suite(self, *args: str, env: dict[str, str] | None = None
                  ) -> subprocess.CompletedProcess[str]:
        return run_python(RUNNER, "--dir", self.tmp, *args, env=env or clean_env())

    def last_line(self, result: subprocess.CompletedProcess[str]) -> str:
        return result.stdout.rstrip("\n").splitlines()[-1]

    def test_final_line_counts_pass_fail_skip_and_failure_exits_non_zero(self) -> None:
        write(self.tmp, "test_sample.py", """\
            import unittest
            class Sample(unittest.TestCase):
                def test_passes(self):
                    pass
                def test_fails(self):
                    self.assertEqual(1, 2, "planted failure")
                @unittest.skip("planted skip")
                def test_skipped(self):
                    pass
            """)
        result = self.run_suite()
        self.assertEqual(self.last_line(result), "tests: 1 passed, 1 failed, 1 skipped")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("FAIL: test_sample.Sample.test_fails", result.stdout)
        self.assertIn("planted failure", result.stdout)

    def test_no_test_run_is_a_failure(self) -> None:
        write(self.tmp, "test_empty.py", "import unittest\n")
        result = self.run_suite()
        self.assertEqual(self.last_line(result), "tests: 0 passed, 0 failed, 0 skipped")
        self.assertNotEqual(result.returncode, 0)

    def test_killed_module_counts_as_a_failure(self) -> None:
        write(self.tmp, "test_dies.py", """\
            import os, signal, unittest
            class Dies(unittest.TestCase):
                def test_a_first(self):
                    pass
                def test_b_dies(self):
                    os.kill(os.getpid(), signal.SIGKILL)
            """)
        write(self.tmp, "test_fine.py", """\
            import unittest
            class Fine(unittest.TestCase):
                def test_ok(self):
                    pass
            """)
        result = self.run_suite()
        self.assertEqual(self.last_line(result), "tests: 2 passed, 1 failed, 0 skipped")
        self.assertIn("killed by SIGKILL", result.stdout)
        self.assertNotEqual(result.returncode, 0)

    def test_pattern_and_module_selection(self) -> None:
        write(self.tmp, "test_one.py", """\
            import unittest
            class One(unittest.TestCase):
                def test_alpha(self):
                    pass
                def test_beta(self):
                    self.fail("not selected")
            """)
        write(self.tmp, "test_two.py", "import unittest\nraise SystemExit('never imported')\n")
        result = self.run_suite("-k", "alpha", "one")
        self.assertEqual(self.last_line(result), "tests: 1 passed, 0 failed, 0 skipped")
        self.assertEqual(result.returncode, 0, result.stdout)


class SupportTest(unittest.TestCase):
    def test_slow_tests_are_skipped_in_the_quick_run(self) -> None:
        def probe() -> None:
            pass

        with mock.patch.dict(os.environ, {"NOBROKER_QUICK": "1"}):
            skipped = slow(probe)
        self.assertTrue(getattr(skipped, "__unittest_skip__", False))
        self.assertEqual(getattr(skipped, "__unittest_skip_why__", ""), "quick run: slow test")

    def test_slow_tests_run_normally(self) -> None:
        def probe() -> None:
            pass

        with mock.patch.dict(os.environ, {"NOBROKER_QUICK": ""}):
            self.assertFalse(getattr(slow(probe), "__unittest_skip__", False))

    def test_src_is_importable(self) -> None:
        self.assertIn(str(SRC), sys.path)


if __name__ == "__main__":
    unittest.main()
