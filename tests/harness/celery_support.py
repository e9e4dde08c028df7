"""What the Celery tests share: skipping without Celery, and real worker processes."""

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

HERE = Path(__file__).resolve().parents[1] / "with_celery"  # celery_app.py
HAVE_CELERY = importlib.util.find_spec("celery") is not None
SKIP_REASON = ("Celery suite skipped: Celery is not installed "
               "(run `python make.py test-celery`)")


def needs_celery(cls: type) -> type:
    return unittest.skipUnless(HAVE_CELERY, SKIP_REASON)(cls)


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


class CeleryTestCase(TempDirTestCase):
    """Each test gets its own queue directory and trace folder, and the app reads them."""

    visibility_timeout = 30.0

    def setUp(self) -> None:
        super().setUp()
        self.directory = self.tmp / "jobs"
        self.trace = self.tmp / "trace"
        self.env = dict(os.environ,
                        NOBROKER_CELERY_DIR=str(self.directory),
                        NOBROKER_CELERY_TRACE=str(self.trace),
                        NOBROKER_CELERY_VT=str(self.visibility_timeout),
                        PYTHONPATH=os.pathsep.join([str(SRC), str(HERE)]))
        # celery_app reads them when a test imports it in this process, too
        for name in ("NOBROKER_CELERY_DIR", "NOBROKER_CELERY_TRACE", "NOBROKER_CELERY_VT"):
            self.set_env(name, self.env[name])
        self.workers: list[subprocess.Popen[bytes]] = []
        self.addCleanup(self.stop_workers)

    def set_env(self, name: str, value: str) -> None:
        """Set an environment variable of this process until the test ends."""
        self.addCleanup(_restore, name, os.environ.get(name))
        os.environ[name] = value

    def app(self) -> Any:
        """celery_app, imported fresh for this test's directory."""
        sys.modules.pop("celery_app", None)
        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))
        import celery_app
        return celery_app

    def start_worker(self, name: str, *options: str) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{name}.log").open("wb")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-n",
             f"{name}@%h", "--without-mingle", "--without-gossip", "--without-heartbeat",
             "-Q", "a,b", "-l", "info", *options],
            cwd=self.tmp, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.workers.append(proc)
        return proc

    def worker_log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """kill -9 the worker and every process it started (its pool)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)

    def stop_workers(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                self.kill(proc)

    def traces(self, kind: str) -> list[str]:
        """The task keys of the traces of one kind, one per run."""
        folder = self.trace / kind
        if not folder.exists():
            return []
        return sorted(p.name.split(".", 1)[0] for p in folder.iterdir())

    def wait_for_trace(self, kind: str, key: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while key not in self.traces(kind):
            if time.monotonic() > deadline:
                self.fail(f"no {kind} trace of {key} within {timeout}s")
            time.sleep(0.05)
