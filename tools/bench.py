"""nobroker's benchmark: every operation next to its physical baseline, same run.

    python tools/bench.py                 # default run (< 5 minutes)
    python tools/bench.py --quick         # small sizes, 2 rounds (< 1 minute)
    python tools/bench.py --big           # 1M-job log for cold open/memory/stats/compaction
    python tools/bench.py --only enqueue,cold_open --json out.json
    python tools/bench.py --markdown      # one Markdown table for the README

Standard library only; run with ``src`` on PYTHONPATH (make.py does), or the
script puts it there.

Methodology
-----------
This machine is shared and noisy, so a number on its own means little. Each
workload runs nobroker and a *physical baseline* — the least work the machine
must do for the same effect — interleaved in one process (A B A B ..., five
rounds by default, two with ``--quick``), and reports the median round of
each, the absolute figure (ops/s and time per op) and their ratio. The ratio
is written in the direction of the target: "speed" ratios are nobroker's
throughput over the baseline's (higher is better); "time" ratios are
nobroker's time over the baseline's (lower is better). Every row carries the
target from the issue and PASS or MISS; "info" rows have no target.

Scratch files go to ``.bench/`` in the repository (ignored by git), not to
/tmp, which may be a tmpfs where fsync costs nothing; the header names the
filesystem the files are on (from /proc/mounts). ``--dir`` chooses another
place.

The baselines
-------------
* raw write+fsync loop: a file opened with O_APPEND, then per operation one
  ``os.write`` of one record and one ``os.fsync``. The record is as long as
  nobroker's own framed record for the same job: the script enqueues 50 jobs
  into a fresh queue, reads its log back (16-byte file header, then
  ``<I length><B type><I crc32>`` + payload per record) and takes the mean
  framed size of the ENQUEUE records. For lease + ack it is the number of
  log bytes one round trip adds, measured the same way.
* 4 threads: four threads, each running that loop on its own file.
* enqueue_many: ``json.dumps(payloads)`` of the same list, one call.
* cold open: read every log file, split it into records by the framing above
  and ``json.loads`` every record payload (no CRC check, no state built).
  Both sides read from a warm page cache.
* pickup latency: two raw write+fsync calls, measured between the samples.
* 4 processes: the same total number of jobs enqueued by one process.
* stats(): the same call on a queue of 1,000 jobs (O(1) means no growth).
* memory and compaction have absolute targets; the baseline column shows the
  on-disk size of a job and the enqueue latency outside compaction.

What each workload measures is spelled out in its function's docstring.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import random
import shlex
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scaling
from bench_common import (
    REPO,
    child_error,
    ensure_src_on_path,
    facts_line,
    fmt_bytes,
    fmt_per_op,
    fmt_ratio,
    fmt_time,
    framed_sizes,
    gather_at_barrier,
    interleave,
    json_loads_log,
    log_record_bytes,
    machine_facts,
    median,
    noop,
    percentile,
    proc_cpu_seconds,
    raw_fsync_loop,
    raw_fsync_samples,
    raw_fsync_threads,
    reap,
    render_markdown_table,
    render_text_table,
    rss_bytes,
    run_threads,
    small_payload,
    small_payloads,
    spawn,
)

ensure_src_on_path()

ENQUEUE_TYPE = 1  # records.RecordType.ENQUEUE, per docs/FORMAT.md
WORKLOADS = (
    "enqueue",
    "threads",
    "processes",
    "workers",
    "mixed",
    "enqueue_many",
    "lease_ack",
    "cold_open",
    "memory",
    "stats",
    "latency",
    "compaction",
    "task_delay",
    "process_pool",
    "periodic_idle",
    "task_roundtrip",
)


# --------------------------------------------------------------------------
# configuration and results


@dataclass
class Config:
    quick: bool
    big: bool
    rounds: int
    enqueue_ops: int  # single enqueues per round
    thread_ops: int  # enqueues per round, split over 4 threads
    proc_jobs: int  # enqueues per round, over 1 or 4 processes
    batch: int  # enqueue_many size
    ack_ops: int  # round trips per round
    ack_batch: int  # ack_many size
    big_n: int  # pending jobs for cold open / memory / stats / compaction
    stats_calls: int
    latency_samples: int
    idle_seconds: float
    drain_jobs: int  # prefilled jobs per drain (workers)
    mixed_jobs: int  # jobs the producer enqueues per mixed run

    @classmethod
    def make(cls, quick: bool, big: bool, rounds: int | None) -> Config:
        if quick:
            cfg = cls(quick, big, 2, 200, 400, 400, 1_000, 200, 1_000, 20_000, 2_000, 15, 2.0,
                      2_000, 1_000)
        else:
            cfg = cls(quick, big, 5, 1_000, 2_000, 2_000, 10_000, 1_000, 1_000, 200_000,
                      10_000, 50, 2.0, 8_000, 4_000)
        if big:
            cfg.big_n = 1_000_000
        if rounds is not None:
            cfg.rounds = rounds
        return cfg


@dataclass
class Row:
    key: str  # workload name (for --only and JSON)
    workload: str  # what the row measures, for humans
    nobroker: str = "—"
    baseline: str = "—"
    ratio: float | None = None
    target: str = "—"
    result: str = "info"
    note: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def cells(self) -> list[str]:
        return [self.workload, self.nobroker, self.baseline, fmt_ratio(self.ratio), self.target,
                self.result]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


class Missing(Exception):
    """A nobroker feature this workload needs does not exist (yet)."""


def require(obj: object, *names: str) -> None:
    absent = [n for n in names if not hasattr(obj, n)]
    if absent:
        owner = obj.__name__ if isinstance(obj, type) else type(obj).__name__
        raise Missing(", ".join(f"{owner}.{n}" for n in absent))


def nobroker_api() -> Any:
    """The nobroker module, or Missing if it (or Queue) cannot be imported."""
    try:
        nobroker = importlib.import_module("nobroker")
    except ImportError as exc:
        raise Missing(f"nobroker ({exc})") from None
    if not hasattr(nobroker, "Queue"):
        raise Missing("nobroker.Queue")
    return nobroker


def worker_class() -> Any:
    """nobroker.Worker (or nobroker.worker.Worker), or Missing."""
    worker = getattr(nobroker_api(), "Worker", None)
    if worker is None:
        try:
            worker = importlib.import_module("nobroker.worker").Worker
        except (ImportError, AttributeError):
            raise Missing("nobroker.Worker") from None
    return worker


# --------------------------------------------------------------------------
# run context: scratch directories and shared fixtures


class Context:
    def __init__(self, cfg: Config, root: Path, log: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.root = root
        self.log = log
        self._record_size: int | None = None
        self._big: Path | None = None
        self._next = 10_000_000  # payload numbers: distinct jobs, same digit count

    def new_dir(self, label: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.root))

    def take(self, count: int) -> int:
        """Reserve `count` payload numbers; return the first."""
        first = self._next
        self._next += count
        return first

    def payloads(self, count: int) -> list[dict[str, Any]]:
        return small_payloads(self.take(count), count)

    def enqueue_record_size(self) -> int:
        """Mean framed size of nobroker's ENQUEUE record for the standard small job."""
        if self._record_size is None:
            nb = nobroker_api()
            d = self.new_dir("recsize")
            with nb.Queue(str(d)) as q:
                for p in self.payloads(50):
                    q.enqueue(p)
            sizes = framed_sizes(d).get(ENQUEUE_TYPE, [])
            if len(sizes) >= 50:
                self._record_size = round(sum(sizes) / len(sizes))
            else:  # unknown record types: fall back to bytes per call
                self._record_size = round(log_record_bytes(d) / 50)
            shutil.rmtree(d, ignore_errors=True)
        return self._record_size

    def big_queue(self) -> Path:
        """A queue directory holding cfg.big_n pending jobs (built once, with enqueue_many)."""
        if self._big is None:
            nb = nobroker_api()
            d = self.new_dir("big")
            n = self.cfg.big_n
            self.log(f"  building a log of {n:,} pending jobs (enqueue_many, 10k per call)...")
            t = time.perf_counter()
            with nb.Queue(str(d)) as q:
                done = 0
                while done < n:
                    k = min(10_000, n - done)
                    q.enqueue_many(small_payloads(done, k))
                    done += k
            size = sum(p.stat().st_size for p in d.glob("*.log"))
            self.log(f"  built in {time.perf_counter() - t:.1f} s; log files {fmt_bytes(size)}")
            self._big = d
        return self._big


# --------------------------------------------------------------------------
# workloads


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
    rows = []
    for count, target in ((2, 1.2), (4, 1.5)):
        ratio = rate[count] / rate[1]
        rows.append(Row("workers", f"{count} worker processes draining one queue",
                        f"{rate[count]:,.0f} jobs/s", base, ratio, f">= {target}x (speed)",
                        verdict(ratio >= target),
                        note=(f"{n:,} no-op jobs prefilled; steady-state rate; "
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
        Row("mixed", "1 producer + 3 workers: enqueue -> handler start, p50", fmt_time(p50),
            pace, None, "info", "info", note=f"{len(latencies)} samples"),
        Row("mixed", "1 producer + 3 workers: enqueue -> handler start, p99", fmt_time(p99),
            pace, None, "<= 10 ms", verdict(p99 <= 0.010),
            note=f"max {fmt_time(max(latencies))}; p99 of {len(latencies)} samples"),
    ]


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


def _build_and_crash(directory: str, jobs: int) -> None:
    """Process body for wl_cold_open: enqueue `jobs` jobs, then die like kill -9."""
    nb = nobroker_api()
    q = nb.Queue(directory, auto_compact=None)
    done = 0
    while done < jobs:
        k = min(10_000, jobs - done)
        q.enqueue_many(small_payloads(done, k))
        done += k
    os._exit(9)  # no close(): whatever checkpoint exists was saved while running


def wl_cold_open(ctx: Context) -> list[Row]:
    """Cold open of a log with N pending jobs, to the first job in hand.

    nobroker: ``Queue(dir)`` + ``lease_one()`` (which appends one LEASE record
    and fsyncs); close is not timed. Three times: as the queue was left by a
    clean close() (which saves a checkpoint); as a process that built the
    same queue and then died by os._exit left it (only the checkpoints a live
    handle saves as its log grows); and from a copy with every ``*.ckpt``
    file deleted before each open (a full replay, the worst case).
    Baseline: read the log files, split the records, json.loads each payload.
    Page cache is warm for all.
    """
    nb = nobroker_api()
    cfg = ctx.cfg
    d = ctx.big_queue()
    bare = ctx.root / "cold-no-checkpoint"
    shutil.copytree(d, bare, ignore=shutil.ignore_patterns("*.ckpt"))
    had_checkpoint = any(d.glob("*.ckpt"))
    crashed = ctx.new_dir("crashed")
    builder = spawn().Process(target=_build_and_crash, args=(str(crashed), cfg.big_n))
    builder.start()
    builder.join()
    crashed_copy = ctx.root / "cold-crashed-copy"

    def crashed_run() -> float:
        # A fresh copy each round: opening saves nothing, but lease_one writes.
        shutil.rmtree(crashed_copy, ignore_errors=True)
        shutil.copytree(crashed, crashed_copy)
        return open_run(crashed_copy, False)()

    def open_run(where: Path, strip: bool) -> Callable[[], float]:
        def run() -> float:
            if strip:
                for p in where.glob("*.ckpt"):
                    p.unlink()
            t = time.perf_counter()
            q = nb.Queue(str(where))
            job = q.lease_one()
            elapsed = time.perf_counter() - t
            q.close()
            if job is None:
                raise RuntimeError("cold open: lease_one returned None")
            return elapsed
        return run

    records: list[int] = []

    def loads_run() -> float:
        t = time.perf_counter()
        records.append(json_loads_log(d))
        return time.perf_counter() - t

    res = interleave(cfg.rounds, [("nobroker", open_run(d, False)),
                                  ("crashed", crashed_run),
                                  ("no_checkpoint", open_run(bare, True)),
                                  ("json_loads", loads_run)])
    shutil.rmtree(bare, ignore_errors=True)
    shutil.rmtree(crashed_copy, ignore_errors=True)
    nb_t, crash_t, bare_t, js_t = (median(res["nobroker"]), median(res["crashed"]),
                                   median(res["no_checkpoint"]), median(res["json_loads"]))
    base = f"json.loads of {records[-1]:,} records: {fmt_time(js_t)}"
    return [
        Row("cold_open", f"cold open, {cfg.big_n:,} pending, to first job", fmt_time(nb_t),
            base, nb_t / js_t, "<= 1.0x (time)", verdict(nb_t / js_t <= 1.0),
            note=("after a clean close(); "
                  f"{'with' if had_checkpoint else 'no'} checkpoint file; warm page cache"),
            data={"jobs": cfg.big_n, **res}),
        Row("cold_open", f"cold open, {cfg.big_n:,} pending, after the writer was killed",
            fmt_time(crash_t), base, crash_t / js_t, "<= 1.0x (time)",
            verdict(crash_t / js_t <= 1.0),
            note="built by a process that then died by os._exit(9): no close()"),
        Row("cold_open", f"cold open, {cfg.big_n:,} pending, no checkpoint at all",
            fmt_time(bare_t), base, bare_t / js_t, "info", "info",
            note="*.ckpt deleted before each open; full replay (the worst case)"),
    ]


def _child_memory(directory: str, mode: str, out: Any) -> None:
    """Process body for wl_memory: open the queue, report memory growth."""
    try:
        import tracemalloc

        nobroker = nobroker_api()
        # warm-up on a one-job queue: lazy imports and caches are not per-job memory
        with nobroker.Queue(tempfile.mkdtemp(dir=os.path.dirname(directory))) as w:
            w.enqueue({"warm": 1})
            w.ack(w.lease_one())
            w.stats()
        gc.collect()
        if mode == "tracemalloc":
            tracemalloc.start()
        rss0 = rss_bytes()
        q = nobroker.Queue(directory)
        gc.collect()
        rss1 = rss_bytes()
        traced1 = tracemalloc.get_traced_memory()[0] if mode == "tracemalloc" else 0
        q.lease_one()  # a queue in use: whatever the first lease builds counts too
        gc.collect()
        rss2 = rss_bytes()
        traced2 = tracemalloc.get_traced_memory()[0] if mode == "tracemalloc" else 0
        s = q.stats()
        jobs = int(getattr(s, "pending", 0)) + int(getattr(s, "leased", 0))
        q.close()
        out.put(("ok", {"rss_open": rss1 - rss0, "rss_delta": rss2 - rss0,
                        "traced_open": traced1, "traced": traced2, "jobs": jobs}))
    except BaseException as exc:
        out.put(("error", child_error(exc)))


def run_child(target: Callable[..., None], *args: Any, timeout: float = 600) -> Any:
    """Run target(*args, out_queue) in a spawned process and return what it put."""
    mp = spawn()
    out = mp.Queue()
    p = mp.Process(target=target, args=(*args, out))
    p.start()
    try:
        status, value = out.get(timeout=timeout)
    finally:
        reap(p, 30)
    if status != "ok":
        raise RuntimeError(value)
    return value


def wl_memory(ctx: Context) -> list[Row]:
    """Resident memory per pending job after opening a queue of N pending jobs.

    In a fresh process, after a warm-up on a one-job queue (so lazy imports
    do not count): RSS (from /proc/self/statm) before ``Queue(dir)`` and after
    it plus the first ``lease_one()`` (a queue in use), after gc.collect(),
    divided by the pending+leased jobs. A second process measures the Python
    heap kept (tracemalloc) the same way. The judged figure is the RSS growth,
    which is what the machine pays.
    """
    nobroker_api()
    d = ctx.big_queue()
    rss = run_child(_child_memory, str(d), "rss")
    traced = run_child(_child_memory, str(d), "tracemalloc")
    jobs = max(1, rss["jobs"])
    per_rss = rss["rss_delta"] / jobs
    per_traced = traced["traced"] / max(1, traced["jobs"])
    disk = framed_sizes(d).get(ENQUEUE_TYPE, [])
    disk_per = sum(disk) / len(disk) if disk else float("nan")
    return [Row("memory", f"resident memory per pending job ({jobs:,} jobs)",
                f"{per_rss:,.0f} B/job RSS", f"on disk: {disk_per:,.0f} B/job", None,
                "<= 150 B", verdict(per_rss <= 150),
                note=(f"Python heap kept (tracemalloc): {per_traced:,.0f} B/job; "
                      f"RSS right after open, before the first lease: "
                      f"{rss['rss_open'] / jobs:,.0f} B/job"),
                data={"rss": rss, "tracemalloc": traced})]


def wl_stats(ctx: Context) -> list[Row]:
    """stats(): time per call on the big queue vs on a 1,000-job queue (O(1) check)."""
    nb = nobroker_api()
    cfg = ctx.cfg
    big = ctx.big_queue()
    small = ctx.new_dir("small")
    with nb.Queue(str(small)) as q:
        q.enqueue_many(small_payloads(0, 1_000))
    calls = cfg.stats_calls
    qb = nb.Queue(str(big))
    qs = nb.Queue(str(small))
    try:
        require(qb, "stats")

        def timed(q: Any) -> Callable[[], float]:
            def run() -> float:
                stats = q.stats
                t = time.perf_counter()
                for _ in range(calls):
                    stats()
                return (time.perf_counter() - t) / calls
            return run

        res = interleave(cfg.rounds, [("big", timed(qb)), ("small", timed(qs))])
    finally:
        qb.close()
        qs.close()
    big_t, small_t = median(res["big"]), median(res["small"])
    ratio = big_t / small_t
    ok = big_t <= 20e-6 and ratio <= 2.0
    return [Row("stats", f"stats() at {cfg.big_n:,} jobs", f"{fmt_time(big_t)}/call",
                f"at 1,000 jobs: {fmt_time(small_t)}/call", ratio,
                "<= 20 us and <= 2x (time)", verdict(ok),
                note="O(1): the ratio to the small queue should stay near 1",
                data={"calls": calls, **res})]


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


def _child_enqueuer(directory: str, ready: Any, stop: Any, out: Any) -> None:
    """Process body for wl_compaction: enqueue nonstop, timing every call."""
    try:
        samples: list[tuple[float, float]] = []
        with nobroker_api().Queue(directory) as q:
            i = 0
            while not stop.is_set():
                t = time.monotonic()
                q.enqueue(small_payload(i))
                samples.append((t, time.monotonic() - t))
                i += 1
                if i == 20:
                    ready.set()
        out.put(("ok", samples))
    except BaseException as exc:
        ready.set()
        out.put(("error", child_error(exc)))


def wl_compaction(ctx: Context) -> list[Row]:
    """compact() of N live jobs while another process keeps enqueuing.

    The other process times every durable enqueue. "Blocked" is the longest
    single enqueue call that overlapped the compact() call; the baseline is
    the same process's median enqueue before compaction started. Each round
    compacts the same queue again (all its jobs stay live). At most 3 rounds:
    one round costs a compaction plus the other process's replay of the log.
    """
    nb = nobroker_api()
    cfg = ctx.cfg
    d = ctx.big_queue()
    mp = spawn()
    blocked: list[float] = []
    durations: list[float] = []
    normal: list[float] = []
    during: list[int] = []
    results: list[str] = []
    with nb.Queue(str(d)) as q:
        require(q, "compact")
        for _ in range(min(cfg.rounds, 3)):
            ready, stop, out = mp.Event(), mp.Event(), mp.Queue()
            proc = mp.Process(target=_child_enqueuer, args=(str(d), ready, stop, out))
            proc.start()
            try:
                if not ready.wait(300):
                    raise RuntimeError("enqueuing process did not start")
                time.sleep(0.2)
                t0 = time.monotonic()
                result = q.compact()
                t1 = time.monotonic()
                time.sleep(0.2)
                stop.set()
                status, samples = out.get(timeout=120)
                if status != "ok":
                    raise RuntimeError(f"enqueuing process failed: {samples}")
            finally:
                stop.set()
                reap(proc, 30)
            over = [dur for (s, dur) in samples if s < t1 and s + dur > t0]
            before = [dur for (s, dur) in samples if s + dur <= t0]
            blocked.append(max(over) if over else 0.0)
            during.append(len(over))
            normal.append(median(before) if before else float("nan"))
            durations.append(t1 - t0)
            results.append(repr(result))
    b = median(blocked)
    return [Row("compaction", f"compaction of {cfg.big_n:,} live jobs: other process blocked",
                fmt_time(b), f"enqueue outside compaction: {fmt_time(median(normal))}", None,
                "<= 200 ms", verdict(b <= 0.200),
                note=(f"compact() took {fmt_time(median(durations))}; worst block "
                      f"{fmt_time(max(blocked))}; {median(during):.0f} enqueues overlapped"),
                data={"blocked": blocked, "compact_seconds": durations, "normal": normal,
                      "enqueues_during": during, "results": results})]


# --------------------------------------------------------------------------
# the task layer (issue 10): .delay(), the process pool, periodic idling, round trips


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


RUNNERS: dict[str, Callable[[Context], list[Row]]] = {
    "enqueue": wl_enqueue,
    "threads": wl_threads,
    "processes": wl_processes,
    "workers": wl_workers,
    "mixed": wl_mixed,
    "enqueue_many": wl_enqueue_many,
    "lease_ack": wl_lease_ack,
    "cold_open": wl_cold_open,
    "memory": wl_memory,
    "stats": wl_stats,
    "latency": wl_latency,
    "compaction": wl_compaction,
    "task_delay": wl_task_delay,
    "process_pool": wl_process_pool,
    "periodic_idle": wl_periodic_idle,
    "task_roundtrip": wl_task_roundtrip,
}
TITLES = {
    "enqueue": "durable single enqueue",
    "threads": "4 threads enqueuing",
    "processes": "4 processes enqueuing",
    "workers": "1, 2, 4 worker processes draining one queue",
    "mixed": "1 producer + 3 worker processes at once",
    "enqueue_many": "enqueue_many",
    "lease_ack": "lease + durable ack",
    "cold_open": "cold open to first job",
    "memory": "resident memory per pending job",
    "stats": "stats()",
    "latency": "enqueue -> handler latency",
    "compaction": "compaction blocking",
    "task_delay": "task.delay() vs q.enqueue",
    "process_pool": "process pool vs thread pool",
    "periodic_idle": "idle worker with 100 periodic tasks",
    "task_roundtrip": "delay -> worker -> get round trip",
}

TARGETS = {
    "enqueue": ">= 1.0x (speed)",
    "threads": ">= 0.8x (speed)",
    "processes": ">= 1.5x (speed)",
    "workers": "2 >= 1.2x, 4 >= 1.5x one process (speed)",
    "mixed": "p99 <= 10 ms below saturation",
    "enqueue_many": "<= 1.5x (time)",
    "lease_ack": ">= 1.0x; batch >= 20x",
    "cold_open": "<= 1.0x (time)",
    "memory": "<= 150 B",
    "stats": "<= 20 us, O(1)",
    "latency": "p50 <= 2 ms + 2 fsyncs, p99 <= 10 ms, idle <= 2%",
    "compaction": "<= 200 ms",
    "task_delay": "<= 1.1x (time)",
    "process_pool": ">= 0.5x (speed)",
    "periodic_idle": "<= 2% of a core",
    "task_roundtrip": "p50 <= 3 ms + 2 fsyncs, p99 <= 10 ms",
}


# --------------------------------------------------------------------------
# main


HEADERS = ["workload", "nobroker", "baseline", "ratio", "target", "result"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, 2 rounds (< 1 minute)")
    p.add_argument("--big", action="store_true",
                   help="1M pending jobs for cold open, memory, stats and compaction")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 5, --quick 2)")
    p.add_argument("--only", help=f"comma-separated workloads: {','.join(WORKLOADS)}")
    p.add_argument("--dir", type=Path, default=REPO / ".bench",
                   help="scratch parent directory (default: .bench/ in the repo)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    p.add_argument("--markdown", action="store_true", help="print one Markdown table")
    p.add_argument("--json", type=Path, metavar="FILE", help="write raw results to FILE")
    p.add_argument("--list", action="store_true", help="list workloads and exit")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name in WORKLOADS:
            print(f"{name:13} {TITLES[name]}")
        return 0
    selected = list(WORKLOADS)
    if args.only:
        selected = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = [w for w in selected if w not in RUNNERS]
        if unknown:
            print(f"bench.py: unknown workload(s): {', '.join(unknown)}; "
                  f"choose from {', '.join(WORKLOADS)}", file=sys.stderr)
            return 2
    cfg = Config.make(args.quick, args.big, args.rounds)
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="run-", dir=args.dir))
    facts = machine_facts(root)
    command = "python tools/bench.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    out = sys.stdout
    progress = sys.stderr if args.markdown else sys.stdout

    def log(msg: str) -> None:
        print(msg, file=progress, flush=True)

    log(f"nobroker bench — {facts_line(facts)}")
    log(f"scratch: {root}")
    log(f"command: {command.strip()}")
    log(f"rounds: {cfg.rounds} (interleaved, medians reported); "
        f"big log: {cfg.big_n:,} jobs; {'quick' if cfg.quick else 'default'} sizes")
    ctx = Context(cfg, root, log)
    rows: list[Row] = []
    errors = 0
    started = time.perf_counter()
    try:
        for name in selected:
            log(f"\n[{name}] {TITLES[name]}")
            t = time.perf_counter()
            try:
                new = RUNNERS[name](ctx)
            except Missing as exc:
                new = [Row(name, TITLES[name], target=TARGETS[name],
                           result=f"n/a (missing: {exc})")]
            except Exception as exc:
                errors += 1
                traceback.print_exc(file=sys.stderr)
                new = [Row(name, TITLES[name], target=TARGETS[name],
                           result=f"ERROR: {type(exc).__name__}: {exc}")]
            for row in new:
                extra = f"  [{row.note}]" if row.note else ""
                log(f"  {row.workload}: {row.nobroker} | baseline {row.baseline} | "
                    f"ratio {fmt_ratio(row.ratio)} | target {row.target} | {row.result}{extra}")
            log(f"  ({time.perf_counter() - t:.1f} s)")
            rows.extend(new)
            gc.collect()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    total = time.perf_counter() - started
    table_rows = [r.cells() for r in rows]
    if args.markdown:
        print(f"nobroker {'quick ' if cfg.quick else ''}benchmark, one run of `{command.strip()}` "
              f"on {facts_line(facts)}; medians of {cfg.rounds} interleaved rounds.\n", file=out)
        print(render_markdown_table(HEADERS, table_rows), file=out)
    else:
        print(f"\nSummary ({total:.0f} s; speed ratio = nobroker/baseline throughput, "
              "time ratio = nobroker/baseline time)\n", file=out)
        print(render_text_table(HEADERS, table_rows), file=out)
    if args.json:
        payload = {"facts": facts, "command": command.strip(), "config": asdict(cfg),
                   "seconds": total, "rows": [asdict(r) for r in rows]}
        args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
        log(f"raw results written to {args.json}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
