"""Huey in tools/bench/realistic/: ``SqliteHuey(fsync=True)``, a task call to
enqueue, ``huey_consumer -k thread -w T`` once per process on one database."""

from __future__ import annotations

from pathlib import Path

from tools.bench.realistic.systems import RealisticSystem

APP = """\
import os

from huey import SqliteHuey

from tools.bench.realistic.jobs import run_job, timed_calls

os.makedirs("@DIR@", exist_ok=True)
huey = SqliteHuey("bench", filename=os.path.join("@DIR@", "huey.db"), fsync=True)


@huey.task()
def job(i):
    run_job(i)


def enqueue(n):
    return timed_calls(job, n)
"""


class HueyRealistic(RealisticSystem):
    name = "Huey SqliteHuey"
    durability = ("enqueue: SQLite WAL, synchronous=FULL (fsync per commit); dequeue "
                  "deletes the row, no ack: a crashed worker's job is lost (at-most-once)")
    app_source = APP
    packages = ("huey",)

    def worker_command(self, app: Path, index: int, threads: int) -> list[str]:
        return [self.python(), "-m", "huey.bin.huey_consumer", f"{self.app_module}.huey",
                "-k", "thread", "-w", str(threads), "-n", "-q"]
