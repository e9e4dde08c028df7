"""nobroker in tools/bench/realistic/: ``Queue(fsync=True).enqueue`` and
``nobroker work --concurrency T``, one command per process, on one queue
directory."""

from __future__ import annotations

from pathlib import Path

from tools.bench.realistic.systems import RealisticSystem

APP = """\
import os

import nobroker

from tools.bench.realistic.jobs import run_job, timed_calls

STORE = "@DIR@"


def handler(job):
    run_job(job.payload["i"])


def enqueue(n):
    os.makedirs(STORE, exist_ok=True)
    with nobroker.Queue(STORE, fsync=True) as q:
        return timed_calls(lambda i: q.enqueue({"i": i}), n)
"""


class NobrokerRealistic(RealisticSystem):
    name = "nobroker"
    durability = ("enqueue: fsync before return; a lease, acked after the job: a crashed "
                  "worker's job comes back (at-least-once)")
    app_source = APP

    def worker_command(self, app: Path, index: int, threads: int) -> list[str]:
        return [self.python(), "-m", "nobroker", "work", "--dir", str(app / "store"),
                "--concurrency", str(threads), "-q", f"{self.app_module}:handler"]
