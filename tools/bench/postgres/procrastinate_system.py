"""tools/bench/postgres/run.py's contender procrastinate, through its async API (its sync
defer runs the same statements), on a psycopg connection pool of its own.

Every row starts from an empty procrastinate_jobs (`_procrastinate_reset`, which applies
the schema the first time). The one task, "bench", calls `_PROCRASTINATE_HOOK`, which
the pickup row points at its timer and sets back to a no-op after it. procrastinate is
imported inside functions only: the harness starts (`--help`) without it.
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
        return float(self._run(lambda app: best_rate(n, lambda: self._fill(app, n))))

    def consume(self, workers: int, n: int) -> Drain:
        async def body(app: Any) -> None:
            await self._fill(app, n)

        self._run(body)
        return drain_in_processes(workers, n, _procrastinate_consume)

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
        return percentiles(latencies)

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
