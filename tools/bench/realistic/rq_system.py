"""RQ in tools/bench/realistic/: ``Queue.enqueue`` on the harness's Redis, ``rq
worker -w rq.worker.SimpleWorker`` once per process (one job at a time, in the
worker process: RQ's default Worker forks a child per job, and has no threads)."""

from __future__ import annotations

from pathlib import Path

from tools.bench.realistic.systems import RealisticSystem

APP = """\
from redis import Redis
from rq import Queue

from tools.bench.realistic.jobs import run_job, timed_calls


def job(i):
    run_job(i)


def enqueue(n):
    q = Queue("bench", connection=Redis.from_url("@REDIS_URL@"))
    return timed_calls(lambda i: q.enqueue(job, i), n)
"""


class RQRealistic(RealisticSystem):
    name = "RQ + Redis"
    durability = ("enqueue: Redis AOF (see its appendfsync); a started job of a dead "
                  "worker goes to the failed registry, not back to the queue")
    app_source = APP
    packages = ("rq", "redis")
    uses_redis = True
    threads = False

    def worker_command(self, app: Path, index: int, threads: int) -> list[str]:
        return [self.python(), "-m", "rq.cli", "worker", "-u", self.redis_url(), "-w",
                "rq.worker.SimpleWorker", "-q", "-n", f"w{index}", "bench"]

    def redis_url(self) -> str:
        assert self.redis is not None
        return f"redis://127.0.0.1:{self.redis.port}/0"
