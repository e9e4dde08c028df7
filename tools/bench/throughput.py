"""tools/bench/run.py's single-call throughput rows: durable enqueue, 4 threads, 4
processes (and their raw-append floor), enqueue_many, and lease + ack.

Each workload function takes the run Context and returns its Rows; what it
measures is in its docstring.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.bench.common import (
    child_error,
    fmt_per_op,
    fmt_time,
    gather_at_barrier,
    interleave,
    log_record_bytes,
    median,
    raw_fsync_loop,
    raw_fsync_threads,
    run_threads,
    small_payloads,
)
from tools.bench.context import Context, Row, nobroker_api, require, verdict


def wl_enqueue(ctx: Context) -> list[Row]:
    """Durable single enqueue, one thread, vs the raw O_APPEND write+fsync loop."""
    nb = nobroker_api()
    cfg = ctx.cfg
    size = ctx.enqueue_record_size()
    n = cfg.enqueue_ops
    d = ctx.new_dir("enqueue")
    raw_path = d / "raw.bin"
    with nb.Queue(str(d)) as q:

        def nobroker_run() -> float:
            payloads = ctx.payloads(n)
            enqueue = q.enqueue
            t = time.perf_counter()
            for p in payloads:
                enqueue(p)
            return time.perf_counter() - t

        res = interleave(cfg.rounds, [("nobroker", nobroker_run),
                                      ("raw", lambda: raw_fsync_loop(raw_path, size, n))])
    nb_t, raw_t = median(res["nobroker"]), median(res["raw"])
    ratio = raw_t / nb_t
    return [Row("enqueue", "durable single enqueue", fmt_per_op(nb_t, n),
                f"raw write+fsync of {size} B: {fmt_per_op(raw_t, n)}", ratio,
                ">= 1.0x (speed)", verdict(ratio >= 1.0),
                note=f"{n} ops/round; record size = mean framed ENQUEUE record in nobroker's log",
                data={"ops": n, "record_size": size, **res})]


def wl_threads(ctx: Context) -> list[Row]:
    """4 threads enqueuing at once, each call durable before it returns.

    Raw: 4 threads, each its own O_APPEND file, write+fsync per record.
    nobroker: 4 threads on ONE Queue object; and 4 threads each with its own
    Queue object on the same queue directory.
    """
    nb = nobroker_api()
    cfg = ctx.cfg
    size = ctx.enqueue_record_size()
    each = cfg.thread_ops // 4
    n = each * 4
    d = ctx.new_dir("threads")
    raw_paths = [d / f"raw{i}.bin" for i in range(4)]
    shared = nb.Queue(str(d))
    own = [nb.Queue(str(d)) for _ in range(4)]
    try:

        def run_on(queues: list[Any]) -> float:
            chunks = [ctx.payloads(each) for _ in range(4)]

            def target(q: Any, payloads: list[dict[str, Any]]) -> Callable[[], None]:
                def go() -> None:
                    for p in payloads:
                        q.enqueue(p)
                return go

            return run_threads([target(q, c) for q, c in zip(queues, chunks, strict=True)])

        res = interleave(cfg.rounds, [
            ("one_queue", lambda: run_on([shared] * 4)),
            ("own_queues", lambda: run_on(own)),
            ("raw", lambda: raw_fsync_threads(raw_paths, size, each)),
        ])
    finally:
        shared.close()
        for q in own:
            q.close()
    one_t, own_t, raw_t = median(res["one_queue"]), median(res["own_queues"]), median(res["raw"])
    raw_text = f"4 threads x raw write+fsync, 4 files: {fmt_per_op(raw_t, n)}"
    return [
        Row("threads", "4 threads enqueuing, one Queue", fmt_per_op(one_t, n), raw_text,
            raw_t / one_t, ">= 0.8x (speed)", verdict(raw_t / one_t >= 0.8),
            note=f"{n} enqueues/round over 4 threads",
            data={"ops": n, "record_size": size, **res}),
        Row("threads", "4 threads enqueuing, a Queue each", fmt_per_op(own_t, n), raw_text,
            raw_t / own_t, ">= 0.8x (speed)", verdict(raw_t / own_t >= 0.8),
            note="4 Queue objects on one directory in one process"),
    ]


def _child_enqueue(directory: str, first: int, count: int, barrier: Any, out: Any) -> None:
    """Process body for wl_processes: open, wait for the start, enqueue, report end time."""
    try:
        payloads = small_payloads(first, count)
        with nobroker_api().Queue(directory) as q:
            barrier.wait(timeout=120)
            for p in payloads:
                q.enqueue(p)
            out.put(("ok", time.monotonic()))
    except BaseException as exc:  # reported to the parent
        barrier.abort()
        out.put(("error", child_error(exc)))


def run_at_barrier(target: Callable[..., None], args: list[tuple[Any, ...]]) -> float:
    """Wall seconds from a shared start to the last of len(args) processes' reported
    end: process i runs target(*args[i], barrier, out) and puts ("ok", its end time)."""
    start, ends = gather_at_barrier([(target, each) for each in args])
    return max(ends) - start


def run_processes(directory: Path, nprocs: int, total: int, first: int) -> float:
    """Wall seconds for `nprocs` processes to enqueue `total` jobs (start at the barrier)."""
    each = total // nprocs
    return run_at_barrier(_child_enqueue, [(str(directory), first + i * each, each)
                                           for i in range(nprocs)])


def _child_raw_append(path: str, record_size: int, count: int, barrier: Any, out: Any) -> None:
    """Process body for wl_processes' floor: O_APPEND write + fsync on one shared file."""
    try:
        record = b"r" * record_size
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            barrier.wait(timeout=120)
            for _ in range(count):
                os.write(fd, record)
                os.fsync(fd)
        finally:
            os.close(fd)
        out.put(("ok", time.monotonic()))
    except BaseException as exc:  # reported to the parent
        barrier.abort()
        out.put(("error", child_error(exc)))


def run_raw_processes(path: Path, nprocs: int, total: int, record_size: int) -> float:
    """Wall seconds for `nprocs` processes to append `total` records to one file."""
    return run_at_barrier(_child_raw_append,
                          [(str(path), record_size, total // nprocs)] * nprocs)


def wl_processes(ctx: Context) -> list[Row]:
    """4 processes enqueuing at once vs 1 process, same total number of jobs.

    Processes are started (spawn) and open the queue before the clock starts;
    the clock runs from a shared barrier to the last process's last enqueue.
    """
    nobroker_api()
    cfg = ctx.cfg
    total = (cfg.proc_jobs // 4) * 4
    d = ctx.new_dir("procs")
    size = ctx.enqueue_record_size()
    raw = d / "raw-shared.bin"
    res = interleave(cfg.rounds, [
        ("four", lambda: run_processes(d, 4, total, ctx.take(total))),
        ("one", lambda: run_processes(d, 1, total, ctx.take(total))),
        ("raw_four", lambda: run_raw_processes(raw, 4, total, size)),
        ("raw_one", lambda: run_raw_processes(raw, 1, total, size)),
    ])
    four_t, one_t = median(res["four"]), median(res["one"])
    raw_four_t, raw_one_t = median(res["raw_four"]), median(res["raw_one"])
    ratio = one_t / four_t
    return [Row("processes", "4 processes enqueuing at once", fmt_per_op(four_t, total),
                f"1 process: {fmt_per_op(one_t, total)}", ratio, ">= 1.5x (speed)",
                verdict(ratio >= 1.5), note=f"{total} durable enqueues/round",
                data={"ops": total, **res}),
            # What the disk allows one shared file: if raw appends cannot reach 1.5x
            # with four writers, no log on this file system can.
            Row("processes", "floor: 4 processes appending to one file, fsync each",
                fmt_per_op(raw_four_t, total),
                f"1 process: {fmt_per_op(raw_one_t, total)}", raw_one_t / raw_four_t,
                "info", "info", note=f"O_APPEND write+fsync of {size} B, one shared file")]


def wl_enqueue_many(ctx: Context) -> list[Row]:
    """enqueue_many of B small jobs (one fsync) vs json.dumps(payloads) of the same list."""
    nb = nobroker_api()
    cfg = ctx.cfg
    b = cfg.batch
    d = ctx.new_dir("many")
    with nb.Queue(str(d)) as q:
        require(q, "enqueue_many")

        def nobroker_run() -> float:
            payloads = ctx.payloads(b)
            t = time.perf_counter()
            q.enqueue_many(payloads)
            return time.perf_counter() - t

        fixed = ctx.payloads(b)

        def dumps_run() -> float:
            t = time.perf_counter()
            json.dumps(fixed)
            return time.perf_counter() - t

        res = interleave(cfg.rounds, [("nobroker", nobroker_run), ("json_dumps", dumps_run)])
    nb_t, js_t = median(res["nobroker"]), median(res["json_dumps"])
    ratio = nb_t / js_t
    return [Row("enqueue_many", f"enqueue_many of {b:,} (one fsync)", fmt_per_op(nb_t, b),
                f"json.dumps(list): {fmt_per_op(js_t, b)}", ratio, "<= 1.5x (time)",
                verdict(ratio <= 1.5), note=f"per job; {fmt_time(nb_t)} per call",
                data={"batch": b, **res})]


def wl_lease_ack(ctx: Context) -> list[Row]:
    """One consumer: lease + durable ack round trips, and a batch ack.

    * ack_and_lease loop: ``job = q.ack_and_lease(job)`` n times (one call,
      one fsync per job) — the round trip the target is about.
    * lease_one + ack: two calls per job, shown for reference.
    * batch ack: ``q.lease(count=B)`` (not timed), then ``q.ack_many(jobs)``
      timed; reported in jobs/s against the raw loop's ops/s.
    Raw loop record = log bytes one ack_and_lease round trip adds.
    """
    nb = nobroker_api()
    cfg = ctx.cfg
    n, b = cfg.ack_ops, cfg.ack_batch
    d = ctx.new_dir("lease")
    raw_path = d / "raw.bin"
    rows: list[Row] = []
    with nb.Queue(str(d)) as q:
        require(q, "lease_one", "ack", "enqueue_many")
        has_al = hasattr(q, "ack_and_lease")
        has_many = hasattr(q, "lease") and hasattr(q, "ack_many")
        need = cfg.rounds * (2 * n + b) + 200
        done = 0
        while done < need:
            k = min(10_000, need - done)
            q.enqueue_many(ctx.payloads(k))
            done += k

        # calibrate: log bytes per round trip
        before = log_record_bytes(d)
        job = q.lease_one()
        for _ in range(20):
            job = q.ack_and_lease(job) if has_al else (q.ack(job), q.lease_one())[1]
        q.ack(job)
        size = round((log_record_bytes(d) - before) / 21)

        def al_run() -> float:
            job = q.lease_one()
            ack_and_lease = q.ack_and_lease
            t = time.perf_counter()
            for _ in range(n):
                job = ack_and_lease(job)
                if job is None:
                    raise RuntimeError("queue ran dry during ack_and_lease")
            elapsed = time.perf_counter() - t
            q.ack(job)
            return elapsed

        def two_calls_run() -> float:
            lease_one, ack = q.lease_one, q.ack
            t = time.perf_counter()
            for _ in range(n):
                job = lease_one()
                if job is None:
                    raise RuntimeError("queue ran dry during lease_one")
                ack(job)
            return time.perf_counter() - t

        def batch_run() -> float:
            jobs = q.lease(count=b)
            if len(jobs) != b:
                raise RuntimeError(f"lease(count={b}) returned {len(jobs)} jobs")
            t = time.perf_counter()
            q.ack_many(jobs)
            return time.perf_counter() - t

        contenders: list[tuple[str, Callable[[], float]]] = []
        if has_al:
            contenders.append(("ack_and_lease", al_run))
        contenders.append(("lease_one_ack", two_calls_run))
        if has_many:
            contenders.append(("ack_many", batch_run))
        contenders.append(("raw", lambda: raw_fsync_loop(raw_path, size, n)))
        gen0 = getattr(q.stats(), "generation", None)
        res = interleave(cfg.rounds, contenders)
        gen1 = getattr(q.stats(), "generation", None)
    compactions = f"; auto-compactions during the rounds: {gen1 - gen0}" if gen0 is not None \
        and gen1 is not None else ""
    raw_t = median(res["raw"])
    raw_text = f"raw write+fsync of {size} B: {fmt_per_op(raw_t, n)}"
    if has_al:
        t = median(res["ack_and_lease"])
        rows.append(Row("lease_ack", "lease + durable ack round trip (ack_and_lease)",
                        fmt_per_op(t, n), raw_text, raw_t / t, ">= 1.0x (speed)",
                        verdict(raw_t / t >= 1.0),
                        note=f"{n} round trips/round, one consumer{compactions}",
                        data={"ops": n, "record_size": size, **res}))
    else:
        rows.append(Row("lease_ack", "lease + durable ack round trip (ack_and_lease)",
                        result="n/a (missing: Queue.ack_and_lease)", target=">= 1.0x (speed)"))
    t = median(res["lease_one_ack"])
    rows.append(Row("lease_ack", "lease_one + ack (two durable calls)", fmt_per_op(t, n),
                    raw_text, raw_t / t, "info",
                    "info", note="two fsyncs per job by construction",
                    data={} if has_al else {"ops": n, "record_size": size, **res}))
    if has_many:
        t = median(res["ack_many"])
        ratio = (b / t) / (n / raw_t)
        rows.append(Row("lease_ack", f"batch ack: ack_many of {b:,}", fmt_per_op(t, b), raw_text,
                        ratio, ">= 20x (speed)", verdict(ratio >= 20.0),
                        note="jobs/s vs raw ops/s; lease(count) not timed"))
    else:
        rows.append(Row("lease_ack", f"batch ack: ack_many of {b:,}", target=">= 20x (speed)",
                        result="n/a (missing: Queue.lease/ack_many)"))
    return rows
