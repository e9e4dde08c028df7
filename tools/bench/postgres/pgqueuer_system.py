"""tools/bench/postgres/run.py's contender PgQueuer, through its asyncio API on a psycopg
async connection (autocommit).

Every row starts from an empty queue (`_pgqueuer_queries`, which installs the schema the
first time). Its column is labelled "acks buffered": its QueueManager commits finished
jobs from a buffer (see tools/bench/postgres/run.py's docstring). PgQueuer and psycopg are
imported inside functions only: the harness starts (`--help`) without them.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from tools.bench.postgres.measure import (
    BATCH,
    URL,
    Drain,
    Rate,
    best_rate,
    drain_in_processes,
    percentiles,
)


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
        return float(self._run(lambda q: best_rate(n, lambda: self._fill(q, n))))

    def consume(self, workers: int, n: int) -> Drain:
        self._run(lambda q: self._fill(q, n))
        return drain_in_processes(workers, n, _pgqueuer_consume)

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
        return percentiles(latencies)

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
