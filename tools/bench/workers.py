"""tools/bench/run.py's rows with Worker processes: 1, 2, 4 workers draining one queue,
1 producer + 3 workers at once (both run by bench_scaling), and the
enqueue-to-handler latency with the idle worker's CPU.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any

import tools.bench.scaling as bench_scaling
from tools.bench.common import (
    child_error,
    fmt_time,
    interleave,
    median,
    percentile,
    proc_cpu_seconds,
    raw_fsync_samples,
    reap,
    spawn,
)
from tools.bench.context import Context, Row, nobroker_api, verdict, worker_class


def wl_workers(ctx: Context) -> list[Row]:
    """N = 1, 2, 4 Worker processes draining one prefilled queue, rounds rotating N.

    Each run prefills a fresh queue with cfg.drain_jobs no-op jobs (untimed),
    spawns N processes that each open it and build a ``Worker`` (concurrency
    1, a handler that only stamps its start), releases them at a barrier and
    waits until every one has found the queue empty. The figure is the
    steady-state rate of handler starts (bench_scaling.steady_rate: start-up
    and tail left out); the ratios are against N = 1 in the same rounds.
    """
    nobroker_api()
    worker_class()
    cfg = ctx.cfg
    n = cfg.drain_jobs
    work = ctx.new_dir("workers")
    counts = (1, 2, 4)
    runs: dict[int, list[bench_scaling.Drain]] = {c: [] for c in counts}

    def run(count: int) -> Callable[[], float]:
        def once() -> float:
            outcome = bench_scaling.drain(work, count, n)
            runs[count].append(outcome)
            return outcome.rate
        return once

    res = interleave(cfg.rounds, [(str(c), run(c)) for c in counts])
    rate = {c: median(res[str(c)]) for c in counts}
    dups = {c: sum(d.duplicates for d in runs[c]) for c in counts}
    base = f"1 process: {rate[1]:,.0f} jobs/s"

    def spread(count: int) -> str:  # how noisy the rounds were
        return f"{min(res[str(count)]):,.0f}-{max(res[str(count)]):,.0f}/s"

    rows = []
    for count, target in ((2, 1.2), (4, 1.5)):
        ratio = rate[count] / rate[1]
        rows.append(Row("workers", f"{count} worker processes draining one queue",
                        f"{rate[count]:,.0f} jobs/s", base, ratio, f">= {target}x (speed)",
                        verdict(ratio >= target),
                        note=(f"{n:,} no-op jobs prefilled; steady-state rate; rounds "
                              f"{spread(1)} at N = 1, {spread(count)} at N = {count}; "
                              f"duplicate deliveries {dups[count]}"),
                        data={"jobs": n, "rates": res}))
    return rows


def wl_mixed(ctx: Context) -> list[Row]:
    """1 producer process + 3 Worker processes on one queue at once (the common shape).

    Each round runs twice on a fresh, empty queue: once with the producer
    enqueuing cfg.mixed_jobs jobs as fast as it can (the end-to-end rate at
    saturation: the steady-state rate of handler starts), then with it paced
    on a fixed schedule at half the median saturated rate so far, for the
    latency: time.time() at the handler's start minus time.time() stamped
    into the payload just before the producer's enqueue (the first 5% of
    each paced run left out as warm-up).
    """
    nobroker_api()
    worker_class()
    cfg = ctx.cfg
    n = cfg.mixed_jobs
    work = ctx.new_dir("mixed")
    saturated: list[bench_scaling.Mixed] = []
    latencies: list[float] = []
    paced_at: list[float] = []

    def flat_out() -> float:
        saturated.append(bench_scaling.mixed(work, n, 0.0))
        return saturated[-1].rate

    def paced() -> float:
        rate = median([m.rate for m in saturated]) / 2
        paced_at.append(rate)
        run = bench_scaling.mixed(work, n, rate)
        latencies.extend(run.latencies[n // 20:])
        return run.rate

    res = interleave(cfg.rounds, [("saturated", flat_out), ("paced", paced)])
    rate = median(res["saturated"])
    producer = median([m.producer_rate for m in saturated])
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    pace = f"producer paced at {median(paced_at):,.0f} jobs/s (half of saturation)"
    data = {"jobs": n, "rates": res, "paced_at": paced_at, "latencies": latencies}
    return [
        Row("mixed", "1 producer + 3 worker processes: end-to-end at saturation",
            f"{rate:,.0f} jobs/s", f"the producer's enqueues meanwhile: {producer:,.0f}/s",
            rate / producer, "info", "info",
            note=f"{n:,} jobs/round, steady-state rate of handler starts", data=data),
        Row("mixed", "1 producer + 3 worker processes: enqueue -> handler start, p50",
            fmt_time(p50), pace, None, "info", "info", note=f"{len(latencies)} samples"),
        Row("mixed", "1 producer + 3 worker processes: enqueue -> handler start, p99",
            fmt_time(p99), pace, None, "<= 10 ms", verdict(p99 <= 0.010),
            note=f"max {fmt_time(max(latencies))}; p99 of {len(latencies)} samples"),
    ]


def _child_worker(directory: str, max_jobs: int, conn: Any, out: Any) -> None:
    """Process body for wl_latency: a Worker whose handler reports when it starts."""
    try:
        nobroker = nobroker_api()
        worker_cls = worker_class()

        def handler(job: Any) -> None:
            stamp = time.time()
            payload = getattr(job, "payload", job)
            conn.send((payload["i"], stamp))

        q = nobroker.Queue(directory)
        w = worker_cls(q, handler, max_jobs=max_jobs, idle_timeout=300)
        conn.send(("ready", os.getpid()))
        w.run()
        q.close()
        out.put(("ok", None))
    except BaseException as exc:
        out.put(("error", child_error(exc)))
        try:
            conn.send(("error", child_error(exc)))
        except Exception:
            pass


def wl_latency(ctx: Context) -> list[Row]:
    """Enqueue-to-handler latency with an idle Worker in another process.

    A spawned process runs ``Worker(Queue(dir), handler, max_jobs=...)`` with
    the Worker's defaults; the handler sends ``time.time()`` at its start over
    a pipe. Before sampling, the idle worker's CPU use is read from
    /proc/PID/stat over cfg.idle_seconds. Then, per sample: sleep 20-50 ms,
    stamp time.time(), enqueue one job, wait for the handler's stamp; between
    samples, two raw write+fsync calls are timed (the baseline). Two warm-up
    samples are discarded.
    """
    nobroker_api()
    worker_class()
    cfg = ctx.cfg
    d = ctx.new_dir("latency")
    raw_path = d / "raw.bin"
    size = ctx.enqueue_record_size()
    warmup = 2
    total = warmup + cfg.latency_samples
    mp = spawn()
    parent_conn, child_conn = mp.Pipe(duplex=False)
    out = mp.Queue()
    nb = nobroker_api()
    q = nb.Queue(str(d))
    proc = mp.Process(target=_child_worker, args=(str(d), total, child_conn, out))
    proc.start()
    latencies: list[float] = []
    fsync2: list[float] = []
    try:
        if not parent_conn.poll(60):
            raise RuntimeError("worker process did not start within 60 s")
        tag, value = parent_conn.recv()
        if tag != "ready":
            raise RuntimeError(f"worker failed: {value}")
        pid = int(value)
        time.sleep(0.5)  # let it reach its idle wait
        c0, w0 = proc_cpu_seconds(pid), time.monotonic()
        time.sleep(cfg.idle_seconds)
        idle_pct = 100.0 * (proc_cpu_seconds(pid) - c0) / (time.monotonic() - w0)
        rng = random.Random(1)
        for i in range(total):
            time.sleep(rng.uniform(0.020, 0.050))
            t0 = time.time()
            q.enqueue({"i": i})
            if not parent_conn.poll(30):
                raise RuntimeError(f"handler did not start within 30 s (sample {i})")
            idx, stamp = parent_conn.recv()
            if idx == "error":
                raise RuntimeError(f"worker failed: {stamp}")
            if idx != i:
                raise RuntimeError(f"handler saw job {idx}, expected {i}")
            if i >= warmup:
                latencies.append(stamp - t0)
            fsync2.append(sum(raw_fsync_samples(raw_path, size, 2)))
        status, value = out.get(timeout=30)
        if status != "ok":
            raise RuntimeError(f"worker failed: {value}")
    finally:
        q.close()
        reap(proc, 10)
    two = median(fsync2)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    budget = 0.002 + two
    base = f"2 x raw fsync: {fmt_time(two)}"
    data = {"latencies": latencies, "two_fsyncs": fsync2, "idle_cpu_pct": idle_pct}
    return [
        Row("latency", "enqueue -> handler start, p50", fmt_time(p50), base, p50 / two,
            f"<= 2 ms + 2 fsyncs = {fmt_time(budget)}", verdict(p50 <= budget),
            note=f"{len(latencies)} samples, Worker in another process", data=data),
        Row("latency", "enqueue -> handler start, p99", fmt_time(p99), base, p99 / two,
            "<= 10 ms", verdict(p99 <= 0.010),
            note=f"max {fmt_time(max(latencies))}; p99 of {len(latencies)} samples"),
        Row("latency", "idle worker CPU", f"{idle_pct:.2f}% of a core", "—", None, "<= 2%",
            verdict(idle_pct <= 2.0),
            note=(f"over {cfg.idle_seconds:.0f} s idle; resolution "
                  f"{100 / os.sysconf('SC_CLK_TCK') / cfg.idle_seconds:.1f}% (clock ticks)")),
    ]
