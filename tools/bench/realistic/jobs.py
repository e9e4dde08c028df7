"""The jobs every system runs in tools/bench/realistic/, and what they leave behind.

One job body for every system (:func:`run_job`), chosen by the worker's
environment: ``io`` sleeps 5 ms (an HTTP call), ``cpu`` burns about 2.1 ms of
the thread's own CPU in a loop (a resize), ``noop`` does nothing. Each call
appends one fixed-size record to an O_APPEND file of its process: its start
(``time.time()``, comparable across processes), the job's id, and the CPU its
own thread spent in the body (``time.thread_time()``), so that the harness
can count lost and duplicated jobs, a steady-state rate, and subtract the
jobs' own CPU from the CPU of the worker processes. One ``os.write`` of a
24-byte record with O_APPEND is not interleaved with another thread's.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.bench.scaling import steady_rate

RECORD = struct.Struct("<ddd")  # start (time.time()), job id, the body's thread CPU seconds
KIND_ENV = "BENCH_REALISTIC_KIND"
RECORDS_ENV = "BENCH_REALISTIC_RECORDS"
IO_SECONDS = 0.005
CPU_SECONDS = 0.0021
KINDS = ("io", "cpu", "noop")

_fd: tuple[int, int] | None = None  # (pid, fd): a forked child opens its own file
_fd_lock = threading.Lock()


def _records_fd() -> int:
    global _fd
    pid = os.getpid()
    with _fd_lock:
        if _fd is None or _fd[0] != pid:
            path = os.path.join(os.environ[RECORDS_ENV], f"{pid}.records")
            _fd = (pid, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        return _fd[1]


def burn(seconds: float) -> None:
    """Spin until this thread has used `seconds` of CPU (other threads' CPU not counted)."""
    clock = time.thread_time
    until = clock() + seconds
    while clock() < until:
        pass


def run_job(job_id: int) -> None:
    """The body of one job, for whatever system called it; records it when done."""
    start, cpu0 = time.time(), time.thread_time()
    kind = os.environ.get(KIND_ENV, "noop")
    if kind == "io":
        time.sleep(IO_SECONDS)
    elif kind == "cpu":
        burn(CPU_SECONDS)
    os.write(_records_fd(), RECORD.pack(start, float(job_id), time.thread_time() - cpu0))


def timed_calls(call: Callable[[int], object], count: int) -> float:
    """Seconds for call(0) .. call(count - 1): every app's enqueue loop, timed alike."""
    t = time.perf_counter()
    for i in range(count):
        call(i)
    return time.perf_counter() - t


def record_count(records_dir: Path) -> int:
    """Jobs recorded so far (polled by the harness while workers drain)."""
    return sum(p.stat().st_size for p in records_dir.glob("*.records")) // RECORD.size


def read_records(records_dir: Path) -> list[tuple[float, float, float]]:
    """Every (start, id, job CPU) recorded, by start time."""
    out: list[tuple[float, float, float]] = []
    for path in records_dir.glob("*.records"):
        out.extend(RECORD.iter_unpack(path.read_bytes()))
    out.sort()
    return out


@dataclass
class Outcome:
    """What one drain left behind, counted from its records."""

    rate: float  # steady-state jobs/s (10th to 90th percentile of starts)
    lost: int  # queued jobs never recorded
    duplicated: int  # records beyond the first for the same id
    job_cpu: float  # seconds of CPU inside the job bodies, all records


def outcome(records_dir: Path, jobs: int) -> Outcome:
    records = read_records(records_dir)
    seen = {int(job_id) for _, job_id, _ in records}
    lost = len(set(range(jobs)) - seen)
    rate = steady_rate([start for start, _, _ in records]) if len(records) >= 10 else 0.0
    return Outcome(rate, lost, len(records) - len(seen), sum(cpu for _, _, cpu in records))
