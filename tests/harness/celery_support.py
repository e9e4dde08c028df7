"""What the Celery tests share: skipping without Celery, and real `celery worker`
processes on a fresh queue directory per test (processes.py runs and kills them)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import unittest
from pathlib import Path
from typing import Any

from harness.processes import WorkerProcessTestCase
from harness.support import SRC

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


class CeleryTestCase(WorkerProcessTestCase):
    """Each test gets its own queue directory and trace folder, and the app reads them."""

    visibility_timeout = 30.0

    def setUp(self) -> None:
        super().setUp()
        self.directory = self.tmp / "jobs"
        self.env = dict(os.environ,
                        NOBROKER_CELERY_DIR=str(self.directory),
                        NOBROKER_CELERY_TRACE=str(self.trace_dir),
                        NOBROKER_CELERY_VT=str(self.visibility_timeout),
                        PYTHONPATH=os.pathsep.join([str(SRC), str(HERE)]))
        # celery_app reads them when a test imports it in this process, too
        for name in ("NOBROKER_CELERY_DIR", "NOBROKER_CELERY_TRACE", "NOBROKER_CELERY_VT"):
            self.set_env(name, self.env[name])

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
        """`celery -A celery_app worker` named NAME@host on queues a and b."""
        return self.spawn(name, [sys.executable, "-m", "celery", "-A", "celery_app", "worker",
                                 "-n", f"{name}@%h", "--without-mingle", "--without-gossip",
                                 "--without-heartbeat", "-Q", "a,b", "-l", "info", *options],
                          self.env)

    def traces(self, kind: str) -> list[str]:
        """The task keys of the traces of one kind, one per run, sorted."""
        return sorted(super().traces(kind))
