"""Celery's own integration suite (t/integration) run against nobroker.

    python -m tools.suites.celery_suite --python .dev/celery-suite-venv/bin/python
        [--ci | --all]

`python make.py test-celery-suite` runs this with the Celery venv. It downloads
the sdist of the Celery pinned in requirements-celery.txt (`pip download
--no-binary :all: --no-deps celery==VERSION`, once, into .dev/celery-suite/),
unpacks only its t/ folder (the installed Celery is the one under test), writes
the pytest settings Celery's pyproject.toml gives its tests, and runs pytest on
SELECTION with TEST_BROKER and TEST_BACKEND set to a fresh nobroker directory
(`nobroker:///tmp/...`): each test is capped at --timeout seconds, the whole run
at --cap. `--all` runs every test file instead (tens of minutes); `--ci` runs
CI_SELECTION minus CI_LEFT_OUT (about 10 minutes, in .ci/run) and lists every
test's outcome.

Then each failure is compared with KNOWN_FAILURES, which says why each listed
test cannot pass on nobroker (docs/CELERY.md shows the same list). The exit
status is 0 only if every test that failed or errored is listed and the run
finished within its cap; a listed test that passes is reported, so the list
can shrink. Standard library only.
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
WORK = REPO / ".dev" / "celery-suite"
REQUIREMENTS = REPO / "requirements-celery.txt"

# Chosen by what they exercise, never by whether they pass: the task tests (calls,
# results, failures, retries, eta and expiry, time limits, reject and requeue,
# revoke, priorities, headers) and the canvas tests (chain, group, chord, their
# errors and callbacks). Celery's other files test its other backends (Redis,
# database, cache), beat, the CLI, security and worker internals.
SELECTION = ("t/integration/test_tasks.py", "t/integration/test_canvas.py")

# What CI runs (`--ci`): the same two files, minus the classes and tests below, each
# left out for what it exercises, never for its outcome. What stays: every test of a
# task's life (calls, results, failures, retries, eta and expiry, time limits, reject
# and requeue, revoke, priorities, headers, replacement) and of the canvas (chain,
# group, chord, result sets, link errors), which is what the transport and the result
# backend serve. docs/CELERY.md shows the same list.
CI_SELECTION = SELECTION
CI_LEFT_OUT: dict[str, str] = {
    "t/integration/test_canvas.py::test_stamping_mechanism": (
        "stamping is Celery's own bookkeeping of headers on signatures; revoke by stamped "
        "headers, the part that crosses the broker, stays (test_tasks)"),
    "t/integration/test_canvas.py::test_signature_serialization": (
        "signature (de)serialization inside Celery; no broker or backend behaviour beyond "
        "what test_chain and test_chord exercise"),
    "t/integration/test_canvas.py::test_xmap_xstarmap": (
        "map/starmap run as one task: a plain call, as in test_tasks"),
    "t/integration/test_tasks.py::test_task_redis_result_backend": (
        "Redis's result backend only (skipped on any other backend)"),
    "t/integration/test_tasks.py::test_pool_acquire_timeout": (
        "Celery's producer pool limits, inside Celery"),
    "t/integration/test_tasks.py::test_signal_bound_method_receivers": (
        "Celery's signals, inside the worker"),
    "t/integration/test_tasks.py::test_trace_log_arguments": (
        "the worker's log format, inside Celery"),
    # scale: the same paths as their small versions, 40 s and more each here
    "t/integration/test_canvas.py::test_chord::test_large_header": (
        "scale: a 1000-task chord, the paths of the small chords at 40 s and more"),
    "t/integration/test_canvas.py::test_chord::test_chain_to_a_chord_with_large_header": (
        "scale: as test_large_header"),
    "t/integration/test_canvas.py::test_group::test_large_group": (
        "scale: a 1000-task group, the paths of the small groups"),
}

# Why each of these cannot pass on nobroker; a pattern ending in "*" covers a prefix.
KNOWN_FAILURES: dict[str, str] = {
    "test_tasks.py::test_tasks::test_revoked_by_headers_complex_canvas": (
        "timing: every revoke works (its 11 subtests pass), then the second round waits "
        "for the worker's one prefork process to finish the canvases' unrevoked sleeping "
        "tasks and misses the test's own 20 s limit; it fails the same way on Redis "
        "(appendfsync always) on this shared 2-core machine"),
    "test_canvas.py::test_chain::test_chord_header_id_duplicated_on_rabbitmq_msg_duplication*": (
        "needs a Redis server: its tasks write the chord ids to a Redis list (it imports redis)"),
    "test_canvas.py::test_chord::test_error_propagates_from_chord": (
        "a chain that fails before a final group never resolves that group's results, on "
        "any backend: Celery marks the test xfail on Redis (celery/celery#6437)"),
    # slow, not wrong: they pass alone (about 40 s here), and miss the tests' own 60 s
    # limit on a loaded machine
    "test_canvas.py::test_chord::test_large_header": (
        "timing: a 1000-task chord on one prefork process is about 40 s on this shared 2-core "
        "machine (each task is five fsynced writes: lease, ack, result, its settle) and "
        "misses the test's own 60 s limit under load"),
    "test_canvas.py::test_chord::test_chain_to_a_chord_with_large_header": (
        "timing, as test_large_header (a 1000-task chord)"),
    "test_tasks.py::test_task_replacement::test_replaced_task_nesting_level_0": (
        "a race in the test: it sets `assertion_result = False` after `.delay()`, so a "
        "worker that receives the task before that line runs has its handler's True "
        "overwritten; the quicker the pickup, the likelier it fails (passed in one CI run, "
        "failed in the next, on the same code)"),
    "test_tasks.py::test_trace_log_arguments::*": (
        "expects the worker's INFO records (\"Task ... received\") in pytest's caplog; the "
        "suite's in-process worker logs at ERROR, so they are never emitted on any broker "
        "(the same test fails on Redis on this machine)"),
}


def unpack_suite(python: str) -> Path:
    """.dev/celery-suite/celery-VERSION/ with the sdist's t/ folder and a pytest.ini."""
    root = unpack_sdist(python, "celery", pinned(REQUIREMENTS, "celery"), WORK, "t")
    # Celery's own [tool.pytest.ini_options] (its test classes are named test_*).
    (root / "pytest.ini").write_text(
        "[pytest]\npython_classes = test_* Test*\nxfail_strict = true\nmarkers =\n"
        "    sleepdeprived_patched_module\n    masked_modules\n    patched_environ\n"
        "    patched_module\n    flaky\n    timeout\n    amqp\n")
    return root


def known_reason(test_id: str) -> str | None:
    for pattern, reason in KNOWN_FAILURES.items():
        if test_id == pattern or (pattern.endswith("*") and test_id.startswith(pattern[:-1])):
            return reason
    return None


def outcomes(junit: Path) -> dict[str, str]:
    """test id ("test_tasks.py::test_tasks::test_eta") -> passed/failed/error/skipped."""
    found: dict[str, str] = {}
    if not junit.exists():
        return found
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        test_id = f"{parts[-2]}.py::{parts[-1]}::{case.get('name')}" if len(parts) >= 2 \
            else str(case.get("name"))
        kinds = {child.tag for child in case}
        found[test_id] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                          else "skipped" if "skipped" in kinds else "passed")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="celery_suite.py", description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter with Celery and pytest (the Celery venv's)")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--all", action="store_true", help="every file of t/integration")
    choice.add_argument("--ci", action="store_true",
                        help="CI's selection (SELECTION minus CI_LEFT_OUT), each outcome listed")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds per test (a 1000-task chord takes about 40)")
    parser.add_argument("--cap", type=float, default=900.0, help="seconds for the whole run")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    root = unpack_suite(args.python)
    scratch = Path(tempfile.mkdtemp(prefix="nobroker-celery-suite-"))
    url = f"nobroker://{scratch / 'jobs'}"
    junit = scratch / "junit.xml"
    env = dict(os.environ, TEST_BROKER=url, TEST_BACKEND=url,
               PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(root)]))
    targets = ["t/integration"] if args.all else list(CI_SELECTION if args.ci else SELECTION)
    if args.ci:
        targets += [f"--deselect={node}" for node in CI_LEFT_OUT]
    cmd = [args.python, "-m", "pytest", "-p", "celery.contrib.pytest", "-p", "no:cacheprovider",
           "-p", "no:rerunfailures", f"--timeout={args.timeout:g}", f"--junitxml={junit}",
           "-q", "-rfE", *targets, *args.pytest_args]
    print(f"$ TEST_BROKER={url} TEST_BACKEND={url} {' '.join(cmd)}", flush=True)
    took, capped = run_capped(cmd, root, env, args.cap)
    results = outcomes(junit)
    shutil.rmtree(scratch, ignore_errors=True)
    if args.ci:  # CI's log lists every test's outcome
        for test_id, kind in sorted(results.items()):
            print(f"  {kind:8} {test_id}")
    return judge("Celery's integration suite", results, known_reason, took, capped, args.cap)


if __name__ == "__main__":
    sys.exit(main())
