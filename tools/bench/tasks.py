"""tools/bench/run.py's task-layer rows (issue 10): task.delay() vs q.enqueue, the
process pool vs the thread pool, an idle worker with 100 periodic tasks, and the
delay -> worker -> get round trip.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from tools.bench.common import (
    child_error,
    fmt_per_op,
    fmt_time,
    interleave,
    median,
    noop,
    percentile,
    proc_cpu_seconds,
    raw_fsync_samples,
    reap,
    spawn,
)
from tools.bench.context import Context, Row, nobroker_api, require, verdict, worker_class


def _echo(*args: Any, **kwargs: Any) -> Any:
    """A task body that returns its first argument (the round trip's result)."""
    return args[0] if args else None


def wl_task_delay(ctx: Context) -> list[Row]:
    """`.delay(i, "x")` vs `q.enqueue` of the very payload it writes, interleaved.

    Durable (fsync) and, as an info row, with fsync=False, where the task
    layer's own CPU cost is not hidden behind the fsync.
    """
    nb = nobroker_api()
    require(nb.Queue, "task")
    cfg = ctx.cfg
    n = cfg.enqueue_ops
    rows: list[Row] = []
    for fsync in (True, False):
        d = ctx.new_dir("task-delay")
        with nb.Queue(str(d), fsync=fsync) as q:
            task = q.task(name="bench.noop")(noop)

            def delay_run(call: Callable[..., Any] = task.delay) -> float:
                first = ctx.take(n)
                t = time.perf_counter()
                for i in range(first, first + n):
                    call(i, "x")
                return time.perf_counter() - t

            def enqueue_run() -> float:
                first = ctx.take(n)
                enqueue = q.enqueue
                t = time.perf_counter()
                for i in range(first, first + n):
                    enqueue({"task": "bench.noop", "args": [i, "x"], "kwargs": {}})
                return time.perf_counter() - t

            res = interleave(cfg.rounds, [("delay", delay_run), ("enqueue", enqueue_run)])
        ratio = median(res["delay"]) / median(res["enqueue"])
        if fsync:
            rows.append(Row("task_delay", "task.delay() (durable)",
                            fmt_per_op(median(res["delay"]), n),
                            f"q.enqueue, same payload: {fmt_per_op(median(res['enqueue']), n)}",
                            ratio, "<= 1.1x (time)", verdict(ratio <= 1.1),
                            note=f"{n} ops/round", data=res))
        else:
            rows.append(Row("task_delay", "task.delay() (fsync=False)",
                            fmt_per_op(median(res["delay"]), n),
                            f"q.enqueue: {fmt_per_op(median(res['enqueue']), n)}", ratio,
                            note="the task layer's CPU cost without the fsync", data=res))
    return rows


def wl_process_pool(ctx: Context) -> list[Row]:
    """No-op task throughput: Worker(q, pool="process") vs the thread pool, one slot each.

    Each round starts a Worker in a thread, waits until it has run one
    warm-up job (so the process pool's child has started and imported its
    modules), then enqueues cfg.ack_ops no-op task jobs with enqueue_many and
    times from there until the Worker has run them all (max_jobs).
    """
    nb = nobroker_api()
    require(nb.Queue, "task")
    worker_cls = worker_class()
    cfg = ctx.cfg
    n = cfg.ack_ops
    d = ctx.new_dir("pool")
    job = {"task": "bench.noop", "args": [], "kwargs": {}}
    with nb.Queue(str(d)) as q:
        q.task(name="bench.noop")(noop)

        def run(pool: str) -> Callable[[], float]:
            def once() -> float:
                worker = worker_cls(q, pool=pool, max_jobs=n + 1, handle_signals=False)
                box: dict[str, Any] = {}
                thread = threading.Thread(target=lambda: box.update(stats=worker.run()))
                done = q.stats().done
                q.enqueue(job)
                thread.start()
                deadline = time.monotonic() + 60
                while q.stats().done == done:  # warming up: not timed
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{pool} pool: the warm-up job did not run")
                    time.sleep(0.005)
                t = time.perf_counter()
                q.enqueue_many([job] * n)
                thread.join()
                elapsed = time.perf_counter() - t
                if box["stats"].succeeded != n + 1:
                    raise RuntimeError(f"{pool} pool: {box['stats']}")
                return elapsed
            return once

        res = interleave(cfg.rounds, [("process", run("process")), ("thread", run("thread"))])
    proc_t, thread_t = median(res["process"]), median(res["thread"])
    ratio = thread_t / proc_t
    return [Row("process_pool", "no-op task, pool=process", f"{n / proc_t:,.0f} jobs/s",
                f"pool=thread: {n / thread_t:,.0f} jobs/s", ratio, ">= 0.5x (speed)",
                verdict(ratio >= 0.5), note=f"{n} jobs/round, concurrency 1, one fsync per job "
                "(ack + next lease)", data=res)]


def _child_periodic(directory: str, tasks: int, ready: Any, out: Any) -> None:
    """Process body for wl_periodic_idle: a Worker(q) with `tasks` periodic tasks."""
    try:
        nb = nobroker_api()
        q = nb.Queue(directory)
        if tasks:
            for i in range(tasks):  # hourly and daily ticks: none falls due while measured
                if i % 2:
                    q.periodic(every=3600, name=f"bench.every{i}")(noop)
                else:
                    q.periodic(cron=f"{i % 60} {i % 24} * * *", name=f"bench.cron{i}")(noop)
            worker = worker_class()(q, idle_timeout=None)
        else:
            worker = worker_class()(q, noop)
        ready.put(os.getpid())
        worker.run()
        out.put(("ok", None))
    except BaseException as exc:
        out.put(("error", child_error(exc)))


def wl_periodic_idle(ctx: Context) -> list[Row]:
    """CPU of an idle worker with 100 periodic tasks registered, vs one with none.

    Each worker runs in its own spawned process; after the start-up ticks
    (each task's latest missed tick runs once) have settled, CPU time is read
    from /proc/PID/stat over 3 x cfg.idle_seconds.
    """
    nb = nobroker_api()
    require(nb.Queue, "periodic")
    mp = spawn()
    pct: dict[str, float] = {}
    for label, tasks in (("periodic", 100), ("plain", 0)):
        d = ctx.new_dir(f"idle-{label}")
        nb.Queue(str(d)).close()
        ready, out = mp.Queue(), mp.Queue()
        proc = mp.Process(target=_child_periodic, args=(str(d), tasks, ready, out))
        proc.start()
        try:
            pid = ready.get(timeout=60)
            time.sleep(2.0)  # the start-up ticks run, then nothing is due
            c0, w0 = proc_cpu_seconds(pid), time.monotonic()
            time.sleep(3 * ctx.cfg.idle_seconds)
            pct[label] = 100.0 * (proc_cpu_seconds(pid) - c0) / (time.monotonic() - w0)
        finally:
            proc.terminate()
            reap(proc, 10)
    return [Row("periodic_idle", "idle worker, 100 periodic tasks",
                f"{pct['periodic']:.2f}% of a core", f"no periodic tasks: {pct['plain']:.2f}%",
                None, "<= 2%", verdict(pct["periodic"] <= 2.0),
                note=f"over {3 * ctx.cfg.idle_seconds:.0f} s; resolution "
                     f"{100 / os.sysconf('SC_CLK_TCK') / (3 * ctx.cfg.idle_seconds):.1f}%",
                data=pct)]


def _child_task_worker(directory: str, ready: Any, out: Any) -> None:
    """Process body for wl_task_roundtrip: Worker(q) running the echo task."""
    try:
        nb = nobroker_api()
        q = nb.Queue(directory)
        q.task(name="bench.echo")(_echo)
        worker = worker_class()(q)
        ready.put(os.getpid())
        worker.run()
        out.put(("ok", None))
    except BaseException as exc:
        out.put(("error", child_error(exc)))


def wl_task_roundtrip(ctx: Context) -> list[Row]:
    """`r = task.delay(i)` -> a Worker in another process runs it -> `r.get()` returns i.

    The fsyncs it needs are two (the enqueue, the ack with the result); the
    baseline is two raw write+fsync calls timed between samples.
    """
    nb = nobroker_api()
    require(nb.Queue, "task", "result")
    cfg = ctx.cfg
    d = ctx.new_dir("roundtrip")
    raw_path = d / "raw.bin"
    size = ctx.enqueue_record_size()
    mp = spawn()
    ready, out = mp.Queue(), mp.Queue()
    q = nb.Queue(str(d))
    task = q.task(name="bench.echo")(_echo)
    proc = mp.Process(target=_child_task_worker, args=(str(d), ready, out))
    proc.start()
    samples: list[float] = []
    fsync2: list[float] = []
    try:
        ready.get(timeout=60)
        rng = random.Random(2)
        for i in range(2 + cfg.latency_samples):
            time.sleep(rng.uniform(0.010, 0.030))
            t = time.perf_counter()
            value = task.delay(i).get(timeout=30)
            elapsed = time.perf_counter() - t
            if value != i:
                raise RuntimeError(f"round trip {i} returned {value!r}")
            if i >= 2:
                samples.append(elapsed)
            fsync2.append(sum(raw_fsync_samples(raw_path, size, 2)))
    finally:
        q.close()
        proc.terminate()
        reap(proc, 10)
    two = median(fsync2)
    p50, p99 = percentile(samples, 50), percentile(samples, 99)
    base = f"2 x raw fsync: {fmt_time(two)}"
    return [
        Row("task_roundtrip", "delay -> worker -> get, p50", fmt_time(p50), base, p50 / two,
            f"<= 3 ms + 2 fsyncs = {fmt_time(0.003 + two)}", verdict(p50 <= 0.003 + two),
            note=f"{len(samples)} samples, Worker in another process",
            data={"samples": samples, "two_fsyncs": fsync2}),
        Row("task_roundtrip", "delay -> worker -> get, p99", fmt_time(p99), base, p99 / two,
            "<= 10 ms", verdict(p99 <= 0.010), note=f"max {fmt_time(max(samples))}"),
    ]
