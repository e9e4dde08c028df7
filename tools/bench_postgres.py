"""Benchmark nobroker on PostgreSQL: `python make.py bench-postgres [--stats-jobs N]`.

Runs on the throwaway server make.py starts (NOBROKER_TEST_POSTGRES_URL),
each workload in a schema of its own: durable enqueue, enqueue_many of
10,000, lease + ack (ack_and_lease) with 1 and 4 worker processes, enqueue ->
pickup latency through LISTEN/NOTIFY, and stats() with N jobs in the queue.
Prints a Markdown table. Figures are this machine's, from one run.

Not here yet: the same workloads on procrastinate and PgQueuer.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

URL = os.environ.get("NOBROKER_TEST_POSTGRES_URL", "")


def fresh_url() -> str:
    return f"{URL}?schema=b_{uuid.uuid4().hex[:10]}"


def open_backend(url: str, **settings: float) -> object:
    from nobroker.backend import Settings
    from nobroker.postgres import open_backend as opener

    return opener(url, "bench", Settings(**settings))  # type: ignore[arg-type]


def bench_enqueue(n: int) -> float:
    b = open_backend(fresh_url())
    started = time.perf_counter()
    for i in range(n):
        b.enqueue(str(i), i, priority=0, delay=0.0, max_attempts=5,  # type: ignore[attr-defined]
                  job_id=None)
    rate = n / (time.perf_counter() - started)
    b.close()  # type: ignore[attr-defined]
    return rate


def bench_enqueue_many(n: int, rounds: int = 3) -> float:
    b = open_backend(fresh_url())
    texts = [str(i) for i in range(n)]
    best = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        b.enqueue_many(texts, list(range(n)), priority=0, delay=0.0,  # type: ignore
                       max_attempts=5)
        best = max(best, n / (time.perf_counter() - started))
    b.close()  # type: ignore[attr-defined]
    return best


def _consume(url: str, start: multiprocessing.synchronize.Event,  # type: ignore[name-defined]
             counts: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    b = open_backend(url)
    start.wait()
    done = 0
    job = (b.lease(1, 30.0) or [None])[0]  # type: ignore[attr-defined]
    while job is not None:
        job = b.ack_and_lease(job, 30.0)  # type: ignore[attr-defined]
        done += 1
    counts.put(done)
    b.close()  # type: ignore[attr-defined]


def bench_consume(workers: int, n: int) -> float:
    url = fresh_url()
    b = open_backend(url)
    for start_at in range(0, n, 10_000):
        count = min(10_000, n - start_at)
        b.enqueue_many(["0"] * count, [0] * count, priority=0, delay=0.0,  # type: ignore
                       max_attempts=5)
    start, counts = multiprocessing.Event(), multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_consume, args=(url, start, counts))
             for _ in range(workers)]
    for proc in procs:
        proc.start()
    time.sleep(1.0)  # let every process connect
    began = time.perf_counter()
    start.set()
    total = sum(counts.get() for _ in procs)
    elapsed = time.perf_counter() - began
    for proc in procs:
        proc.join()
    b.close()  # type: ignore[attr-defined]
    assert total == n, (total, n)
    return n / elapsed


def bench_pickup(samples: int) -> tuple[float, float]:
    url = fresh_url()
    producer, consumer = open_backend(url), open_backend(url)
    latencies: list[float] = []
    ready = threading.Event()
    sent: list[float] = []

    def consume() -> None:
        for _ in range(samples):
            ready.set()
            while True:
                jobs = consumer.lease(1, 30.0)  # type: ignore[attr-defined]
                if jobs:
                    break
                consumer.wait(5.0)  # type: ignore[attr-defined]
            latencies.append(time.perf_counter() - sent[-1])
            consumer.ack(jobs[0])  # type: ignore[attr-defined]

    thread = threading.Thread(target=consume)
    thread.start()
    for _ in range(samples):
        ready.wait()
        ready.clear()
        time.sleep(0.01)  # the consumer is idle, blocked in wait()
        sent.append(time.perf_counter())
        producer.enqueue('"x"', "x", priority=0, delay=0.0, max_attempts=5,  # type: ignore
                         job_id=None)
        while len(latencies) < len(sent):
            time.sleep(0.0005)
    thread.join()
    producer.close()  # type: ignore[attr-defined]
    consumer.close()  # type: ignore[attr-defined]
    latencies.sort()
    return statistics.median(latencies) * 1000, latencies[int(len(latencies) * 0.99)] * 1000


def bench_stats(n: int) -> float:
    b = open_backend(fresh_url())
    batch = ["0"] * 10_000
    for start_at in range(0, n, 10_000):
        count = min(10_000, n - start_at)
        b.enqueue_many(batch[:count], [0] * count, priority=0, delay=0.0,  # type: ignore
                       max_attempts=5)
    assert b.stats().pending == n  # type: ignore[attr-defined]
    times = []
    for _ in range(50):
        started = time.perf_counter()
        b.stats()  # type: ignore[attr-defined]
        times.append(time.perf_counter() - started)
    b.close()  # type: ignore[attr-defined]
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench_postgres.py")
    parser.add_argument("--stats-jobs", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs per throughput row")
    args = parser.parse_args()
    if not URL:
        print("bench_postgres: no server; run it as `python make.py bench-postgres`")
        return 2
    rows = []
    rows.append(("durable enqueue, one at a time", f"{bench_enqueue(args.jobs):,.0f} jobs/s"))
    rows.append(("enqueue_many of 10,000", f"{bench_enqueue_many(10_000):,.0f} jobs/s"))
    one = bench_consume(1, args.jobs * 2)
    four = bench_consume(4, args.jobs * 2)
    rows.append(("lease + ack, 1 worker process", f"{one:,.0f} jobs/s"))
    rows.append(("lease + ack, 4 worker processes", f"{four:,.0f} jobs/s ({four / one:.2f}x)"))
    p50, p99 = bench_pickup(200)
    rows.append(("enqueue -> pickup (LISTEN/NOTIFY)", f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"))
    rows.append((f"stats() at {args.stats_jobs:,} jobs", f"{bench_stats(args.stats_jobs):.2f} ms"))
    print("\n| workload | nobroker on PostgreSQL |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
