"""Shared helpers for nobroker's test suite.

This module owns the few things every test file needs:

- ``REPO`` and ``SRC``: where the checkout and its ``src/`` directory are.
  Importing this module puts ``SRC`` on ``sys.path``, so tests import the
  library straight from the tree; nothing has to be installed (and ``REPO``
  last, so the tests of the tools import them as ``tools.*``).
- ``slow``: marks a test that the quick run (``NOBROKER_QUICK=1``, used by
  ``python make.py test-quick``) skips.
- ``TempDirTestCase``: a ``unittest.TestCase`` that gives every test its own
  fresh directory in ``self.tmp`` and deletes it afterwards.

Rules: stdlib only, no nobroker imports here (a broken library must not break
the helpers), and helpers never touch anything outside their own temp dirs.
Append new helpers below the existing ones.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["QUICK_ENV", "REPO", "SRC", "TempDirTestCase", "quick_run", "slow", "FakeClock",
           "file_queue", "store_of", "wait_until"]

REPO: Path = Path(__file__).resolve().parents[2]  # tests/harness/support.py
SRC: Path = REPO / "src"

if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # last: only for ``import tools.bench...`` in tests of the tools

QUICK_ENV = "NOBROKER_QUICK"

_Test = TypeVar("_Test", bound=Callable[..., object])


def quick_run() -> bool:
    """True when the environment asks for the quick run (``NOBROKER_QUICK=1``)."""
    return os.environ.get(QUICK_ENV, "") not in ("", "0")


def slow(test: _Test) -> _Test:
    """Skip ``test`` (a method or a TestCase class) during the quick run."""
    return unittest.skipIf(quick_run(), "quick run: slow test")(test)


class TempDirTestCase(unittest.TestCase):
    """A TestCase with a private, fresh directory ``self.tmp`` for each test.

    The directory is removed by a cleanup registered in ``setUp``, so it goes
    away even when the test (or a subclass's ``setUp``) fails.
    """

    tmp: Path

    def setUp(self) -> None:
        super().setUp()
        self.tmp = Path(tempfile.mkdtemp(prefix=f"nobroker-{self._testMethodName}-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)


# --------------------------------------------------------------------------
# Helpers for the storage tests (state, framing, queue contract, crash, bad input).

import hashlib  # noqa: E402
import subprocess  # noqa: E402


class FakeClock:
    """A clock a test moves by hand: ``Queue(path, clock=clock)``; ``clock.advance(30)``."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def tree_digest(root: os.PathLike[str] | str) -> dict[str, tuple[int, str]]:
    """Every file under ``root`` (relative name -> (mode bits, sha256)), directories too.

    Two equal digests mean no byte, name or permission under ``root`` changed.
    """
    found: dict[str, tuple[int, str]] = {}
    base = Path(root)
    for path in sorted(base.rglob("*")):
        rel = str(path.relative_to(base))
        mode = path.lstat().st_mode & 0o7777
        if path.is_file() and not path.is_symlink():
            found[rel] = (mode, hashlib.sha256(path.read_bytes()).hexdigest())
        else:
            found[rel] = (mode, "dir" if path.is_dir() else "other")
    return found


def scratch_root() -> str | None:
    """A tmpfs directory for tests that create thousands of small files, if there is one."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return str(shm)
    return None


def child_env() -> dict[str, str]:
    """The environment for a child Python process that imports nobroker from ``SRC``."""
    env = dict(os.environ)
    parts = [str(SRC)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def spawn_python(code: str, *args: str, **popen: object) -> subprocess.Popen[bytes]:
    """Start ``python -c code args...`` as a real OS process with nobroker importable.

    stdin, stdout and stderr default to pipes; the caller owns the process
    (kill it with ``proc.kill()``, which is SIGKILL on POSIX, then ``wait()``).
    """
    options: dict[str, object] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE,
                                  "stderr": subprocess.PIPE, "env": child_env()}
    options.update(popen)
    return subprocess.Popen([sys.executable, "-c", code, *args], **options)  # type: ignore[call-overload, no-any-return]


# --------------------------------------------------------------------------
# The file backend, built by hand: its options (FileOptions) are not Queue
# arguments. nobroker is imported inside the functions, as the rules above ask.

def file_queue(path: os.PathLike[str] | str, name: str = "default", **kwargs: object) -> Any:
    """A Queue over a FileBackend opened at ``path``.

    Keyword arguments are FileOptions fields (``fs``, ``checkpoints``,
    ``auto_compact``, ``min_compact_bytes``, ...) or Settings fields
    (``clock``, ``rng``, ``fsync``, ``visibility_timeout``, ...), given as is
    (unchecked: tests pass sensible values).
    """
    from nobroker import Queue
    from nobroker.backend import Settings
    from nobroker.file.backend import FileBackend, FileOptions

    option_names = set(FileOptions.__dataclass_fields__)
    options = {key: kwargs.pop(key) for key in list(kwargs) if key in option_names}
    backend = FileBackend(path, name, Settings(**kwargs),  # type: ignore[arg-type]
                          FileOptions(**options))  # type: ignore[arg-type]
    return Queue.from_backend(backend)


def seed_limited_queue(directory: os.PathLike[str] | str, customer: str) -> float:
    """Queue "limited" of `directory` (the dashboard's limits view): a queue rate limit of
    100/m, task "rated" (2/h) with 2 of its 3 jobs leased (full), task "capped" (one at a
    time per customer) with 1 of `customer`'s 2 jobs leased. Returns when it leased."""
    from nobroker import Queue

    def noop(*args: Any) -> None:
        return None

    with Queue(directory, "limited", rate_limit="100/m") as q:
        rated = q.task(name="rated", rate_limit="2/h")(noop)
        capped = q.task(name="capped", concurrency=1,
                        concurrency_key=lambda who: who)(noop)
        for n in range(3):
            rated.delay(n)
        capped.delay(customer)
        capped.delay(customer)
        leased = q.lease(10)
        assert len(leased) == 3, leased  # rated: 2 of 3; capped: 1 of 2
        return q.clock()


def store_of(queue: Any) -> Any:
    """The QueueHandle under a file-backed Queue (its replay state, lock, log)."""
    from nobroker.file.backend import FileBackend

    backend = queue.backend
    if not isinstance(backend, FileBackend):
        raise TypeError(f"{queue!r} is not a file-backed queue")
    return backend.handle


# --------------------------------------------------------------------------
# Waiting for a condition (worker and task tests).

import time  # noqa: E402


def wait_until(condition: Callable[[], object], timeout: float = 10.0,
               what: str = "condition") -> Any:
    """Poll `condition` until it is truthy and return it; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


import json  # noqa: E402
import signal  # noqa: E402
import textwrap  # noqa: E402


class WorkerProcessCase(TempDirTestCase):
    """Tests that run real `nobroker work MODULE` processes on tasks modules they
    write. A subclass sets MODULE_HEADER (the top of every such module: its Queue,
    and `note()`, which appends a JSON line to $NB_LOG) and adds to `env` in its
    setUp, after this one's."""

    MODULE_HEADER = ""

    def setUp(self) -> None:
        super().setUp()
        self.log = self.tmp / "log.jsonl"
        self.log.touch()
        self.env = dict(os.environ, NB_LOG=str(self.log),
                        PYTHONPATH=os.pathsep.join([str(SRC), str(self.tmp)]))

    def module(self, name: str, body: str) -> None:
        (self.tmp / f"{name}.py").write_text(self.MODULE_HEADER + textwrap.dedent(body))

    def work(self, *args: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / "workers.err", "ab") as err:  # read it when a test fails
            proc = subprocess.Popen([sys.executable, "-m", "nobroker", "work", *args],
                                    cwd=self.tmp, env=self.env, stdout=subprocess.DEVNULL,
                                    stderr=err)
        self.addCleanup(self.reap, proc)
        return proc

    @staticmethod
    def reap(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def notes(self) -> list[list[Any]]:
        """What the workers' tasks noted, in order."""
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def errors(self) -> str:
        """The workers' stderr so far (for a failing assertion's message)."""
        path = self.tmp / "workers.err"
        return path.read_text() if path.exists() else ""
