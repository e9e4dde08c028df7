"""Celery in tools/bench/realistic/: Redis as the broker (no result backend),
``task.delay`` to enqueue, ``celery worker -P threads -c T`` once per process."""

from __future__ import annotations

from pathlib import Path

from tools.bench.realistic.systems import RealisticSystem

APP = """\
from celery import Celery

from tools.bench.realistic.jobs import run_job, timed_calls

app = Celery("bench", broker="@REDIS_URL@")
app.conf.update(broker_connection_retry_on_startup=True, task_ignore_result=True,
                task_default_queue="bench", worker_hijack_root_logger=False)


@app.task(name="bench.job")
def job(i):
    run_job(i)


def enqueue(n):
    return timed_calls(job.delay, n)
"""


class CeleryRealistic(RealisticSystem):
    name = "Celery + Redis"
    durability = ("enqueue: Redis AOF (see its appendfsync); acks on receipt by default "
                  "(task_acks_late off): a crashed worker's running job is lost")
    app_source = APP
    packages = ("celery", "redis")
    uses_redis = True

    def worker_command(self, app: Path, index: int, threads: int) -> list[str]:
        return [self.python(), "-m", "celery", "-A", self.app_module, "worker", "-P", "threads",
                "-c", str(threads), "-n", f"w{index}@%h", "-Q", "bench", "-l", "WARNING",
                "--without-gossip", "--without-mingle", "--without-heartbeat"]
