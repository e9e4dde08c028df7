"""What the Dramatiq tests share: skipping without Dramatiq, and real `dramatiq` worker
processes on a fresh queue directory per test."""

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

APP_DIR = Path(__file__).resolve().parents[1] / "with_dramatiq"  # dramatiq_app.py
HAVE_DRAMATIQ = importlib.util.find_spec("dramatiq") is not None
SKIP_REASON = ("Dramatiq suite skipped: Dramatiq is not installed "
               "(run `python make.py test-dramatiq`)")
APP_ENV = ("NOBROKER_DRAMATIQ_DIR", "NOBROKER_DRAMATIQ_TRACE", "NOBROKER_DRAMATIQ_VT")


def needs_dramatiq(cls: type) -> type:
    return unittest.skipUnless(HAVE_DRAMATIQ, SKIP_REASON)(cls)


class DramatiqTestCase(WorkerProcessTestCase):
    """A queue directory and a trace folder per test, read by dramatiq_app in this
    process and in the workers."""

    visibility_timeout = 30.0

    def setUp(self) -> None:
        super().setUp()
        self.directory = self.tmp / "jobs"
        values = (str(self.directory), str(self.trace_dir), str(self.visibility_timeout))
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(APP_DIR)]),
                        **dict(zip(APP_ENV, values, strict=True)))
        for name in APP_ENV:
            previous = os.environ.get(name)
            self.addCleanup(lambda n=name, v=previous: _set_env(n, v))
            os.environ[name] = self.env[name]

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
        """`dramatiq dramatiq_app OPTIONS`, with `env` added to its environment."""
        return self.spawn(name, [sys.executable, "-m", "dramatiq", "dramatiq_app", *options],
                          {**self.env, **env})


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
