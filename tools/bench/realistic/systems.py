"""The seam of tools/bench/realistic/: a system is an app module (its enqueue loop
and its job, written into the drain's scratch directory and imported by the
system's own worker command), the command that starts one worker process, and
what it promises about a job.

The app is source text, not an import: the peers (huey, dramatiq, celery, rq,
redis) are imported only by the app and the worker commands, in the bench
venv, never by the harness (tools/build/check_deps.py).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from tools.bench.peers.redis_systems import RedisServer
from tools.bench.peers.systems import Skip, peer_module


class RealisticSystem:
    """One system under test: its app, its worker command, its guarantees."""

    name = "?"
    durability = "?"  # what a returned enqueue survives, and what a crash does to a taken job
    app_module = "bench_realistic_app"
    app_source = ""  # Python source of the app module: enqueue(n) -> seconds, and the job
    packages: tuple[str, ...] = ()  # importable peers it needs (checked up front)
    threads = True  # its worker runs jobs in threads; False: one job at a time a process
    stop_signal = signal.SIGTERM
    uses_redis = False

    def __init__(self, redis: RedisServer | None = None) -> None:
        for name in self.packages:
            peer_module(name)
        if self.uses_redis and redis is None:
            raise Skip("no redis-server")
        self.redis = redis

    def write_app(self, app: Path) -> None:
        url = f"redis://127.0.0.1:{self.redis.port}/0" if self.redis is not None else ""
        text = self.app_source.replace("@REDIS_URL@", url).replace("@DIR@", str(app / "store"))
        (app / f"{self.app_module}.py").write_text(text, encoding="utf-8")

    def reset(self) -> None:
        """Empty the system's store before a drain (the file stores start fresh anyway)."""
        if self.redis is not None:
            r = peer_module("redis").Redis(host="127.0.0.1", port=self.redis.port)
            r.flushall()
            r.close()

    def worker_command(self, app: Path, index: int, threads: int) -> list[str]:
        raise NotImplementedError

    @staticmethod
    def python() -> str:
        return sys.executable
