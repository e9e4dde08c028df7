"""Where one call's time goes: a per-layer profile of nobroker's hot calls.

The benchmark (tools/bench/run.py) says how fast each call is next to its
physical floor; this says why. For each operation it measures, in one
process:

* the wall time per call with fsync on (what a user gets) and with
  ``fsync=False`` (the CPU part alone: everything but the flush), and
* a cProfile of the ``fsync=False`` loop, with the time spent inside each
  function summed by the module it lives in (``state``, ``commands``,
  ``logfile``, ...) and the system calls listed by name, as microseconds
  per call.

Profiling slows pure Python several times more than it slows system calls,
so the per-layer figures are shares, not absolute costs; the unprofiled
``fsync=False`` time is the absolute one.

    python -m tools.profile.calls            # every operation
    python -m tools.profile.calls --only enqueue,read_forward --calls 20000
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nobroker
from tools.bench.common import REPO, small_payloads

Loop = Callable[[], None]


def _enqueue(root: Path, n: int, fsync: bool) -> Loop:
    q = nobroker.Queue(str(root), fsync=fsync, auto_compact=None)
    payloads = small_payloads(0, n)

    def loop() -> None:
        enqueue = q.enqueue
        for p in payloads:
            enqueue(p)
    return loop


def _ack_and_lease(root: Path, n: int, fsync: bool) -> Loop:
    q = nobroker.Queue(str(root), fsync=fsync, auto_compact=None)
    for start in range(0, n + 2, 10_000):
        q.enqueue_many(small_payloads(start, min(10_000, n + 2 - start)))

    def loop() -> None:
        job = q.lease_one()
        ack_and_lease = q.ack_and_lease
        for _ in range(n):
            job = ack_and_lease(job)
    return loop


def _ack_many_and_lease(k: int) -> Callable[[Path, int, bool], Loop]:
    """ack_many_and_lease of k jobs and k more (a prefetching worker's call), per call."""
    def make(root: Path, n: int, fsync: bool) -> Loop:
        q = nobroker.Queue(str(root), fsync=fsync, auto_compact=None)
        total = (n + 2) * k
        for start in range(0, total, 10_000):
            q.enqueue_many(small_payloads(start, min(10_000, total - start)))

        def loop() -> None:
            jobs = q.lease(k)
            ack_many_and_lease = q.ack_many_and_lease
            for _ in range(n):
                jobs = ack_many_and_lease(jobs, k)
        return loop
    return make


def _enqueue_many(root: Path, n: int, fsync: bool) -> Loop:
    q = nobroker.Queue(str(root), fsync=fsync, auto_compact=None)
    batches = [small_payloads(start, min(1000, n - start)) for start in range(0, n, 1000)]

    def loop() -> None:
        for batch in batches:
            q.enqueue_many(batch)
    return loop


def _read_forward(root: Path, n: int, fsync: bool) -> Loop:
    """A second handle catching up with n records another handle wrote."""
    writer = nobroker.Queue(str(root), fsync=False, auto_compact=None)
    reader = nobroker.Queue(str(root), fsync=fsync, auto_compact=None)
    reader.stats()
    for start in range(0, n, 10_000):
        writer.enqueue_many(small_payloads(start, min(10_000, n - start)))
    return lambda: reader.stats() and None


def _read_forward_acks(root: Path, n: int, fsync: bool) -> Loop:
    """A second handle catching up with n ack_and_lease batches of another (each an
    ACK and a LEASE of a job the reader does not hold): what every call of N worker
    processes reads first, under the lock."""
    writer = nobroker.Queue(str(root), fsync=False, auto_compact=None)
    reader = nobroker.Queue(str(root), fsync=fsync, auto_compact=None)
    for start in range(0, n + 2, 10_000):
        writer.enqueue_many(small_payloads(start, min(10_000, n + 2 - start)))
    job = writer.lease_one()
    reader.stats()
    for _ in range(n):
        job = writer.ack_and_lease(job)
    return lambda: reader.stats() and None


OPERATIONS: dict[str, tuple[Callable[[Path, int, bool], Loop], str]] = {
    "enqueue": (_enqueue, "durable single enqueue"),
    "ack_and_lease": (_ack_and_lease, "ack one job and lease the next (one batch)"),
    "ack_many_and_lease_1": (_ack_many_and_lease(1), "ack_many_and_lease of 1 job and 1"),
    "ack_many_and_lease_16": (_ack_many_and_lease(16), "ack_many_and_lease of 16 jobs and "
                              "16, per call"),
    "enqueue_many": (_enqueue_many, "enqueue_many of 1,000, per job"),
    "read_forward": (_read_forward, "another handle's records read forward, per record"),
    "read_forward_acks": (_read_forward_acks, "a peer's ack_and_lease batches read "
                          "forward, per batch"),
}


def timed(make: Callable[[Path, int, bool], Loop], n: int, fsync: bool) -> float:
    root = Path(tempfile.mkdtemp(prefix="nbprof-", dir=REPO / ".bench"))
    try:
        loop = make(root, n, fsync)
        start = time.perf_counter()
        loop()
        return (time.perf_counter() - start) / n
    finally:
        shutil.rmtree(root, ignore_errors=True)


def layers(make: Callable[[Path, int, bool], Loop], n: int) -> list[tuple[str, float]]:
    """(layer, microseconds per call) under cProfile, largest first."""
    root = Path(tempfile.mkdtemp(prefix="nbprof-", dir=REPO / ".bench"))
    try:
        loop = make(root, n, False)
        profile = cProfile.Profile()
        profile.runcall(loop)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    totals: dict[str, float] = {}
    for (filename, _, function), (_, _, own, _, _) in stats.items():
        totals[_layer(filename, function)] = totals.get(_layer(filename, function), 0.0) + own
    return sorted(((k, v / n * 1e6) for k, v in totals.items()), key=lambda kv: -kv[1])


_SYSCALLS = ("posix.", "fcntl.", "select.")


def _layer(filename: str, function: str) -> str:
    if filename == "~":  # a builtin: name the system calls, lump the rest
        name = function.strip("<>").replace("built-in method ", "")
        if name.startswith(_SYSCALLS):
            return f"syscall {name}"
        return "builtins (json C code, crc32, dict/list ops)"
    path = Path(filename)
    if "nobroker" in path.parts:
        return f"nobroker.{path.stem}"
    return f"stdlib {path.stem}" if filename.startswith(sys.prefix) else path.stem


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(OPERATIONS),
                        help=f"comma-separated: {','.join(OPERATIONS)}")
    parser.add_argument("--calls", type=int, default=10_000, help="calls per measurement")
    parser.add_argument("--top", type=int, default=10, help="layers to list per operation")
    args = parser.parse_args(argv)
    (REPO / ".bench").mkdir(exist_ok=True)
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in names if name not in OPERATIONS]
    if unknown:
        parser.error(f"unknown operation(s): {', '.join(unknown)}")
    for name in names:
        make, title = OPERATIONS[name]
        n = args.calls
        durable = timed(make, max(200, n // 10), True)
        cpu = timed(make, n, False)
        print(f"\n{name}: {title}")
        print(f"  per call: {durable * 1e6:8.1f} us with fsync, {cpu * 1e6:6.1f} us with "
              f"fsync=False (CPU only)")
        print("  cProfile, own time by layer (us per call, profiled):")
        for layer, us in layers(make, n)[:args.top]:
            print(f"    {us:7.2f}  {layer}")
    return 0


if __name__ == "__main__":
    os.umask(0o077)
    raise SystemExit(main())
