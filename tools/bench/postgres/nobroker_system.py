"""tools/bench/postgres/run.py's own contender: nobroker's Queue and Worker on PostgreSQL.

Each row gets a fresh schema (`?schema=b_...`), so no row sees another's jobs. The
A/B rounds (`--ab`) run another checkout's src/ in the worker processes: `Nobroker(src)`
fills and drains with that code (`_use_src`), the rest of the rows always run this
checkout's.
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
import time
import uuid
from typing import Any

from tools.bench.postgres.measure import (
    BATCH,
    URL,
    Drain,
    Rate,
    drain_in_processes,
    median_ms,
    percentiles,
    timed,
)


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
            return timed(n, lambda: [q.enqueue(i) for i in range(n)] and None)

    def enqueue_many(self, n: int) -> Rate:
        from nobroker import Queue

        with Queue(_nobroker_url(), "bench") as q:
            return max(timed(n, lambda: q.enqueue_many(range(n)) and None) for _ in range(3))

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
        return drain_in_processes(workers, n, _nobroker_consume, url, self.src)

    def consume_batched(self, n: int) -> str:
        url = _nobroker_url()
        self.fill(url, n)
        drain = drain_in_processes(1, n, _nobroker_consume_batched, url)
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
        return percentiles(latencies)

    def stats(self, n: int) -> float:
        from nobroker import Queue

        url = _nobroker_url()
        self.fill(url, n)
        with Queue(url, "bench") as q:
            assert q.stats().pending == n
            return median_ms(q.stats)
