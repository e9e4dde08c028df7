"""Benchmark nobroker on PostgreSQL against procrastinate and PgQueuer, on one server.

    python make.py bench-postgres [--jobs N] [--stats-jobs N] [--only NAME,...]

make.py starts a throwaway server (tools/pg_cluster.py, which sets
NOBROKER_TEST_POSTGRES_URL) and runs this in .dev/pg-bench-venv, where
requirements-bench-postgres.txt pins the peers. Every contender runs every
workload on the same server in the same run, through its public API:

- durable enqueue: one job per call, each committed before the next;
- enqueue_many of 10,000 jobs (procrastinate: batch_defer; PgQueuer: enqueue
  with lists), the best of three;
- lease + ack with 1 and 4 worker processes: N jobs drained by the peer's own
  worker loop (nobroker: ack_and_lease; procrastinate: run_worker(wait=False);
  PgQueuer: QueueManager in drain mode), from the start signal until every
  process is done; each with its default batching. Not the same promise:
  nobroker's and procrastinate's loops commit each job's ack before they take
  the next job, while PgQueuer's puts each finished job in a buffer that a
  background task commits every 10 jobs or 0.1 s (pgqueuer/core/qm.py
  `_dispatch` -> `JobStatusLogBuffer.add`, core/buffers.py), so its worker
  runs on before its acks are committed; the column says so;
- lease + ack in batches of 10, 1 worker process (nobroker only): `lease(10)`,
  then `ack_many` of the 10, each call committed before it returns: what
  leasing ahead buys with nobroker's public API, durability unchanged;
- enqueue -> handler latency: one idle worker woken by LISTEN/NOTIFY
  (nobroker: a Worker; the peers: their workers with NOTIFY on), the time
  from just before the producer's enqueue to the handler's first line;
- stats() with --stats-jobs jobs in the queue (procrastinate:
  list_queues; PgQueuer: queue_size), the median of 20 calls.

Figures are this machine's, from one run; the machine is shared, so compare
rows of one run with each other, not with another machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

URL = os.environ.get("NOBROKER_TEST_POSTGRES_URL", "")
BATCH = 10_000
Rate = float


def _timed(n: int, fn: Callable[[], None]) -> Rate:
    started = time.perf_counter()
    fn()
    return n / (time.perf_counter() - started)


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
            fields = Path(entry.path, "stat").read_text().rpartition(")")[2].split()
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


def _drain_in_processes(workers: int, jobs: int, target: Callable[..., None],
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


def _percentiles(latencies: list[float]) -> tuple[float, float]:
    latencies.sort()
    return (statistics.median(latencies) * 1000,
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000)


# --------------------------------------------------------------------------
# nobroker


def _nobroker_url() -> str:
    return f"{URL}?schema=b_{uuid.uuid4().hex[:10]}"


def _use_src(src: str | None) -> None:
    """Import nobroker from `src` from now on (the A/B rounds run another checkout's
    code in the worker processes); None keeps this checkout's."""
    if src is None:
        return
    for name in [m for m in sys.modules if m == "nobroker" or m.startswith("nobroker.")]:
        del sys.modules[name]
    sys.path.insert(0, src)


def _nobroker_fill(url: str, n: int, src: str | None = None) -> None:
    _use_src(src)
    from nobroker import Queue

    with Queue(url, "bench") as q:
        for at in range(0, n, BATCH):
            q.enqueue_many([0] * min(BATCH, n - at))


def _nobroker_consume(url: str, src: str | None, start: Any) -> None:
    _use_src(src)
    from nobroker import Queue

    with Queue(url, "bench") as q:
        start.wait()
        job = q.lease_one()
        while job is not None:
            job = q.ack_and_lease(job)


def _nobroker_consume_batched(url: str, start: Any) -> None:
    from nobroker import Queue

    with Queue(url, "bench") as q:
        start.wait()
        jobs = q.lease(10)
        while jobs:
            q.ack_many(jobs)
            jobs = q.lease(10)


class Nobroker:
    name = "nobroker"

    def enqueue(self, n: int) -> Rate:
        from nobroker import Queue

        with Queue(_nobroker_url(), "bench") as q:
            return _timed(n, lambda: [q.enqueue(i) for i in range(n)] and None)

    def enqueue_many(self, n: int) -> Rate:
        from nobroker import Queue

        with Queue(_nobroker_url(), "bench") as q:
            return max(_timed(n, lambda: q.enqueue_many(range(n)) and None) for _ in range(3))

    def __init__(self, src: str | None = None) -> None:
        self.src = src  # another checkout's src/ (the A/B rounds); None: this one's

    def fill(self, url: str, n: int) -> None:
        if self.src is None:
            _nobroker_fill(url, n)
            return
        proc = multiprocessing.Process(target=_nobroker_fill, args=(url, n, self.src))
        proc.start()
        proc.join()
        assert proc.exitcode == 0, proc.exitcode

    def consume(self, workers: int, n: int) -> Drain:
        url = _nobroker_url()
        self.fill(url, n)
        return _drain_in_processes(workers, n, _nobroker_consume, url, self.src)

    def consume_batched(self, n: int) -> str:
        url = _nobroker_url()
        self.fill(url, n)
        drain = _drain_in_processes(1, n, _nobroker_consume_batched, url)
        return f"{drain.rate:,.0f} jobs/s"

    def pickup(self, samples: int) -> tuple[float, float]:
        from nobroker import Queue, Worker

        url = _nobroker_url()
        latencies: list[float] = []
        handled = threading.Semaphore(0)
        sent: list[float] = []

        def handle(job: Any) -> None:
            latencies.append(time.perf_counter() - sent[-1])
            handled.release()

        with Queue(url, "bench") as consumer, Queue(url, "bench") as producer:
            worker = Worker(consumer, handle, handle_signals=False, poll_interval=5.0)
            thread = threading.Thread(target=worker.run)
            thread.start()
            for _ in range(samples):
                time.sleep(0.02)  # the worker is idle, blocked in wait()
                sent.append(time.perf_counter())
                producer.enqueue("x")
                assert handled.acquire(timeout=30)
            worker.stop()
            thread.join()
        return _percentiles(latencies)

    def stats(self, n: int) -> float:
        from nobroker import Queue

        url = _nobroker_url()
        self.fill(url, n)
        with Queue(url, "bench") as q:
            assert q.stats().pending == n
            return _median_ms(q.stats)


def _median_ms(call: Callable[[], object], rounds: int = 20) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


# --------------------------------------------------------------------------
# procrastinate (async API; its sync defer runs the same statements)


def _procrastinate_app() -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=URL))

    @app.task(name="bench", queue="bench")
    async def bench(n: int = 0) -> None:
        _PROCRASTINATE_HOOK(n)

    return app


def _noop(n: int) -> None:
    pass


_PROCRASTINATE_HOOK: Callable[[int], None] = _noop


async def _procrastinate_reset(app: Any) -> None:
    async with app.connector.pool.connection() as conn:
        exists = await (await conn.execute(
            "SELECT to_regclass('procrastinate_jobs') IS NOT NULL")).fetchone()
        if not exists[0]:
            await app.schema_manager.apply_schema_async()
        await conn.execute("TRUNCATE procrastinate_jobs CASCADE")


def _procrastinate_consume(start: Any) -> None:
    async def main() -> None:
        app = _procrastinate_app()
        async with app.open_async():
            start.wait()
            await app.run_worker_async(queues=["bench"], wait=False, concurrency=1,
                                       install_signal_handlers=False, listen_notify=False,
                                       delete_jobs="always")

    asyncio.run(main())


class Procrastinate:
    name = "procrastinate"

    def _run(self, body: Callable[[Any], Any]) -> Any:
        async def main() -> Any:
            app = _procrastinate_app()
            async with app.open_async():
                await _procrastinate_reset(app)
                return await body(app)

        return asyncio.run(main())

    def enqueue(self, n: int) -> Rate:
        async def body(app: Any) -> Rate:
            task = app.tasks["bench"]
            started = time.perf_counter()
            for i in range(n):
                await task.defer_async(n=i)
            return n / (time.perf_counter() - started)

        return float(self._run(body))

    async def _fill(self, app: Any, n: int) -> None:
        task = app.tasks["bench"]
        for at in range(0, n, BATCH):
            await task.batch_defer_async(*({"n": i} for i in range(min(BATCH, n - at))))

    def enqueue_many(self, n: int) -> Rate:
        async def body(app: Any) -> Rate:
            best = 0.0
            for _ in range(3):
                started = time.perf_counter()
                await self._fill(app, n)
                best = max(best, n / (time.perf_counter() - started))
            return best

        return float(self._run(body))

    def consume(self, workers: int, n: int) -> Drain:
        async def body(app: Any) -> None:
            await self._fill(app, n)

        self._run(body)
        return _drain_in_processes(workers, n, _procrastinate_consume)

    def pickup(self, samples: int) -> tuple[float, float]:
        global _PROCRASTINATE_HOOK
        latencies: list[float] = []
        sent: list[float] = []

        async def body(app: Any) -> None:
            global _PROCRASTINATE_HOOK
            handled = asyncio.Event()

            def hook(n: int) -> None:
                latencies.append(time.perf_counter() - sent[-1])
                handled.set()

            _PROCRASTINATE_HOOK = hook
            worker = asyncio.ensure_future(app.run_worker_async(
                queues=["bench"], wait=True, concurrency=1, install_signal_handlers=False,
                listen_notify=True, delete_jobs="always"))
            await asyncio.sleep(1.0)
            task = app.tasks["bench"]
            for _ in range(samples):
                await asyncio.sleep(0.02)
                handled.clear()
                sent.append(time.perf_counter())
                await task.defer_async(n=0)
                await asyncio.wait_for(handled.wait(), 30)
            worker.cancel()
            try:
                await worker
            except asyncio.CancelledError:
                pass

        try:
            self._run(body)
        finally:
            _PROCRASTINATE_HOOK = _noop
        return _percentiles(latencies)

    def stats(self, n: int) -> float:
        async def body(app: Any) -> float:
            await self._fill(app, n)
            times = []
            for _ in range(20):
                started = time.perf_counter()
                await app.job_manager.list_queues_async()
                times.append(time.perf_counter() - started)
            return statistics.median(times) * 1000

        return float(self._run(body))


# --------------------------------------------------------------------------
# PgQueuer (asyncio, on a psycopg async connection)


async def _pgqueuer_connect() -> Any:
    import psycopg

    return await psycopg.AsyncConnection.connect(URL, autocommit=True)


async def _pgqueuer_queries(conn: Any, reset: bool = True) -> Any:
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries

    queries = Queries(PsycopgDriver(conn))
    if reset:
        if not await queries.schema_is_installed():
            await queries.install()
        await queries.clear_queue()
    return queries


def _pgqueuer_consume(start: Any) -> None:
    async def main() -> None:
        from pgqueuer.db import PsycopgDriver
        from pgqueuer.qm import QueueManager
        from pgqueuer.queries import Queries
        from pgqueuer.types import QueueExecutionMode

        conn = await _pgqueuer_connect()
        qm = QueueManager(Queries(PsycopgDriver(conn)))

        @qm.entrypoint("bench")
        async def bench(job: Any) -> None:
            pass

        start.wait()
        await qm.run(mode=QueueExecutionMode.drain)
        await conn.close()

    asyncio.run(main())


class PgQueuer:
    name = "PgQueuer"
    label = "PgQueuer (acks buffered)"

    def _run(self, body: Callable[[Any], Any]) -> Any:
        async def main() -> Any:
            conn = await _pgqueuer_connect()
            try:
                return await body(await _pgqueuer_queries(conn))
            finally:
                await conn.close()

        return asyncio.run(main())

    def enqueue(self, n: int) -> Rate:
        async def body(q: Any) -> Rate:
            started = time.perf_counter()
            for i in range(n):
                await q.enqueue("bench", str(i).encode(), 0)
            return n / (time.perf_counter() - started)

        return float(self._run(body))

    @staticmethod
    async def _fill(q: Any, n: int) -> None:
        for at in range(0, n, BATCH):
            count = min(BATCH, n - at)
            await q.enqueue(["bench"] * count, [b"0"] * count, [0] * count)

    def enqueue_many(self, n: int) -> Rate:
        async def body(q: Any) -> Rate:
            best = 0.0
            for _ in range(3):
                started = time.perf_counter()
                await self._fill(q, n)
                best = max(best, n / (time.perf_counter() - started))
            return best

        return float(self._run(body))

    def consume(self, workers: int, n: int) -> Drain:
        self._run(lambda q: self._fill(q, n))
        return _drain_in_processes(workers, n, _pgqueuer_consume)

    def pickup(self, samples: int) -> tuple[float, float]:
        latencies: list[float] = []
        sent: list[float] = []

        async def body(q: Any) -> None:
            from pgqueuer.db import PsycopgDriver
            from pgqueuer.qm import QueueManager
            from pgqueuer.queries import Queries

            handled = asyncio.Event()
            conn = await _pgqueuer_connect()
            qm = QueueManager(Queries(PsycopgDriver(conn)))

            @qm.entrypoint("bench")
            async def bench(job: Any) -> None:
                latencies.append(time.perf_counter() - sent[-1])
                handled.set()

            runner = asyncio.ensure_future(qm.run(batch_size=1))
            await asyncio.sleep(1.0)
            for _ in range(samples):
                await asyncio.sleep(0.02)
                handled.clear()
                sent.append(time.perf_counter())
                await q.enqueue("bench", b"x", 0)
                await asyncio.wait_for(handled.wait(), 30)
            qm.shutdown.set()
            await asyncio.wait_for(runner, 30)
            await conn.close()

        self._run(body)
        return _percentiles(latencies)

    def stats(self, n: int) -> float:
        async def body(q: Any) -> float:
            await self._fill(q, n)
            times = []
            for _ in range(20):
                started = time.perf_counter()
                await q.queue_size()
                times.append(time.perf_counter() - started)
            return statistics.median(times) * 1000

        return float(self._run(body))


# --------------------------------------------------------------------------
# the table


def _cpu_table(drains: dict[tuple[str, int], Drain]) -> list[str]:
    """Where each drain's time went: wall and CPU per job, workers and server apart."""
    lines = ["", f"CPU per job in the lease + ack rows (user + system; workers and server "
             f"share {os.cpu_count()} cores):", "",
             "| contender | workers | wall per job | worker CPU per job | server CPU per job "
             "| cores busy |", "| --- | --- | --- | --- | --- | --- |"]
    for (name, workers), d in drains.items():
        lines.append(f"| {name} | {workers} | {d.seconds / d.jobs * 1e6:.0f} us | "
                     f"{d.worker_cpu / d.jobs * 1e6:.0f} us | "
                     f"{d.server_cpu / d.jobs * 1e6:.0f} us | {d.cores_busy:.2f} |")
    for name in dict.fromkeys(name for name, _ in drains):
        one, four = drains.get((name, 1)), drains.get((name, 4))
        if one is not None and four is not None:
            lines.append(f"{name}: 4 workers / 1 = {four.rate / one.rate:.2f}x; the ceiling "
                         f"{os.cpu_count()} cores allow, cores / (CPU per job x rate at 1 "
                         f"worker) = {_ceiling(one):.2f}x ({_ceiling(one, four):.2f}x with "
                         f"the CPU per job of 4 workers)")
    return lines


def _ceiling(one: Drain, at: Drain | None = None) -> float:
    """The most N workers can gain over 1 with every core busy, if a job costs the CPU
    it cost in drain `at` (default: `one`, the drain with 1 worker)."""
    per_job = (at or one).cpu_per_job
    return (os.cpu_count() or 1) / (per_job * one.rate)


def _ab(old_src: str, rounds: int, n: int) -> int:
    """The lease + ack rows only, on another checkout's code (A) and this one's (B),
    interleaved: A1 B1 A4 B4, B1 A1 B4 A4, ... (the order flips every round)."""
    here = str(Path(__file__).resolve().parent.parent / "src")
    sides = {"A": Nobroker(str(Path(old_src).resolve())), "B": Nobroker(here)}
    drains: dict[tuple[str, int], list[Drain]] = {}
    for number in range(rounds):
        order = ["A", "B"] if number % 2 == 0 else ["B", "A"]
        for workers in (1, 4):
            for side in order:
                d = sides[side].consume(workers, n)
                drains.setdefault((side, workers), []).append(d)
                print(f"round {number + 1} {side} {workers} worker(s): {d.rate:,.0f} jobs/s, "
                      f"cpu/job {d.cpu_per_job * 1e6:.0f} us (workers "
                      f"{d.worker_cpu / n * 1e6:.0f}, server {d.server_cpu / n * 1e6:.0f}), "
                      f"cores busy {d.cores_busy:.2f}", file=sys.stderr, flush=True)
    print(f"\nA = {old_src}, B = {here}; {rounds} rounds of {n:,} jobs; medians:\n")
    print("| side | rate, 1 worker | rate, 4 workers | 4/1 | CPU per job at 1 (workers + "
          "server) | CPU per job at 4 | cores busy at 1 | ceiling 4/1 (CPU at 1; at 4) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for side in ("A", "B"):
        ones, fours = drains[(side, 1)], drains[(side, 4)]
        med = statistics.median
        ratio = med(f.rate / o.rate for o, f in zip(ones, fours, strict=True))
        print(f"| {side} | {med(d.rate for d in ones):,.0f} jobs/s | "
              f"{med(d.rate for d in fours):,.0f} jobs/s | {ratio:.2f}x | "
              f"{med(d.cpu_per_job for d in ones) * 1e6:.0f} us "
              f"({med(d.worker_cpu / d.jobs for d in ones) * 1e6:.0f} + "
              f"{med(d.server_cpu / d.jobs for d in ones) * 1e6:.0f}) | "
              f"{med(d.cpu_per_job for d in fours) * 1e6:.0f} us | "
              f"{med(d.cores_busy for d in ones):.2f} | "
              f"{med(_ceiling(d) for d in ones):.2f}x; "
              f"{med(_ceiling(o, f) for o, f in zip(ones, fours, strict=True)):.2f}x |")
    return 0


def main() -> int:
    # procrastinate warns that its App lives in __main__; that is this script's choice.
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(prog="bench_postgres.py")
    parser.add_argument("--jobs", type=int, default=3_000, help="jobs per throughput row")
    parser.add_argument("--stats-jobs", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=200, help="pickup latency samples")
    parser.add_argument("--only", default="", help="contenders, comma-separated")
    parser.add_argument("--ab", metavar="OLD_SRC", default="",
                        help="only the lease + ack rows, this checkout against OLD_SRC "
                             "(another checkout's src/), in interleaved rounds")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --ab")
    args = parser.parse_args()
    if not URL:
        print("bench_postgres: no server; run it as `python make.py bench-postgres`")
        return 2
    if args.ab:
        return _ab(args.ab, args.rounds, 2 * args.jobs)
    contenders: list[Any] = [Nobroker(), Procrastinate(), PgQueuer()]
    if args.only:
        wanted = {name.strip().lower() for name in args.only.split(",")}
        contenders = [c for c in contenders if c.name.lower() in wanted]
    n = args.jobs
    drains: dict[tuple[str, int], Drain] = {}

    def drained(c: Any, workers: int) -> str:
        drain = drains[(c.name, workers)] = c.consume(workers, 2 * n)
        return f"{drain.rate:,.0f} jobs/s"

    rows: list[tuple[str, Callable[[Any], str]]] = [
        (f"durable enqueue, one at a time ({n:,} jobs)",
         lambda c: f"{c.enqueue(n):,.0f} jobs/s"),
        (f"enqueue_many of {BATCH:,}", lambda c: f"{c.enqueue_many(BATCH):,.0f} jobs/s"),
        (f"lease + ack, 1 worker process ({2 * n:,} jobs)", lambda c: drained(c, 1)),
        (f"lease + ack, 4 worker processes ({2 * n:,} jobs)", lambda c: drained(c, 4)),
        (f"lease + ack in batches of 10, 1 worker process ({2 * n:,} jobs)",
         lambda c: c.consume_batched(2 * n) if hasattr(c, "consume_batched") else "-"),
        ("enqueue -> handler, LISTEN/NOTIFY (p50 / p99)",
         lambda c: "{:.2f} / {:.2f} ms".format(*c.pickup(args.samples))),
        (f"stats() at {args.stats_jobs:,} jobs", lambda c: f"{c.stats(args.stats_jobs):.2f} ms"),
    ]
    table = [[name] for name, _ in rows]
    for row, (name, measure) in zip(table, rows, strict=True):
        for contender in contenders:
            print(f"bench_postgres: {contender.name}: {name}", file=sys.stderr, flush=True)
            row.append(measure(contender))
    labels = [getattr(c, "label", c.name) for c in contenders]
    print("\n| workload | " + " | ".join(labels) + " |")
    print("| --- |" + " --- |" * len(contenders))
    for row in table:
        print("| " + " | ".join(row) + " |")
    print("\n".join(_cpu_table(drains)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
