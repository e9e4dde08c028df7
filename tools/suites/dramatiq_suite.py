"""Dramatiq's own test suite run against NobrokerBroker.

    python -m tools.suites.dramatiq_suite --python .dev/dramatiq-venv/bin/python

`python make.py test-dramatiq-suite` runs this with the Dramatiq venv. It downloads
the sdist of the Dramatiq pinned in requirements-dramatiq.txt (`pip download
--no-binary :all: --no-deps dramatiq==VERSION`, once, into .dev/dramatiq-suite/),
unpacks only its tests/ folder (the installed Dramatiq is the one under test; the
sdist has no conftest.py), puts dramatiq_fixtures.py there as tests/conftest.py and
tests/common.py, so that the `stub_broker`, `stub_worker` and `result_backend`
fixtures are a NobrokerBroker, a Worker on it and a NobrokerResultBackend on fresh
directories, and runs pytest on SELECTION, each test capped at --timeout seconds and
the run at --cap.

Then each failure is compared with KNOWN_FAILURES, which says why each listed test
cannot pass on nobroker (docs/DRAMATIQ.md shows the same list). The exit status is 0
only if every test that failed or errored is listed and the run finished within its
cap; a listed test that passes is reported, so the list can shrink. Standard library
only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from tools.suites.peer_suite import judge, pinned, run_capped, unpack_sdist

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / ".dev" / "dramatiq-suite"
REQUIREMENTS = REPO / "requirements-dramatiq.txt"
FIXTURES = Path(__file__).resolve().parent / "dramatiq_fixtures.py"

# Chosen by what they exercise, never by whether they pass: every file whose tests run
# messages through a broker and a worker (actors: retries, delays, priorities, time
# and age limits, skips, dead letters; composition: pipelines and groups; results;
# callbacks; generic actors; the worker; messages). Not selected: the files that test
# one other broker or backend (test_redis, test_rabbitmq, test_stub_broker, the rate
# limiter backends and barrier), the default broker and middleware ordering of the
# Broker base class (test_broker), the CLI, file watching, pid files, and helpers
# (test_common, test_canteen, test_encoders, test_types).
SELECTION = ("tests/test_actors.py", "tests/test_composition.py", "tests/test_results.py",
             "tests/test_callbacks.py", "tests/test_generic_actors.py", "tests/test_worker.py",
             "tests/test_messages.py")

STUB_QUEUE = ("reaches into StubBroker's in-memory queue.Queue objects "
              "(stub_broker.queues[name].get/put), which no other broker has")
KNOWN_FAILURES: dict[str, str] = {
    "test_actors.py::test_actors_can_be_sent_messages": STUB_QUEUE,
    "test_actors.py::test_worker_handles_non_numeric_eta_and_logs_warning": STUB_QUEUE,
    "test_actors.py::test_worker_handles_none_eta": STUB_QUEUE,
    "test_worker.py::test_exception_from_actor_doesnt_leak": (
        "checks that no exception outlives its message, after patching StubBroker's "
        "message class to stop keeping them; the fixture's NobrokerBroker keeps the "
        "exceptions of what it dead-letters (fail_fast_default=True, as StubBroker), "
        "and the patch does not reach it"),
    "test_actors.py::test_actor_messages_can_be_assigned_time_limits": (
        "timing, under load only: the actor sleeps 2 s against a 1 s limit, and Dramatiq's "
        "TimeLimit thread checks once a second, so a check delayed past 2 s lets the "
        "actor finish before its exception lands (failed once in a CI run beside other "
        "work, load about 3; passed in three runs alone just after, on the same code)"),
}


def prepare_suite(python: str) -> Path:
    """The unpacked tests/ of the pinned Dramatiq, with the fixtures and a pytest.ini
    (the sdist's own settings ask for pytest-cov)."""
    root = unpack_sdist(python, "dramatiq", pinned(REQUIREMENTS, "dramatiq"), WORK, "tests")
    tests = root / "tests"
    (tests / "__init__.py").touch()
    for name in ("conftest.py", "common.py"):
        shutil.copyfile(FIXTURES, tests / name)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    return root


def test_id(case: ET.Element) -> str:
    """"test_actors.py::test_name" for the junit case of tests/test_actors.py."""
    module = case.get("classname", "").rsplit(".", 1)[-1]
    return f"{module}.py::{case.get('name')}"


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed/failed/error/skipped."""
    if not junit.exists():
        return {}
    found: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        found[test_id(case)] = next((kind for tag, kind in (("failure", "failed"),
                                                             ("error", "error"),
                                                             ("skipped", "skipped"))
                                     if tag in kinds), "passed")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dramatiq_suite.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter with Dramatiq and pytest (the Dramatiq venv's)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per test")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds for the whole run")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    root = prepare_suite(args.python)
    scratch = Path(tempfile.mkdtemp(prefix="nobroker-dramatiq-suite-"))
    junit = scratch / "junit.xml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(root)]))
    cmd = [args.python, "-m", "pytest", "-c", "pytest.ini", "-p", "no:cacheprovider",
           f"--timeout={args.timeout:g}", f"--junitxml={junit}", f"--basetemp={scratch / 't'}",
           "-q", "-rfE", *SELECTION, *args.pytest_args]
    print("$", " ".join(cmd), flush=True)
    took, capped = run_capped(cmd, root, env, args.cap)
    results = outcomes(junit)
    shutil.rmtree(scratch, ignore_errors=True)
    return judge("Dramatiq's suite", results, KNOWN_FAILURES.get, took, capped, args.cap)


if __name__ == "__main__":
    sys.exit(main())
