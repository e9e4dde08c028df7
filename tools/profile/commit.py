"""Where a durable call's time goes around its fdatasync: the floor, and threads.

tools/profile/calls.py splits a call's CPU into layers; this looks at what
surrounds the flush, in two parts, each interleaved (A B C A B C, medians of
the rounds) because the machine drifts:

* floor (one thread; enqueue and ack_and_lease): the durable call next to
  the same call with ``fsync=False`` run back to back (its CPU, with warm
  caches), the same call timed alone after a 100 us sleep (its CPU after
  the thread blocked, which a durable call's always is), the fsync=False
  call followed by a raw ``pwrite`` + ``fdatasync`` of a preallocated file
  (what the call would cost if nobroker's own sync path were free: the
  floor), and the raw loops alone (that pwrite + fdatasync, and the
  benchmark's ``O_APPEND`` write + fsync).
* threads (enqueue on one Queue, 1 and 4 threads): calls/s, records per
  fdatasync (HandleCounters), the fdatasync's median time and the median gap
  between one ending and the next starting (a timing FileSystem), time spent
  acquiring the queue lock per call, process CPU and context switches per
  call; beside the raw baselines: the benchmark's 4 threads on 4 files, and
  4 threads group-committing on one preallocated file with no other work
  (what one file allows; the benchmark compares with 4 files).

    python -m tools.profile.commit
    python -m tools.profile.commit --only threads --calls 4000 --rounds 7
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nobroker
from nobroker.backend import Settings
from nobroker.file.backend import FileBackend, FileOptions
from nobroker.file.disk.fs import FileSystem
from tools.bench.common import REPO, raw_fsync_loop, raw_fsync_threads, small_payloads

RECORD = 183  # bytes of the raw loops' record: about one ack_and_lease batch
Round = Callable[[], float]  # one measurement: seconds per call


class TimedFS(FileSystem):
    """Records when each fdatasync began and ended (perf_counter seconds)."""

    def __init__(self) -> None:
        self.syncs: list[tuple[float, float]] = []

    def fdatasync(self, fd: int) -> None:
        began = time.perf_counter()
        super().fdatasync(fd)
        self.syncs.append((began, time.perf_counter()))


class RawLog:
    """A preallocated file written like nobroker's log: pwrite at the end, fdatasync."""

    def __init__(self, path: Path, size: int = 64 << 20) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.pwrite(self.fd, bytes(size), 0)
        os.fsync(self.fd)
        self.size = size
        self.end = 0
        self.record = b"r" * RECORD

    def append_and_sync(self) -> None:
        if self.end + RECORD > self.size:
            self.end = 0  # rewrite the start: the blocks exist, as in the log
        os.pwrite(self.fd, self.record, self.end)
        self.end += RECORD
        os.fdatasync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


def interleave(rounds: int, contenders: dict[str, Round]) -> dict[str, float]:
    """Median seconds per call of each contender over `rounds` interleaved rounds."""
    results: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            results[name].append(run())
    return {name: statistics.median(times) for name, times in results.items()}


# -- floor ------------------------------------------------------------------


def _calls(root: Path, op: str, fsync: bool, total: int) -> Callable[[], None]:
    """One `op` call per invocation, on a queue of its own under `root`."""
    q = nobroker.Queue(str(root / f"{op}-{fsync}"), fsync=fsync, auto_compact=None)
    if op == "enqueue":
        payloads = iter(small_payloads(0, total))
        enqueue = q.enqueue
        return lambda: enqueue(next(payloads)) and None
    for start in range(0, total + 2, 10_000):
        q.enqueue_many(small_payloads(start, min(10_000, total + 2 - start)))
    held: list[Any] = [q.lease_one()]
    ack_and_lease = q.ack_and_lease

    def call() -> None:
        held[0] = ack_and_lease(held[0])
    return call


def floor(root: Path, op: str, n: int, rounds: int) -> None:
    total = n * rounds + 10
    durable, cpu = _calls(root, op, True, total), _calls(root, op, False, total * 3)
    raw = RawLog(root / "raw.log")
    appended = root / "append.bin"

    def loop(step: Callable[[], None]) -> Round:
        def run() -> float:
            start = time.perf_counter()
            for _ in range(n):
                step()
            return (time.perf_counter() - start) / n
        return run

    def after_sleep() -> float:
        alone = 0.0
        for _ in range(n):
            time.sleep(0.0001)
            start = time.perf_counter()
            cpu()
            alone += time.perf_counter() - start
        return alone / n

    def plus_raw() -> None:
        cpu()
        raw.append_and_sync()

    try:
        res = interleave(rounds, {
            "durable": loop(durable), "cpu": loop(cpu), "cold": after_sleep,
            "floor": loop(plus_raw), "raw": loop(raw.append_and_sync),
            "append": lambda: raw_fsync_loop(appended, RECORD, n) / n,
        })
    finally:
        raw.close()
    us = {name: value * 1e6 for name, value in res.items()}
    speed = res["append"] / res["durable"]
    print(f"\n{op}: one thread, {n} calls x {rounds} interleaved rounds (medians, us per call)")
    print(f"  durable call                                  {us['durable']:7.1f}"
          f"   ({speed:.2f}x the O_APPEND loop's speed)")
    print(f"  fsync=False, back to back (CPU, warm)         {us['cpu']:7.1f}")
    print(f"  fsync=False, alone after a 100 us sleep       {us['cold']:7.1f}"
          f"   (CPU after blocking: {us['cold'] / us['cpu']:.1f}x warm)")
    print(f"  fsync=False + raw pwrite+fdatasync (floor)    {us['floor']:7.1f}"
          f"   (durable / floor: {res['durable'] / res['floor']:.2f})")
    print(f"  raw pwrite+fdatasync, preallocated file       {us['raw']:7.1f}")
    print(f"  raw O_APPEND write+fsync (bench baseline)     {us['append']:7.1f}")


# -- threads ----------------------------------------------------------------


def run_threads(workers: list[threading.Thread]) -> float:
    """Start every thread, wait for all; the seconds that took."""
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start


def _one_file_group_commit(path: Path, threads: int, each: int) -> float:
    """Wall seconds for `threads` threads appending to one preallocated file, each
    write followed by a group-committed fdatasync (sync_to's rule, no other work)."""
    raw = RawLog(path)
    lock, cond = threading.Lock(), threading.Condition()
    state = {"durable": 0, "syncing": False}

    def go() -> None:
        for _ in range(each):
            with lock:
                os.pwrite(raw.fd, raw.record, raw.end)
                raw.end += RECORD
                offset = raw.end
            with cond:
                while state["durable"] < offset and state["syncing"]:
                    cond.wait()
                if state["durable"] >= offset:
                    continue
                state["syncing"], target = True, raw.end
            os.fdatasync(raw.fd)
            with cond:
                state["durable"], state["syncing"] = max(state["durable"], target), False
                cond.notify_all()

    elapsed = run_threads([threading.Thread(target=go) for _ in range(threads)])
    raw.close()
    return elapsed


class ThreadsRun:
    """Enqueues from `threads` threads on one Queue, with what they cost."""

    def __init__(self, root: Path, threads: int) -> None:
        self.threads = threads
        self.fs = TimedFS()
        self.queue = nobroker.Queue.from_backend(FileBackend(
            str(root / f"threads{threads}"), "default", Settings(),
            FileOptions(fs=self.fs, auto_compact=None)))
        self.handle = self.queue.backend.handle  # type: ignore[attr-defined]
        lock = self.handle.lock
        acquire = lock.acquire
        self.lock_wait = 0.0
        waited = threading.Lock()

        def timed_acquire(timeout: float) -> None:  # an instance attribute: this lock only
            start = time.perf_counter()
            acquire(timeout)
            spent = time.perf_counter() - start
            with waited:
                self.lock_wait += spent
        lock.acquire = timed_acquire
        self.samples: dict[str, list[float]] = {}

    def run(self, n: int) -> float:
        each = n // self.threads
        calls = each * self.threads
        counters = self.handle.counters
        before = (counters.durable_calls, counters.fdatasyncs)
        self.fs.syncs.clear()
        self.lock_wait = 0.0
        chunks = [small_payloads(k * each, each) for k in range(self.threads)]

        def go(payloads: list[dict[str, Any]]) -> None:
            enqueue = self.queue.enqueue
            for payload in payloads:
                enqueue(payload)

        workers = [threading.Thread(target=go, args=(chunk,)) for chunk in chunks]
        used = resource.getrusage(resource.RUSAGE_SELF)
        elapsed = run_threads(workers)
        after = resource.getrusage(resource.RUSAGE_SELF)
        syncs = sorted(self.fs.syncs)
        durations = [end - began for began, end in syncs]
        gaps = [b[0] - a[1] for a, b in itertools.pairwise(syncs)]
        issued = counters.fdatasyncs - before[1]
        for name, value in (
                ("rate", calls / elapsed),
                ("per_sync", (counters.durable_calls - before[0]) / max(issued, 1)),
                ("sync_us", statistics.median(durations) * 1e6 if durations else 0.0),
                ("gap_us", statistics.median(gaps) * 1e6 if gaps else 0.0),
                ("lock_us", self.lock_wait / calls * 1e6),
                ("user_us", (after.ru_utime - used.ru_utime) / calls * 1e6),
                ("sys_us", (after.ru_stime - used.ru_stime) / calls * 1e6),
                ("vcsw", (after.ru_nvcsw - used.ru_nvcsw) / calls),
                ("ivcsw", (after.ru_nivcsw - used.ru_nivcsw) / calls)):
            self.samples.setdefault(name, []).append(value)
        return elapsed / calls

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])


def threads(root: Path, n: int, rounds: int) -> None:
    runs = [ThreadsRun(root, 1), ThreadsRun(root, 4)]
    files = [root / f"raw{i}.bin" for i in range(4)]
    each = n // 4
    try:
        res = interleave(rounds, {
            "1": lambda: runs[0].run(n), "4": lambda: runs[1].run(n),
            "raw4": lambda: raw_fsync_threads(files, RECORD, each) / (4 * each),
            "group4": lambda: _one_file_group_commit(root / "group.log", 4, each) / (4 * each),
        })
    finally:
        for run in runs:
            run.queue.close()
    print(f"\nthreads: enqueue on one Queue, {n} calls x {rounds} interleaved rounds (medians)")
    print("  threads    calls/s  calls/fdatasync  fdatasync us  gap us  lock wait us"
          "  CPU us (user+sys)  switches/call (vol, invol)")
    for run in runs:
        print(f"  {run.threads:7d}  {run.median('rate'):9,.0f}  {run.median('per_sync'):15.2f}"
              f"  {run.median('sync_us'):12.0f}  {run.median('gap_us'):6.0f}"
              f"  {run.median('lock_us'):12.0f}"
              f"  {run.median('user_us'):8.0f} + {run.median('sys_us'):<7.0f}"
              f"  {run.median('vcsw'):.1f}, {run.median('ivcsw'):.1f}")
    raw4, group4 = 1 / res["raw4"], 1 / res["group4"]
    print(f"  raw, 4 threads x write+fsync, 4 files:              {raw4:9,.0f}/s")
    print(f"  raw, 4 threads group-committing on one file:        {group4:9,.0f}/s"
          f"  ({group4 / raw4:.2f}x the 4 files)")
    print(f"  nobroker, 4 threads on one Queue:                   {1 / res['4']:9,.0f}/s"
          f"  ({res['raw4'] / res['4']:.2f}x the 4 files)")


PARTS = ("enqueue", "ack_and_lease", "threads")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated: "
                        f"{','.join(PARTS)}")
    parser.add_argument("--calls", type=int, default=2_000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in names if name not in PARTS]
    if unknown:
        parser.error(f"unknown part(s): {', '.join(unknown)}")
    (REPO / ".bench").mkdir(exist_ok=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f} (on {os.cpu_count()} cores)")
    for name in names:
        root = Path(tempfile.mkdtemp(prefix="nbcommit-", dir=REPO / ".bench"))
        try:
            if name == "threads":
                threads(root, args.calls, args.rounds)
            else:
                floor(root, name, args.calls, args.rounds)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    os.umask(0o077)
    raise SystemExit(main())
