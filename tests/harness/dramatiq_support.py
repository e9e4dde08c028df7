"""What the Dramatiq tests share: skipping without Dramatiq, and real `dramatiq` worker
processes on a fresh queue directory per test."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import unittest
from pathlib import Path
from typing import Any

from harness.support import SRC, TempDirTestCase

APP_DIR = Path(__file__).resolve().parents[1] / "with_dramatiq"  # dramatiq_app.py
HAVE_DRAMATIQ = importlib.util.find_spec("dramatiq") is not None
SKIP_REASON = ("Dramatiq suite skipped: Dramatiq is not installed "
               "(run `python make.py test-dramatiq`)")
APP_ENV = ("NOBROKER_DRAMATIQ_DIR", "NOBROKER_DRAMATIQ_TRACE", "NOBROKER_DRAMATIQ_VT")


def needs_dramatiq(cls: type) -> type:
    return unittest.skipUnless(HAVE_DRAMATIQ, SKIP_REASON)(cls)


class DramatiqTestCase(TempDirTestCase):
    """A queue directory and a trace folder per test, read by dramatiq_app in this
    process and in the workers."""

    visibility_timeout = 30.0

    def setUp(self) -> None:
        super().setUp()
        self.directory = self.tmp / "jobs"
        self.trace_dir = self.tmp / "trace"
        values = (str(self.directory), str(self.trace_dir), str(self.visibility_timeout))
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(APP_DIR)]),
                        **dict(zip(APP_ENV, values, strict=True)))
        for name in APP_ENV:
            previous = os.environ.get(name)
            self.addCleanup(lambda n=name, v=previous: _set_env(n, v))
            os.environ[name] = self.env[name]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.addCleanup(self._kill_all)

    def app(self) -> Any:
        """dramatiq_app, imported fresh for this test's directory (its broker set)."""
        old = sys.modules.pop("dramatiq_app", None)
        if old is not None:
            old.broker.close()
        if str(APP_DIR) not in sys.path:
            sys.path.insert(0, str(APP_DIR))
        import dramatiq_app
        self.addCleanup(dramatiq_app.broker.close)
        return dramatiq_app

    def start_worker(self, name: str, *options: str, **env: str) -> subprocess.Popen[bytes]:
        """`dramatiq dramatiq_app OPTIONS` in its own session, logging to NAME.log."""
        log = (self.tmp / f"{name}.log").open("wb")
        self.addCleanup(log.close)
        proc = subprocess.Popen([sys.executable, "-m", "dramatiq", "dramatiq_app", *options],
                                cwd=self.tmp, env={**self.env, **env}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def worker_log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """kill -9 the `dramatiq` process and its worker processes (its session)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)

    def _kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc)

    def traces(self, kind: str) -> list[str]:
        """The keys of one kind of trace, one per run, sorted by the time they were left."""
        folder = self.trace_dir / kind
        if not folder.exists():
            return []
        runs = [(float(p.read_text() or 0), p.name.split(".", 1)[0]) for p in folder.iterdir()]
        return [key for _, key in sorted(runs)]

    def wait_for_trace(self, kind: str, key: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while key not in self.traces(kind):
            if time.monotonic() > deadline:
                self.fail(f"no {kind} trace of {key} within {timeout}s")
            time.sleep(0.05)


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
