"""What tools/bench/postgres/run.py's contenders measure with: the drain in worker processes
and the CPU it cost, and the timing helpers of the other rows.

A drain (`drain_in_processes`) starts N worker processes, lets each connect, then
fires one start signal and times until every process has returned. Its CPU comes
from /proc (bench_common.proc_stat_fields): each worker notes its own user + system
time when the signal fires and reports what it spent after it (imports and
connecting are not counted); the server's is every process of the cluster, found
through its postmaster.pid, before and after, once the workers' backends have been
reaped (a backend read before it exits and missed after would be lost).

The server URL is NOBROKER_TEST_POSTGRES_URL, which tools/postgres/cluster.py sets.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.bench.common import proc_stat_fields

URL = os.environ.get("NOBROKER_TEST_POSTGRES_URL", "")
BATCH = 10_000
Rate = float


def timed(n: int, fn: Callable[[], None]) -> Rate:
    started = time.perf_counter()
    fn()
    return n / (time.perf_counter() - started)


async def best_rate(n: int, fill: Callable[[], Awaitable[None]], rounds: int = 3) -> Rate:
    """The best of `rounds` timed `fill()`s of `n` jobs (the enqueue_many row of the
    asyncio peers)."""
    best = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        await fill()
        best = max(best, n / (time.perf_counter() - started))
    return best


def median_ms(call: Callable[[], object], rounds: int = 20) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def percentiles(latencies: list[float]) -> tuple[float, float]:
    latencies.sort()
    return (statistics.median(latencies) * 1000,
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000)


@dataclass(frozen=True)
class Drain:
    """One drain: its wall time, and the CPU the workers and the server spent on it."""

    jobs: int
    workers: int
    seconds: float
    worker_cpu: float  # user + system seconds of the worker processes, start to finish
    server_cpu: float  # the same for every process of the PostgreSQL cluster

    @property
    def rate(self) -> Rate:
        return self.jobs / self.seconds

    @property
    def cpu_per_job(self) -> float:
        return (self.worker_cpu + self.server_cpu) / self.jobs

    @property
    def cores_busy(self) -> float:
        return (self.worker_cpu + self.server_cpu) / self.seconds


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


class _Start:
    """The start signal, as a worker sees it: notes the process's CPU when it fires,
    so that connecting and importing before it are not counted."""

    def __init__(self, event: Any) -> None:
        self.event = event
        self.cpu = 0.0

    def wait(self) -> None:
        self.event.wait()
        self.cpu = _own_cpu()


def _measured(target: Callable[..., None], args: tuple[Any, ...], event: Any,
              spent: Any) -> None:
    start = _Start(event)
    target(*args, start)
    spent.put(_own_cpu() - start.cpu)


def _postmaster() -> int | None:
    """The pid of the cluster's postmaster, from its data directory's postmaster.pid (the
    data directory is the `-D` of NOBROKER_TEST_PG_CTL, set by pg_cluster.py)."""
    try:
        pg_ctl = json.loads(os.environ["NOBROKER_TEST_PG_CTL"])
        data = Path(pg_ctl[pg_ctl.index("-D") + 1])
        return int((data / "postmaster.pid").read_text().split()[0])
    except (KeyError, ValueError, IndexError, OSError):
        return None


def _server_processes() -> dict[int, tuple[int, int]]:
    """{pid: (ticks, ticks of reaped children)} of the postmaster and its children;
    empty where /proc or the data directory cannot be read."""
    postmaster = _postmaster()
    found: dict[int, tuple[int, int]] = {}
    if postmaster is None:
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = proc_stat_fields(entry.name)
        except OSError:
            continue  # gone since the scan began
        pid, ppid = int(entry.name), int(fields[1])
        if pid == postmaster or ppid == postmaster:
            utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
            found[pid] = (utime + stime, cutime + cstime if pid == postmaster else 0)
    return found


def _server_cpu() -> float:
    """CPU seconds the cluster used so far: the postmaster's own and its reaped
    children's (backends that exited), plus every live child's."""
    return sum(own + reaped for own, reaped in _server_processes().values()) / os.sysconf(
        "SC_CLK_TCK")


def _reaped(pids: set[int], timeout: float = 10.0) -> None:
    """Wait until the postmaster has reaped `pids` (their CPU is then in its cutime):
    a backend read just before it exits and missed just after would be lost."""
    deadline = time.monotonic() + timeout
    while any(os.path.exists(f"/proc/{pid}") for pid in pids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"backends {sorted(pids)} did not exit in {timeout}s")
        time.sleep(0.01)


def drain_in_processes(workers: int, jobs: int, target: Callable[..., None],
                       *args: Any) -> Drain:
    """Drain `jobs` with `workers` processes running target(*args, start): the time from
    the start signal until all have returned, and the CPU spent meanwhile."""
    event = multiprocessing.Event()
    spent: Any = multiprocessing.SimpleQueue()
    procs = [multiprocessing.Process(target=_measured, args=(target, args, event, spent))
             for _ in range(workers)]
    backends = set(_server_processes())
    for proc in procs:
        proc.start()
    time.sleep(1.5)  # every process connects and waits for the signal
    backends = set(_server_processes()) - backends  # the workers' (and a stray autovacuum)
    server_before = _server_cpu()
    began = time.perf_counter()
    event.set()
    for proc in procs:
        proc.join()
        assert proc.exitcode == 0, proc.exitcode
    seconds = time.perf_counter() - began
    _reaped(backends)
    server = _server_cpu() - server_before
    worker_cpu = sum(spent.get() for _ in procs)
    return Drain(jobs, workers, seconds, worker_cpu, server)
