"""Several processes on one queue: the runs behind bench.py's `workers` and `mixed`
rows and bench_peers.py's drain (standard library only, plus nobroker).

* A *drain*: a queue prefilled with N no-op jobs, then P spawned processes,
  each the real ``nobroker.Worker`` (concurrency 1, a no-op handler), opened
  before a shared barrier and released together.
* *Mixed*: one producer process enqueuing (as fast as it can, or paced at a
  given rate) while three Worker processes drain the same queue.

Every handler call appends one stamp to a file of its process
(:func:`record`): ``time.time()`` at the handler's start and one number the
caller chooses (the job's sequence number, to count duplicate deliveries;
or the time the producer stamped before its enqueue, for the latency).
``time.time()`` because stamps from several processes are compared, as in
bench.py's latency workload. Files, not pipes, so that a peer's own consumer
process (Huey's) can record the same way; one ``os.write`` of 16 bytes costs
a few microseconds against a few hundred per job.

A drain's figure is its *steady-state* rate (:func:`steady_rate`): the jobs
between the 10th and the 90th percentile of handler starts over the time
between them, which leaves out process start-up (imports, the first open)
and the tail, where some processes have found the queue empty and stopped.
"""

from __future__ import annotations

import importlib
import os
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.bench.common import child_error, gather_at_barrier, small_payload, small_payloads

STAMP = struct.Struct("<dd")  # handler start (time.time()), the caller's number
IDLE_TIMEOUT = 0.5  # seconds a Worker waits on an empty queue before it returns
_FDS: dict[tuple[int, str], int] = {}  # (pid, stamps dir) -> its O_APPEND file


def record(stamps_dir: str, value: float) -> None:
    """Append (now, value) to this process's stamp file in stamps_dir."""
    key = (os.getpid(), stamps_dir)
    fd = _FDS.get(key)
    if fd is None:
        path = os.path.join(stamps_dir, f"{os.getpid()}.stamps")
        fd = _FDS[key] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.write(fd, STAMP.pack(time.time(), value))


def read_stamps(stamps_dir: Path) -> list[tuple[float, float]]:
    """Every (start, value) recorded in stamps_dir, by start time."""
    out: list[tuple[float, float]] = []
    for path in stamps_dir.glob("*.stamps"):
        out.extend(STAMP.iter_unpack(path.read_bytes()))
    out.sort()
    return out


def stamp_count(stamps_dir: Path) -> int:
    """How many handler calls have been recorded so far (for a peer's consumer)."""
    return sum(p.stat().st_size for p in stamps_dir.glob("*.stamps")) // STAMP.size


def steady_rate(starts: list[float], trim: float = 0.1) -> float:
    """Jobs per second between the `trim` and 1 - `trim` quantiles of the sorted starts."""
    if len(starts) < 10:
        raise RuntimeError(f"only {len(starts)} handler calls: too few for a rate")
    lo = int(len(starts) * trim)
    hi = len(starts) - 1 - lo
    span = starts[hi] - starts[lo]
    if span <= 0:
        raise RuntimeError("handler starts span no time")
    return (hi - lo) / span


@dataclass
class Drain:
    """One drain's outcome."""

    rate: float  # steady-state jobs/s
    jobs: int  # handler calls recorded
    duplicates: int  # calls beyond the first for the same job


def drain_outcome(stamps_dir: Path, expected: int) -> Drain:
    """The drain recorded in stamps_dir; raises if a job was never run."""
    stamps = read_stamps(stamps_dir)
    distinct = len({value for _, value in stamps})
    if distinct != expected:
        raise RuntimeError(f"{distinct} distinct jobs ran, {expected} were queued")
    return Drain(steady_rate([start for start, _ in stamps]), len(stamps),
                 len(stamps) - distinct)


def fresh(path: Path) -> Path:
    """An empty directory at path (removed first if it exists)."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def prefill(directory: Path, jobs: int) -> None:
    """Queue `jobs` standard small jobs numbered 0..jobs-1 (enqueue_many, untimed)."""
    nobroker = importlib.import_module("nobroker")
    with nobroker.Queue(str(directory)) as q:
        for first in range(0, jobs, 10_000):
            q.enqueue_many(small_payloads(first, min(10_000, jobs - first)))


def _child_worker(directory: str, stamps_dir: str, field: str, barrier: Any, out: Any) -> None:
    """Process body: one Worker (concurrency 1) whose handler records payload[field]."""
    try:
        nobroker = importlib.import_module("nobroker")

        def handler(job: Any) -> None:
            record(stamps_dir, float(job.payload[field]))

        q = nobroker.Queue(directory)
        worker = nobroker.Worker(q, handler, concurrency=1, idle_timeout=IDLE_TIMEOUT,
                                 handle_signals=False)
        barrier.wait(timeout=120)
        stats = worker.run()
        q.close()
        out.put(("ok", ("worker", stats.succeeded)))
    except BaseException as exc:  # reported to the parent
        barrier.abort()
        out.put(("error", child_error(exc)))


def drain(work: Path, workers: int, jobs: int) -> Drain:
    """`workers` Worker processes draining a fresh queue of `jobs` no-op jobs."""
    directory, stamps = fresh(work / "queue"), fresh(work / "stamps")
    prefill(directory, jobs)
    gather_at_barrier([(_child_worker, (str(directory), str(stamps), "user"))] * workers)
    return drain_outcome(stamps, jobs)


# --------------------------------------------------------------------------
# mixed: one producer beside three workers


def _child_producer(directory: str, jobs: int, rate: float, barrier: Any, out: Any) -> None:
    """Process body: enqueue `jobs` jobs, each stamped with time.time() just before its
    enqueue; at `rate` jobs/s on a fixed schedule, or as fast as it can if rate is 0.
    Reports its own enqueue rate."""
    try:
        nobroker = importlib.import_module("nobroker")
        with nobroker.Queue(directory) as q:
            barrier.wait(timeout=120)
            start = time.time()
            for k in range(jobs):
                if rate:
                    ahead = start + k / rate - time.time()
                    if ahead > 0:
                        time.sleep(ahead)
                q.enqueue(small_payload(k) | {"t": time.time()})
            out.put(("ok", ("producer", jobs / (time.time() - start))))
    except BaseException as exc:  # reported to the parent
        barrier.abort()
        out.put(("error", child_error(exc)))


@dataclass
class Mixed:
    """One mixed run's outcome."""

    rate: float  # steady-state handler starts per second
    producer_rate: float  # the producer's own enqueues per second
    latencies: list[float]  # enqueue -> handler start, seconds, in order of start


def mixed(work: Path, jobs: int, rate: float, workers: int = 3) -> Mixed:
    """One producer process enqueuing `jobs` jobs (at `rate`/s, 0 = flat out) while
    `workers` Worker processes drain the same, initially empty, queue."""
    directory, stamps = fresh(work / "queue"), fresh(work / "stamps")
    children = [(_child_worker, (str(directory), str(stamps), "t"))] * workers
    _, values = gather_at_barrier([*children, (_child_producer, (str(directory), jobs, rate))])
    runs = read_stamps(stamps)
    if len(runs) != jobs:
        raise RuntimeError(f"{len(runs)} handler calls for {jobs} jobs")
    producer_rate = next(v for kind, v in values if kind == "producer")
    return Mixed(steady_rate([start for start, _ in runs]), producer_rate,
                 [start - enqueued for start, enqueued in runs])
