"""Real worker processes for the framework tests (tests/with_celery, tests/with_dramatiq):
started in their own session, logging to a file, killed with kill -9 as a whole, and the
traces their tasks leave (one file per run) read back."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from harness.support import TempDirTestCase


class WorkerProcessTestCase(TempDirTestCase):
    """Each test gets a trace folder (`trace_dir`); the processes it starts are killed
    when it ends."""

    def setUp(self) -> None:
        super().setUp()
        self.trace_dir = self.tmp / "trace"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.addCleanup(self._kill_all)

    def spawn(self, name: str, cmd: Sequence[str],
              env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Run `cmd` in its own session from the test's folder, logging to NAME.log."""
        log = (self.tmp / f"{name}.log").open("wb")
        self.addCleanup(log.close)
        proc = subprocess.Popen(list(cmd), cwd=self.tmp, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def worker_log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """kill -9 the process and every process it started (its session)."""
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
        """The keys of one kind of trace, one per run, in the order they were left (each
        trace file is named KEY.PID.NONCE and holds its time)."""
        folder: Path = self.trace_dir / kind
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
