"""tools/bench/peers/run.py's RQ peer: redis-server found or installed (apt-get), a
private server per appendfsync mode that the script starts and stops, and RQ as
a System.

redis and rq are imported only inside methods (peer_module).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tools.bench.common import small_payloads
from tools.bench.peers.systems import Skip, System, die_with_parent, peer_module


def ensure_redis_server() -> str | None:
    """Path of redis-server, installing Debian's package if needed; None if impossible."""
    found = shutil.which("redis-server")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None:
        return None
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("bench_peers: redis-server missing; apt-get install -y redis-server", file=sys.stderr)

    def apt_get(*words: str) -> int:
        return subprocess.run([apt, *words], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode

    if apt_get("install", "-y", "redis-server") != 0:
        apt_get("update")
        apt_get("install", "-y", "redis-server")
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A private redis-server on 127.0.0.1 with AOF persistence; we start and stop it."""

    def __init__(self, binary: str, directory: Path, appendfsync: str) -> None:
        self.binary = binary
        self.dir = directory
        self.appendfsync = appendfsync
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 15.0) -> float:
        """Start the server; return seconds until it answers PING (AOF loaded)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
               "--dir", str(self.dir), "--appendonly", "yes",
               "--appendfsync", self.appendfsync, "--save", "", "--daemonize", "no",
               "--protected-mode", "yes", "--logfile", str(self.dir / "redis.log")]
        t = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}; "
                                   f"see {self.dir / 'redis.log'}")
            if self._ping():
                return time.perf_counter() - t
            time.sleep(0.001)
        raise RuntimeError("redis-server did not answer PING in time")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM (Redis flushes and fsyncs its AOF on it), then wait; kill if it hangs."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class RQSystem(System):
    takes = "started job: moved to the failed registry when the dead worker is noticed"
    supports_batch = True

    def __init__(self, server: RedisServer | None, why_not: str) -> None:
        super().__init__()
        if server is None:
            raise Skip(why_not)
        self.redis_mod, self.rq = peer_module("redis"), peer_module("rq")
        self.server = server
        self.name = f"RQ (appendfsync {server.appendfsync})"
        self.r: Any = None
        self.q: Any = None
        self._connect()

    def _connect(self) -> None:
        self.r = self.redis_mod.Redis(host="127.0.0.1", port=self.server.port)
        self.q = self.rq.Queue("bench", connection=self.r)
        fsync = self.r.config_get("appendfsync").get("appendfsync", "?")
        aof = self.r.config_get("appendonly").get("appendonly", "?")
        what = {"always": "fsync per write (server side)",
                "everysec": "fsync once a second: up to 1 s of acknowledged writes lost on "
                            "power loss"}.get(fsync, "no fsync")
        self.durability = f"Redis AOF appendonly={aof}, appendfsync={fsync}: {what}"

    def open(self, d: Path) -> None:
        self.r.flushall()

    def close(self) -> None:
        self.r.flushall()

    def enqueue(self, payload: dict[str, Any]) -> None:
        from tools.bench.common import noop

        self.q.enqueue(noop, payload)

    def enqueue_batch(self, payloads: list[dict[str, Any]]) -> None:
        from tools.bench.common import noop

        prepare = self.rq.Queue.prepare_data
        self.q.enqueue_many([prepare(noop, (p,)) for p in payloads])

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        self.r.config_set("appendfsync", "no")
        try:
            for i in range(0, len(payloads), 1_000):
                self.enqueue_batch(payloads[i : i + 1_000])
        finally:
            self.r.config_set("appendfsync", self.server.appendfsync)

    def take_ack(self, n: int) -> float:
        if self.q.count < n:
            raise RuntimeError(f"RQ queue holds {self.q.count} jobs, need {n}")
        worker = self.rq.SimpleWorker([self.q], connection=self.r)
        t = time.perf_counter()
        worker.work(burst=True, max_jobs=n, logging_level="WARNING")
        return time.perf_counter() - t

    def cold_open(self, d: Path) -> float:
        self.server.stop()
        t = time.perf_counter()
        self.server.start()
        self._connect()
        got = self.rq.Queue.dequeue_any([self.q], None, connection=self.r)
        elapsed = time.perf_counter() - t
        if got is None:
            raise RuntimeError("no job after restart")
        return elapsed

    def memory_per_job(self, d: Path, n: int) -> tuple[float, str]:
        self.r.flushall()
        before = int(self.r.info("memory")["used_memory"])
        self.prefill(small_payloads(0, n))
        after = int(self.r.info("memory")["used_memory"])
        self.r.flushall()
        return (after - before) / n, "redis used_memory growth"
