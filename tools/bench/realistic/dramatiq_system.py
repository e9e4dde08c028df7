"""Dramatiq in tools/bench/realistic/: its RedisBroker on the harness's Redis,
``actor.send`` to enqueue, ``dramatiq APP --processes 1 --threads T`` once per
process; and the same app with nobroker as its broker (``NobrokerBroker(DIR)``,
nobroker.dramatiq)."""

from __future__ import annotations

from pathlib import Path

from tools.bench.realistic.systems import RealisticSystem

APP = """\
import dramatiq
@BROKER_IMPORT@
from tools.bench.realistic.jobs import run_job, timed_calls

dramatiq.set_broker(@BROKER@)


@dramatiq.actor(queue_name="bench", max_retries=0)
def job(i):
    run_job(i)


def enqueue(n):
    return timed_calls(job.send, n)
"""


class DramatiqRealistic(RealisticSystem):
    name = "Dramatiq + Redis"
    durability = ("enqueue: Redis AOF (see its appendfsync); a message is acked after "
                  "the job, a dead worker's messages are requeued (at-least-once)")
    app_source = APP.replace("@BROKER_IMPORT@", "from dramatiq.brokers.redis import RedisBroker\n")\
        .replace("@BROKER@", 'RedisBroker(url="@REDIS_URL@")')
    packages = ("dramatiq", "redis")
    uses_redis = True

    def worker_command(self, app: Path, index: int, threads: int) -> list[str]:
        return [self.python(), "-m", "dramatiq", self.app_module, "--processes", "1",
                "--threads", str(threads), "--path", str(app), "--queues", "bench"]


class DramatiqNobrokerRealistic(DramatiqRealistic):
    name = "Dramatiq + nobroker"
    durability = ("enqueue: fsync before return; a message is acked after the job, a dead "
                  "worker's messages come back after the visibility timeout (at-least-once)")
    app_source = APP.replace("@BROKER_IMPORT@", "\nfrom nobroker.dramatiq import NobrokerBroker\n")\
        .replace("@BROKER@", 'NobrokerBroker("@DIR@")')
    packages = ("dramatiq",)
    uses_redis = False
