"""nobroker's test runner: every test module in its own process, in parallel.

Usage::

    python tests/run.py                    # every test_*.py under tests/, 2 at a time
    python tests/run.py -j 1 test_state    # one module (tests/file/test_state.py)
    python tests/run.py -k recovery        # only tests whose id matches

The folders show what is tested: ``contract/`` (the public API, every
backend), ``file/`` (the file engine), ``postgres/`` (the PostgreSQL backend,
skipped without a server), ``memory/`` (the in-memory backend), ``worker/``,
``task_layer/`` (tasks, cron, results), ``cli/``, ``tooling/`` (check_deps,
build_pyz, the benchmarks, make.py) and ``docs/`` (the examples). Every
folder below tests/ is searched, so a new one needs no entry here.
``harness/`` holds no tests: it is the package every test module and
tools/torture/run.py import (support, the crash-state explorer, faults, fuzz,
soak); tests/ is on ``sys.path`` for it.

Theory of operation. The parent finds ``test_*.py`` modules, then runs each one
in a child process (this same file with ``--child``) through a small thread
pool of ``-j`` workers. The child runs the module with plain ``unittest`` and
appends one JSON line per test outcome to a results file, flushing after each,
so the parent keeps every result that was reached even if the child dies. A
child that exits non-zero, is killed by a signal, times out, or never writes
its closing record counts as one more failure for its module, reported with its
exit status and the tail of its output. Each child gets its own session (so a
timeout can kill the tests' subprocesses too) and writes its output to a file,
not a pipe, so a grandchild that outlives it cannot hang the runner.

The last line printed is always ``tests: N passed, N failed, N skipped``
(errors and unexpected successes count as failed, expected failures as
passed). The exit code is 0 only when nothing failed and at least one test
passed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TextIO, TypeAlias

TESTS_DIR = Path(__file__).resolve().parent
REPO = TESTS_DIR.parent
SRC = REPO / "src"

DEFAULT_TIMEOUT = 1800.0  # seconds per module; CI gives the whole run 90 minutes
OUTPUT_TAIL_LINES = 60  # lines of a failing module's output shown in the report

PASSED = ("pass", "xfail")
FAILED = ("fail", "error", "xpass", "crash")
SKIPPED = ("skip",)

_ExcInfo: TypeAlias = tuple[type[BaseException], BaseException, TracebackType]
_OptExcInfo: TypeAlias = _ExcInfo | tuple[None, None, None]


# --------------------------------------------------------------------------
# child side: run one module, record outcomes as JSON lines


class _RecordingResult(unittest.TestResult):
    """A TestResult that appends each outcome to an open file as a JSON line."""

    def __init__(self, sink: TextIO) -> None:
        super().__init__()
        self._sink = sink

    def _record(self, test: unittest.TestCase, outcome: str, detail: str = "") -> None:
        line = {"id": test.id(), "outcome": outcome, "detail": detail}
        self._sink.write(json.dumps(line) + "\n")
        self._sink.flush()

    def _format(self, err: _OptExcInfo, test: unittest.TestCase) -> str:
        return self._exc_info_to_string(err, test)  # type: ignore[attr-defined, no-any-return]

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._record(test, "pass")

    def addFailure(self, test: unittest.TestCase, err: _OptExcInfo) -> None:
        super().addFailure(test, err)
        self._record(test, "fail", self._format(err, test))

    def addError(self, test: unittest.TestCase, err: _OptExcInfo) -> None:
        super().addError(test, err)
        self._record(test, "error", self._format(err, test))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._record(test, "skip", reason)

    def addExpectedFailure(self, test: unittest.TestCase, err: _OptExcInfo) -> None:
        super().addExpectedFailure(test, err)
        self._record(test, "xfail")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._record(test, "xpass", "unexpected success: the test is marked expectedFailure")

    def addSubTest(
        self, test: unittest.TestCase, subtest: unittest.TestCase, err: _OptExcInfo | None
    ) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None and err[0] is not None:
            failed = issubclass(err[0], test.failureException)
            self._record(subtest, "fail" if failed else "error", self._format(err, subtest))


def run_child(tests_dir: Path, module: str, patterns: list[str], result_path: Path) -> int:
    """Run one test module, writing outcomes to ``result_path``; 0 when it finished."""
    # A shell starts a background job (`make.py test &`, nohup, some CI runners)
    # with SIGINT ignored, and that is inherited: Python then raises no
    # KeyboardInterrupt, and the Ctrl-C tests fail. Give the module, and every
    # process it starts (a handler resets to the default at exec), a real one.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, str(tests_dir))
    loader = unittest.TestLoader()
    if patterns:
        loader.testNamePatterns = [p if "*" in p else f"*{p}*" for p in patterns]
    with result_path.open("a", encoding="utf-8") as sink:
        try:
            suite = loader.loadTestsFromName(module)
        except Exception:
            line = {"id": module, "outcome": "error", "detail": traceback.format_exc()}
            sink.write(json.dumps(line) + "\n")
        else:
            suite.run(_RecordingResult(sink))
        sink.write(json.dumps({"done": True}) + "\n")
        sink.flush()
    return 0


# --------------------------------------------------------------------------
# parent side: schedule modules, collect and report


@dataclass
class Outcome:
    """One recorded test outcome."""

    test_id: str
    kind: str
    detail: str = ""


@dataclass
class ModuleResult:
    """Everything the parent learned from one module's child process."""

    module: str
    seconds: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)
    output: str = ""

    def count(self, kinds: Sequence[str]) -> int:
        return sum(1 for o in self.outcomes if o.kind in kinds)

    @property
    def failed(self) -> int:
        return self.count(FAILED)


def discover(tests_dir: Path, selected: Sequence[str]) -> list[str]:
    """Module names to run: every ``test_*.py`` in ``tests_dir`` and its subfolders
    (``file/test_state.py`` is ``file.test_state``), or the selected ones, named by
    file name, path or module name. File names are unique across the folders."""
    found: dict[str, str] = {}  # file stem -> module name
    for path in sorted(tests_dir.rglob("test_*.py")):
        parts = path.relative_to(tests_dir).with_suffix("").parts
        if not all(part.isidentifier() for part in parts):
            continue  # e.g. data folders (crash_corpus): not packages of tests
        if path.stem in found:
            raise SystemExit(f"run.py: two test modules named {path.stem}: "
                             f"{found[path.stem]} and {'.'.join(parts)}")
        found[path.stem] = ".".join(parts)
    if not selected:
        return sorted(found.values())
    chosen: list[str] = []
    for name in selected:
        stem = Path(name).stem if name.endswith(".py") else name.rpartition(".")[2]
        if not stem.startswith("test_") and f"test_{stem}" in found:
            stem = f"test_{stem}"
        if stem not in found:
            raise SystemExit(f"run.py: no test module {name!r} in {tests_dir}")
        if found[stem] not in chosen:
            chosen.append(found[stem])
    return chosen


def child_env() -> dict[str, str]:
    """The environment for children: ``src`` first on PYTHONPATH, nothing installed."""
    env = dict(os.environ)
    parts = [str(SRC)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def describe_exit(returncode: int | None, timed_out: bool, timeout: float) -> str:
    """A human phrase for why a child did not finish cleanly."""
    if timed_out:
        return f"timed out after {timeout:g}s and was killed"
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode} before finishing"


def read_outcomes(result_path: Path) -> tuple[list[Outcome], bool]:
    """Parse a child's JSON lines; also report whether its closing record is there."""
    outcomes: list[Outcome] = []
    done = False
    if not result_path.exists():
        return outcomes, done
    for raw in result_path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a line torn by a dying child
        if record.get("done"):
            done = True
        else:
            outcomes.append(Outcome(record["id"], record["outcome"], record.get("detail", "")))
    return outcomes, done


_live: set[subprocess.Popen[bytes]] = set()  # children still running, for Ctrl-C
_live_lock = threading.Lock()


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill a child and, on POSIX, every process in its session."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_module(tests_dir: Path, module: str, patterns: list[str], timeout: float) -> ModuleResult:
    """Run one module in a child process and collect what it recorded."""
    result = ModuleResult(module)
    with tempfile.TemporaryDirectory(prefix=f"nobroker-run-{module}-") as scratch:
        result_path = Path(scratch) / "results.jsonl"
        output_path = Path(scratch) / "output.txt"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", module,
               "--dir", str(tests_dir), "--results", str(result_path)]
        for pattern in patterns:
            cmd += ["-k", pattern]
        started = time.monotonic()
        timed_out = False
        with output_path.open("wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=child_env(),
                                    start_new_session=(os.name == "posix"))
            with _live_lock:
                _live.add(proc)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                if proc.returncode is None:  # timed out, or the runner is interrupted
                    kill_group(proc)
                with _live_lock:
                    _live.discard(proc)
        result.seconds = time.monotonic() - started
        result.outcomes, done = read_outcomes(result_path)
        result.output = output_path.read_text(encoding="utf-8", errors="replace")
        if timed_out or proc.returncode != 0 or not done:
            why = describe_exit(proc.returncode, timed_out, timeout)
            result.outcomes.append(Outcome(module, "crash", f"test module process {why}"))
    return result


def module_line(result: ModuleResult) -> str:
    status = "FAIL" if result.failed else "ok"
    counts = (f"{result.count(PASSED)} passed, {result.failed} failed, "
              f"{result.count(SKIPPED)} skipped")
    return f"{status:<4}  {result.module:<32} {counts:<34} {result.seconds:7.2f}s"


def report_problems(results: list[ModuleResult]) -> None:
    """Print each failure's traceback, and the output tail of modules that failed."""
    for result in results:
        problems = [o for o in result.outcomes if o.kind in FAILED]
        if not problems:
            continue
        for outcome in problems:
            print("=" * 78)
            print(f"{outcome.kind.upper()}: {outcome.test_id}")
            print("-" * 78)
            print(outcome.detail.rstrip())
        tail = result.output.rstrip().splitlines()[-OUTPUT_TAIL_LINES:]
        if tail:
            print("-" * 78)
            print(f"output of {result.module} (last {len(tail)} lines):")
            print("\n".join(tail))
    if any(r.failed for r in results):
        print("=" * 78)


def run_all(tests_dir: Path, modules: list[str], patterns: list[str],
            jobs: int, timeout: float, verbose: bool) -> list[ModuleResult]:
    """Run modules ``jobs`` at a time, printing a line for each as it finishes."""
    lock = threading.Lock()

    def one(module: str) -> ModuleResult:
        result = run_module(tests_dir, module, patterns, timeout)
        with lock:
            print(module_line(result), flush=True)
            if verbose:
                for outcome in result.outcomes:
                    reason = f"  ({outcome.detail})" if outcome.kind == "skip" else ""
                    print(f"      {outcome.kind:<6} {outcome.test_id}{reason}", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            return list(pool.map(one, modules))
        except KeyboardInterrupt:
            # Children run in their own sessions, so Ctrl-C never reached them.
            with _live_lock:
                running = list(_live)
            for proc in running:
                kill_group(proc)
            raise


def report_skipped_suites(results: list[ModuleResult]) -> None:
    """Say loudly which whole suites were skipped (a skip reason naming "suite skipped",
    as the PostgreSQL tests give without a server), so a green run cannot hide them."""
    suites: dict[str, int] = {}
    for result in results:
        for outcome in result.outcomes:
            if outcome.kind == "skip" and "suite skipped" in outcome.detail:
                suites[outcome.detail] = suites.get(outcome.detail, 0) + 1
    for reason, count in sorted(suites.items()):
        print(f"!!! {reason} ({count} tests NOT RUN)")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tests/run.py", description="Run nobroker's tests, one process per module.")
    parser.add_argument("modules", nargs="*",
                        help="test modules to run (test_state, state, tests/test_state.py); "
                             "default: all")
    parser.add_argument("-j", "--jobs", type=int, default=2,
                        help="modules run at once (default 2)")
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        metavar="PATTERN",
                        help="only tests whose id matches (substring or fnmatch glob); "
                             "repeatable")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="list every test outcome under its module")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds before a module is killed (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--dir", type=Path, default=TESTS_DIR,
                        help="directory holding the test_*.py modules (default: tests/)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tests_dir: Path = args.dir.resolve()
    if args.child:
        return run_child(tests_dir, args.child, args.patterns, args.results)

    modules = discover(tests_dir, args.modules)
    jobs = max(1, min(args.jobs, len(modules) or 1))
    where = os.path.relpath(tests_dir) if tests_dir.is_relative_to(Path.cwd()) else tests_dir
    print(f"running {len(modules)} test module(s) from {where} with {jobs} process(es)",
          flush=True)
    started = time.monotonic()
    results = run_all(tests_dir, modules, args.patterns, jobs, args.timeout, args.verbose)
    report_problems(results)

    passed = sum(r.count(PASSED) for r in results)
    failed = sum(r.failed for r in results)
    skipped = sum(r.count(SKIPPED) for r in results)
    if passed + failed == 0:
        print("no test ran: that counts as a failed run")
    print(f"took {time.monotonic() - started:.2f}s")
    report_skipped_suites(results)
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
