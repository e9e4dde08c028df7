"""Celery in tools/bench/realistic/: Redis as the broker (no result backend),
``task.delay`` to enqueue, ``celery worker -P threads -c T`` once per process; and
the same app with nobroker as its broker (``nobroker:///DIR``, nobroker.celery)."""

from __future__ import annotations

from pathlib import Path

from tools.bench.realistic.systems import RealisticSystem

APP = """\
from celery import Celery

from tools.bench.realistic.jobs import run_job, timed_calls

app = Celery("bench", broker="@BROKER_URL@")
app.conf.update(broker_connection_retry_on_startup=True, task_ignore_result=True,
                task_default_queue="bench", worker_hijack_root_logger=False)


@app.task(name="bench.job")
def job(i):
    run_job(i)


def enqueue(n):
    return timed_calls(job.delay, n)
"""


# kombu finds nobroker:// through the .pth hook an install puts in site-packages; the
# bench runs nobroker from the source tree, so the app imports the hook itself
NOBROKER_APP = "import _nobroker_celery  # noqa: F401  (registers nobroker://)\n" + APP.replace(
    "@BROKER_URL@", "nobroker://@DIR@")


class CeleryRealistic(RealisticSystem):
    name = "Celery + Redis"
    durability = ("enqueue: Redis AOF (see its appendfsync); acks on receipt by default "
                  "(task_acks_late off): a crashed worker's running job is lost")
    app_source = APP.replace("@BROKER_URL@", "@REDIS_URL@")
    packages = ("celery", "redis")
    uses_redis = True

    def worker_command(self, app: Path, index: int, threads: int) -> list[str]:
        return [self.python(), "-m", "celery", "-A", self.app_module, "worker", "-P", "threads",
                "-c", str(threads), "-n", f"w{index}@%h", "-Q", "bench", "-l", "WARNING",
                "--without-gossip", "--without-mingle", "--without-heartbeat"]


class CeleryNobrokerRealistic(CeleryRealistic):
    name = "Celery + nobroker"
    durability = ("enqueue: fsync before return; acks on receipt by default "
                  "(task_acks_late off): a crashed worker's running job is lost, its "
                  "prefetched ones come back after the visibility timeout")
    app_source = NOBROKER_APP
    packages = ("celery",)
    uses_redis = False
